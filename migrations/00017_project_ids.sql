-- +goose Up
-- Projects get an immutable id (issue 34). A slug is a name: unique among the
-- projects that exist (the API's routes name projects by it), but free again once
-- its project is deleted, and never an identity. Everything that belongs to a
-- project refers to its id, so a slug reused by another owner reaches none of
-- the old project's runs, workspace, memory or knowledge.
ALTER TABLE projects ADD COLUMN id uuid NOT NULL DEFAULT gen_random_uuid();
ALTER TABLE projects ADD CONSTRAINT projects_id UNIQUE (id);
-- The workspace a project's runs share. New projects get project-<id>; the
-- projects that existed keep project-<slug>, the directory their files are in
-- (no other project is ever given a slug-named workspace again).
ALTER TABLE projects ADD COLUMN workspace text;
UPDATE projects SET workspace = 'project-' || slug;
ALTER TABLE projects ALTER COLUMN workspace SET NOT NULL;
ALTER TABLE projects ADD CONSTRAINT projects_workspace UNIQUE (workspace);
-- Audit of people's deletions of projects and memory entries (who, what, when).
CREATE TABLE project_audit (
    id          bigserial PRIMARY KEY,
    at          timestamptz NOT NULL DEFAULT now(),
    principal   text NOT NULL,
    action      text NOT NULL CHECK (action IN ('project.delete', 'memory.delete')),
    project_id  uuid NOT NULL,
    slug        text NOT NULL,
    owner       text NOT NULL,
    detail      text NOT NULL DEFAULT ''
);
CREATE INDEX project_audit_project ON project_audit (project_id, id);

-- runs.project stays the slug the run was submitted with (a label for people);
-- project_id is the project, workspace the workspace it works in ('' = its own).
ALTER TABLE runs ADD COLUMN project_id uuid;
ALTER TABLE runs ADD COLUMN workspace text NOT NULL DEFAULT '';
-- Backfill: a run belongs to the project of its slug only if the run came after
-- that project was made (an older run was of a deleted project that had the slug),
-- and an MCP run only if its principal owns the project (before issue 34 any
-- principal's MCP profile could name any project). Other runs keep their slug as a
-- label and lose the project: their files are no one's to read any more.
UPDATE runs r SET project_id = p.id, workspace = p.workspace FROM projects p
WHERE r.project = p.slug AND r.project <> '' AND r.created_at >= p.created_at
  AND (r.template NOT LIKE 'mcp:%' OR r.owner = p.owner);
DROP INDEX runs_project_in_flight;
CREATE INDEX runs_project_in_flight ON runs (project_id) WHERE project_id IS NOT NULL AND status IN ('queued','running','waiting');
CREATE INDEX runs_workspace ON runs (workspace, finished_at) WHERE workspace <> '';

-- Memory: agent_memory.project and agent_memory_terms.project hold the project's
-- id from here on. Entries of a slug no project has are a deleted project's
-- leftovers: removed, so no later project of that slug could ever recall them.
DELETE FROM agent_memory m WHERE NOT EXISTS (SELECT 1 FROM projects p WHERE p.slug = m.project);
UPDATE agent_memory m SET project = p.id::text FROM projects p WHERE m.project = p.slug;
UPDATE agent_memory_terms t SET project = p.id::text FROM projects p WHERE t.project = p.slug;

-- Knowledge: a project's source is its id. Document ids are derived from the
-- source (knowledge.DocID: sha256 of kind NUL source NUL path, 10 bytes, hex), so
-- each document moves to the id its new source gives it; a deleted project's
-- leftovers are dropped.
DELETE FROM knowledge_docs d WHERE d.kind = 'project' AND NOT EXISTS (SELECT 1 FROM projects p WHERE p.slug = d.source);
DELETE FROM knowledge_sources s WHERE s.kind = 'project' AND NOT EXISTS (SELECT 1 FROM projects p WHERE p.slug = s.source);
CREATE TEMP TABLE knowledge_doc_move ON COMMIT DROP AS
SELECT d.id AS old_id, p.id::text AS source,
       'kd_' || left(encode(sha256('project'::bytea || '\x00'::bytea || convert_to(p.id::text, 'UTF8') || '\x00'::bytea || convert_to(d.path, 'UTF8')), 'hex'), 20) AS new_id
FROM knowledge_docs d JOIN projects p ON d.kind = 'project' AND d.source = p.slug;
INSERT INTO knowledge_docs (id, kind, source, path, title, tags, language, content_hash, chunks, embedding_model, indexed_at)
SELECT m.new_id, d.kind, m.source, d.path, d.title, d.tags, d.language, d.content_hash, d.chunks, d.embedding_model, d.indexed_at
FROM knowledge_docs d JOIN knowledge_doc_move m ON d.id = m.old_id;
UPDATE knowledge_chunks c SET doc_id = m.new_id, source = m.source FROM knowledge_doc_move m WHERE c.doc_id = m.old_id;
DELETE FROM knowledge_docs d USING knowledge_doc_move m WHERE d.id = m.old_id;
UPDATE knowledge_sources s SET source = p.id::text FROM projects p WHERE s.kind = 'project' AND s.source = p.slug;

-- +goose Down
UPDATE knowledge_sources s SET source = p.slug FROM projects p WHERE s.kind = 'project' AND s.source = p.id::text;
CREATE TEMP TABLE knowledge_doc_move ON COMMIT DROP AS
SELECT d.id AS old_id, p.slug AS source,
       'kd_' || left(encode(sha256('project'::bytea || '\x00'::bytea || convert_to(p.slug, 'UTF8') || '\x00'::bytea || convert_to(d.path, 'UTF8')), 'hex'), 20) AS new_id
FROM knowledge_docs d JOIN projects p ON d.kind = 'project' AND d.source = p.id::text;
INSERT INTO knowledge_docs (id, kind, source, path, title, tags, language, content_hash, chunks, embedding_model, indexed_at)
SELECT m.new_id, d.kind, m.source, d.path, d.title, d.tags, d.language, d.content_hash, d.chunks, d.embedding_model, d.indexed_at
FROM knowledge_docs d JOIN knowledge_doc_move m ON d.id = m.old_id;
UPDATE knowledge_chunks c SET doc_id = m.new_id, source = m.source FROM knowledge_doc_move m WHERE c.doc_id = m.old_id;
DELETE FROM knowledge_docs d USING knowledge_doc_move m WHERE d.id = m.old_id;
UPDATE agent_memory_terms t SET project = p.slug FROM projects p WHERE t.project = p.id::text;
UPDATE agent_memory m SET project = p.slug FROM projects p WHERE m.project = p.id::text;
DROP INDEX runs_workspace;
DROP INDEX runs_project_in_flight;
CREATE INDEX runs_project_in_flight ON runs (project) WHERE project <> '' AND status IN ('queued','running','waiting');
ALTER TABLE runs DROP COLUMN workspace;
ALTER TABLE runs DROP COLUMN project_id;
DROP TABLE project_audit;
ALTER TABLE projects DROP COLUMN workspace;
ALTER TABLE projects DROP COLUMN id;
