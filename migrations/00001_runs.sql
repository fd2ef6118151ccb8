-- +goose Up
CREATE TABLE runs (
    id            uuid PRIMARY KEY,
    status        text NOT NULL CHECK (status IN ('queued','running','waiting','completed','failed','cancelled')),
    prompt        text NOT NULL,
    template      text NOT NULL DEFAULT '',
    team          jsonb NOT NULL,
    variables     jsonb NOT NULL DEFAULT '{}',
    result        text NOT NULL DEFAULT '',
    error         text NOT NULL DEFAULT '',
    reason        text NOT NULL DEFAULT '',
    tokens_used   bigint NOT NULL DEFAULT 0,
    token_budget  bigint NOT NULL DEFAULT 0,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    finished_at   timestamptz
);
CREATE INDEX runs_status_created ON runs (status, created_at DESC, id);
CREATE INDEX runs_created ON runs (created_at DESC, id);

-- One conversation per agent per delegation; the supervisor has one per run.
CREATE TABLE sessions (
    id             text PRIMARY KEY,
    run_id         uuid NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    agent          text NOT NULL,
    role           text NOT NULL CHECK (role IN ('supervisor','worker','subagent')),
    delegation_id  text,
    messages       jsonb NOT NULL DEFAULT '[]',
    status         text NOT NULL DEFAULT 'active' CHECK (status IN ('active','waiting','done')),
    steps          int NOT NULL DEFAULT 0,
    failures       int NOT NULL DEFAULT 0,
    version        bigint NOT NULL DEFAULT 0,
    lease_token    text NOT NULL DEFAULT '',
    lease_until    timestamptz NOT NULL DEFAULT 'epoch',
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX sessions_run ON sessions (run_id);

CREATE TABLE delegations (
    id              text PRIMARY KEY,
    run_id          uuid NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    parent_session  text NOT NULL,
    tool_call_id    text NOT NULL,
    agent           text NOT NULL,
    task            text NOT NULL,
    -- Tool allowlist for agents created by spawn_subagents (never wider than the parent's).
    tools           jsonb,
    status          text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending','running','completed','failed')),
    result          text NOT NULL DEFAULT '',
    error           text NOT NULL DEFAULT '',
    attempts        int NOT NULL DEFAULT 0,
    created_at      timestamptz NOT NULL DEFAULT now(),
    completed_at    timestamptz,
    UNIQUE (parent_session, tool_call_id, agent)
);
CREATE INDEX delegations_run ON delegations (run_id);

CREATE TABLE run_events (
    id          bigserial PRIMARY KEY,
    run_id      uuid NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    -- Deterministic per state change, so a redelivered step cannot record it twice.
    key         text NOT NULL,
    type        text NOT NULL,
    agent       text NOT NULL DEFAULT '',
    data        jsonb NOT NULL DEFAULT '{}',
    created_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (run_id, key)
);
CREATE INDEX run_events_run ON run_events (run_id, id);

CREATE TABLE plans (
    id          bigserial PRIMARY KEY,
    run_id      uuid NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    goal        text NOT NULL DEFAULT '',
    active      boolean NOT NULL DEFAULT true,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX plans_one_active ON plans (run_id) WHERE active;

CREATE TABLE plan_steps (
    plan_id     bigint NOT NULL REFERENCES plans(id) ON DELETE CASCADE,
    idx         int NOT NULL,
    title       text NOT NULL,
    status      text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending','in_progress','completed','failed','skipped')),
    result      text NOT NULL DEFAULT '',
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (plan_id, idx)
);

CREATE TABLE todos (
    run_id      uuid NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    agent       text NOT NULL,
    items       jsonb NOT NULL DEFAULT '[]',
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, agent)
);

-- +goose Down
DROP TABLE todos;
DROP TABLE plan_steps;
DROP TABLE plans;
DROP TABLE run_events;
DROP TABLE delegations;
DROP TABLE sessions;
DROP TABLE runs;
