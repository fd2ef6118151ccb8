-- +goose Up
-- The MCP server's tool calls (package mcpserver, worker/mcp.go). An outside MCP
-- client's calls run on the workers as mcp:call tasks, inside a run row of their
-- own ("mcp:<profile>", one live run per principal and profile), so approvals,
-- audit rows, ownership and the project's workspace work as for agents. A row
-- moves queued → running → (waiting → running)* → done, each move a conditional
-- UPDATE under the claiming delivery's token: a redelivered task finds the call
-- claimed or done and does not run the tool again.
CREATE TABLE mcp_calls (
    id           text PRIMARY KEY,
    run_id       uuid NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    profile      text NOT NULL,
    principal    text NOT NULL,
    tool         text NOT NULL,
    -- As the client sent them: malformed arguments must reach the gate (and its
    -- audit row) unchanged, so they are text, not jsonb.
    args         text NOT NULL,
    status       text NOT NULL DEFAULT 'queued' CHECK (status IN ('queued','running','waiting','done')),
    claim        text NOT NULL DEFAULT '',
    claimed_at   timestamptz,
    attempts     int NOT NULL DEFAULT 0,
    approval_id  text NOT NULL DEFAULT '',
    -- The outcome (status done): decision allowed | denied | error | unknown.
    decision     text NOT NULL DEFAULT '',
    result       text NOT NULL DEFAULT '',
    is_error     boolean NOT NULL DEFAULT false,
    deny_layer   text NOT NULL DEFAULT '',
    deny_reason  text NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    finished_at  timestamptz
);
CREATE INDEX mcp_calls_run ON mcp_calls (run_id, created_at);
-- One live MCP run per principal and profile: concurrent first calls of one
-- client race to insert it and all but one find the winner's.
CREATE UNIQUE INDEX runs_mcp_live ON runs (owner, template)
    WHERE template LIKE 'mcp:%' AND status IN ('queued','running','waiting');

-- +goose Down
DROP INDEX runs_mcp_live;
DROP TABLE mcp_calls;
