-- +goose Up
-- The fleet's identity, generated once per database: it scopes what the fleet owns on
-- shared infrastructure (sandbox containers on a Docker engine another fleet uses too).
CREATE TABLE fleet_identity (
    singleton  boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    id         text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
-- Filled by the first process that asks (store.FleetID), not here: a database
-- cloned from a migrated template must not inherit its template's identity.

-- +goose Down
DROP TABLE fleet_identity;
