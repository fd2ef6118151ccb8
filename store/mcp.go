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
	"github.com/jackc/pgx/v5/pgconn"
)

// MCP call statuses (mcp_calls.status).
const (
	MCPCallQueued  = "queued"
	MCPCallRunning = "running"
	MCPCallWaiting = "waiting"
	MCPCallDone    = "done"
)

// MCPTemplatePrefix marks the runs that hold an MCP client's calls: their
// template is "mcp:<profile>".
const MCPTemplatePrefix = "mcp:"

// MCPCall is one tool call of an outside MCP client, executed by a worker.
type MCPCall struct {
	ID         string
	RunID      string
	Profile    string
	Principal  string
	Tool       string
	Args       string
	Status     string
	ApprovalID string
	Attempts   int
	Decision   string
	Result     string
	IsError    bool
	DenyLayer  string
	DenyReason string
	CreatedAt  time.Time
	UpdatedAt  time.Time
	FinishedAt *time.Time
}

const mcpCols = `id, run_id::text, profile, principal, tool, args, status, approval_id, attempts, decision, result, is_error,
	deny_layer, deny_reason, created_at, updated_at, finished_at`

func scanMCPCall(row pgx.Row) (MCPCall, error) {
	var c MCPCall
	err := row.Scan(&c.ID, &c.RunID, &c.Profile, &c.Principal, &c.Tool, &c.Args, &c.Status, &c.ApprovalID, &c.Attempts,
		&c.Decision, &c.Result, &c.IsError, &c.DenyLayer, &c.DenyReason, &c.CreatedAt, &c.UpdatedAt, &c.FinishedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return c, ErrNotFound
	}
	return c, err
}

// EnsureMCPRun returns the live run of owner's MCP profile (template
// "mcp:<profile>"), creating it running when there is none: it is never queued,
// so no supervisor step picks it up. A live run whose stored team differs from
// team (the profile changed) is completed and replaced, so a call never runs
// with a catalog the operator took back. Concurrent callers converge on one run
// through the runs_mcp_live unique index. projectID is the id of the profile's
// project ("" for none), which the caller has checked owner may use
// (ProjectAccess.MayUse); a project deleted meanwhile is ErrNoProject.
func (s *Store) EnsureMCPRun(ctx context.Context, owner, profile string, team json.RawMessage, projectID string) (Run, error) {
	template := MCPTemplatePrefix + profile
	if _, err := uuid.Parse(projectID); projectID != "" && err != nil {
		return Run{}, fmt.Errorf("%w: %q of mcp profile %s is not a project id", ErrNoProject, projectID, profile)
	}
	for attempt := 0; attempt < 3; attempt++ {
		r, err := scanRun(s.db.QueryRow(ctx, `SELECT `+runCols+` FROM runs
			WHERE owner = $1 AND template = $2 AND status IN ('queued','running','waiting')`, owner, template))
		switch {
		case err == nil && sameJSON(r.Team, team) && r.ProjectID == projectID:
			return r, nil
		case err == nil:
			if _, _, err := s.FinishRun(ctx, r.ID, RunCompleted, "", "", "mcp_profile_changed"); err != nil {
				return Run{}, err
			}
			continue
		case !errors.Is(err, ErrNotFound):
			return Run{}, fmt.Errorf("mcp run of %s/%s: %w", owner, profile, err)
		}
		id := uuid.NewString()
		tag, err := s.db.Exec(ctx, `INSERT INTO runs (id, status, prompt, template, team, owner, project, project_id, workspace, fair_key, admitted_at)
			SELECT $1::uuid, 'running', $2::text, $3::text, $4::jsonb, $5::text, coalesce(p.slug, ''), p.id, coalesce(p.workspace, ''), $5::text, now()
			FROM (SELECT 1) one LEFT JOIN (SELECT id, slug, workspace FROM projects WHERE id = nullif($6, '')::uuid FOR SHARE) p ON true
			WHERE ($6 = '' OR p.id IS NOT NULL)`,
			id, "MCP client session of profile "+profile, template, team, owner, projectID)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "23505" {
			continue // another call of the same client created it first
		}
		if err != nil {
			return Run{}, fmt.Errorf("create mcp run of %s/%s: %w", owner, profile, err)
		}
		if tag.RowsAffected() == 0 {
			return Run{}, fmt.Errorf("%w: project %s of mcp profile %s", ErrNoProject, projectID, profile)
		}
		return s.GetRun(ctx, id)
	}
	return Run{}, fmt.Errorf("mcp run of %s/%s: no stable live run after 3 attempts", owner, profile)
}

func sameJSON(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	ra, _ := json.Marshal(x)
	rb, _ := json.Marshal(y)
	return string(ra) == string(rb)
}

// ErrTooManyMCPCalls refuses a call past its principal's cap of MCP calls in
// flight (mcp.max_calls_in_flight).
var ErrTooManyMCPCalls = errors.New("too many MCP calls in flight")

