-- +goose Up
-- Cost in money (issue 37). Amounts are picodollars (10^-12 USD, llm.Money): a
-- price per million tokens in microdollars times tokens, so sums are exact.
ALTER TABLE runs ADD COLUMN cost bigint NOT NULL DEFAULT 0;
-- 0 = no money budget (the template's budget.max_cost).
ALTER TABLE runs ADD COLUMN cost_budget bigint NOT NULL DEFAULT 0;
-- A step parked by a rate limit since then (NULL: not waiting); the step fails
-- with reason rate_limited once llm.max_wait has passed since.
ALTER TABLE sessions ADD COLUMN waiting_since timestamptz;
-- One row per model call, written with the step's save: what teams, projects
-- and principals spent, by model. Denormalized (owner, team, project) so the
-- sums need no join, and the rows outlive a run's deletion.
CREATE TABLE llm_calls (
    id                 bigserial PRIMARY KEY,
    at                 timestamptz NOT NULL DEFAULT now(),
    run_id             uuid NOT NULL,
    session_id         text NOT NULL,
    agent              text NOT NULL,
    owner              text NOT NULL,
    team               text NOT NULL,
    project_id         uuid,
    provider           text NOT NULL,
    model              text NOT NULL,
    fallback           boolean NOT NULL DEFAULT false,
    input_tokens       bigint NOT NULL,
    output_tokens      bigint NOT NULL,
    cached_tokens      bigint NOT NULL,
    cache_write_tokens bigint NOT NULL,
    cost               bigint NOT NULL,
    priced             boolean NOT NULL
);
CREATE INDEX llm_calls_owner_at ON llm_calls (owner, at);
CREATE INDEX llm_calls_run ON llm_calls (run_id);
CREATE INDEX llm_calls_project_at ON llm_calls (project_id, at) WHERE project_id IS NOT NULL;
CREATE INDEX llm_calls_team_at ON llm_calls (team, at);

-- +goose Down
DROP TABLE llm_calls;
ALTER TABLE sessions DROP COLUMN waiting_since;
ALTER TABLE runs DROP COLUMN cost_budget;
ALTER TABLE runs DROP COLUMN cost;
