-- +goose Up
-- What a delegated session read itself (its flow label, issue 49), stored with
-- its outcome in the save that ends it: the resume that reads the result takes
-- the label from the row it already reads instead of reading the session's
-- whole history again (two transactions per round trip, issue 45). NULL: not
-- recorded (a row finished by an older build, or by the redelivery path), and
-- the reader derives it from the history as before.
ALTER TABLE delegations ADD COLUMN IF NOT EXISTS result_label jsonb;

-- +goose Down
ALTER TABLE delegations DROP COLUMN IF EXISTS result_label;
