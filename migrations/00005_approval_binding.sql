-- +goose Up
-- An approval binds to the exact arguments it was granted for: args_hash is the
-- SHA-256 of their RFC 8785 canonical form (jsonb reorders keys, so the stored
-- args cannot be hashed again). approver_view is what the approver is shown (the parsed
-- commands of run_shell, the URL of a URL tool), secrets masked in place.
-- 'cancelled' closes the pending approvals of a run that was cancelled or failed.
ALTER TABLE approvals
    ADD COLUMN args_hash text NOT NULL DEFAULT '',
    ADD COLUMN approver_view jsonb NOT NULL DEFAULT '{}',
    DROP CONSTRAINT approvals_status_check,
    ADD CONSTRAINT approvals_status_check CHECK (status IN ('pending','approved','denied','timed_out','cancelled'));

-- +goose Down
UPDATE approvals SET status = 'denied' WHERE status = 'cancelled';
ALTER TABLE approvals
    DROP CONSTRAINT approvals_status_check,
    ADD CONSTRAINT approvals_status_check CHECK (status IN ('pending','approved','denied','timed_out')),
    DROP COLUMN approver_view,
    DROP COLUMN args_hash;
