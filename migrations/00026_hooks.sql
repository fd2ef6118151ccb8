-- +goose Up
-- Inbound webhooks (issue 43, part 2). A hook is an endpoint POST /hooks/<id>
-- that starts a run of a template (or an inline team) when a delivery signed
-- with its secret arrives; variables maps the template's variables to JSON
-- pointers (RFC 6901) into the delivery's payload.
--
-- secret is stored as written, because verifying an HMAC needs it: the API
-- answers it once (creation, rotation) and never again, but the database holds
-- it in the clear (encryption at rest is out of scope: docs/hooks.md).
CREATE TABLE hooks (
    id          text PRIMARY KEY,
    owner       text NOT NULL,
    name        text NOT NULL,
    scheme      text NOT NULL CHECK (scheme IN ('github','stripe','hmac')),
    secret      text NOT NULL,
    template    text NOT NULL DEFAULT '',
    team        jsonb,
    prompt      text NOT NULL,
    variables   jsonb NOT NULL DEFAULT '{}',
    project     text NOT NULL DEFAULT '',
    priority    integer NOT NULL DEFAULT 0,
    enabled     boolean NOT NULL DEFAULT true,
    created_at  timestamptz NOT NULL DEFAULT now(),
    rotated_at  timestamptz,
    CHECK ((template = '') <> (team IS NULL))
);
CREATE INDEX hooks_owner ON hooks (owner, created_at DESC);

-- Every delivery a hook received, accepted or refused (reason from a bounded
-- set). dedupe_key is what a delivery is recognised by again (the signed
-- delivery or event id; for GitHub, whose delivery id is unsigned, the body's
-- SHA-256): at most one accepted delivery per key, so a replay, however
-- concurrent, starts nothing. Refusals do not hold a key (a forged delivery
-- must not block the genuine one) and only the newest are kept
-- (api.hooks.keep_refused).
CREATE TABLE hook_deliveries (
    id           bigserial PRIMARY KEY,
    hook_id      text NOT NULL REFERENCES hooks (id) ON DELETE CASCADE,
    delivery_id  text NOT NULL DEFAULT '',
    dedupe_key   text NOT NULL DEFAULT '',
    received_at  timestamptz NOT NULL DEFAULT now(),
    outcome      text NOT NULL CHECK (outcome IN ('accepted','refused')),
    reason       text NOT NULL DEFAULT '',
    detail       text NOT NULL DEFAULT '',
    run_id       uuid
);
CREATE UNIQUE INDEX hook_deliveries_dedupe ON hook_deliveries (hook_id, dedupe_key) WHERE outcome = 'accepted';
CREATE INDEX hook_deliveries_hook ON hook_deliveries (hook_id, id DESC);

-- +goose Down
DROP TABLE hook_deliveries;
DROP TABLE hooks;
