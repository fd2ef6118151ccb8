-- +goose Up
CREATE TABLE approvals (
    id              text PRIMARY KEY,
    run_id          uuid NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    session_id      text NOT NULL,
    call_id         text NOT NULL,
    team            text NOT NULL DEFAULT '',
    agent           text NOT NULL,
    tool            text NOT NULL,
    tier            text NOT NULL,
    -- Redacted arguments, shown to the human deciding.
    args            jsonb NOT NULL DEFAULT '{}',
    why             text NOT NULL,
    status          text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending','approved','denied','timed_out')),
    decided_by      text NOT NULL DEFAULT '',
    decision_reason text NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL DEFAULT now(),
    expires_at      timestamptz NOT NULL,
    decided_at      timestamptz,
    UNIQUE (session_id, call_id)
);
CREATE INDEX approvals_pending ON approvals (created_at) WHERE status = 'pending';
CREATE INDEX approvals_run ON approvals (run_id);

-- One row per gated call attempt. No foreign key: the audit trail outlives runs.
CREATE TABLE tool_audit (
    id           bigserial PRIMARY KEY,
    -- session id + call id: a redelivered step cannot audit the same attempt twice.
    call_key     text NOT NULL UNIQUE,
    at           timestamptz NOT NULL,
    run_id       uuid NOT NULL,
    team         text NOT NULL DEFAULT '',
    agent        text NOT NULL DEFAULT '',
    role         text NOT NULL DEFAULT '',
    tool         text NOT NULL,
    tier         text NOT NULL,
    allowed      boolean NOT NULL,
    decision     text NOT NULL CHECK (decision IN ('allowed','denied','error','timed_out','unknown')),
    deny_layer   text NOT NULL DEFAULT '',
    deny_reason  text NOT NULL DEFAULT '',
    approved_by  text NOT NULL DEFAULT '',
    -- Elevated/Restricted: full redacted arguments and result. Standard: summary only.
    args         jsonb,
    result       text,
    summary      text NOT NULL DEFAULT '',
    error        text NOT NULL DEFAULT '',
    duration_ms  bigint NOT NULL DEFAULT 0
);
CREATE INDEX tool_audit_run ON tool_audit (run_id, id);
CREATE INDEX tool_audit_at ON tool_audit (at);

-- +goose Down
DROP TABLE tool_audit;
DROP TABLE approvals;
