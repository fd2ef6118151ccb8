-- +goose Up
-- Issue 46: retention deletes old runs in bulk from the tables live runs write.
-- After such a delete, VACUUM truncates the empty pages at a table's end under
-- an ACCESS EXCLUSIVE lock, which every live INSERT and UPDATE of the table
-- waits behind until VACUUM notices them (it checks every 20 ms) and gives up:
-- lock waits on runs/run_events the sweep's own transactions never cause
-- (docs/retention.md). Without truncation the freed pages are reused by new
-- rows instead of returned to the file system. SET (…) takes a SHARE UPDATE
-- EXCLUSIVE lock: writes go on while it runs.
ALTER TABLE runs SET (vacuum_truncate = false);
ALTER TABLE run_events SET (vacuum_truncate = false);
ALTER TABLE sessions SET (vacuum_truncate = false);
ALTER TABLE session_messages SET (vacuum_truncate = false);
ALTER TABLE session_compactions SET (vacuum_truncate = false);
ALTER TABLE delegations SET (vacuum_truncate = false);
ALTER TABLE approvals SET (vacuum_truncate = false);
ALTER TABLE llm_calls SET (vacuum_truncate = false);
ALTER TABLE tool_audit SET (vacuum_truncate = false);
ALTER TABLE egress_connections SET (vacuum_truncate = false);

-- +goose Down
ALTER TABLE egress_connections RESET (vacuum_truncate);
ALTER TABLE tool_audit RESET (vacuum_truncate);
ALTER TABLE llm_calls RESET (vacuum_truncate);
ALTER TABLE approvals RESET (vacuum_truncate);
ALTER TABLE delegations RESET (vacuum_truncate);
ALTER TABLE session_compactions RESET (vacuum_truncate);
ALTER TABLE session_messages RESET (vacuum_truncate);
ALTER TABLE sessions RESET (vacuum_truncate);
ALTER TABLE run_events RESET (vacuum_truncate);
ALTER TABLE runs RESET (vacuum_truncate);
