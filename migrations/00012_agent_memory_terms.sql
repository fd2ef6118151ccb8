-- +goose Up
-- Recall's relevance is ts_rank_cd(tsv, q, 32) with q an OR of the task's
-- words. For such a query every occurrence of a query word is a cover of its
-- own, so ts_rank_cd is 0.1 (the default weight of unlabelled positions) times
-- the number of positions of query words in the entry. Computing it per row
-- from the tsvector cost ~70 µs an entry (Cover() over every query item), ~90 ms
-- a recall with 10,000 entries; this table keeps each long-term entry's
-- lexemes with their position counts, so a recall reads the few index entries
-- of the task's words (an index-only scan) and sums them. store's tests assert
-- the sum equals PostgreSQL's own ts_rank_cd.
CREATE TABLE agent_memory_terms (
    project    text NOT NULL,
    lexeme     text NOT NULL,
    memory_id  bigint NOT NULL REFERENCES agent_memory (id) ON DELETE CASCADE,
    -- '' for a project-shared entry, else the only agent that may recall it.
    agent      text NOT NULL,
    n          int NOT NULL,
    PRIMARY KEY (project, lexeme, memory_id) INCLUDE (agent, n)
);
CREATE INDEX agent_memory_terms_memory ON agent_memory_terms (memory_id);

-- +goose StatementBegin
CREATE FUNCTION agent_memory_terms_add() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.tier = 'long_term' THEN
        INSERT INTO agent_memory_terms (project, lexeme, memory_id, agent, n)
        SELECT NEW.project, u.lexeme, NEW.id, CASE WHEN NEW.scope = 'agent' THEN NEW.agent ELSE '' END,
               greatest(cardinality(u.positions), 1)
        FROM unnest(NEW.tsv) AS u;
    END IF;
    RETURN NULL;
END $$;
-- +goose StatementEnd
CREATE TRIGGER agent_memory_terms_add AFTER INSERT ON agent_memory
    FOR EACH ROW EXECUTE FUNCTION agent_memory_terms_add();

INSERT INTO agent_memory_terms (project, lexeme, memory_id, agent, n)
SELECT m.project, u.lexeme, m.id, CASE WHEN m.scope = 'agent' THEN m.agent ELSE '' END, greatest(cardinality(u.positions), 1)
FROM agent_memory m, unnest(m.tsv) AS u WHERE m.tier = 'long_term';

-- Recall no longer matches against tsv.
DROP INDEX agent_memory_tsv;

-- +goose Down
CREATE INDEX agent_memory_tsv ON agent_memory USING gin (tsv);
DROP TRIGGER agent_memory_terms_add ON agent_memory;
DROP FUNCTION agent_memory_terms_add();
DROP TABLE agent_memory_terms;
