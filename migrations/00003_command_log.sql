-- +goose Up
-- One row per run_shell invocation: what ran, for whom, and how it ended. Output is
-- not stored (the audit trail of the tool call carries it); its size is.
CREATE TABLE command_log (
    id            bigserial PRIMARY KEY,
    run_id        uuid NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    agent         text NOT NULL,
    command       text NOT NULL,
    -- The command's exit status; 124 when its timeout killed it, -1 when it never ran.
    exit_code     int NOT NULL,
    duration_ms   bigint NOT NULL DEFAULT 0,
    output_bytes  bigint NOT NULL DEFAULT 0,
    truncated     boolean NOT NULL DEFAULT false,
    timed_out     boolean NOT NULL DEFAULT false,
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX command_log_run ON command_log (run_id, id);

-- +goose Down
DROP TABLE command_log;
