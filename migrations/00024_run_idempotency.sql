-- +goose Up
-- Idempotency-Key on run submission (issue 43): a principal's key names the
-- first run it started, and the fingerprint of that request, for a day (the
-- submitter's ttl). The claim is inserted in the run's own transaction, so
-- concurrent requests with one key create one run. run_id is not a foreign
-- key: the claim is the run's creation, and a purged run's key still refuses
-- to start another until it expires.
CREATE TABLE run_idempotency (
    owner        text NOT NULL,
    key          text NOT NULL CHECK (length(key) BETWEEN 1 AND 255),
    request_hash text NOT NULL,
    run_id       uuid NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (owner, key)
);
CREATE INDEX run_idempotency_created ON run_idempotency (created_at);

-- +goose Down
DROP TABLE run_idempotency;
