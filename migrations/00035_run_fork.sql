-- +goose Up
-- A fork (issue 44, docs/fork.md) is a run that shares another run's record up
-- to a step and runs live after it: it records which run and which step.
-- No foreign key: a fork outlives the run it was forked from (retention may
-- delete that one first); NULL for every other run.
ALTER TABLE runs ADD COLUMN forked_from uuid;
ALTER TABLE runs ADD COLUMN forked_at int NOT NULL DEFAULT 0 CHECK (forked_at >= 0);

-- +goose Down
ALTER TABLE runs DROP COLUMN forked_at;
ALTER TABLE runs DROP COLUMN forked_from;
