package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Approval statuses.
const (
	ApprovalPending  = "pending"
	ApprovalApproved = "approved"
	ApprovalDenied   = "denied"
	ApprovalTimedOut = "timed_out"
)

// ErrDecided is a decision on an approval that is no longer pending.
var ErrDecided = errors.New("approval already decided")

// Approval is a Restricted (or escalated) call waiting for a human.
type Approval struct {
	ID             string          `json:"id"`
	RunID          string          `json:"run_id"`
	SessionID      string          `json:"session_id"`
	CallID         string          `json:"call_id"`
	Team           string          `json:"team"`
	Agent          string          `json:"agent"`
	Tool           string          `json:"tool"`
	Tier           string          `json:"tier"`
	Args           json.RawMessage `json:"args"`
	Why            string          `json:"why"`
	Status         string          `json:"status"`
	DecidedBy      string          `json:"decided_by,omitempty"`
	DecisionReason string          `json:"decision_reason,omitempty"`
	CreatedAt      time.Time       `json:"created_at"`
	ExpiresAt      time.Time       `json:"expires_at"`
	DecidedAt      *time.Time      `json:"decided_at,omitempty"`
}

const apprCols = `id, run_id::text, session_id, call_id, team, agent, tool, tier, args, why, status, decided_by,
	decision_reason, created_at, expires_at, decided_at`

func scanApproval(row pgx.Row) (Approval, error) {
	var a Approval
	err := row.Scan(&a.ID, &a.RunID, &a.SessionID, &a.CallID, &a.Team, &a.Agent, &a.Tool, &a.Tier, &a.Args, &a.Why,
		&a.Status, &a.DecidedBy, &a.DecisionReason, &a.CreatedAt, &a.ExpiresAt, &a.DecidedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return a, ErrNotFound
	}
	return a, err
}

// RequestApproval inserts a pending approval unless one exists for the same call;
// it returns the stored row and whether it was created now.
func (s *Store) RequestApproval(ctx context.Context, a Approval, window time.Duration) (Approval, bool, error) {
	if len(a.Args) == 0 {
		a.Args = json.RawMessage("{}")
	}
	tag, err := s.Pool.Exec(ctx, `INSERT INTO approvals (id, run_id, session_id, call_id, team, agent, tool, tier, args, why, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, now() + $11::interval) ON CONFLICT DO NOTHING`,
		a.ID, a.RunID, a.SessionID, a.CallID, a.Team, a.Agent, a.Tool, a.Tier, a.Args, a.Why, window.String())
	if err != nil {
		return a, false, fmt.Errorf("request approval: %w", err)
	}
	got, err := s.ApprovalForCall(ctx, a.SessionID, a.CallID)
	return got, tag.RowsAffected() == 1, err
}

// ApprovalForCall loads the approval of one call.
func (s *Store) ApprovalForCall(ctx context.Context, sessionID, callID string) (Approval, error) {
	a, err := scanApproval(s.Pool.QueryRow(ctx, `SELECT `+apprCols+` FROM approvals WHERE session_id = $1 AND call_id = $2`, sessionID, callID))
	if err != nil && !errors.Is(err, ErrNotFound) {
		err = fmt.Errorf("approval for call: %w", err)
	}
	return a, err
}

// GetApproval loads one approval.
func (s *Store) GetApproval(ctx context.Context, id string) (Approval, error) {
	a, err := scanApproval(s.Pool.QueryRow(ctx, `SELECT `+apprCols+` FROM approvals WHERE id = $1`, id))
	if err != nil && !errors.Is(err, ErrNotFound) {
		err = fmt.Errorf("get approval: %w", err)
	}
	return a, err
}

// ListApprovals lists approvals, optionally by status and run, oldest first.
func (s *Store) ListApprovals(ctx context.Context, status, runID string, limit int) ([]Approval, error) {
	return s.ListApprovalsOf(ctx, "", status, runID, limit)
}

// ListApprovalsOf is ListApprovals restricted to the runs of one owner ("" for
// every owner).
func (s *Store) ListApprovalsOf(ctx context.Context, owner, status, runID string, limit int) ([]Approval, error) {
	rows, err := s.Pool.Query(ctx, `SELECT `+apprCols+` FROM approvals
		WHERE ($1 = '' OR status = $1) AND ($2 = '' OR run_id::text = $2)
		AND ($4 = '' OR run_id IN (SELECT id FROM runs WHERE owner = $4))
		ORDER BY created_at, id LIMIT $3`, status, runID, limit, owner)
	if err != nil {
		return nil, fmt.Errorf("list approvals: %w", err)
	}
	defer rows.Close()
	out := []Approval{}
	for rows.Next() {
		a, err := scanApproval(rows)
		if err != nil {
			return nil, fmt.Errorf("list approvals: %w", err)
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

// DecideApproval moves a pending approval to status once. ErrDecided when it was not
// pending; ErrNotFound when it does not exist.
func (s *Store) DecideApproval(ctx context.Context, id, status, by, reason string) (Approval, error) {
	a, err := scanApproval(s.Pool.QueryRow(ctx, `UPDATE approvals SET status = $2, decided_by = $3, decision_reason = $4, decided_at = now()
		WHERE id = $1 AND status = 'pending' RETURNING `+apprCols, id, status, by, reason))
	if errors.Is(err, ErrNotFound) {
		cur, gerr := s.GetApproval(ctx, id)
		if gerr != nil {
			return cur, gerr
		}
		return cur, fmt.Errorf("%w: %s is %s", ErrDecided, id, cur.Status)
	}
	if err != nil {
		return a, fmt.Errorf("decide approval: %w", err)
	}
	return a, nil
}

// PendingApprovals counts pending approvals of a run (other than except).
func (s *Store) PendingApprovals(ctx context.Context, runID string) (int, error) {
	var n int
	err := s.Pool.QueryRow(ctx, `SELECT count(*) FROM approvals WHERE run_id = $1 AND status = 'pending'`, runID).Scan(&n)
	return n, err
}

// CountPendingApprovals counts every pending approval (metrics).
func (s *Store) CountPendingApprovals(ctx context.Context) (int, error) {
	var n int
	err := s.Pool.QueryRow(ctx, `SELECT count(*) FROM approvals WHERE status = 'pending'`).Scan(&n)
	return n, err
}

// HasApprovals reports whether a run ever asked for an approval (the on-call
// approver may read the summary of such a run).
func (s *Store) HasApprovals(ctx context.Context, runID string) (bool, error) {
	var ok bool
	err := s.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM approvals WHERE run_id = $1)`, runID).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("approvals of run %s: %w", runID, err)
	}
	return ok, nil
}
