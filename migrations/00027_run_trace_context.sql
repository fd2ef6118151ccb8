-- +goose Up
-- One trace per run (issue 42): the W3C traceparent of the run's submit span,
-- so every task of the run, in any worker process, starts its span as a child
-- of the run's root. Empty when tracing was off at submission.
ALTER TABLE runs ADD COLUMN trace_context text NOT NULL DEFAULT '' CHECK (length(trace_context) <= 512);

-- +goose Down
ALTER TABLE runs DROP COLUMN trace_context;
