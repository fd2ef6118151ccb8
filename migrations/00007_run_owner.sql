-- +goose Up
-- A run belongs to the principal that submitted it (the API token's name; "local"
-- when the API runs without tokens). Runs from before this migration were all
-- submitted by someone unknown: they go to "local", visible to read_all/admin.
ALTER TABLE runs ADD COLUMN owner text NOT NULL DEFAULT 'local';
-- Listing one principal's runs newest first (GET /api/runs for a read token).
CREATE INDEX runs_owner_created ON runs (owner, created_at DESC, id DESC);
-- Counting one principal's runs in flight on every submit (api.max_runs_in_flight):
-- a partial index holds only the few non-terminal rows, so the count stays cheap
-- however many finished runs pile up.
CREATE INDEX runs_owner_in_flight ON runs (owner) WHERE status IN ('queued','running','waiting');

-- +goose Down
DROP INDEX runs_owner_in_flight;
DROP INDEX runs_owner_created;
ALTER TABLE runs DROP COLUMN owner;
