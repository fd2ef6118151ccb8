package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Delegation statuses.
const (
	DelegationPending   = "pending"
	DelegationRunning   = "running"
	DelegationCompleted = "completed"
	DelegationFailed    = "failed"
	// DelegationCancelled is a delegation its run stopped waiting for: the run
	// was cancelled, or completed, while it was still open (closeRunDelegations).
	DelegationCancelled = "cancelled"
)

// Delegation is a task handed from one session to an agent.
type Delegation struct {
	ID            string   `json:"id"`
	RunID         string   `json:"run_id"`
	ParentSession string   `json:"parent_session"`
	ToolCallID    string   `json:"tool_call_id"`
	Agent         string   `json:"agent"`
	Task          string   `json:"task"`
	Tools         []string `json:"tools,omitempty"`
	// Kind is DelegationReview for code_review's reviewer, else empty.
	Kind        string     `json:"kind,omitempty"`
	Status      string     `json:"status"`
	Result      string     `json:"result"`
	Error       string     `json:"error"`
	CreatedAt   time.Time  `json:"created_at"`
	CompletedAt *time.Time `json:"completed_at,omitempty"`
	// TraceContext is the W3C traceparent of the step that finished the
	// delegation (issue 42): the resume that reads its result links to it. ""
	// when tracing was off or it is not finished.
	TraceContext string `json:"-"`
	// ResultLabel is the flow label of what the delegated session read itself
	// (llm.Provenance as JSON, "{}" when clean), stored with its outcome by the
	// save that ended it; nil when not recorded (the reader derives it from the
	// session's history).
	ResultLabel json.RawMessage `json:"-"`
	// TaskLabel is the flow label of the delegation's task (llm.Provenance as
	// JSON, "{}" when clean): what the delegating session had read, stored by
	// the save that recorded it (StepWrite.Delegated); nil when not recorded
	// (an older build's, or one recorded outside a step), and the reader derives
	// it from the delegating session's history.
	TaskLabel json.RawMessage `json:"-"`
}

// DelegationReview is the kind of code_review's reviewer delegation.
const DelegationReview = "review"

const delCols = `id, run_id::text, parent_session, tool_call_id, agent, task, tools, kind, status, result, error, created_at, completed_at, trace_context, result_label, task_label`

func scanDelegation(row pgx.Row) (Delegation, error) {
	var d Delegation
	var tools []byte
	err := row.Scan(&d.ID, &d.RunID, &d.ParentSession, &d.ToolCallID, &d.Agent, &d.Task, &tools, &d.Kind, &d.Status,
		&d.Result, &d.Error, &d.CreatedAt, &d.CompletedAt, &d.TraceContext, &d.ResultLabel, &d.TaskLabel)
	if errors.Is(err, pgx.ErrNoRows) {
		return d, ErrNotFound
	}
	if err == nil && len(tools) > 0 {
		err = json.Unmarshal(tools, &d.Tools)
	}
	return d, err
}

// DelegationLimits bound the delegations RecordDelegations records: per parent
// session and per run, each counting every delegation already recorded.
type DelegationLimits struct {
	PerSession, PerRun int
}

// DelegationCapError is a RecordDelegations refused by a limit: recording Want
// more would take the Scope ("session" or "run") past Cap, which Have already
// counts.
type DelegationCapError struct {
	Scope           string
	Cap, Have, Want int
}

func (e *DelegationCapError) Error() string {
	return fmt.Sprintf("the %s has %d of its %d delegations; %d more would exceed the cap", e.Scope, e.Have, e.Cap, e.Want)
}

// The statements of RecordDelegations. The run's row is locked first (NO KEY
// UPDATE: inserts of rows naming the run, which take KEY SHARE, go on), in its own
// statement: under READ COMMITTED the insert's snapshot is then taken after every
// other recorder of the run committed, so its counts are the real ones and steps
// running at once cannot together pass a cap. A count in the insert's own statement
// (or a lock in its CTE) would read the snapshot taken before the lock was granted.
const (
	lockRunForDelegations = `SELECT 1 FROM runs WHERE id = $1 FOR NO KEY UPDATE`
	recordDelegations     = `WITH u AS (
			SELECT * FROM unnest($4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[]) AS u(id, call, agent, task, tools, kind)),
		fresh AS (SELECT * FROM u WHERE NOT EXISTS (SELECT 1 FROM delegations AS d WHERE d.id = u.id)),
		c AS (SELECT EXISTS (SELECT 1 FROM sessions WHERE id = $1 AND lease_token = $2) AS leased,
				(SELECT count(*) FROM delegations WHERE parent_session = $1) AS sess_n,
				(SELECT count(*) FROM delegations WHERE run_id = $3::uuid) AS run_n,
				(SELECT count(*) FROM fresh) AS new_n),
		ins AS (INSERT INTO delegations (id, run_id, parent_session, tool_call_id, agent, task, tools, kind)
			SELECT f.id, $3::uuid, $1, f.call, f.agent, f.task, f.tools::jsonb, f.kind FROM fresh AS f, c
			WHERE c.leased AND c.sess_n + c.new_n <= $10 AND c.run_n + c.new_n <= $11
			ON CONFLICT DO NOTHING RETURNING 1)
		SELECT c.leased, c.sess_n, c.run_n, c.new_n, (SELECT count(*) FROM ins) FROM c`
)

