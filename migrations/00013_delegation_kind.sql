-- +goose Up
-- A delegation's kind: '' for an agent of the team or a subagent (tools set), or
-- 'review' for code_review's reviewer, whose final answer the worker validates
-- against the review schema before its caller sees it.
ALTER TABLE delegations ADD COLUMN kind text NOT NULL DEFAULT '' CHECK (kind IN ('', 'review'));

-- +goose Down
ALTER TABLE delegations DROP COLUMN kind;
