-- +goose NO TRANSACTION
-- +goose Up
-- A run's end (FinishRun) and its terminal event are two transactions: a crash
-- between them is mended by the step's redelivery, but a database dump taken
-- between them (restored onto an empty Redis: no redelivery) or a lost
-- redelivery left an end no one heard of (no terminal event, no cleanup, no
-- webhook). end_announced is false from the end until its terminal event is
-- stored; the stuck-runs tick announces ends left unannounced
-- (store.UnannouncedEnds). Existing rows count as announced; the index holds
-- only the ends in that gap, built CONCURRENTLY so an upgrade never blocks
-- writes to runs.
ALTER TABLE runs ADD COLUMN IF NOT EXISTS end_announced boolean NOT NULL DEFAULT true;
CREATE INDEX CONCURRENTLY IF NOT EXISTS runs_end_unannounced ON runs (finished_at) WHERE NOT end_announced;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS runs_end_unannounced;
ALTER TABLE runs DROP COLUMN IF EXISTS end_announced;
