-- +goose Up
-- Projects (issue 17): a workspace, a knowledge base and agents' memory that
-- outlive runs. A run names its project ('' is a private scratch project, as
-- before projects existed).
CREATE TABLE projects (
    slug        text PRIMARY KEY CHECK (slug ~ '^[a-z0-9][a-z0-9-]{0,62}$'),
    name        text NOT NULL,
    owner       text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX projects_owner ON projects (owner, created_at DESC);
ALTER TABLE runs ADD COLUMN project text NOT NULL DEFAULT '';
CREATE INDEX runs_project_in_flight ON runs (project) WHERE project <> '' AND status IN ('queued','running','waiting');

-- +goose Down
DROP INDEX runs_project_in_flight;
ALTER TABLE runs DROP COLUMN project;
DROP TABLE projects;
