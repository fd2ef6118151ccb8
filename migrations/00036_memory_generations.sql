-- +goose Up
-- Issue 45: every worker keeps an in-process index of a project's long-term
-- memory (store.MemoryIndex) so a new session's recall does not read 10,000
-- rows. A recall first reads the project's generation here; the index is
-- current when it was built at that generation or a later one. Triggers keep
-- the generation in the transaction of every change to a long-term entry, so
-- a write by any process (the engine's final save, the API, retention, a
-- person's SQL, a build without the index) is seen by the next recall on
-- every worker.
--
-- gen comes from one sequence (never reset, not owned by the table), so a
-- value is never reused for a project, even after its row or the table is
-- truncated. reset_gen is the generation of the last delete or update of a
-- long-term entry: an index older than it rebuilds; an index older than gen
-- only reads the entries written since (agent_memory.gen > its generation).
--
-- agent_memory.gen is the generation that wrote the entry. The writer takes
-- the project's row lock before it (the insert trigger's upsert) and holds it
-- until commit, so writers of one project commit in the order of their
-- generations: an index at generation G has every entry of gen <= G, and
-- reading gen > G finds the rest. One long-term write per project at a time:
-- a session's final save holds the lock for the rest of its transaction.
CREATE SEQUENCE agent_memory_gen_seq;
CREATE TABLE agent_memory_generations (
    project   text PRIMARY KEY,
    gen       bigint NOT NULL,
    reset_gen bigint NOT NULL DEFAULT 0
);
-- NULL for entries written before this migration: a rebuild reads them.
ALTER TABLE agent_memory ADD COLUMN gen bigint;
CREATE INDEX agent_memory_gen ON agent_memory (project, gen) WHERE gen IS NOT NULL;

-- +goose StatementBegin
-- One bump per transaction and project (a bulk insert takes one generation,
-- not one per row): the transaction remembers its generation in two
-- transaction-local settings.
CREATE FUNCTION agent_memory_gen_insert() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE g bigint;
BEGIN
    IF NEW.tier <> 'long_term' THEN
        RETURN NEW;
    END IF;
    IF current_setting('aetherium.memory_gen_project', true) IS NOT DISTINCT FROM NEW.project THEN
        g := current_setting('aetherium.memory_gen', true)::bigint;
    ELSE
        INSERT INTO agent_memory_generations AS a (project, gen) VALUES (NEW.project, nextval('agent_memory_gen_seq'))
        ON CONFLICT (project) DO UPDATE SET gen = nextval('agent_memory_gen_seq')
        RETURNING a.gen INTO g;
        PERFORM set_config('aetherium.memory_gen_project', NEW.project, true), set_config('aetherium.memory_gen', g::text, true);
    END IF;
    NEW.gen := g;
    RETURN NEW;
END $$;
-- +goose StatementEnd
CREATE TRIGGER agent_memory_gen_insert BEFORE INSERT ON agent_memory
    FOR EACH ROW EXECUTE FUNCTION agent_memory_gen_insert();

-- +goose StatementBegin
CREATE FUNCTION agent_memory_gen_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO agent_memory_generations AS a (project, gen, reset_gen)
    SELECT p.project, nextval('agent_memory_gen_seq'), 0 FROM (SELECT DISTINCT project FROM gone WHERE tier = 'long_term') p ORDER BY p.project
    ON CONFLICT (project) DO UPDATE SET gen = nextval('agent_memory_gen_seq');
    UPDATE agent_memory_generations a SET reset_gen = a.gen
    WHERE a.project IN (SELECT project FROM gone WHERE tier = 'long_term');
    RETURN NULL;
END $$;
-- +goose StatementEnd
CREATE TRIGGER agent_memory_gen_delete AFTER DELETE ON agent_memory
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION agent_memory_gen_delete();

-- +goose StatementBegin
-- Nothing updates a long-term entry today (working memory is overwritten);
-- should anything, the index of its project rebuilds.
CREATE FUNCTION agent_memory_gen_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO agent_memory_generations AS a (project, gen, reset_gen)
    SELECT p.project, nextval('agent_memory_gen_seq'), 0 FROM (
        SELECT project FROM gone WHERE tier = 'long_term' UNION SELECT project FROM came WHERE tier = 'long_term') p ORDER BY p.project
    ON CONFLICT (project) DO UPDATE SET gen = nextval('agent_memory_gen_seq');
    UPDATE agent_memory_generations a SET reset_gen = a.gen
    WHERE a.project IN (SELECT project FROM gone WHERE tier = 'long_term' UNION SELECT project FROM came WHERE tier = 'long_term');
    RETURN NULL;
END $$;
-- +goose StatementEnd
CREATE TRIGGER agent_memory_gen_update AFTER UPDATE ON agent_memory
    REFERENCING OLD TABLE AS gone NEW TABLE AS came FOR EACH STATEMENT EXECUTE FUNCTION agent_memory_gen_update();

-- +goose StatementBegin
CREATE FUNCTION agent_memory_gen_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE agent_memory_generations SET gen = nextval('agent_memory_gen_seq');
    UPDATE agent_memory_generations SET reset_gen = gen;
    RETURN NULL;
END $$;
-- +goose StatementEnd
CREATE TRIGGER agent_memory_gen_truncate AFTER TRUNCATE ON agent_memory
    FOR EACH STATEMENT EXECUTE FUNCTION agent_memory_gen_truncate();

-- +goose Down
DROP TRIGGER agent_memory_gen_truncate ON agent_memory;
DROP FUNCTION agent_memory_gen_truncate();
DROP TRIGGER agent_memory_gen_update ON agent_memory;
DROP FUNCTION agent_memory_gen_update();
DROP TRIGGER agent_memory_gen_delete ON agent_memory;
DROP FUNCTION agent_memory_gen_delete();
DROP TRIGGER agent_memory_gen_insert ON agent_memory;
DROP FUNCTION agent_memory_gen_insert();
DROP INDEX agent_memory_gen;
ALTER TABLE agent_memory DROP COLUMN gen;
DROP TABLE agent_memory_generations;
DROP SEQUENCE agent_memory_gen_seq;