// RecordDelegations records the delegations of one tool call of the session that
// holds the lease token, all or none: none when recording the new ones (ids not
// recorded yet; a redispatched call's are not new and always pass) would take the
// session or the run past lim — a *DelegationCapError naming the scope — and
// ErrLeaseLost when another delivery holds the session. The count check and the
// insert are one transaction under the run's row lock, so concurrent steps of a
// run cannot pass lim together.
func (s *Store) RecordDelegations(ctx context.Context, session, token string, ds []Delegation, lim DelegationLimits) error {
	if len(ds) == 0 {
		return nil
	}
	if lim.PerSession <= 0 || lim.PerRun <= 0 {
		return fmt.Errorf("record delegations: limits must be positive, got %+v", lim)
	}
	runID := ds[0].RunID
	args, err := delegationArrays(ds)
	if err != nil {
		return err
	}
	// One batch is one implicit transaction, and under READ COMMITTED each of
	// its statements takes its own snapshot: the insert's is taken after the
	// lock was granted, as in an explicit transaction, without its BEGIN and
	// COMMIT round trips. Nothing is inserted past a cap (the statement's
	// WHERE), so committing a refusal commits nothing.
	b := &pgx.Batch{}
	b.Queue(lockRunForDelegations, runID)
	b.Queue(recordDelegations, append(append([]any{session, token, runID}, args...), lim.PerSession, lim.PerRun)...)
	br := s.db.SendBatch(ctx, b)
	var leased bool
	var sessN, runN, newN, inserted int
	_, err = br.Exec()
	if err == nil {
		err = br.QueryRow().Scan(&leased, &sessN, &runN, &newN, &inserted)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("record delegations of session %s: %w", session, err)
	}
	switch {
	case !leased:
		return fmt.Errorf("record delegations of session %s: %w", session, ErrLeaseLost)
	case newN > 0 && sessN+newN > lim.PerSession:
		return &DelegationCapError{Scope: "session", Cap: lim.PerSession, Have: sessN, Want: newN}
	case newN > 0 && runN+newN > lim.PerRun:
		return &DelegationCapError{Scope: "run", Cap: lim.PerRun, Have: runN, Want: newN}
	}
	return nil
}

