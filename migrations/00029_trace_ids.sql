-- +goose Up
-- Trace ids on run events and audit rows (issue 42): the trace of the span
-- that wrote the row (a step, a tool call, the submit), so an event or an
-- audited call leads to its place in the run's trace. Empty when tracing was
-- off, or when no span wrote it (an API request outside the run's trace).
ALTER TABLE run_events ADD COLUMN trace_id text NOT NULL DEFAULT '' CHECK (length(trace_id) <= 32);
ALTER TABLE tool_audit ADD COLUMN trace_id text NOT NULL DEFAULT '' CHECK (length(trace_id) <= 32);

-- +goose Down
ALTER TABLE tool_audit DROP COLUMN trace_id;
ALTER TABLE run_events DROP COLUMN trace_id;
