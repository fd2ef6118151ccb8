-- +goose Up
-- Storage tiers (issue 46, part 4): promoting a staging run's workspace into its
-- project's Production workspace is audited with the project's other actions.
-- Widening the check is expand-only: an older binary writes the actions it knew.
ALTER TABLE project_audit DROP CONSTRAINT IF EXISTS project_audit_action_check;
ALTER TABLE project_audit ADD CONSTRAINT project_audit_action_check
    CHECK (action IN ('project.delete', 'memory.delete', 'workspace.promote'));

-- +goose Down
DELETE FROM project_audit WHERE action = 'workspace.promote';
ALTER TABLE project_audit DROP CONSTRAINT IF EXISTS project_audit_action_check;
ALTER TABLE project_audit ADD CONSTRAINT project_audit_action_check
    CHECK (action IN ('project.delete', 'memory.delete'));