// InsertDelegation records a delegation, with no limit and no lease (fixtures of
// the API's tests; steps record theirs with RecordDelegations); a duplicate id is a
// no-op. created is false when it already existed.
func (s *Store) InsertDelegation(ctx context.Context, d Delegation) (created bool, err error) {
	var tools []byte
	if d.Tools != nil {
		if tools, err = json.Marshal(d.Tools); err != nil {
			return false, err
		}
	}
	tag, err := s.db.Exec(ctx, `INSERT INTO delegations (id, run_id, parent_session, tool_call_id, agent, task, tools, kind)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING`,
		d.ID, d.RunID, d.ParentSession, d.ToolCallID, d.Agent, d.Task, tools, d.Kind)
	if err != nil {
		return false, fmt.Errorf("insert delegation: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

// GetDelegation loads one delegation.
func (s *Store) GetDelegation(ctx context.Context, id string) (Delegation, error) {
	d, err := scanDelegation(s.db.QueryRow(ctx, `SELECT `+delCols+` FROM delegations WHERE id = $1`, id))
	return d, lookupErr(err, "get delegation "+id)
}

// DelegationsForCall returns the delegations one tool call created, in creation order.
func (s *Store) DelegationsForCall(ctx context.Context, parentSession, callID string) ([]Delegation, error) {
	return s.queryDelegations(ctx, `SELECT `+delCols+` FROM delegations WHERE parent_session = $1 AND tool_call_id = $2 ORDER BY id`, parentSession, callID)
}

// RunDelegations returns every delegation of a run.
func (s *Store) RunDelegations(ctx context.Context, runID string) ([]Delegation, error) {
	return s.queryDelegations(ctx, `SELECT `+delCols+` FROM delegations WHERE run_id = $1 ORDER BY created_at, id`, runID)
}

func (s *Store) queryDelegations(ctx context.Context, q string, args ...any) ([]Delegation, error) {
	return queryRows(ctx, s.db, "delegations", []Delegation(nil), rowsOf(scanDelegation), q, args...)
}

// MarkDelegationRunning moves pending → running and counts the attempt.
func (s *Store) MarkDelegationRunning(ctx context.Context, id string) error {
	_, err := s.db.Exec(ctx, `UPDATE delegations SET status = 'running', attempts = attempts + 1
		WHERE id = $1 AND status IN ('pending','running')`, id)
	if err != nil {
		return fmt.Errorf("delegation %s running: %w", id, err)
	}
	return nil
}

// FinishDelegation records the outcome once; false when it was already finished.
func (s *Store) FinishDelegation(ctx context.Context, id, status, result, errMsg string) (bool, error) {
	tag, err := s.db.Exec(ctx, `UPDATE delegations SET status = $2, result = $3, error = $4, completed_at = now()
		WHERE id = $1 AND status IN ('pending','running')`, id, status, result, errMsg)
	if err != nil {
		return false, fmt.Errorf("finish delegation %s: %w", id, err)
	}
	return tag.RowsAffected() == 1, nil
}

// closeRunDelegations closes the open delegations of a run that just ended
// (FinishRun's transaction), with a status that says why: failed with the run
// when it failed — its agent's work is lost with the run, whoever tripped the
// breaker or the budget —, cancelled when the run was cancelled or completed
// without waiting for it (its agent neither finished nor failed the task). A
// step that finishes the delegation later finds it closed (FinishDelegation,
// SaveStep's Finish: only pending or running ones change).
func closeRunDelegations(ctx context.Context, tx pgx.Tx, runID, runStatus, reason, errMsg string) error {
	status, why := DelegationCancelled, "the run "+runStatus+" before this delegation finished"
	switch runStatus {
	case RunFailed:
		status = DelegationFailed
	case RunCancelled:
		why = "the run was cancelled before this delegation finished"
	}
	if reason != "" && reason != runStatus {
		why += " (" + reason + ")"
	}
	if errMsg != "" {
		why += ": " + errMsg
	}
	_, err := tx.Exec(ctx, `UPDATE delegations SET status = $2, error = $3, completed_at = now()
		WHERE run_id = $1 AND status IN ('pending','running')`, runID, status, why)
	if err != nil {
		return fmt.Errorf("close delegations of run %s: %w", runID, err)
	}
	return nil
}

// UnannouncedDelegations returns the finished delegations of a run that have no
// delegation.finished event yet (keyed "delegation-finished:<id>"): those its
// end closed (closeRunDelegations), and any whose event a crash lost. The
// recorder of the run's terminal event emits theirs first, under the same keys,
// so each delegation gets exactly one however often that runs.
func (s *Store) UnannouncedDelegations(ctx context.Context, runID string) ([]Delegation, error) {
	return s.queryDelegations(ctx, `SELECT `+delCols+` FROM delegations AS d
		WHERE d.run_id = $1 AND d.status NOT IN ('pending','running')
			AND NOT EXISTS (SELECT 1 FROM run_events AS e WHERE e.run_id = d.run_id AND e.key = 'delegation-finished:' || d.id)
		ORDER BY d.created_at, d.id`, runID)
}

// GetTurn loads a delegation with its run and its task's stored flow label
// (Delegation.TaskLabel), in one statement: what an agent turn reads before it
// starts.
func (s *Store) GetTurn(ctx context.Context, id string) (Delegation, Run, error) {
	var d Delegation
	var r Run
	var tools []byte
	err := s.db.QueryRow(ctx, `SELECT d.id, d.run_id::text, d.parent_session, d.tool_call_id, d.agent, d.task, d.tools, d.kind,
			d.status, d.result, d.error, d.created_at, d.completed_at, d.task_label,
			r.id::text, r.status, r.prompt, r.template, r.team, r.variables, r.result, r.error, r.reason,
			r.tokens_used, r.token_budget, r.cost, r.cost_budget, r.created_at, r.updated_at, r.finished_at, r.owner, r.project, coalesce(r.project_id::text, ''), r.workspace,
			r.fair_key, r.priority, r.run_limit, r.admitted_at, r.trace_context, r.untrusted
		FROM delegations AS d JOIN runs AS r ON r.id = d.run_id WHERE d.id = $1`, id).Scan(
		&d.ID, &d.RunID, &d.ParentSession, &d.ToolCallID, &d.Agent, &d.Task, &tools, &d.Kind, &d.Status,
		&d.Result, &d.Error, &d.CreatedAt, &d.CompletedAt, &d.TaskLabel,
		&r.ID, &r.Status, &r.Prompt, &r.Template, &r.Team, &r.Variables, &r.Result,
		&r.Error, &r.Reason, &r.TokensUsed, &r.TokenBudget, &r.Cost, &r.CostBudget, &r.CreatedAt, &r.UpdatedAt, &r.FinishedAt, &r.Owner, &r.Project, &r.ProjectID, &r.Workspace,
		&r.FairKey, &r.Priority, &r.RunLimit, &r.AdmittedAt, &r.TraceContext, &r.Untrusted)
	if errors.Is(err, pgx.ErrNoRows) {
		return d, r, ErrNotFound
	}
	if err == nil && len(tools) > 0 {
		err = json.Unmarshal(tools, &d.Tools)
	}
	if err != nil {
		return d, r, fmt.Errorf("get delegation %s: %w", id, err)
	}
	return d, r, nil
}