// CreateMCPCall records a queued call before its task is enqueued, so the
// worker always finds the row its task names. With maxInFlight > 0 it refuses
// (ErrTooManyMCPCalls) while c.Principal has that many calls not done in its
// live MCP runs: each may hold a pending approval, so the cap bounds what one
// principal puts in the approvers' inbox. The count and the insert hold a lock
// of the principal's, so concurrent calls cannot all slip under the cap.
func (s *Store) CreateMCPCall(ctx context.Context, c MCPCall, maxInFlight int) error {
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if maxInFlight > 0 {
			var n int
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('mcp-calls:' || $1, 0))`, c.Principal); err != nil {
				return err
			}
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM mcp_calls m JOIN runs r ON r.id = m.run_id
				WHERE r.owner = $1 AND r.template LIKE 'mcp:%' AND r.status IN ('queued','running','waiting')
				AND m.status <> 'done'`, c.Principal).Scan(&n); err != nil {
				return err
			}
			if n >= maxInFlight {
				return fmt.Errorf("%w: %s already has %d MCP calls in flight (mcp.max_calls_in_flight)", ErrTooManyMCPCalls, c.Principal, n)
			}
		}
		_, err := tx.Exec(ctx, `INSERT INTO mcp_calls (id, run_id, profile, principal, tool, args)
			VALUES ($1, $2::uuid, $3, $4, $5, $6)`, c.ID, c.RunID, c.Profile, c.Principal, c.Tool, pgText(c.Args))
		return err
	})
	if errors.Is(err, ErrTooManyMCPCalls) {
		return err
	}
	if err != nil {
		return fmt.Errorf("create mcp call %s: %w", c.ID, err)
	}
	return nil
}

// GetMCPCall loads a call.
func (s *Store) GetMCPCall(ctx context.Context, id string) (MCPCall, error) {
	c, err := scanMCPCall(s.db.QueryRow(ctx, `SELECT `+mcpCols+` FROM mcp_calls WHERE id = $1`, id))
	return c, lookupErr(err, "get mcp call "+id)
}

// ClaimMCPCall takes a call for one delivery under token: a queued or waiting
// call, or a running one whose claim is older than stale (its worker died).
// ok is false when the call is done or another delivery holds it.
func (s *Store) ClaimMCPCall(ctx context.Context, id, token string, stale time.Duration) (MCPCall, bool, error) {
	c, err := scanMCPCall(s.db.QueryRow(ctx, `UPDATE mcp_calls SET status = 'running', claim = $2, claimed_at = now(),
			attempts = attempts + 1, updated_at = now()
		WHERE id = $1 AND (status IN ('queued','waiting') OR (status = 'running' AND claimed_at < now() - $3::interval))
		RETURNING `+mcpCols, id, token, stale.String()))
	if errors.Is(err, ErrNotFound) {
		cur, gerr := s.GetMCPCall(ctx, id)
		return cur, false, gerr
	}
	if err != nil {
		return c, false, fmt.Errorf("claim mcp call %s: %w", id, err)
	}
	return c, true, nil
}

// RenewMCPCall keeps a claim fresh while its tool runs, so a long call is not
// taken for a dead worker's; false: the claim was lost.
func (s *Store) RenewMCPCall(ctx context.Context, id, token string) (bool, error) {
	tag, err := s.db.Exec(ctx, `UPDATE mcp_calls SET claimed_at = now() WHERE id = $1 AND claim = $2 AND status = 'running'`, id, token)
	if err != nil {
		return false, fmt.Errorf("renew mcp call %s: %w", id, err)
	}
	return tag.RowsAffected() == 1, nil
}

// ReleaseMCPCall hands a claimed call back: to waiting (its approval is
// pending; the decision's resume claims it again) or to queued (the delivery
// failed before an outcome and its task retries). false: the claim was lost.
func (s *Store) ReleaseMCPCall(ctx context.Context, id, token, status, approvalID string) (bool, error) {
	if status != MCPCallWaiting && status != MCPCallQueued {
		return false, fmt.Errorf("release mcp call %s: %q is not queued or waiting", id, status)
	}
	tag, err := s.db.Exec(ctx, `UPDATE mcp_calls SET status = $3, approval_id = CASE WHEN $4 = '' THEN approval_id ELSE $4 END,
			claim = '', updated_at = now()
		WHERE id = $1 AND claim = $2 AND status = 'running'`, id, token, status, approvalID)
	if err != nil {
		return false, fmt.Errorf("release mcp call %s: %w", id, err)
	}
	return tag.RowsAffected() == 1, nil
}

