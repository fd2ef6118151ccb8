package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// RunsInFlight counts runs queued, running or waiting: submitted runs by
// status, and MCP client sessions (which stay running while their client
// calls) apart.
type RunsInFlight struct {
	Queued, Running, Waiting int
	// MCPSessions counts the MCP session runs in flight (RunKindMCP), which
	// Queued, Running and Waiting leave out.
	MCPSessions int
}

// CountRunsInFlight counts the runs in flight of owner ("" for every owner).
// Both forms read the partial index of unfinished runs (runs_owner_in_flight),
// so the count stays cheap however many finished runs accumulate.
func (s *Store) CountRunsInFlight(ctx context.Context, owner string) (RunsInFlight, error) {
	rows, err := s.db.Query(ctx, `SELECT status, template LIKE $2 || '%', count(*) FROM runs
		WHERE status IN ('queued','running','waiting') AND ($1 = '' OR owner = $1) GROUP BY 1, 2`, owner, MCPTemplatePrefix)
	if err != nil {
		return RunsInFlight{}, fmt.Errorf("count runs in flight: %w", err)
	}
	var out RunsInFlight
	var status string
	var mcp bool
	var n int
	_, err = pgx.ForEachRow(rows, []any{&status, &mcp, &n}, func() error {
		switch {
		case mcp:
			out.MCPSessions += n
		case status == RunQueued:
			out.Queued = n
		case status == RunRunning:
			out.Running = n
		case status == RunWaiting:
			out.Waiting = n
		}
		return nil
	})
	if err != nil {
		return RunsInFlight{}, fmt.Errorf("count runs in flight: %w", err)
	}
	return out, nil
}
