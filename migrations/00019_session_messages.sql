-- +goose Up
-- Long sessions (issue 38). A session's history is append-only: a step writes
-- the messages it adds, never the whole conversation again (a session of n
-- turns wrote O(n²) bytes as one jsonb value rewritten per step). The model's
-- context is the head rows (seq < head: prompt, recalled memory, task), then
-- the summary standing for rows head .. context_from-1, then every row from
-- context_from on. Before a first compaction head = context_from = 0 and the
-- summary is empty: the context is every row. The rows of a compacted range
-- stay: the full history is always here.
CREATE TABLE session_messages (
    session_id text NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    seq        int NOT NULL CHECK (seq >= 0),
    message    jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, seq)
);
ALTER TABLE sessions ADD COLUMN head int NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN context_from int NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN summary jsonb NOT NULL DEFAULT '[]';
-- ADR 5's working memory: the session's notes, overwritten by the agent, shown
-- at every turn start and kept across compactions.
ALTER TABLE sessions ADD COLUMN notes text NOT NULL DEFAULT '';
-- One row per compaction: where it cut, what it cost and what it left.
CREATE TABLE session_compactions (
    session_id    text NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    n             int NOT NULL,
    head          int NOT NULL,
    from_seq      int NOT NULL,
    through_seq   int NOT NULL,
    tokens_before int NOT NULL,
    tokens_after  int NOT NULL,
    summary       jsonb NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, n)
);
INSERT INTO session_messages (session_id, seq, message)
    SELECT s.id, e.n - 1, e.m FROM sessions AS s, jsonb_array_elements(s.messages) WITH ORDINALITY AS e(m, n);
ALTER TABLE sessions DROP COLUMN messages;
-- The full history of a session as one JSON array, in order: for reports, the
-- drills and tests (never the worker's hot path).
CREATE FUNCTION session_history(sid text) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT coalesce(jsonb_agg(message ORDER BY seq), '[]'::jsonb) FROM session_messages WHERE session_id = sid
$$;

-- +goose Down
ALTER TABLE sessions ADD COLUMN messages jsonb NOT NULL DEFAULT '[]';
UPDATE sessions SET messages = session_history(id);
DROP FUNCTION session_history(text);
DROP TABLE session_compactions;
DROP TABLE session_messages;
ALTER TABLE sessions DROP COLUMN notes;
ALTER TABLE sessions DROP COLUMN summary;
ALTER TABLE sessions DROP COLUMN context_from;
ALTER TABLE sessions DROP COLUMN head;
