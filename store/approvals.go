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
	// ApprovalCancelled closes a pending approval whose run was cancelled or failed.
	ApprovalCancelled = "cancelled"
)

// Errors of a human decision on an approval that is no longer pending. Each is a
// conflict for the caller; they are distinct so the message says why.
var (
	// ErrDecided: somebody (or the fallback) decided it already.
	ErrDecided = errors.New("approval already decided")
	// ErrExpired: its window closed (it is now timed_out, whether or not the
	// expiry task ran yet).
	ErrExpired = errors.New("approval expired")
	// ErrRunClosed: its run was cancelled or failed, which closed it.
	ErrRunClosed = errors.New("approval closed with its run")
)

// Approval is a Restricted (or escalated) call waiting for a human.
type Approval struct {
	ID        string `json:"id"`
	RunID     string `json:"run_id"`
	SessionID string `json:"session_id"`
	CallID    string `json:"call_id"`
	Team      string `json:"team"`
	Agent     string `json:"agent"`
	Tool      string `json:"tool"`
	Tier      string `json:"tier"`
	// Args are the call's arguments with secret spans masked in place.
	Args json.RawMessage `json:"args"`
	// ArgsHash is the hex SHA-256 of the RFC 8785 form of the effective arguments:
	// the call runs only if its arguments at execution hash the same.
	ArgsHash string `json:"args_hash"`
	// View is what the approver decides on (parsed commands, URL), masked.
	View           json.RawMessage `json:"view"`
	Why            string          `json:"why"`
	Status         string          `json:"status"`
	DecidedBy      string          `json:"decided_by,omitempty"`
	DecisionReason string          `json:"decision_reason,omitempty"`
	CreatedAt      time.Time       `json:"created_at"`
	ExpiresAt      time.Time       `json:"expires_at"`
	DecidedAt      *time.Time      `json:"decided_at,omitempty"`
}

const apprCols = `id, run_id::text, session_id, call_id, team, agent, tool, tier, args, args_hash, approver_view, why, status,
	decided_by, decision_reason, created_at, expires_at, decided_at`

func scanApproval(row pgx.Row) (Approval, error) {
	var a Approval
	err := row.Scan(&a.ID, &a.RunID, &a.SessionID, &a.CallID, &a.Team, &a.Agent, &a.Tool, &a.Tier, &a.Args, &a.ArgsHash, &a.View, &a.Why,
		&a.Status, &a.DecidedBy, &a.DecisionReason, &a.CreatedAt, &a.ExpiresAt, &a.DecidedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return a, ErrNotFound
	}
	return a, err
}

// RequestApproval inserts a pending approval unless one exists for the same call;
// it returns the stored row and whether it was created now. On a run that already
// finished it is born cancelled: the run row is locked (FOR SHARE) so a concurrent
// FinishRun either sees this row when it closes the run's approvals or is seen here.
func (s *Store) RequestApproval(ctx context.Context, a Approval, window time.Duration) (Approval, bool, error) {
	if len(a.Args) == 0 {
		a.Args = json.RawMessage("{}")
	}
	if len(a.View) == 0 {
		a.View = json.RawMessage("{}")
	}
	tag, err := s.db.Exec(ctx, `INSERT INTO approvals (id, run_id, session_id, call_id, team, agent, tool, tier, args, args_hash,
			approver_view, why, expires_at, status, decided_by, decision_reason, decided_at)
		SELECT $1, r.id, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, now() + $13::interval,
			CASE WHEN r.status IN ('queued','running','waiting') THEN 'pending' ELSE 'cancelled' END,
			CASE WHEN r.status IN ('queued','running','waiting') THEN '' ELSE 'system' END,
			CASE WHEN r.status IN ('queued','running','waiting') THEN '' ELSE 'run was ' || r.status END,
			CASE WHEN r.status IN ('queued','running','waiting') THEN NULL ELSE now() END
		FROM runs r WHERE r.id = $2 FOR SHARE
		ON CONFLICT DO NOTHING`,
		a.ID, a.RunID, a.SessionID, a.CallID, a.Team, a.Agent, a.Tool, a.Tier, a.Args, a.ArgsHash, a.View, a.Why, window.String())
	if err != nil {
		return a, false, fmt.Errorf("request approval: %w", err)
	}
	got, err := s.ApprovalForCall(ctx, a.SessionID, a.CallID)
	return got, tag.RowsAffected() == 1, err
}

// ApprovalForCall loads the approval of one call.
func (s *Store) ApprovalForCall(ctx context.Context, sessionID, callID string) (Approval, error) {
	a, err := scanApproval(s.db.QueryRow(ctx, `SELECT `+apprCols+` FROM approvals WHERE session_id = $1 AND call_id = $2`, sessionID, callID))
	return a, lookupErr(err, "approval for call")
}

// GetApproval loads one approval.
func (s *Store) GetApproval(ctx context.Context, id string) (Approval, error) {
	a, err := scanApproval(s.db.QueryRow(ctx, `SELECT `+apprCols+` FROM approvals WHERE id = $1`, id))
	return a, lookupErr(err, "get approval")
}

