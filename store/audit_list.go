package store

import (
	"context"
	"fmt"
	"strings"
)

// AuditFilter selects audit rows across runs; empty fields match everything.
type AuditFilter struct {
	// Owner limits the rows to the runs of one principal ("" for every owner).
	Owner    string
	RunID    string
	Agent    string
	Tool     string
	Decision string
	Tier     string
	// Before pages: only rows with an id below it (0 for the newest).
	Before int64
	Limit  int
}

// ListAudit returns the audit rows f selects, newest first.
func (s *Store) ListAudit(ctx context.Context, f AuditFilter) ([]AuditRow, error) {
	var where []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	if f.Owner != "" {
		where = append(where, "run_id IN (SELECT id FROM runs WHERE owner = "+arg(f.Owner)+")")
	}
	for col, v := range map[string]string{"run_id::text": f.RunID, "agent": f.Agent, "tool": f.Tool, "decision": f.Decision, "tier": f.Tier} {
		if v != "" {
			where = append(where, col+" = "+arg(v))
		}
	}
	if f.Before > 0 {
		where = append(where, "id < "+arg(f.Before))
	}
	q := `SELECT ` + auditSelectCols + ` FROM tool_audit`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY id DESC LIMIT " + arg(f.Limit)
	rows, err := s.db.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list audit: %w", err)
	}
	return scanAudit(rows)
}
