-- +goose Up
-- A delegation's kind: '' for an agent of the team or a subagent (tools set), or
-- 'review' for code_review's reviewer, whose final answer the worker validates
-- against the review schema before its caller sees it. Its session's role is
-- 'reviewer'.
ALTER TABLE delegations ADD COLUMN kind text NOT NULL DEFAULT '' CHECK (kind IN ('', 'review'));
ALTER TABLE sessions DROP CONSTRAINT sessions_role_check;
ALTER TABLE sessions ADD CONSTRAINT sessions_role_check CHECK (role IN ('supervisor', 'worker', 'subagent', 'reviewer'));

-- +goose Down
ALTER TABLE sessions DROP CONSTRAINT sessions_role_check;
ALTER TABLE sessions ADD CONSTRAINT sessions_role_check CHECK (role IN ('supervisor', 'worker', 'subagent'));
ALTER TABLE delegations DROP COLUMN kind;
