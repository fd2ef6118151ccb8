package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Run statuses.
const (
	RunQueued    = "queued"
	RunRunning   = "running"
	RunWaiting   = "waiting"
	RunCompleted = "completed"
	RunFailed    = "failed"
	RunCancelled = "cancelled"
)

// Terminal reports whether a run status is final.
func Terminal(status string) bool {
	return status == RunCompleted || status == RunFailed || status == RunCancelled
}

// Run is one row of runs.
type Run struct {
	ID          string          `json:"id"`
	Status      string          `json:"status"`
	Prompt      string          `json:"prompt"`
	Template    string          `json:"template,omitempty"`
	Team        json.RawMessage `json:"team"`
	Variables   json.RawMessage `json:"variables"`
	Result      string          `json:"result"`
	Error       string          `json:"error"`
	Reason      string          `json:"reason,omitempty"`
	TokensUsed  int64           `json:"tokens_used"`
	TokenBudget int64           `json:"token_budget"`
	// Cost is what the run's model calls cost so far, in picodollars
	// (llm.Money); CostBudget is its money budget (0: none).
	Cost       int64      `json:"cost"`
	CostBudget int64      `json:"cost_budget"`
	CreatedAt  time.Time  `json:"created_at"`
	UpdatedAt  time.Time  `json:"updated_at"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	// Owner is the principal that submitted the run (an API token's name, or
	// LocalOwner without authentication); it decides who may see and cancel it.
	Owner string `json:"owner"`
	// Project is the slug of the project the run was submitted into ("" for a
	// private scratch project): a label for people. The project itself is
	// ProjectID; a later project of the same slug is another project.
	Project string `json:"project,omitempty"`
	// ProjectID is the id of the run's project ("" for none, or for a run older
	// than project ids whose project could not be told apart).
	ProjectID string `json:"project_id,omitempty"`
	// Workspace is the workspace the run works in when it is not its own: its
	// project's (Project.Workspace), fixed when the run is created. It travels
	// with the run (a worker's cached copy of the row is JSON).
	Workspace string `json:"workspace,omitempty"`
	// FairKey is the run's fairness key (issue 39): who it shares the fleet's
	// worker time with and whose run limit it counts against. Its owner unless
	// its template chose otherwise (templates.Template.FairnessKey).
	FairKey string `json:"fair_key,omitempty"`
	// Priority is the run's priority, 1 (lowest) to 5; DefaultPriority if unset.
	Priority int `json:"priority,omitempty"`
	// RunLimit is how many runs of FairKey may be admitted at once (0: no
	// limit), as configured when the run was submitted.
	RunLimit int `json:"run_limit,omitempty"`
	// AdmittedAt is when the run was admitted to start; nil while it waits for a
	// run of its key to end (RunLimit reached).
	AdmittedAt *time.Time `json:"admitted_at,omitempty"`
	// Aging is an input of CreateRunLimited, not stored: what one priority
	// level is worth in waiting (fairness.aging), the head start its Priority
	// gives the run in its key's line.
	Aging time.Duration `json:"-"`
	// TraceContext is the W3C traceparent of the run's submit span (issue 42):
	// the parent of every span of the run's tasks. "" when tracing was off.
	TraceContext string `json:"trace_context,omitempty"`
	// Untrusted names the sources of the run's request that no person wrote
	// (a webhook's payload: "hook:<id> payload"): every session of the run
	// starts labelled untrusted with them (the flow rules). Empty for a
	// person's or a schedule's run.
	Untrusted []string `json:"untrusted,omitempty"`
	// Fork is an input of CreateRunOnce, not read back (ForkOf reads where a
	// run was forked from): the record a fork starts from, written with the run.
	Fork *ForkSeed `json:"-"`
}

// WorkspaceID is the id of the workspace the run works in: its project's, shared
// by the project's runs, or its own. The worker, the files endpoint and the
// workspace sweep all use this one mapping.
func (r Run) WorkspaceID() string {
	if r.Workspace != "" {
		return r.Workspace
	}
	return r.ID
}

// The workspace id prefixes of the storage tiers (wsquota.TierOf reads them):
// a project's workspace is Production, a staging run's own is Staging, a
// plain run's own (its id) is Temp.
const (
	ProjectWorkspacePrefix = "project-"
	StagingWorkspacePrefix = "staging-"
)

// StagingWorkspace is the workspace id of a project's staging run: its own,
// in the Staging tier, until it is promoted into the project's.
func StagingWorkspace(runID string) string { return StagingWorkspacePrefix + runID }

// Staging reports whether the run works in a staging workspace of its project.
func (r Run) Staging() bool { return r.ProjectID != "" && r.Workspace == StagingWorkspace(r.ID) }

// LocalOwner owns the runs submitted without authentication (loopback development).
const LocalOwner = "local"

// ErrTooManyRuns refuses a run whose owner already has the limit of runs in flight.
var ErrTooManyRuns = errors.New("too many runs in flight")

// ErrNoProject refuses a run whose project does not exist (deleted meanwhile).
var ErrNoProject = errors.New("no such project")

const runCols = `id::text, status, prompt, template, team, variables, result, error, reason,
	tokens_used, token_budget, cost, cost_budget, created_at, updated_at, finished_at, owner, project, coalesce(project_id::text, ''), workspace,
	fair_key, priority, run_limit, admitted_at, trace_context, untrusted`

func scanRun(row pgx.Row) (Run, error) {
	var r Run
	err := row.Scan(&r.ID, &r.Status, &r.Prompt, &r.Template, &r.Team, &r.Variables, &r.Result,
		&r.Error, &r.Reason, &r.TokensUsed, &r.TokenBudget, &r.Cost, &r.CostBudget, &r.CreatedAt, &r.UpdatedAt, &r.FinishedAt, &r.Owner, &r.Project, &r.ProjectID, &r.Workspace,
		&r.FairKey, &r.Priority, &r.RunLimit, &r.AdmittedAt, &r.TraceContext, &r.Untrusted)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, ErrNotFound
	}
	return r, err
}

// Priorities of a run: MinPriority (lowest) to MaxPriority; DefaultPriority
// when its submitter names none.
const (
	MinPriority     = 1
	MaxPriority     = 5
	DefaultPriority = 3
)

// CreateRun inserts a queued run (admitted at once unless its RunLimit is
// reached: see CreateRunLimited).
func (s *Store) CreateRun(ctx context.Context, r Run) error {
	_, err := s.CreateRunLimited(ctx, r, 0)
	return err
}

// CreateRunLimited inserts a queued run unless its owner already has maxInFlight
// runs not yet terminal (ErrTooManyRuns); maxInFlight 0 means no limit. It
// reports whether the run was admitted: false when its key (FairKey, default the
// owner) already has RunLimit admitted runs in flight — the run then waits, and
// the end of one of them admits it (FinishRun). Both limits are exact under
// concurrent submits: transaction-scoped advisory locks per owner and per key
// serialize count-and-insert, and the insert's own snapshot (READ COMMITTED)
// sees every run a previous lock holder committed. lineAt is the run's place in
// its key's line (Run.LineAt): its creation time less its priority's head start.
func (s *Store) CreateRunLimited(ctx context.Context, r Run, maxInFlight int) (bool, error) {
	admitted, _, err := s.CreateRunOnce(ctx, r, maxInFlight, nil)
	return admitted, err
}

// IdempotencyClaim makes a run's creation at most once per (owner, Key) for
// TTL: the key is claimed in the transaction that inserts the run.
type IdempotencyClaim struct {
	Key string
	// RequestHash fingerprints the request: the key with another hash is
	// ErrIdempotencyMismatch.
	RequestHash string
	TTL         time.Duration
}

// ErrIdempotencyMismatch refuses a request whose idempotency key an earlier,
// different request of its owner holds.
var ErrIdempotencyMismatch = errors.New("idempotency key used with another request")

// IdempotentRun is the run an owner's idempotency key started within ttl
// (ErrNotFound when none did, or the key has expired).
func (s *Store) IdempotentRun(ctx context.Context, owner, key string, ttl time.Duration) (IdempotentRun, error) {
	var out IdempotentRun
	err := s.db.QueryRow(ctx, `SELECT run_id::text, request_hash, created_at FROM run_idempotency
		WHERE owner = $1 AND key = $2 AND created_at > now() - $3::bigint * interval '1 microsecond'`, owner, key, ttl.Microseconds()).
		Scan(&out.RunID, &out.RequestHash, &out.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return out, ErrNotFound
	}
	if err != nil {
		return out, fmt.Errorf("idempotency key: %w", err)
	}
	return out, nil
}

// IdempotentRun is an idempotency key's first run.
type IdempotentRun struct {
	RunID, RequestHash string
	CreatedAt          time.Time
}

// CreateRunOnce is CreateRunLimited with an optional idempotency claim. With a
// claim, the key is inserted first in the run's transaction: a concurrent
// request with the same key blocks on the key's row until this transaction
// ends, then either finds the committed claim (earlier is its run, nothing is
// created; ErrIdempotencyMismatch when its hash differs) or, if this one rolled
// back (a refusal), claims the key itself. An expired claim is taken over.
func (s *Store) CreateRunOnce(ctx context.Context, r Run, maxInFlight int, claim *IdempotencyClaim) (admitted bool, earlier string, err error) {
	if len(r.Variables) == 0 {
		r.Variables = json.RawMessage("{}")
	}
	if r.Owner == "" {
		r.Owner = LocalOwner
	}
	if r.FairKey == "" {
		r.FairKey = r.Owner
	}
	if r.Priority == 0 {
		r.Priority = DefaultPriority
	}
	switch {
	case maxInFlight < 0:
		return false, "", fmt.Errorf("create run: max runs in flight %d is negative", maxInFlight)
	case r.Priority < MinPriority || r.Priority > MaxPriority:
		return false, "", fmt.Errorf("create run: priority %d is not in %d-%d", r.Priority, MinPriority, MaxPriority)
	case r.RunLimit < 0:
		return false, "", fmt.Errorf("create run: run limit %d is negative", r.RunLimit)
	case claim != nil && (claim.Key == "" || claim.TTL <= 0):
		return false, "", fmt.Errorf("create run: an idempotency claim needs a key and a ttl")
	case r.Workspace != "" && (r.ProjectID == "" || r.Workspace != StagingWorkspace(r.ID)):
		return false, "", fmt.Errorf("create run: workspace %q: a run chooses only its project's staging workspace (%s<run id>), in a project", r.Workspace, StagingWorkspacePrefix)
	}
	// A project run names its project by id (the caller checked the principal may
	// use it): the insert takes the project's slug and workspace from that row,
	// locked FOR SHARE so it cannot vanish mid-insert; a project deleted (by
	// someone else) meanwhile refuses the run instead of receiving it.
	const insert = `INSERT INTO runs (id, status, prompt, template, team, variables, token_budget, owner, project, project_id, workspace, cost_budget,
			fair_key, priority, run_limit, line_at, admitted_at, trace_context, untrusted)
		SELECT $1::uuid, 'queued', $2::text, $3::text, $4::jsonb, $5::jsonb, $6::bigint, $7::text,
			coalesce(p.slug, ''), p.id, CASE WHEN $16::text <> '' THEN $16::text ELSE coalesce(p.workspace, '') END, $9::bigint,
			$10::text, $11::smallint, $12::integer, now() - $13::bigint * interval '1 microsecond',
			CASE WHEN $12::integer = 0 OR (SELECT count(*) FROM runs WHERE fair_key = $10::text AND admitted_at IS NOT NULL
				AND status IN ('queued','running','waiting')) < $12::integer THEN now() END, $14::text, $15::text[]
		FROM (SELECT 1) one LEFT JOIN (SELECT id, slug, workspace FROM projects WHERE id = nullif($8, '')::uuid FOR SHARE) p ON true
		WHERE ($8 = '' OR p.id IS NOT NULL)`
	headStart := int64(r.Priority) * r.Aging.Microseconds()
	args := []any{r.ID, r.Prompt, r.Template, r.Team, r.Variables, r.TokenBudget, r.Owner, r.ProjectID, r.CostBudget,
		r.FairKey, r.Priority, r.RunLimit, headStart, r.TraceContext, untrustedOf(r), r.Workspace}
	if claim == nil && maxInFlight == 0 && r.RunLimit == 0 && r.Fork == nil {
		// Nothing to count or claim: one statement, no transaction.
		err := s.db.QueryRow(ctx, insert+` RETURNING admitted_at IS NOT NULL`, args...).Scan(&admitted)
		if errors.Is(err, pgx.ErrNoRows) {
			return false, "", fmt.Errorf("%w: project %q (deleted?)", ErrNoProject, r.ProjectID)
		}
		if err != nil {
			return false, "", fmt.Errorf("create run: %w", err)
		}
		return admitted, "", nil
	}
	err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if claim != nil {
			var err error
			if earlier, err = claimKey(ctx, tx, r.Owner, r.ID, *claim); err != nil || earlier != "" {
				return err
			}
		}
		var err error
		if admitted, err = createRunTx(ctx, tx, r, maxInFlight, insert, args); err != nil || r.Fork == nil {
			return err
		}
		return seedFork(ctx, tx, r.ID, r.Fork)
	})
	if err != nil && !errors.Is(err, ErrTooManyRuns) && !errors.Is(err, ErrNoProject) && !errors.Is(err, ErrIdempotencyMismatch) {
		return false, "", fmt.Errorf("create run: %w", err)
	}
	return admitted, earlier, err
}

// claimKey claims owner's idempotency key for runID in tx; earlier is the run
// of a live claim someone else committed first.
func claimKey(ctx context.Context, tx pgx.Tx, owner, runID string, c IdempotencyClaim) (earlier string, err error) {
	var got string
	err = tx.QueryRow(ctx, `INSERT INTO run_idempotency (owner, key, request_hash, run_id, created_at) VALUES ($1, $2, $3, $4::uuid, now())
		ON CONFLICT (owner, key) DO UPDATE SET request_hash = EXCLUDED.request_hash, run_id = EXCLUDED.run_id, created_at = EXCLUDED.created_at
			WHERE run_idempotency.created_at <= now() - $5::bigint * interval '1 microsecond'
		RETURNING run_id::text`, owner, c.Key, c.RequestHash, runID, c.TTL.Microseconds()).Scan(&got)
	if err == nil {
		return "", nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("claim idempotency key: %w", err)
	}
	var hash string
	if err := tx.QueryRow(ctx, `SELECT run_id::text, request_hash FROM run_idempotency WHERE owner = $1 AND key = $2`, owner, c.Key).Scan(&earlier, &hash); err != nil {
		return "", fmt.Errorf("read idempotency key: %w", err)
	}
	if hash != c.RequestHash {
		return "", fmt.Errorf("%w (run %s)", ErrIdempotencyMismatch, earlier)
	}
	return earlier, nil
}

// createRunTx is CreateRunLimited's counted insert, in tx.
func createRunTx(ctx context.Context, tx pgx.Tx, r Run, maxInFlight int, insert string, args []any) (bool, error) {
	var admitted bool
	err := func() error {
		q := insert
		if maxInFlight > 0 {
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('aetherium.runs_in_flight:' || $1, 0))`, r.Owner); err != nil {
				return fmt.Errorf("lock runs in flight of %q: %w", r.Owner, err)
			}
			q += fmt.Sprintf(` AND (SELECT count(*) FROM runs WHERE owner = $7 AND status IN ('queued','running','waiting')) < $%d::bigint`, len(args)+1)
			args = append(args, maxInFlight)
		}
		if r.RunLimit > 0 {
			if err := lockKey(ctx, tx, r.FairKey); err != nil {
				return err
			}
		}
		err := tx.QueryRow(ctx, q+` RETURNING admitted_at IS NOT NULL`, args...).Scan(&admitted)
		if errors.Is(err, pgx.ErrNoRows) {
			if r.ProjectID != "" {
				var ok bool
				if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM projects WHERE id = $1::uuid)`, r.ProjectID).Scan(&ok); err == nil && !ok {
					return fmt.Errorf("%w: project %q (deleted?)", ErrNoProject, r.ProjectID)
				}
			}
			return fmt.Errorf("%w: %q has %d (api.max_runs_in_flight)", ErrTooManyRuns, r.Owner, maxInFlight)
		}
		return err
	}()
	return admitted, err
}

// lockKey serializes the admissions of one fairness key until tx ends.
func lockKey(ctx context.Context, tx pgx.Tx, key string) error {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('aetherium.fair_key:' || $1, 0))`, key); err != nil {
		return fmt.Errorf("lock fairness key %q: %w", key, err)
	}
	return nil
}

