-- +goose Up
-- What a run was started from that no person wrote (a webhook's payload): the
-- sources every session of the run starts labelled untrusted with, so the flow
-- rules (worker/provenance.go) restrict what the run sends out after reading
-- its own prompt. A retry copies them: its request is the same text.
ALTER TABLE runs ADD COLUMN untrusted text[] NOT NULL DEFAULT '{}'
	CHECK (cardinality(untrusted) <= 8);

-- +goose Down
ALTER TABLE runs DROP COLUMN untrusted;
