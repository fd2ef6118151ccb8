-- +goose Up
-- A delegation still open when its run ends is closed with the run (issue 41):
-- 'failed' when the run failed, 'cancelled' when the run was cancelled or
-- completed without waiting for it — its agent neither finished nor failed
-- its task, the run stopped asking.
ALTER TABLE delegations
    DROP CONSTRAINT delegations_status_check,
    ADD CONSTRAINT delegations_status_check CHECK (status IN ('pending','running','completed','failed','cancelled'));

-- +goose Down
UPDATE delegations SET status = 'failed' WHERE status = 'cancelled';
ALTER TABLE delegations
    DROP CONSTRAINT delegations_status_check,
    ADD CONSTRAINT delegations_status_check CHECK (status IN ('pending','running','completed','failed'));