// FinishMCPCall records a claimed call's outcome and its audit row in one
// transaction: neither is kept without the other. false: the claim was lost
// (another delivery took over) and nothing was written.
func (s *Store) FinishMCPCall(ctx context.Context, id, token string, out MCPCall, audit *AuditRow) (bool, error) {
	done := false
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE mcp_calls SET status = 'done', claim = '', decision = $3, result = $4, is_error = $5,
				deny_layer = $6, deny_reason = $7, updated_at = now(), finished_at = now()
			WHERE id = $1 AND claim = $2 AND status = 'running'`,
			id, token, out.Decision, pgText(out.Result), out.IsError, out.DenyLayer, pgText(out.DenyReason))
		if err != nil {
			return err
		}
		if done = tag.RowsAffected() == 1; !done || audit == nil {
			return nil
		}
		_, err = tx.Exec(ctx, insertAudit, append([]any{nil, nil}, auditColumns(ctx, []AuditRow{*audit})...)...)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("finish mcp call %s: %w", id, err)
	}
	return done, nil
}

// pgText makes s storable in a text column (no NUL, valid UTF-8): a tool's
// binary output or a hostile argument must not make the outcome's write fail.
func pgText(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

// MCPDecisionWithdrawn is the decision of a call its client withdrew before a
// worker ran it (WithdrawMCPCall).
const MCPDecisionWithdrawn = "withdrawn"

// WithdrawMCPCall ends a call its client gave up on (tasks/cancel, a cancelled
// or disconnected wait) while no worker runs it: in one transaction a queued or
// waiting call becomes done with decision withdrawn, its pending approval is
// cancelled (the inbox no longer shows it; a later decision is a conflict), and
// its audit row says so. ok is false when the call had already moved on (a
// worker claimed it, or it is done): a running call finishes and is audited as
// usual. The returned call is the row as it now stands.
func (s *Store) WithdrawMCPCall(ctx context.Context, id, by, reason string) (MCPCall, bool, error) {
	var out MCPCall
	ok := false
	text := "withdrawn by the MCP client"
	if reason != "" {
		text += " (" + reason + ")"
	}
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		c, err := scanMCPCall(tx.QueryRow(ctx, `UPDATE mcp_calls SET status = 'done', claim = '', decision = $2, result = $3,
				is_error = true, deny_layer = 'approval', deny_reason = $3, updated_at = now(), finished_at = now()
			WHERE id = $1 AND status IN ('queued','waiting') RETURNING `+mcpCols, id, MCPDecisionWithdrawn, pgText(text)))
		if errors.Is(err, ErrNotFound) {
			out, err = scanMCPCall(tx.QueryRow(ctx, `SELECT `+mcpCols+` FROM mcp_calls WHERE id = $1`, id))
			return err
		}
		if err != nil {
			return err
		}
		out, ok = c, true
		// The audit keeps the approval's arguments, which the gate masked; a call
		// withdrawn before the gate saw it records none (they were never judged).
		tier, team := "", MCPTemplatePrefix+c.Profile
		var args json.RawMessage
		if c.ApprovalID != "" {
			if err := tx.QueryRow(ctx, `UPDATE approvals SET status = 'cancelled', decided_by = $2, decision_reason = $3, decided_at = now()
				WHERE id = $1 AND status = 'pending' RETURNING tier, team, args`, c.ApprovalID, pgText(by), pgText(text)).Scan(&tier, &team, &args); err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
		}
		row := AuditRow{CallKey: "m:" + c.ID + ":" + c.ID, At: time.Now(), RunID: c.RunID, Team: team, Agent: c.Principal, Role: "mcp",
			Tool: c.Tool, Tier: tier, Decision: "denied", DenyLayer: "approval", DenyReason: text, Args: args,
			Summary: c.Tool + " " + text, ApprovalID: c.ApprovalID}
		_, err = tx.Exec(ctx, insertAudit, append([]any{nil, nil}, auditColumns(ctx, []AuditRow{row})...)...)
		return err
	})
	if err != nil {
		return out, false, fmt.Errorf("withdraw mcp call %s: %w", id, err)
	}
	return out, ok, nil
}

// MCPCallState is what a waiting client's safety net reads of a call: when its
// row last changed, and whether its run ended.
type MCPCallState struct {
	UpdatedAt   time.Time
	RunTerminal bool
}

// MCPCallStates reads the states of many calls in one statement: an API
// process checks every call its clients wait on with one query per
// mcp.poll, however many there are. Unknown ids are absent.
func (s *Store) MCPCallStates(ctx context.Context, ids []string) (map[string]MCPCallState, error) {
	out := make(map[string]MCPCallState, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := s.db.Query(ctx, `SELECT m.id, m.updated_at, r.status = ANY($2)
		FROM mcp_calls m JOIN runs r ON r.id = m.run_id WHERE m.id = ANY($1)`, ids, []string{RunCompleted, RunFailed, RunCancelled})
	if err != nil {
		return nil, fmt.Errorf("mcp call states (%d): %w", len(ids), err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var st MCPCallState
		if err := rows.Scan(&id, &st.UpdatedAt, &st.RunTerminal); err != nil {
			return nil, fmt.Errorf("mcp call states: %w", err)
		}
		out[id] = st
	}
	return out, rows.Err()
}
