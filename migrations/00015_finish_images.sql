-- +goose Up
-- finish_image's post-run upscales (toolbox/comfyui, worker/postrun.go): one row
-- per picture a run asked to finish. The tool inserts the rows (a repeated call
-- names the same pictures, so ON CONFLICT leaves one request); run:cleanup,
-- after it released the run's leases, enqueues run:finish-image when a
-- completed run has pending rows (or settles them as skipped when the run did
-- not complete); the handler moves each row out of pending once, with a
-- conditional UPDATE, so a redelivered task never upscales a picture twice.
CREATE TABLE finish_images (
    run_id       uuid NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    -- Request order (the event lists the pictures in it).
    seq          bigint GENERATED ALWAYS AS IDENTITY,
    -- The original, relative to the run's workspace.
    path         text NOT NULL,
    -- Where the upscale is written, beside the original (<name>-2k.png).
    output       text NOT NULL,
    status       text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending','done','failed','skipped')),
    width        int NOT NULL DEFAULT 0,
    height       int NOT NULL DEFAULT 0,
    error        text NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL DEFAULT now(),
    finished_at  timestamptz,
    PRIMARY KEY (run_id, path)
);
CREATE INDEX finish_images_pending ON finish_images (run_id) WHERE status = 'pending';

-- +goose Down
DROP TABLE finish_images;
