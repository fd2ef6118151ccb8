-- +goose Up
-- Schedules (issue 43): runs that start themselves on a cron expression in a
-- time zone. A schedule's next_tick is the nominal cron time it fires next;
-- next_fire_at is that tick plus its jitter (deterministic per schedule and
-- tick), when it is due.
CREATE TABLE schedules (
    id              text PRIMARY KEY CHECK (id ~ '^sch_[a-z0-9]{1,40}$'),
    owner           text NOT NULL,
    name            text NOT NULL,
    cron            text NOT NULL,
    time_zone       text NOT NULL DEFAULT 'UTC',
    -- A shipped template's name, or '' with an inline team.
    template        text NOT NULL DEFAULT '',
    team            jsonb,
    prompt          text NOT NULL,
    variables       jsonb NOT NULL DEFAULT '{}',
    project         text NOT NULL DEFAULT '',
    priority        int NOT NULL DEFAULT 0,
    jitter_ms       bigint NOT NULL DEFAULT 0 CHECK (jitter_ms >= 0),
    overlap         text NOT NULL DEFAULT 'skip' CHECK (overlap IN ('skip','queue_one','cancel_previous','allow_all')),
    catch_up        text NOT NULL DEFAULT 'none' CHECK (catch_up IN ('none','last','all')),
    catch_up_limit  int NOT NULL DEFAULT 0 CHECK (catch_up_limit >= 0),
    paused          boolean NOT NULL DEFAULT false,
    next_tick       timestamptz,
    next_fire_at    timestamptz,
    last_tick       timestamptz,
    last_status     text NOT NULL DEFAULT '',
    last_reason     text NOT NULL DEFAULT '',
    last_run_id     uuid,
    missed          bigint NOT NULL DEFAULT 0,
    -- The creating request's Idempotency-Key and the fingerprint of its body:
    -- the same key and body within a day answer with this schedule.
    idempotency_key text,
    request_hash    text NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (owner, name)
);
CREATE INDEX schedules_due ON schedules (next_fire_at) WHERE NOT paused;
CREATE UNIQUE INDEX schedules_idempotency ON schedules (owner, idempotency_key) WHERE idempotency_key IS NOT NULL;

-- One row per tick of a schedule that a scheduler claimed. UNIQUE (schedule_id,
-- tick) is the exactly-once claim: however many scheduler processes run, and
-- however late a dead one's asynq task ids would have expired, a tick is
-- inserted once. A row is claimed (submit pending, request holds what to
-- submit), deferred (overlap queue_one: waits for the previous run), submitted
-- (run_id), skipped, missed or failed (reason).
CREATE TABLE schedule_fires (
    id           bigserial PRIMARY KEY,
    schedule_id  text NOT NULL REFERENCES schedules(id) ON DELETE CASCADE,
    tick         timestamptz NOT NULL,
    fire_at      timestamptz NOT NULL,
    status       text NOT NULL CHECK (status IN ('claimed','deferred','submitted','skipped','missed','failed')),
    reason       text NOT NULL DEFAULT '',
    detail       text NOT NULL DEFAULT '',
    run_id       uuid,
    request      jsonb,
    attempts     int NOT NULL DEFAULT 0,
    claimed_by   text NOT NULL DEFAULT '',
    claimed_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (schedule_id, tick)
);
CREATE INDEX schedule_fires_pending ON schedule_fires (claimed_at) WHERE status IN ('claimed','deferred');
CREATE INDEX schedule_fires_runs ON schedule_fires (schedule_id, tick DESC) WHERE run_id IS NOT NULL;

-- +goose Down
DROP TABLE schedule_fires;
DROP TABLE schedules;