// ListApprovals lists approvals, optionally by status and run, oldest first.
func (s *Store) ListApprovals(ctx context.Context, status, runID string, limit int) ([]Approval, error) {
	return s.ListApprovalsOf(ctx, "", status, runID, limit)
}

// ListApprovalsOf is ListApprovals restricted to the runs of one owner ("" for
// every owner).
func (s *Store) ListApprovalsOf(ctx context.Context, owner, status, runID string, limit int) ([]Approval, error) {
	return queryRows(ctx, s.db, "list approvals", []Approval{}, rowsOf(scanApproval), `SELECT `+apprCols+` FROM approvals
		WHERE ($1 = '' OR status = $1) AND ($2 = '' OR run_id::text = $2)
		AND ($4 = '' OR run_id IN (SELECT id FROM runs WHERE owner = $4))
		ORDER BY created_at, id LIMIT $3`, status, runID, limit, owner)
}

// DecideApproval records a human decision on a pending approval whose window is
// still open. Otherwise: ErrExpired when its window closed (a still-pending row is
// timed out here, before the expiry task runs, and returned with the error so the
// caller can resume its session), ErrRunClosed when its run closed it, ErrDecided
// when it was decided; ErrNotFound when it does not exist.
func (s *Store) DecideApproval(ctx context.Context, id, status, by, reason string) (Approval, error) {
	a, err := s.closeApproval(ctx, id, status, by, reason, `expires_at > now()`)
	if !errors.Is(err, ErrNotFound) {
		return a, err
	}
	a, err = s.closeApproval(ctx, id, ApprovalTimedOut, "system", "expired before a decision", `expires_at <= now()`)
	if err == nil {
		return a, fmt.Errorf("%w: %s expired at %s, before this decision", ErrExpired, id, a.ExpiresAt.UTC().Format(time.RFC3339))
	}
	if !errors.Is(err, ErrNotFound) {
		return a, err
	}
	return s.notPending(ctx, id)
}

// closeApproval moves a pending approval that meets cond to status; ErrNotFound
// when none did.
func (s *Store) closeApproval(ctx context.Context, id, status, by, reason, cond string) (Approval, error) {
	a, err := scanApproval(s.db.QueryRow(ctx, `UPDATE approvals SET status = $2, decided_by = $3, decision_reason = $4, decided_at = now()
		WHERE id = $1 AND status = 'pending' AND `+cond+` RETURNING `+apprCols, id, status, by, reason))
	return a, lookupErr(err, "decide approval "+id)
}

// TimeOutApproval closes a pending approval at (or after) its expiry with status
// (timed_out, or approved by a fallback); the window is not checked. Not pending:
// the sentinel of its current state (ErrExpired, ErrRunClosed, ErrDecided).
func (s *Store) TimeOutApproval(ctx context.Context, id, status, by, reason string) (Approval, error) {
	a, err := s.closeApproval(ctx, id, status, by, reason, `true`)
	if !errors.Is(err, ErrNotFound) {
		return a, err
	}
	return s.notPending(ctx, id)
}

// notPending explains why an approval could not be decided.
func (s *Store) notPending(ctx context.Context, id string) (Approval, error) {
	cur, gerr := s.GetApproval(ctx, id)
	if gerr != nil {
		return cur, gerr
	}
	switch cur.Status {
	case ApprovalTimedOut:
		return cur, fmt.Errorf("%w: %s expired at %s without a decision", ErrExpired, id, cur.ExpiresAt.UTC().Format(time.RFC3339))
	case ApprovalCancelled:
		return cur, fmt.Errorf("%w: %s was closed: its %s", ErrRunClosed, id, cur.DecisionReason)
	}
	return cur, fmt.Errorf("%w: %s is %s", ErrDecided, id, cur.Status)
}

// cancelRunApprovals closes the pending approvals of a run that just finished.
func cancelRunApprovals(ctx context.Context, tx pgx.Tx, runID, runStatus string) error {
	_, err := tx.Exec(ctx, `UPDATE approvals SET status = 'cancelled', decided_by = 'system', decision_reason = 'run was ' || $2,
		decided_at = now() WHERE run_id = $1 AND status = 'pending'`, runID, runStatus)
	if err != nil {
		return fmt.Errorf("cancel approvals of run %s: %w", runID, err)
	}
	return nil
}

// PendingApprovals counts pending approvals of a run (other than except).
func (s *Store) PendingApprovals(ctx context.Context, runID string) (int, error) {
	var n int
	err := s.db.QueryRow(ctx, `SELECT count(*) FROM approvals WHERE run_id = $1 AND status = 'pending'`, runID).Scan(&n)
	return n, err
}

// CountPendingApprovals counts every pending approval (metrics).
func (s *Store) CountPendingApprovals(ctx context.Context) (int, error) {
	var n int
	err := s.db.QueryRow(ctx, `SELECT count(*) FROM approvals WHERE status = 'pending'`).Scan(&n)
	return n, err
}

// HasApprovals reports whether a run ever asked for an approval (the on-call
// approver may read the summary of such a run).
func (s *Store) HasApprovals(ctx context.Context, runID string) (bool, error) {
	var ok bool
	err := s.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM approvals WHERE run_id = $1)`, runID).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("approvals of run %s: %w", runID, err)
	}
	return ok, nil
}
