-- +goose Up
-- Humans in the loop (issue 40). An approval is now one of two kinds: a held
-- call ('call') or a question an agent asked with ask_user ('question', answered
-- with 'answered'). An approver may edit a call ('edited': the call runs with
-- edited_args, bound to edited_args_hash, after passing the whole gate again),
-- and may approve with a grant (grant_id). policy_revision is the revision of
-- permissions.yaml the approval was requested under: an approved call whose
-- revision changed since is asked again.
ALTER TABLE approvals
    ADD COLUMN kind text NOT NULL DEFAULT 'call' CHECK (kind IN ('call','question')),
    ADD COLUMN policy_revision text NOT NULL DEFAULT '',
    ADD COLUMN edited_args jsonb,
    ADD COLUMN edited_args_hash text NOT NULL DEFAULT '',
    ADD COLUMN answer text NOT NULL DEFAULT '',
    ADD COLUMN grant_id text NOT NULL DEFAULT '',
    DROP CONSTRAINT approvals_status_check,
    ADD CONSTRAINT approvals_status_check CHECK (status IN ('pending','approved','edited','answered','denied','timed_out','cancelled'));
CREATE INDEX approvals_decided ON approvals (decided_at DESC) WHERE decided_at IS NOT NULL;

-- A scoped grant: calls of tool by the owner's runs in scope that match the
-- pattern run without asking until expires_at, while the permissions file is
-- at policy_revision (a reload suspends the grant until confirmed).
CREATE TABLE grants (
    id              text PRIMARY KEY,
    created_by      text NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    approval_id     text NOT NULL DEFAULT '',
    owner           text NOT NULL,
    scope           text NOT NULL CHECK (scope IN ('run','project','team')),
    scope_id        text NOT NULL,
    tool            text NOT NULL,
    match           text NOT NULL CHECK (match IN ('exact','command','url_prefix')),
    pattern         text NOT NULL,
    policy_revision text NOT NULL,
    confirmed_by    text NOT NULL DEFAULT '',
    expires_at      timestamptz NOT NULL,
    revoked_at      timestamptz,
    revoked_by      text NOT NULL DEFAULT ''
);
CREATE INDEX grants_lookup ON grants (owner, tool, scope, scope_id) WHERE revoked_at IS NULL;

-- What an executed call was bound to: the hash of the arguments it ran with, the
-- policy revision it was judged under, and the approval or grant that let it run.
ALTER TABLE tool_audit
    ADD COLUMN args_hash text NOT NULL DEFAULT '',
    ADD COLUMN policy_revision text NOT NULL DEFAULT '',
    ADD COLUMN approval_id text NOT NULL DEFAULT '',
    ADD COLUMN grant_id text NOT NULL DEFAULT '',
    ADD COLUMN edited_by text NOT NULL DEFAULT '',
    ADD COLUMN original_args jsonb;

-- +goose Down
ALTER TABLE tool_audit
    DROP COLUMN original_args,
    DROP COLUMN edited_by,
    DROP COLUMN grant_id,
    DROP COLUMN approval_id,
    DROP COLUMN policy_revision,
    DROP COLUMN args_hash;
DROP TABLE grants;
DROP INDEX approvals_decided;
DELETE FROM approvals WHERE kind = 'question';
UPDATE approvals SET status = 'approved' WHERE status = 'edited';
ALTER TABLE approvals
    DROP CONSTRAINT approvals_status_check,
    ADD CONSTRAINT approvals_status_check CHECK (status IN ('pending','approved','denied','timed_out','cancelled')),
    DROP COLUMN grant_id,
    DROP COLUMN answer,
    DROP COLUMN edited_args_hash,
    DROP COLUMN edited_args,
    DROP COLUMN policy_revision,
    DROP COLUMN kind;
