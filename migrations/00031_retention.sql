-- +goose NO TRANSACTION
-- +goose Up
-- Retention (docs/retention.md) finds terminal runs by age and egress rows by
-- time; built CONCURRENTLY so an upgrade never blocks writes to the hot tables.
CREATE INDEX CONCURRENTLY IF NOT EXISTS runs_terminal_finished ON runs (finished_at, id)
	WHERE status IN ('completed', 'failed', 'cancelled');
CREATE INDEX CONCURRENTLY IF NOT EXISTS egress_connections_at ON egress_connections (at);

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS egress_connections_at;
DROP INDEX CONCURRENTLY IF EXISTS runs_terminal_finished;
