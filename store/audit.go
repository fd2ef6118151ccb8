package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aetherium-engine/aetherium/tracing"
)

// DefaultAuditRetention is how long tool_audit rows are kept (90 days): the
// default of security.audit_retention, which the scheduler's maintenance purges by.
const DefaultAuditRetention = 90 * 24 * time.Hour

// AuditRow is one gated call attempt.
type AuditRow struct {
	ID         int64           `json:"id"`
	CallKey    string          `json:"call_key"`
	At         time.Time       `json:"at"`
	RunID      string          `json:"run_id"`
	Team       string          `json:"team"`
	Agent      string          `json:"agent"`
	Role       string          `json:"role"`
	Tool       string          `json:"tool"`
	Tier       string          `json:"tier"`
	Allowed    bool            `json:"allowed"`
	Decision   string          `json:"decision"`
	DenyLayer  string          `json:"deny_layer,omitempty"`
	DenyReason string          `json:"deny_reason,omitempty"`
	ApprovedBy string          `json:"approved_by,omitempty"`
	Args       json.RawMessage `json:"args,omitempty"`
	Result     *string         `json:"result,omitempty"`
	Summary    string          `json:"summary"`
	Error      string          `json:"error,omitempty"`
	DurationMS int64           `json:"duration_ms"`
	// ArgsHash is the hash of the arguments an executed call ran with (the edited
	// ones after an edit); PolicyRevision the permissions file's revision it was
	// judged under; ApprovalID or GrantID what let a held call run.
	ArgsHash       string `json:"args_hash,omitempty"`
	PolicyRevision string `json:"policy_revision,omitempty"`
	ApprovalID     string `json:"approval_id,omitempty"`
	GrantID        string `json:"grant_id,omitempty"`
	// EditedBy is the approver who edited the call; OriginalArgs the model's
	// arguments before the edit (redacted), Args the edited ones.
	EditedBy     string          `json:"edited_by,omitempty"`
	OriginalArgs json.RawMessage `json:"original_args,omitempty"`
	// TraceID is the trace of the span the call ran in (its execute_tool
	// span; issue 42): "" when tracing was off.
	TraceID string `json:"trace_id,omitempty"`
}

// insertAudit is the one statement that writes audit rows: $3… are the columns
// as arrays (auditColumns). With a session and lease token ($1, $2) it writes only
// while that lease holds (SaveStep); with NULLs, unconditionally (InsertAudit). A
// row whose call_key exists is skipped: a redelivered step re-auditing the same
// attempt.
const insertAudit = `INSERT INTO tool_audit (call_key, at, run_id, team, agent, role, tool, tier, allowed, decision,
		deny_layer, deny_reason, approved_by, args, result, summary, error, duration_ms,
		args_hash, policy_revision, approval_id, grant_id, edited_by, original_args, trace_id)
	SELECT u.call_key, u.at, u.run_id::uuid, u.team, u.agent, u.role, u.tool, u.tier, u.allowed, u.decision,
		u.deny_layer, u.deny_reason, u.approved_by, u.args::jsonb, u.result, u.summary, u.error, u.duration_ms,
		u.args_hash, u.policy_revision, u.approval_id, u.grant_id, u.edited_by, u.original_args::jsonb, u.trace_id
	FROM unnest($3::text[], $4::timestamptz[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[],
		$11::bool[], $12::text[], $13::text[], $14::text[], $15::text[], $16::text[], $17::text[], $18::text[], $19::text[], $20::int8[],
		$21::text[], $22::text[], $23::text[], $24::text[], $25::text[], $26::text[], $27::text[])
		AS u(call_key, at, run_id, team, agent, role, tool, tier, allowed, decision, deny_layer, deny_reason, approved_by,
			args, result, summary, error, duration_ms, args_hash, policy_revision, approval_id, grant_id, edited_by, original_args, trace_id)
	WHERE $1::text IS NULL OR EXISTS (SELECT 1 FROM sessions WHERE id = $1 AND lease_token = $2::text)
	ON CONFLICT (call_key) DO NOTHING`

