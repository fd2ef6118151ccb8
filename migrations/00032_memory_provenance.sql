-- +goose Up
-- What the session that wrote a memory entry had read (llm.Provenance), stored
-- with the entry when it is written: the entry outlives the session (retention
-- deletes finished runs and their sessions; the project keeps its memory), and
-- a recalled entry must carry the writer's label however old it is. NULL for
-- entries written before this column (derived from the session while it
-- exists) and for a person's entries (no session).
ALTER TABLE agent_memory ADD COLUMN provenance jsonb;

-- +goose Down
ALTER TABLE agent_memory DROP COLUMN provenance;
