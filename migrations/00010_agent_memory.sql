-- +goose Up
-- ADR 5: agent memory, two tiers, no vector index. Long-term entries are
-- append-only per project, scoped to the project or to one agent; working memory
-- is one row per session, overwritten. Relevance is full-text rank against the
-- task ('simple' configuration: memory is written in any language).
CREATE TABLE agent_memory (
    id          bigserial PRIMARY KEY,
    project     text NOT NULL,
    tier        text NOT NULL CHECK (tier IN ('long_term', 'working')),
    scope       text NOT NULL CHECK (scope IN ('project', 'agent')),
    agent       text NOT NULL DEFAULT '',
    run_id      uuid,
    session_id  text,
    author      text NOT NULL DEFAULT '',
    content     text NOT NULL,
    tsv         tsvector GENERATED ALWAYS AS (to_tsvector('simple', content)) STORED,
    created_at  timestamptz NOT NULL DEFAULT now()
);
-- Recall reads one project's long-term entries by rank and by age.
CREATE INDEX agent_memory_tsv ON agent_memory USING gin (tsv);
CREATE INDEX agent_memory_project ON agent_memory (project, tier, created_at DESC);
-- One long-term entry per finished session (a redelivered final save adds none),
-- one working row per session.
CREATE UNIQUE INDEX agent_memory_session ON agent_memory (session_id, tier) WHERE session_id IS NOT NULL;

-- +goose Down
DROP TABLE agent_memory;
