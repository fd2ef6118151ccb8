package store

import (
	"context"
	"fmt"
)

// Intent states returned by BeginIntent.
const (
	IntentNew      = "new"      // recorded now: run the call
	IntentStarted  = "started"  // recorded earlier, never finished: outcome unknown
	IntentFinished = "finished" // recorded and finished: replay the stored result
)

// Intent is a recorded tool call.
type Intent struct {
	State    string
	ArgsHash string
	Result   string
	IsError  bool
}

// BeginIntent records a call's intent unless one exists, and reports which.
func (s *Store) BeginIntent(ctx context.Context, callKey, runID, tool, argsHash string) (Intent, error) {
	tag, err := s.db.Exec(ctx, `INSERT INTO tool_intents (call_key, run_id, tool, args_hash) VALUES ($1, $2, $3, $4)
		ON CONFLICT (call_key) DO NOTHING`, callKey, runID, tool, argsHash)
	if err != nil {
		return Intent{}, fmt.Errorf("begin intent: %w", err)
	}
	if tag.RowsAffected() == 1 {
		return Intent{State: IntentNew, ArgsHash: argsHash}, nil
	}
	var in Intent
	var finished bool
	var result *string
	err = s.db.QueryRow(ctx, `SELECT args_hash, finished_at IS NOT NULL, result, is_error FROM tool_intents WHERE call_key = $1`, callKey).
		Scan(&in.ArgsHash, &finished, &result, &in.IsError)
	if err != nil {
		return in, fmt.Errorf("read intent: %w", err)
	}
	in.State = IntentStarted
	if finished {
		in.State = IntentFinished
	}
	if result != nil {
		in.Result = *result
	}
	return in, nil
}

// FinishIntent stores a call's outcome.
func (s *Store) FinishIntent(ctx context.Context, callKey, result string, isError bool) error {
	_, err := s.db.Exec(ctx, `UPDATE tool_intents SET finished_at = now(), result = $2, is_error = $3
		WHERE call_key = $1 AND finished_at IS NULL`, callKey, result, isError)
	if err != nil {
		return fmt.Errorf("finish intent: %w", err)
	}
	return nil
}
