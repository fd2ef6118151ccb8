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
}

// DelegationReview is the kind of code_review's reviewer delegation.
const DelegationReview = "review"

const delCols = `id, run_id::text, parent_session, tool_call_id, agent, task, tools, kind, status, result, error, created_at, completed_at`

func scanDelegation(row pgx.Row) (Delegation, error) {
	var d Delegation
	var tools []byte
	err := row.Scan(&d.ID, &d.RunID, &d.ParentSession, &d.ToolCallID, &d.Agent, &d.Task, &tools, &d.Kind, &d.Status,
		&d.Result, &d.Error, &d.CreatedAt, &d.CompletedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return d, ErrNotFound
	}
	if err == nil && len(tools) > 0 {
		err = json.Unmarshal(tools, &d.Tools)
	}
	return d, err
}

// InsertDelegation records a delegation; a duplicate id is a no-op. created is false
// when it already existed.
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
	if err != nil && !errors.Is(err, ErrNotFound) {
		err = fmt.Errorf("get delegation %s: %w", id, err)
	}
	return d, err
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
	rows, err := s.db.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("delegations: %w", err)
	}
	defer rows.Close()
	var out []Delegation
	for rows.Next() {
		d, err := scanDelegation(rows)
		if err != nil {
			return nil, fmt.Errorf("delegations: %w", err)
		}
		out = append(out, d)
	}
	return out, rows.Err()
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

// GetTurn loads a delegation with its run, in one query: what an agent turn
// reads before it starts.
func (s *Store) GetTurn(ctx context.Context, id string) (Delegation, Run, error) {
	var d Delegation
	var r Run
	var tools []byte
	err := s.db.QueryRow(ctx, `SELECT d.id, d.run_id::text, d.parent_session, d.tool_call_id, d.agent, d.task, d.tools, d.kind,
			d.status, d.result, d.error, d.created_at, d.completed_at,
			r.id::text, r.status, r.prompt, r.template, r.team, r.variables, r.result, r.error, r.reason,
			r.tokens_used, r.token_budget, r.created_at, r.updated_at, r.finished_at, r.owner, r.project, coalesce(r.project_id::text, ''), r.workspace
		FROM delegations AS d JOIN runs AS r ON r.id = d.run_id WHERE d.id = $1`, id).Scan(
		&d.ID, &d.RunID, &d.ParentSession, &d.ToolCallID, &d.Agent, &d.Task, &tools, &d.Kind, &d.Status,
		&d.Result, &d.Error, &d.CreatedAt, &d.CompletedAt,
		&r.ID, &r.Status, &r.Prompt, &r.Template, &r.Team, &r.Variables, &r.Result,
		&r.Error, &r.Reason, &r.TokensUsed, &r.TokenBudget, &r.CreatedAt, &r.UpdatedAt, &r.FinishedAt, &r.Owner, &r.Project, &r.ProjectID, &r.Workspace)
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
