-- +goose Up
-- A non-idempotent tool call records its intent before it runs and its outcome after.
-- A redelivered step finding a finished intent replays the stored result instead of
-- running the call again; one started but never finished (the worker died mid-call)
-- is reported to the model as "outcome unknown".
CREATE TABLE tool_intents (
    call_key     text PRIMARY KEY,
    run_id       uuid NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    tool         text NOT NULL,
    args_hash    text NOT NULL,
    started_at   timestamptz NOT NULL DEFAULT now(),
    finished_at  timestamptz,
    result       text,
    is_error     boolean NOT NULL DEFAULT false
);
CREATE INDEX tool_intents_run ON tool_intents (run_id);

-- +goose Down
DROP TABLE tool_intents;
