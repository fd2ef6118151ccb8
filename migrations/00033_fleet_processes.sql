-- +goose Up
-- Versioned contracts (docs/how-to/upgrade.md). fleet_identity names the fleet; a
-- row here is one process of it (api, worker, scheduler, dev) with the
-- versions of the contracts it reads and writes, refreshed every few seconds
-- (seen_at). A process writes a newer task payload only once every live
-- process here (and every asynq worker server, which a build before this
-- table does not register here) reads it.
CREATE TABLE fleet_processes (
    id           text PRIMARY KEY,
    role         text NOT NULL,
    host         text NOT NULL,
    pid          int NOT NULL,
    build        text NOT NULL DEFAULT '',
    contract     int NOT NULL,
    min_contract int NOT NULL,
    started_at   timestamptz NOT NULL DEFAULT now(),
    seen_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX fleet_processes_seen ON fleet_processes (seen_at);

-- The format of a session record (its row and its session_messages), 1 for
-- every session so far. A worker refuses to step a session of a format newer
-- than it reads, with an error that keeps the task (retried, then archived).
ALTER TABLE sessions ADD COLUMN format int NOT NULL DEFAULT 1;

-- +goose Down
ALTER TABLE sessions DROP COLUMN format;
DROP TABLE fleet_processes;
