-- +goose Up
-- Fencing epochs of GPU leases (lease.PostgresEpoch). A token is (epoch, counter):
-- the counter lives in Redis and can go back when Redis fails over to a replica
-- that missed writes; the epoch comes from here, which does not, so a manager
-- that finds a new Redis history takes a new epoch and its tokens still sort
-- after every token issued before.
CREATE SEQUENCE lease_fence_epoch MINVALUE 1 MAXVALUE 23000 NO CYCLE;

-- +goose Down
DROP SEQUENCE lease_fence_epoch;
