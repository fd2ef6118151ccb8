package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

// LocalOwner owns the runs submitted without authentication (loopback development).
const LocalOwner = "local"

// ErrTooManyRuns refuses a run whose owner already has the limit of runs in flight.
var ErrTooManyRuns = errors.New("too many runs in flight")

// ErrNoProject refuses a run whose project does not exist (deleted meanwhile).
var ErrNoProject = errors.New("no such project")

const runCols = `id::text, status, prompt, template, team, variables, result, error, reason,
	tokens_used, token_budget, cost, cost_budget, created_at, updated_at, finished_at, owner, project, coalesce(project_id::text, ''), workspace`

func scanRun(row pgx.Row) (Run, error) {
	var r Run
	err := row.Scan(&r.ID, &r.Status, &r.Prompt, &r.Template, &r.Team, &r.Variables, &r.Result,
		&r.Error, &r.Reason, &r.TokensUsed, &r.TokenBudget, &r.Cost, &r.CostBudget, &r.CreatedAt, &r.UpdatedAt, &r.FinishedAt, &r.Owner, &r.Project, &r.ProjectID, &r.Workspace)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, ErrNotFound
	}
	return r, err
}

// CreateRun inserts a queued run.
func (s *Store) CreateRun(ctx context.Context, r Run) error {
	return s.CreateRunLimited(ctx, r, 0)
}

// CreateRunLimited inserts a queued run unless its owner already has maxInFlight
// runs not yet terminal (ErrTooManyRuns); maxInFlight 0 means no limit. The limit
// is exact under concurrent submits: a transaction-scoped advisory lock per owner
// serializes count-and-insert, and the insert's own snapshot (READ COMMITTED)
// sees every run a previous lock holder committed.
func (s *Store) CreateRunLimited(ctx context.Context, r Run, maxInFlight int) error {
	if len(r.Variables) == 0 {
		r.Variables = json.RawMessage("{}")
	}
	if r.Owner == "" {
		r.Owner = LocalOwner
	}
	if maxInFlight < 0 {
		return fmt.Errorf("create run: max runs in flight %d is negative", maxInFlight)
	}
	// A project run names its project by id (the caller checked the principal may
	// use it): the insert takes the project's slug and workspace from that row,
	// under a share lock, so a project deleted (and its slug re-created by
	// someone else) meanwhile refuses the run instead of receiving it.
	const insert = `INSERT INTO runs (id, status, prompt, template, team, variables, token_budget, owner, project, project_id, workspace, cost_budget)
		SELECT $1::uuid, 'queued', $2::text, $3::text, $4::jsonb, $5::jsonb, $6::bigint, $7::text,
			coalesce(p.slug, ''), p.id, coalesce(p.workspace, ''), $9::bigint
		FROM (SELECT 1) one LEFT JOIN (SELECT id, slug, workspace FROM projects WHERE id = nullif($8, '')::uuid FOR SHARE) p ON true
		WHERE ($8 = '' OR p.id IS NOT NULL)`
	args := []any{r.ID, r.Prompt, r.Template, r.Team, r.Variables, r.TokenBudget, r.Owner, r.ProjectID, r.CostBudget}
	if maxInFlight == 0 {
		tag, err := s.db.Exec(ctx, insert, args...)
		if err != nil {
			return fmt.Errorf("create run: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("%w: project %q (deleted?)", ErrNoProject, r.ProjectID)
		}
		return nil
	}
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('aetherium.runs_in_flight:' || $1, 0))`, r.Owner); err != nil {
			return fmt.Errorf("lock runs in flight of %q: %w", r.Owner, err)
		}
		tag, err := tx.Exec(ctx, insert+` AND (SELECT count(*) FROM runs
			WHERE owner = $7 AND status IN ('queued','running','waiting')) < $10::bigint`, append(args, maxInFlight)...)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			if r.ProjectID != "" {
				var ok bool
				if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM projects WHERE id = $1::uuid)`, r.ProjectID).Scan(&ok); err == nil && !ok {
					return fmt.Errorf("%w: project %q (deleted?)", ErrNoProject, r.ProjectID)
				}
			}
			return fmt.Errorf("%w: %q has %d (api.max_runs_in_flight)", ErrTooManyRuns, r.Owner, maxInFlight)
		}
		return nil
	})
	if err != nil && !errors.Is(err, ErrTooManyRuns) && !errors.Is(err, ErrNoProject) {
		return fmt.Errorf("create run: %w", err)
	}
	return err
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
	// Search matches runs whose id, prompt, template, project, owner or team name
	// contains it, ignoring case; a plain substring (no pattern characters). It
	// filters the scan in created_at order: cheap on a page of recent runs, a
	// sequential read when it matches few of many.
	Search string
}

// FindRuns lists the runs that match f, newest first, limit at a time after
// cursor (the last run of the previous page).
func (s *Store) FindRuns(ctx context.Context, f RunFilter, limit int, cursor string) ([]Run, error) {
	q := `SELECT ` + runCols + ` FROM runs WHERE ($1 = '' OR status = $1) AND ($2 = '' OR owner = $2)
		AND ($4 = '' OR strpos(lower(id::text || ' ' || prompt || ' ' || template || ' ' || project || ' ' || owner || ' ' || coalesce(team->>'name', '')), lower($4)) > 0)`
	args := []any{f.Status, f.Owner, limit, f.Search}
	if cursor != "" {
		q += ` AND (created_at, id) < (SELECT created_at, id FROM runs WHERE id = $5 AND ($2 = '' OR owner = $2))`
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
// insert this update waited for (RequestApproval locks the run row).
func (s *Store) FinishRun(ctx context.Context, id, status, result, errMsg, reason string) (bool, error) {
	if !Terminal(status) {
		return false, fmt.Errorf("finish run: %q is not terminal", status)
	}
	changed := false
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE runs SET status = $2, result = $3, error = $4, reason = $5,
			updated_at = now(), finished_at = now()
			WHERE id = $1 AND status IN ('queued','running','waiting')`, id, status, result, errMsg, reason)
		if err != nil {
			return err
		}
		if changed = tag.RowsAffected() == 1; !changed {
			return nil
		}
		return cancelRunApprovals(ctx, tx, id, status)
	})
	if err != nil {
		return false, fmt.Errorf("finish run %s: %w", id, err)
	}
	return changed, nil
}

// StaleRuns returns non-terminal runs whose last event is older than age.
func (s *Store) StaleRuns(ctx context.Context, age time.Duration, limit int) ([]string, error) {
	rows, err := s.db.Query(ctx, `SELECT r.id::text FROM runs r
		WHERE r.status IN ('queued','running') AND r.updated_at < now() - $1::interval
		AND NOT EXISTS (SELECT 1 FROM run_events e WHERE e.run_id = r.id AND e.created_at >= now() - $1::interval)
		LIMIT $2`, age.String(), limit)
	if err != nil {
		return nil, fmt.Errorf("stale runs: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// QueuedRuns returns runs still queued after age (their first step was never picked up).
func (s *Store) QueuedRuns(ctx context.Context, age time.Duration, limit int) ([]string, error) {
	rows, err := s.db.Query(ctx, `SELECT id::text FROM runs WHERE status = 'queued' AND created_at < now() - $1::interval
		ORDER BY created_at LIMIT $2`, age.String(), limit)
	if err != nil {
		return nil, fmt.Errorf("queued runs: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
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
