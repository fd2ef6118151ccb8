-- +goose Up
-- Many tenants, one fleet (issue 39). Every run has a fairness key (default its
-- owner; a template may choose its project, its team or a variable) and a
-- priority (1-5, default 3). A key may be limited to N runs at once
-- (fairness.keys.<key>.runs): a run over the limit is accepted and waits
-- with admitted_at NULL; the transaction that ends one of the key's admitted runs
-- admits the next (store.FinishRun), so a slot is never leaked whoever ends the
-- run. run_limit is the key's limit when the run was submitted: admission reads it
-- from the rows, so every process admits by the same number without the config.
ALTER TABLE runs
    ADD COLUMN fair_key text NOT NULL DEFAULT '',
    ADD COLUMN priority smallint NOT NULL DEFAULT 3 CHECK (priority BETWEEN 1 AND 5),
    ADD COLUMN run_limit integer NOT NULL DEFAULT 0 CHECK (run_limit >= 0),
    ADD COLUMN admitted_at timestamptz,
    -- The run's place in its key's line of waiting runs: its submission time
    -- less its priority's head start (priority × fairness.aging), so a higher
    -- priority goes first and a lower one gains on it as it waits (aging).
    ADD COLUMN line_at timestamptz NOT NULL DEFAULT now();
-- Every run before this migration was started at once: admitted when created.
UPDATE runs SET fair_key = owner, admitted_at = created_at, line_at = created_at;
-- The line of a key (waiting runs) and its admitted runs in flight.
CREATE INDEX runs_waiting_admission ON runs (fair_key, line_at, id) WHERE admitted_at IS NULL AND status = 'queued';
CREATE INDEX runs_admitted_in_flight ON runs (fair_key) WHERE admitted_at IS NOT NULL AND status IN ('queued','running','waiting');

-- +goose Down
DROP INDEX runs_admitted_in_flight;
DROP INDEX runs_waiting_admission;
ALTER TABLE runs DROP COLUMN line_at, DROP COLUMN admitted_at, DROP COLUMN run_limit, DROP COLUMN priority, DROP COLUMN fair_key;
