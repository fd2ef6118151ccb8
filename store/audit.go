package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

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
}

// InsertAudit writes rows in one multi-row statement; a row whose call_key exists is
// skipped (a redelivered step re-auditing the same attempt).
func (s *Store) InsertAudit(ctx context.Context, rows []AuditRow) error {
	if len(rows) == 0 {
		return nil
	}
	const cols = 17
	var b strings.Builder
	b.WriteString(`INSERT INTO tool_audit (call_key, at, run_id, team, agent, role, tool, tier, allowed, decision,
		deny_layer, deny_reason, approved_by, args, result, summary, error, duration_ms) VALUES `)
	args := make([]any, 0, len(rows)*(cols+1))
	for i, r := range rows {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString("(")
		for j := 0; j < cols+1; j++ {
			if j > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, "$%d", i*(cols+1)+j+1)
		}
		b.WriteString(")")
		var a any
		if len(r.Args) > 0 {
			a = r.Args
		}
		args = append(args, r.CallKey, r.At, r.RunID, r.Team, r.Agent, r.Role, r.Tool, r.Tier, r.Allowed, r.Decision,
			r.DenyLayer, r.DenyReason, r.ApprovedBy, a, r.Result, r.Summary, r.Error, r.DurationMS)
	}
	b.WriteString(" ON CONFLICT (call_key) DO NOTHING")
	if _, err := s.Pool.Exec(ctx, b.String(), args...); err != nil {
		return fmt.Errorf("insert audit (%d rows): %w", len(rows), err)
	}
	return nil
}

// RunAudit lists a run's audit rows in order.
func (s *Store) RunAudit(ctx context.Context, runID string, limit int) ([]AuditRow, error) {
	rows, err := s.Pool.Query(ctx, `SELECT id, call_key, at, run_id::text, team, agent, role, tool, tier, allowed, decision,
		deny_layer, deny_reason, approved_by, args, result, summary, error, duration_ms
		FROM tool_audit WHERE run_id = $1 ORDER BY at, id LIMIT $2`, runID, limit)
	if err != nil {
		return nil, fmt.Errorf("run audit: %w", err)
	}
	defer rows.Close()
	out := []AuditRow{}
	for rows.Next() {
		var r AuditRow
		if err := rows.Scan(&r.ID, &r.CallKey, &r.At, &r.RunID, &r.Team, &r.Agent, &r.Role, &r.Tool, &r.Tier, &r.Allowed,
			&r.Decision, &r.DenyLayer, &r.DenyReason, &r.ApprovedBy, &r.Args, &r.Result, &r.Summary, &r.Error, &r.DurationMS); err != nil {
			return nil, fmt.Errorf("run audit: %w", err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// PurgeAudit deletes audit rows older than age; it returns how many.
func (s *Store) PurgeAudit(ctx context.Context, age time.Duration) (int64, error) {
	tag, err := s.Pool.Exec(ctx, `DELETE FROM tool_audit WHERE at < now() - $1::interval`, age.String())
	if err != nil {
		return 0, fmt.Errorf("purge audit: %w", err)
	}
	return tag.RowsAffected(), nil
}
