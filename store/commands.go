package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Command is one command_log row: a run_shell invocation and how it ended.
type Command struct {
	ID    int64  `json:"id"`
	RunID string `json:"run_id"`
	Agent string `json:"agent"`
	// Command is the shell command line as the agent gave it.
	Command string `json:"command"`
	// ExitCode is the exit status; 124 when the timeout killed it, -1 when it
	// never ran.
	ExitCode    int       `json:"exit_code"`
	DurationMS  int64     `json:"duration_ms"`
	OutputBytes int64     `json:"output_bytes"`
	Truncated   bool      `json:"truncated"`
	TimedOut    bool      `json:"timed_out"`
	CreatedAt   time.Time `json:"created_at"`
}

// InsertCommand records one invocation and returns its id.
func (s *Store) InsertCommand(ctx context.Context, c Command) (int64, error) {
	var id int64
	err := s.db.QueryRow(ctx, `INSERT INTO command_log
		(run_id, agent, command, exit_code, duration_ms, output_bytes, truncated, timed_out)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id`,
		c.RunID, c.Agent, c.Command, c.ExitCode, c.DurationMS, c.OutputBytes, c.Truncated, c.TimedOut).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("insert command_log: %w", err)
	}
	return id, nil
}

// ListCommands returns a run's commands in the order they ran (limit <= 0: all).
func (s *Store) ListCommands(ctx context.Context, runID string, limit int) ([]Command, error) {
	if limit <= 0 {
		limit = 1 << 30
	}
	rows, err := s.db.Query(ctx, `SELECT id, run_id::text, agent, command, exit_code, duration_ms,
		output_bytes, truncated, timed_out, created_at
		FROM command_log WHERE run_id = $1 ORDER BY id LIMIT $2`, runID, limit)
	if err != nil {
		return nil, fmt.Errorf("list command_log: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Command, error) {
		var c Command
		err := r.Scan(&c.ID, &c.RunID, &c.Agent, &c.Command, &c.ExitCode, &c.DurationMS,
			&c.OutputBytes, &c.Truncated, &c.TimedOut, &c.CreatedAt)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("list command_log: %w", err)
	}
	return out, nil
}
