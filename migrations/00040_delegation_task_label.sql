-- +goose Up
-- The flow label of a delegation's task (issue 49's rules: what the delegating
-- session had read when its save recorded the delegation), stored by that save
-- in its first statement: the delegated turn reads it with the delegation
-- instead of the delegating session's whole saved context (O(history) and two
-- statements per round trip, issue 45). NULL: not recorded (a delegation
-- recorded by an older build, or outside a step), and the turn derives it from
-- the delegating session's history as before.
ALTER TABLE delegations ADD COLUMN IF NOT EXISTS task_label jsonb;

-- +goose Down
ALTER TABLE delegations DROP COLUMN IF EXISTS task_label;
