-- +goose Up
-- Every connection a sandbox's egress proxy allowed or refused: a table of its own, so
-- tool_audit keeps exactly one row per tool call (one run_shell call may open many
-- connections, or none).
CREATE TABLE egress_connections (
    id          bigserial PRIMARY KEY,
    run_id      uuid NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    agent       text NOT NULL DEFAULT '',
    at          timestamptz NOT NULL DEFAULT now(),
    -- CONNECT for a tunnel (HTTPS: opaque to the proxy), else the HTTP method.
    method      text NOT NULL,
    host        text NOT NULL,
    port        integer NOT NULL,
    -- The address actually dialed (empty when refused before dialing).
    remote      text NOT NULL DEFAULT '',
    allowed     boolean NOT NULL,
    reason      text NOT NULL DEFAULT '',
    status      integer NOT NULL DEFAULT 0,
    bytes_out   bigint NOT NULL DEFAULT 0,
    bytes_in    bigint NOT NULL DEFAULT 0,
    duration_ms bigint NOT NULL DEFAULT 0
);
CREATE INDEX egress_connections_run ON egress_connections (run_id, id);

-- +goose Down
DROP TABLE egress_connections;