// auditColumns are rows as the column arrays of insertAudit, in its order. A
// row without a trace id takes the one of ctx's span (the step that saves it).
func auditColumns(ctx context.Context, rows []AuditRow) []any {
	n := len(rows)
	var (
		keys, runs, teams, agents, roles, tls, tiers, decisions = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		layers, reasons, approvers, summaries, errs             = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		at                                                      = make([]time.Time, n)
		allowed                                                 = make([]bool, n)
		args, results                                           = make([]*string, n), make([]*string, n)
		durations                                               = make([]int64, n)
		hashes, revisions, approvals, grants, editors           = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		originals                                               = make([]*string, n)
		traces                                                  = make([]string, n)
	)
	for i, r := range rows {
		keys[i], at[i], runs[i], teams[i], agents[i], roles[i], tls[i], tiers[i] = r.CallKey, r.At, r.RunID, r.Team, r.Agent, r.Role, r.Tool, r.Tier
		allowed[i], decisions[i], layers[i], reasons[i], approvers[i] = r.Allowed, r.Decision, r.DenyLayer, r.DenyReason, r.ApprovedBy
		if len(r.Args) > 0 {
			a := string(r.Args)
			args[i] = &a
		}
		results[i], summaries[i], errs[i], durations[i] = r.Result, r.Summary, r.Error, r.DurationMS
		hashes[i], revisions[i], approvals[i], grants[i], editors[i] = r.ArgsHash, r.PolicyRevision, r.ApprovalID, r.GrantID, r.EditedBy
		if len(r.OriginalArgs) > 0 {
			o := string(r.OriginalArgs)
			originals[i] = &o
		}
		if traces[i] = r.TraceID; traces[i] == "" {
			traces[i] = tracing.TraceID(ctx)
		}
	}
	return []any{keys, at, runs, teams, agents, roles, tls, tiers, allowed, decisions, layers, reasons, approvers, args, results, summaries, errs, durations,
		hashes, revisions, approvals, grants, editors, originals, traces}
}

// InsertAudit writes rows in one statement (the Auditor's batches, and rows a step
// could not save with its session).
func (s *Store) InsertAudit(ctx context.Context, rows []AuditRow) error {
	if len(rows) == 0 {
		return nil
	}
	if _, err := s.db.Exec(ctx, insertAudit, append([]any{nil, nil}, auditColumns(ctx, rows)...)...); err != nil {
		return fmt.Errorf("insert audit (%d rows): %w", len(rows), err)
	}
	return nil
}

// RunAudit lists a run's audit rows in order.
func (s *Store) RunAudit(ctx context.Context, runID string, limit int) ([]AuditRow, error) {
	rows, err := s.db.Query(ctx, `SELECT `+auditSelectCols+`
		FROM tool_audit WHERE run_id = $1 ORDER BY at, id LIMIT $2`, runID, limit)
	if err != nil {
		return nil, fmt.Errorf("run audit: %w", err)
	}
	return scanAudit(rows)
}

const auditSelectCols = `id, call_key, at, run_id::text, team, agent, role, tool, tier, allowed, decision,
		deny_layer, deny_reason, approved_by, args, result, summary, error, duration_ms,
		args_hash, policy_revision, approval_id, grant_id, edited_by, original_args, trace_id`

func scanAudit(rows pgx.Rows) ([]AuditRow, error) {
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (AuditRow, error) {
		var r AuditRow
		err := row.Scan(&r.ID, &r.CallKey, &r.At, &r.RunID, &r.Team, &r.Agent, &r.Role, &r.Tool, &r.Tier, &r.Allowed,
			&r.Decision, &r.DenyLayer, &r.DenyReason, &r.ApprovedBy, &r.Args, &r.Result, &r.Summary, &r.Error, &r.DurationMS,
			&r.ArgsHash, &r.PolicyRevision, &r.ApprovalID, &r.GrantID, &r.EditedBy, &r.OriginalArgs, &r.TraceID)
		return r, err
	})
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	return out, nil
}

// auditPurgeBatch bounds one transaction of PurgeAudit: one DELETE of the whole
// backlog would hold its row locks, and the audit writers behind them, for as
// long as it ran.
const auditPurgeBatch = 1000

// PurgeAudit deletes audit rows older than age, in batches of auditPurgeBatch
// (DeleteOlderBatch); it returns how many.
func (s *Store) PurgeAudit(ctx context.Context, age time.Duration) (int64, error) {
	cutoff := time.Now().Add(-age)
	var n int64
	for {
		b, err := s.DeleteOlderBatch(ctx, TableAudit, cutoff, auditPurgeBatch)
		n += b.Rows
		if err != nil {
			return n, fmt.Errorf("purge audit: %w", err)
		}
		if b.Rows < auditPurgeBatch || ctx.Err() != nil {
			return n, nil
		}
	}
}
