package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aetherium-engine/aetherium/tracing"
)

// Approval statuses.
const (
	ApprovalPending  = "pending"
	ApprovalApproved = "approved"
	// ApprovalEdited: approved with the approver's arguments (EditedArgs).
	ApprovalEdited = "edited"
	// ApprovalAnswered closes a question (kind question) with an answer.
	ApprovalAnswered = "answered"
	ApprovalDenied   = "denied"
	ApprovalTimedOut = "timed_out"
	// ApprovalCancelled closes a pending approval whose run was cancelled or failed.
	ApprovalCancelled = "cancelled"
)

// Approval kinds.
const (
	// KindCall: a call the gate holds for a human.
	KindCall = "call"
	// KindQuestion: a question an agent asked with ask_user.
	KindQuestion = "question"
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
	// Kind is KindCall or KindQuestion.
	Kind string `json:"kind"`
	// PolicyRevision is the permissions file's revision when it was requested.
	PolicyRevision string `json:"policy_revision"`
	// EditedArgs are the approver's arguments of an edited call, and
	// EditedArgsHash their hash, which the edited call must run with.
	EditedArgs     json.RawMessage `json:"edited_args,omitempty"`
	EditedArgsHash string          `json:"edited_args_hash,omitempty"`
	// Answer is a question's answer.
	Answer string `json:"answer,omitempty"`
	// GrantID is the grant made with the decision ("" for none).
	GrantID string `json:"grant_id,omitempty"`
	// TraceContext is the W3C traceparent of the tool call that asked (issue
	// 42): the approval wait's span links to it. "" when tracing was off.
	TraceContext string `json:"-"`
}

const apprCols = `id, run_id::text, session_id, call_id, team, agent, tool, tier, args, args_hash, approver_view, why, status,
	decided_by, decision_reason, created_at, expires_at, decided_at, kind, policy_revision, edited_args, edited_args_hash, answer, grant_id, trace_context`

func scanApproval(row pgx.Row) (Approval, error) {
	var a Approval
	err := row.Scan(&a.ID, &a.RunID, &a.SessionID, &a.CallID, &a.Team, &a.Agent, &a.Tool, &a.Tier, &a.Args, &a.ArgsHash, &a.View, &a.Why,
		&a.Status, &a.DecidedBy, &a.DecisionReason, &a.CreatedAt, &a.ExpiresAt, &a.DecidedAt,
		&a.Kind, &a.PolicyRevision, &a.EditedArgs, &a.EditedArgsHash, &a.Answer, &a.GrantID, &a.TraceContext)
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
	if a.Kind == "" {
		a.Kind = KindCall
	}
	tag, err := s.db.Exec(ctx, `INSERT INTO approvals (id, run_id, session_id, call_id, team, agent, tool, tier, args, args_hash,
			approver_view, why, expires_at, kind, policy_revision, status, decided_by, decision_reason, decided_at, trace_context)
		SELECT $1, r.id, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, now() + $13::interval, $14, $15,
			CASE WHEN r.status IN ('queued','running','waiting') THEN 'pending' ELSE 'cancelled' END,
			CASE WHEN r.status IN ('queued','running','waiting') THEN '' ELSE 'system' END,
			CASE WHEN r.status IN ('queued','running','waiting') THEN '' ELSE 'run was ' || r.status END,
			CASE WHEN r.status IN ('queued','running','waiting') THEN NULL ELSE now() END, $16
		FROM runs r WHERE r.id = $2 FOR SHARE
		ON CONFLICT DO NOTHING`,
		a.ID, a.RunID, a.SessionID, a.CallID, a.Team, a.Agent, a.Tool, a.Tier, a.Args, a.ArgsHash, a.View, a.Why, window.String(), a.Kind, a.PolicyRevision,
		tracing.Traceparent(ctx))
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
	return s.ListApprovalsOf(ctx, ApprovalFilter{Status: status, RunID: runID, Limit: limit})
}

// ApprovalFilter selects approvals; empty fields match everything.
type ApprovalFilter struct {
	// Owner restricts to the runs of one principal.
	Owner  string
	Status string
	RunID  string
	// Kind is KindCall or KindQuestion.
	Kind string
	// Decided lists decided approvals, latest decision first (the history).
	Decided bool
	Limit   int
}