// maxAdmitBatch bounds how many waiting runs one transaction admits (a raised
// limit admits the rest at the next end or sweep).
const maxAdmitBatch = 100

// admit admits the waiting runs of key that its limit now has room for, in line
// order (line_at: priority with aging, then submission), and returns them. Each
// waiting run counts against its own run_limit (the limit when it was
// submitted), so a lowered limit admits nobody until the key is under it.
func admit(ctx context.Context, tx pgx.Tx, key string) ([]Run, error) {
	if err := lockKey(ctx, tx, key); err != nil {
		return nil, err
	}
	var active int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM runs WHERE fair_key = $1 AND admitted_at IS NOT NULL
		AND status IN ('queued','running','waiting')`, key).Scan(&active); err != nil {
		return nil, fmt.Errorf("admit %q: count: %w", key, err)
	}
	var out []Run
	for len(out) < maxAdmitBatch {
		r, err := scanRun(tx.QueryRow(ctx, `UPDATE runs SET admitted_at = now(), updated_at = now()
			WHERE id = (SELECT id FROM runs WHERE fair_key = $1 AND admitted_at IS NULL AND status = 'queued'
				ORDER BY line_at, id LIMIT 1)
			AND (run_limit = 0 OR run_limit > $2)
			RETURNING `+runCols, key, active))
		if errors.Is(err, ErrNotFound) {
			break
		}
		if err != nil {
			return out, fmt.Errorf("admit %q: %w", key, err)
		}
		out = append(out, r)
		active++
	}
	return out, nil
}

// AdmitWaiting admits what the limits of the keys with waiting runs have room
// for (at most keys keys): the sweep behind FinishRun, for a limit raised by
// configuration or an end whose admission was rolled back. It returns the runs
// admitted; the caller starts them.
func (s *Store) AdmitWaiting(ctx context.Context, keys int) ([]Run, error) {
	rows, err := s.db.Query(ctx, `SELECT DISTINCT fair_key FROM runs WHERE admitted_at IS NULL AND status = 'queued' LIMIT $1`, keys)
	if err != nil {
		return nil, fmt.Errorf("admit waiting: %w", err)
	}
	ks, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("admit waiting: %w", err)
	}
	var out []Run
	for _, k := range ks {
		err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
			rs, err := admit(ctx, tx, k)
			out = append(out, rs...)
			return err
		})
		if err != nil {
			return out, fmt.Errorf("admit waiting: %w", err)
		}
	}
	return out, nil
}

// QueuePosition is a waiting run's place in its key's line (1: next to be
// admitted), 0 for a run that is not waiting for admission.
func (s *Store) QueuePosition(ctx context.Context, id string) (int, error) {
	var n int
	err := s.db.QueryRow(ctx, `SELECT count(*) FROM runs w, runs r
		WHERE r.id = $1 AND r.admitted_at IS NULL AND r.status = 'queued'
		AND w.fair_key = r.fair_key AND w.admitted_at IS NULL AND w.status = 'queued' AND (w.line_at, w.id) <= (r.line_at, r.id)`, id).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("queue position of %s: %w", id, err)
	}
	return n, nil
}

// GetRun loads a run.
func (s *Store) GetRun(ctx context.Context, id string) (Run, error) {
	r, err := scanRun(s.db.QueryRow(ctx, `SELECT `+runCols+` FROM runs WHERE id = $1`, id))
	return r, lookupErr(err, "get run "+id)
}

// ListRuns pages runs newest first. cursor is the id of the last run of the previous
// page ("" for the first page).
func (s *Store) ListRuns(ctx context.Context, status string, limit int, cursor string) ([]Run, error) {
	return s.ListRunsOf(ctx, "", status, limit, cursor)
}

// ListRunsOf is ListRuns restricted to one owner's runs ("" for every owner). A
// cursor naming another owner's run matches nothing, so it cannot probe for it.
func (s *Store) ListRunsOf(ctx context.Context, owner, status string, limit int, cursor string) ([]Run, error) {
	return s.FindRuns(ctx, RunFilter{Owner: owner, Status: status}, limit, cursor)
}

// RunFilter narrows a run listing; every empty field matches everything.
type RunFilter struct {
	Owner, Status string
	// Team is a team name (the run's team, or its template); Project a project
	// slug; exact matches.
	Team, Project string
	// Kind is RunKindMCP (an MCP client's session run) or RunKindJob (every
	// other run); "" both.
	Kind string
	// Search matches runs whose id, prompt, template, project, owner or team name
	// contains it, ignoring case; a plain substring (no pattern characters). It
	// filters the scan in created_at order: cheap on a page of recent runs, a
	// sequential read when it matches few of many.
	Search string
}

// Run kinds (RunFilter.Kind): a job is a submitted run; an MCP run holds one
// MCP client's calls (template "mcp:<profile>[#<handle>]").
const (
	RunKindJob = "job"
	RunKindMCP = "mcp"
)

// KindOf is a run's kind.
func KindOf(template string) string {
	if strings.HasPrefix(template, MCPTemplatePrefix) {
		return RunKindMCP
	}
	return RunKindJob
}

// FindRuns lists the runs that match f, newest first, limit at a time after
// cursor (the last run of the previous page).
func (s *Store) FindRuns(ctx context.Context, f RunFilter, limit int, cursor string) ([]Run, error) {
	q := `SELECT ` + runCols + ` FROM runs WHERE ($1 = '' OR status = $1) AND ($2 = '' OR owner = $2)
		AND ($4 = '' OR strpos(lower(id::text || ' ' || prompt || ' ' || template || ' ' || project || ' ' || owner || ' ' || coalesce(team->>'name', '')), lower($4)) > 0)
		AND ($5 = '' OR coalesce(team->>'name', '') = $5 OR template = $5) AND ($6 = '' OR project = $6)
		AND ($7 = '' OR ($7 = 'mcp') = (template LIKE 'mcp:%'))`
	args := []any{f.Status, f.Owner, limit, f.Search, f.Team, f.Project, f.Kind}
	if cursor != "" {
		q += ` AND (created_at, id) < (SELECT created_at, id FROM runs WHERE id = $8 AND ($2 = '' OR owner = $2))`
		args = append(args, cursor)
	}
	q += ` ORDER BY created_at DESC, id DESC LIMIT $3`
	return queryRows(ctx, s.db, "list runs", []Run(nil), rowsOf(scanRun), q, args...)
}

// StartRun moves a queued run to running; false when it was not queued.
func (s *Store) StartRun(ctx context.Context, id string) (bool, error) {
	tag, err := s.db.Exec(ctx, startRun, id)
	if err != nil {
		return false, fmt.Errorf("start run: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

// startRun is StartRun's statement (also in an Acquire's batch).
const startRun = `UPDATE runs SET status = 'running', updated_at = now() WHERE id = $1 AND status = 'queued'`

// SetRunWaiting toggles running ⇄ waiting (approvals); false when the run was not in from.
func (s *Store) SetRunWaiting(ctx context.Context, id string, waiting bool) (bool, error) {
	from, to := RunRunning, RunWaiting
	if !waiting {
		from, to = to, from
	}
	tag, err := s.db.Exec(ctx, `UPDATE runs SET status = $3, updated_at = now() WHERE id = $1 AND status = $2`, id, from, to)
	if err != nil {
		return false, fmt.Errorf("run %s → %s: %w", id, to, err)
	}
	return tag.RowsAffected() == 1, nil
}

// FinishRun moves a non-terminal run to a terminal status; false when it already was
// terminal (a duplicate delivery, or a cancel that won the race). The run's pending
// approvals are closed (cancelled) in the same transaction, so none of them can be
// approved after its run stopped; a second statement, so it sees an approval whose
// insert this update waited for (RequestApproval locks the run row). An admitted
// run's end admits the next waiting runs of its key in the same transaction, so
// no end — completion, failure, cancellation, a sweep of a dead worker's run —
// can leak its slot; they are returned, and the caller starts them (a start lost
// with the caller is the queued-runs sweep's: QueuedRuns). Its open delegations
// are closed in the same transaction too (closeRunDelegations): whichever way the
// run ended, none of them stays pending or running; their delegation.finished
// events ride with the run's terminal one (UnannouncedDelegations).
func (s *Store) FinishRun(ctx context.Context, id, status, result, errMsg, reason string) (bool, []Run, error) {
	if !Terminal(status) {
		return false, nil, fmt.Errorf("finish run: %q is not terminal", status)
	}
	changed := false
	var admitted []Run
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		admitted = nil
		var key string
		var limited bool
		err := tx.QueryRow(ctx, `UPDATE runs SET status = $2, result = $3, error = $4, reason = $5,
			updated_at = now(), finished_at = now(), end_announced = false
			WHERE id = $1 AND status IN ('queued','running','waiting')
			RETURNING fair_key, admitted_at IS NOT NULL AND EXISTS (SELECT 1 FROM runs w
				WHERE w.fair_key = runs.fair_key AND w.admitted_at IS NULL AND w.status = 'queued')`,
			id, status, result, errMsg, reason).Scan(&key, &limited)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		changed = true
		if err := cancelRunApprovals(ctx, tx, id, status); err != nil {
			return err
		}
		if err := closeRunDelegations(ctx, tx, id, status, reason, errMsg); err != nil {
			return err
		}
		if limited {
			admitted, err = admit(ctx, tx, key)
		}
		return err
	})
	if err != nil {
		return false, nil, fmt.Errorf("finish run %s: %w", id, err)
	}
	return changed, admitted, nil
}

// StaleRuns returns non-terminal runs whose last event is older than age: the
// stuck-run detector's. MCP runs (template MCPTemplatePrefix…) are not among
// them: such a run is an MCP client's session, running with no event for as
// long as the client sits idle, not a job that stopped making progress; each
// of its calls has its own timeouts, and its owner can cancel it.
func (s *Store) StaleRuns(ctx context.Context, age time.Duration, limit int) ([]string, error) {
	rows, err := s.db.Query(ctx, `SELECT r.id::text FROM runs r
		WHERE r.status IN ('queued','running') AND r.updated_at < now() - $1::interval
		AND NOT starts_with(r.template, $3)
		AND NOT EXISTS (SELECT 1 FROM run_events e WHERE e.run_id = r.id AND e.created_at >= now() - $1::interval)
		LIMIT $2`, age.String(), limit, MCPTemplatePrefix)
	if err != nil {
		return nil, fmt.Errorf("stale runs: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// StalledRun is a running run that shows no sign of life: no event, no
// session holding a step's lease, no approval pending. Its next step lived in
// Redis only (a restore onto an empty Redis, a failover that lost writes), or
// is merely late in a long queue; either way a wake-up of its sessions is what
// a redelivery would do.
type StalledRun struct {
	ID       string
	FairKey  string
	Priority int
	// LastEvent is the id of the run's newest event (0: none): the stall's
	// name, so each stall is woken once (a wake that makes progress writes an
	// event, and a next stall has another name).
	LastEvent int64
	// Delegations are the run's open (pending or running) delegations.
	Delegations []string
}

// StalledRuns returns running runs with no event and no update for quiet, no
// session under a live step lease and no pending approval (a person's decision
// resumes those), oldest first. MCP runs are not among them (StaleRuns says why).
func (s *Store) StalledRuns(ctx context.Context, quiet time.Duration, limit int) ([]StalledRun, error) {
	rows, err := s.db.Query(ctx, `SELECT r.id::text, r.fair_key, r.priority,
			coalesce((SELECT max(e.id) FROM run_events e WHERE e.run_id = r.id), 0),
			coalesce((SELECT array_agg(d.id ORDER BY d.id) FROM delegations d WHERE d.run_id = r.id AND d.status IN ('pending','running')), '{}')
		FROM runs r
		WHERE r.status = 'running' AND r.updated_at < now() - $1::interval
		AND NOT starts_with(r.template, $3)
		AND NOT EXISTS (SELECT 1 FROM run_events e WHERE e.run_id = r.id AND e.created_at >= now() - $1::interval)
		AND NOT EXISTS (SELECT 1 FROM sessions s WHERE s.run_id = r.id AND s.lease_until > now())
		AND NOT EXISTS (SELECT 1 FROM approvals a WHERE a.run_id = r.id AND a.status = 'pending')
		ORDER BY r.updated_at LIMIT $2`, quiet.String(), limit, MCPTemplatePrefix)
	if err != nil {
		return nil, fmt.Errorf("stalled runs: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (StalledRun, error) {
		var r StalledRun
		return r, row.Scan(&r.ID, &r.FairKey, &r.Priority, &r.LastEvent, &r.Delegations)
	})
	if err != nil {
		return nil, fmt.Errorf("stalled runs: %w", err)
	}
	return out, nil
}

// MarkEndAnnounced records that run's terminal event is stored and its hooks
// ran (FinishRun cleared it). A no-op once set.
func (s *Store) MarkEndAnnounced(ctx context.Context, runID string) error {
	if _, err := s.db.Exec(ctx, `UPDATE runs SET end_announced = true WHERE id = $1 AND NOT end_announced`, runID); err != nil {
		return fmt.Errorf("run %s: mark its end announced: %w", runID, err)
	}
	return nil
}

// UnannouncedEnds returns runs that ended more than grace ago with no
// terminal event stored since (their ender died between the two writes, or a
// dump caught the gap), oldest first.
func (s *Store) UnannouncedEnds(ctx context.Context, grace time.Duration, limit int) ([]string, error) {
	rows, err := s.db.Query(ctx, `SELECT id::text FROM runs WHERE NOT end_announced AND finished_at < now() - $1::interval
		ORDER BY finished_at LIMIT $2`, grace.String(), limit)
	if err != nil {
		return nil, fmt.Errorf("unannounced ends: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// QueuedRuns returns admitted runs still queued after age (their first step was
// never picked up); runs waiting for admission are not theirs to start.
func (s *Store) QueuedRuns(ctx context.Context, age time.Duration, limit int) ([]Run, error) {
	rows, err := s.db.Query(ctx, `SELECT `+runCols+` FROM runs WHERE status = 'queued' AND admitted_at IS NOT NULL
		AND admitted_at < now() - $1::interval ORDER BY admitted_at LIMIT $2`, age.String(), limit)
	if err != nil {
		return nil, fmt.Errorf("queued runs: %w", err)
	}
	defer rows.Close()
	var out []Run
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			return nil, fmt.Errorf("queued runs: %w", err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// RunOwners maps each of ids that names a run to its owner; ids that are not runs
// (or not UUIDs) are absent.
func (s *Store) RunOwners(ctx context.Context, ids []string) (map[string]string, error) {
	out := make(map[string]string, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := s.db.Query(ctx, `SELECT id::text, owner FROM runs WHERE id::text = ANY($1::text[])`, ids)
	if err != nil {
		return nil, fmt.Errorf("run owners: %w", err)
	}
	var id, owner string
	if _, err := pgx.ForEachRow(rows, []any{&id, &owner}, func() error { out[id] = owner; return nil }); err != nil {
		return nil, fmt.Errorf("run owners: %w", err)
	}
	return out, nil
}

// WorkspaceIdle reports whether workspace id (Run.WorkspaceID) has been unused
// for longer than after: no run working in it is in flight and the last one
// ended more than after ago. A run's own workspace (id is a run id) is its
// run's; a project's is shared by every run whose Workspace it is, and is used
// from the project's creation on. A workspace neither a run nor a project names
// (a deleted project's, a removed run's) is idle.
func (s *Store) WorkspaceIdle(ctx context.Context, id string, after time.Duration) (bool, error) {
	if _, err := uuid.Parse(id); err == nil {
		r, err := s.GetRun(ctx, id)
		if errors.Is(err, ErrNotFound) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		return Terminal(r.Status) && r.FinishedAt != nil && time.Since(*r.FinishedAt) > after, nil
	}
	// A project's workspace counts as used from the project's creation: files
	// put there before its first run (an upload, a picture of an earlier
	// project run) stay mounted for the delay like any other.
	var live bool
	var last *time.Time
	err := s.db.QueryRow(ctx, `SELECT coalesce(bool_or(status IN ('queued','running','waiting') OR finished_at IS NULL), false),
			greatest(max(finished_at), (SELECT created_at FROM projects WHERE workspace = $1))
		FROM runs WHERE workspace = $1 AND workspace <> ''`, id).Scan(&live, &last)
	if err != nil {
		return false, fmt.Errorf("workspace %s in use: %w", id, err)
	}
	return !live && (last == nil || time.Since(*last) > after), nil
}

// WorkspaceUse is what the retention of workspaces asks of one workspace.
type WorkspaceUse struct {
	// Live: a run working in it is queued, running or waiting.
	Live bool
	// LastEnded is when the last run working in it finished; nil when none did
	// (or no run names it: Known is false).
	LastEnded *time.Time
	// Known: a run (its own run, or runs working in it) names the workspace.
	Known bool
	// Project: a project that exists has it as its workspace.
	Project bool
}

// WorkspaceUse reports who uses workspace id (Run.WorkspaceID): a run's own
// (a run id), a staging run's (staging-<run id>) or a project's.
func (s *Store) WorkspaceUse(ctx context.Context, id string) (WorkspaceUse, error) {
	var u WorkspaceUse
	cond := `workspace = $1 AND workspace <> ''`
	if _, err := uuid.Parse(id); err == nil {
		cond = `id = $1::uuid AND workspace = ''`
	}
	err := s.db.QueryRow(ctx, `SELECT coalesce(bool_or(status IN ('queued','running','waiting') OR finished_at IS NULL), false),
			max(finished_at), count(*) > 0, EXISTS (SELECT 1 FROM projects WHERE workspace = $1)
		FROM runs WHERE `+cond, id).Scan(&u.Live, &u.LastEnded, &u.Known, &u.Project)
	if err != nil {
		return u, fmt.Errorf("workspace %s in use: %w", id, err)
	}
	return u, nil
}

// untrustedOf is the run's untrusted sources as the column takes them: never
// NULL (the column is NOT NULL, pgx encodes a nil slice as NULL).
func untrustedOf(r Run) []string {
	if r.Untrusted == nil {
		return []string{}
	}
	return r.Untrusted
}
