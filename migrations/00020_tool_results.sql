-- +goose Up
-- Large tool results (issue 38, part 3): a result over worker.result_head_bytes is
-- stored whole here and the model gets its head and a handle it pages with
-- read_result. One row per stored result, its bytes in 1 MiB chunks, so neither
-- writing nor reading a page holds the whole result in memory.
-- id is random (unguessable) and new for every attempt of a call: a redelivered
-- step that runs the call again writes a new result and the session's save keeps
-- the message naming it; an attempt whose save never came is an orphan nobody can
-- name, removed with its run. run_id and session_id are the owner read_result
-- checks.
CREATE TABLE tool_results (
    id          text PRIMARY KEY,
    run_id      uuid NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    session_id  text NOT NULL,
    call_id     text NOT NULL,
    tool        text NOT NULL,
    size        bigint NOT NULL,
    chunk_bytes integer NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX tool_results_run ON tool_results (run_id);
CREATE TABLE tool_result_chunks (
    result_id  text NOT NULL REFERENCES tool_results(id) ON DELETE CASCADE,
    seq        integer NOT NULL,
    data       bytea NOT NULL,
    PRIMARY KEY (result_id, seq)
);

-- +goose Down
DROP TABLE tool_result_chunks;
DROP TABLE tool_results;
