-- +goose Up
-- Span links (issue 42): the W3C traceparent of the span that finished a
-- delegated turn (the supervisor's resume that reads its result links to it)
-- and of the tool call that asked for an approval (the "approval wait" span
-- recorded when the call resumes links to it). Empty when tracing was off.
ALTER TABLE delegations ADD COLUMN trace_context text NOT NULL DEFAULT '' CHECK (length(trace_context) <= 512);
ALTER TABLE approvals ADD COLUMN trace_context text NOT NULL DEFAULT '' CHECK (length(trace_context) <= 512);

-- +goose Down
ALTER TABLE approvals DROP COLUMN trace_context;
ALTER TABLE delegations DROP COLUMN trace_context;
