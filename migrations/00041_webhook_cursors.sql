-- +goose Up
-- How far each outbound webhook (api.webhooks) has been swept (webhook.Sweep):
-- the id of the newest run event its sweep has seen. A delivery is enqueued
-- when its event is stored (events.Recorder.OnEvent); the sweep enqueues those
-- whose enqueue never happened (the process died between the commit and it, or
-- Redis refused it), so a hook hears every event at least once. hook is the
-- hook's place in the configuration and a digest of its URL (webhook.Hook.Key).
CREATE TABLE IF NOT EXISTS webhook_cursors (
    hook text PRIMARY KEY,
    event_id bigint NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE IF EXISTS webhook_cursors;
