package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultCallPage is how many recorded calls one RecordedCalls page returns
// when CallScan.Limit is 0: a policy what-if pages through the record this
// many rows at a time, never holding the whole range.
const DefaultCallPage = 1000

// RecordedCall is one audited call with what the permission rules match on:
// the audit row's facts and, from its run, how the team was submitted and the
// workspace it ran in. The audit trail outlives runs (no foreign key), so a
// call of a deleted run has RunKnown false and empty Template and Workspace.
type RecordedCall struct {
	ID      int64     `json:"id"`
	At      time.Time `json:"at"`
	RunID   string    `json:"run_id"`
	Team    string    `json:"team"`
	Agent   string    `json:"agent"`
	Tool    string    `json:"tool"`
	Tier    string    `json:"tier"`
	Allowed bool      `json:"allowed"`
	// Decision and DenyLayer are the gate's outcome when the call ran.
	Decision  string `json:"decision"`
	DenyLayer string `json:"deny_layer,omitempty"`
	// Args are the call's redacted arguments (Elevated and Restricted calls;
	// the edited ones after an approver's edit); nil for a Standard call, whose
	// row keeps Summary only: the redacted arguments cut to 240 bytes.
	Args    json.RawMessage `json:"args,omitempty"`
	Summary string          `json:"summary"`
	// Template is the run's template ("" for an inline team); Workspace the
	// id of the workspace it ran in (Run.WorkspaceID).
	Template  string `json:"template,omitempty"`
	Workspace string `json:"workspace,omitempty"`
	RunKnown  bool   `json:"run_known"`
}

// CallScan selects recorded calls: those of RunIDs when given, else those at
// or after Since. Pages run in id order: After is the last id of the previous
// page (0 for the first).
type CallScan struct {
	RunIDs []string
	Since  time.Time
	After  int64
	// Limit is the page's size (0: DefaultCallPage).
	Limit int
}

// ErrNoScan refuses a CallScan that selects neither runs nor a time.
var ErrNoScan = errors.New("recorded calls: give runs or a start time")

func (sc CallScan) where() (string, []any, error) {
	switch {
	case sc.RunIDs != nil:
		return "a.run_id = ANY($1::uuid[])", []any{sc.RunIDs}, nil
	case !sc.Since.IsZero():
		return "a.at >= $1", []any{sc.Since}, nil
	}
	return "", nil, ErrNoScan
}

// LatestRunIDs are the ids of the n most recently created runs, newest first.
func (s *Store) LatestRunIDs(ctx context.Context, n int) ([]string, error) {
	rows, err := s.db.Query(ctx, `SELECT id::text FROM runs ORDER BY created_at DESC, id DESC LIMIT $1`, n)
	if err != nil {
		return nil, fmt.Errorf("latest runs: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("latest runs: %w", err)
	}
	return ids, nil
}

// CountRecordedCalls is how many calls sc selects (its After and Limit aside).
func (s *Store) CountRecordedCalls(ctx context.Context, sc CallScan) (int64, error) {
	where, args, err := sc.where()
	if err != nil {
		return 0, err
	}
	var n int64
	if err := s.db.QueryRow(ctx, `SELECT count(*) FROM tool_audit a WHERE `+where, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("count recorded calls: %w", err)
	}
	return n, nil
}

// EachRecordedCall hands fn the calls of one page of sc, in id order (the
// order they were audited in), as they arrive: a page of large arguments is
// never held whole. It returns how many it handed over and the last id (the
// next page's After).
func (s *Store) EachRecordedCall(ctx context.Context, sc CallScan, fn func(RecordedCall) error) (n int, last int64, err error) {
	where, args, err := sc.where()
	if err != nil {
		return 0, 0, err
	}
	limit := sc.Limit
	if limit <= 0 {
		limit = DefaultCallPage
	}
	args = append(args, sc.After, limit)
	rows, err := s.db.Query(ctx, `SELECT a.id, a.at, a.run_id::text, a.team, a.agent, a.tool, a.tier, a.allowed, a.decision,
			a.deny_layer, a.args, a.summary, coalesce(r.template, ''), coalesce(nullif(r.workspace, ''), r.id::text, ''), r.id IS NOT NULL
		FROM tool_audit a LEFT JOIN runs r ON r.id = a.run_id
		WHERE `+where+` AND a.id > $2 ORDER BY a.id LIMIT $3`, args...)
	if err != nil {
		return 0, 0, fmt.Errorf("recorded calls: %w", err)
	}
	defer rows.Close()
	last = sc.After
	for rows.Next() {
		var c RecordedCall
		if err := rows.Scan(&c.ID, &c.At, &c.RunID, &c.Team, &c.Agent, &c.Tool, &c.Tier, &c.Allowed, &c.Decision,
			&c.DenyLayer, &c.Args, &c.Summary, &c.Template, &c.Workspace, &c.RunKnown); err != nil {
			return n, last, fmt.Errorf("recorded calls: %w", err)
		}
		if err := fn(c); err != nil {
			return n, last, err
		}
		n, last = n+1, c.ID
	}
	if err := rows.Err(); err != nil {
		return n, last, fmt.Errorf("recorded calls: %w", err)
	}
	return n, last, nil
}