// ListApprovalsOf lists the approvals f selects, oldest first (latest decision
// first with f.Decided).
func (s *Store) ListApprovalsOf(ctx context.Context, f ApprovalFilter) ([]Approval, error) {
	order := `created_at, id`
	if f.Decided {
		order = `decided_at DESC, id`
	}
	return queryRows(ctx, s.db, "list approvals", []Approval{}, rowsOf(scanApproval), `SELECT `+apprCols+` FROM approvals
		WHERE ($1 = '' OR status = $1) AND ($2 = '' OR run_id::text = $2)
		AND ($4 = '' OR run_id IN (SELECT id FROM runs WHERE owner = $4))
		AND ($5 = '' OR kind = $5) AND (NOT $6 OR decided_at IS NOT NULL)
		ORDER BY `+order+` LIMIT $3`, f.Status, f.RunID, f.Limit, f.Owner, f.Kind, f.Decided)
}

// DecideApproval records a human decision on a pending approval whose window is
// still open. Otherwise: ErrExpired when its window closed (a still-pending row is
// timed out here, before the expiry task runs, and returned with the error so the
// caller can resume its session), ErrRunClosed when its run closed it, ErrDecided
// when it was decided; ErrNotFound when it does not exist.
func (s *Store) DecideApproval(ctx context.Context, id, status, by, reason string) (Approval, error) {
	return s.Decide(ctx, id, Decision{Status: status, By: by, Reason: reason})
}

// Decision is a human's decision on a pending approval.
type Decision struct {
	Status, By, Reason string
	// EditedArgs and EditedArgsHash: an edit (status ApprovalEdited).
	EditedArgs     json.RawMessage
	EditedArgsHash string
	// Answer: a question's answer (status ApprovalAnswered).
	Answer string
	// Grant is inserted with the decision, in its transaction (Approval.GrantID).
	Grant *Grant
}

// Decide records d on a pending approval whose window is still open; errors as
// DecideApproval's.
func (s *Store) Decide(ctx context.Context, id string, d Decision) (Approval, error) {
	a, err := s.closeWith(ctx, id, d, `expires_at > now()`)
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
	return s.closeWith(ctx, id, Decision{Status: status, By: by, Reason: reason}, cond)
}

// closeWith is closeApproval with a decision's edit, answer and grant: the grant
// row and the decision commit together, so a grant exists exactly when its
// approval names it.
func (s *Store) closeWith(ctx context.Context, id string, d Decision, cond string) (Approval, error) {
	var a Approval
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		grantID := ""
		if d.Grant != nil {
			grantID = d.Grant.ID
		}
		var edited any
		if len(d.EditedArgs) > 0 {
			edited = string(d.EditedArgs)
		}
		var err error
		a, err = scanApproval(tx.QueryRow(ctx, `UPDATE approvals SET status = $2, decided_by = $3, decision_reason = $4, decided_at = now(),
				edited_args = $5::jsonb, edited_args_hash = $6, answer = $7, grant_id = $8
			WHERE id = $1 AND status = 'pending' AND `+cond+` RETURNING `+apprCols,
			id, d.Status, d.By, d.Reason, edited, d.EditedArgsHash, d.Answer, grantID))
		if err != nil || d.Grant == nil {
			return err
		}
		return insertGrant(ctx, tx, *d.Grant)
	})
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

// OverdueApproval is a pending approval past its expiry.
type OverdueApproval struct {
	ID        string
	ExpiresAt time.Time
}

// OverdueApprovals lists pending approvals whose expiry passed more than grace
// ago (oldest first): their expiry task should have timed them out by then,
// so it was lost (Redis restored empty, or lost with a failover) and the
// maintenance tick enqueues it again.
func (s *Store) OverdueApprovals(ctx context.Context, grace time.Duration, limit int) ([]OverdueApproval, error) {
	rows, err := s.db.Query(ctx, `SELECT id, expires_at FROM approvals WHERE status = 'pending' AND expires_at < now() - $1::interval
		ORDER BY expires_at LIMIT $2`, grace.String(), limit)
	if err != nil {
		return nil, fmt.Errorf("overdue approvals: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (OverdueApproval, error) {
		var a OverdueApproval
		return a, row.Scan(&a.ID, &a.ExpiresAt)
	})
	if err != nil {
		return nil, fmt.Errorf("overdue approvals: %w", err)
	}
	return out, nil
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
