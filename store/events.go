package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// Event is one stored run event.
type Event struct {
	ID        int64           `json:"id"`
	RunID     string          `json:"run_id"`
	Type      string          `json:"type"`
	Agent     string          `json:"agent,omitempty"`
	Data      json.RawMessage `json:"data"`
	CreatedAt time.Time       `json:"created_at"`
}

// AppendEvent stores an event once per (run, key); inserted is false for a duplicate.
func (s *Store) AppendEvent(ctx context.Context, runID, key, typ, agent string, data any) (id int64, inserted bool, err error) {
	raw, err := json.Marshal(data)
	if err != nil {
		return 0, false, fmt.Errorf("event %s: %w", typ, err)
	}
	err = s.Pool.QueryRow(ctx, `WITH ins AS (
			INSERT INTO run_events (run_id, key, type, agent, data) VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (run_id, key) DO NOTHING RETURNING id)
		SELECT COALESCE((SELECT id FROM ins), 0)`, runID, key, typ, agent, raw).Scan(&id)
	if err != nil {
		return 0, false, fmt.Errorf("append event %s: %w", typ, err)
	}
	return id, id != 0, nil
}

// EventsAfter returns up to limit events of a run with id > after, in order.
func (s *Store) EventsAfter(ctx context.Context, runID string, after int64, limit int) ([]Event, error) {
	rows, err := s.Pool.Query(ctx, `SELECT id, run_id::text, type, agent, data, created_at FROM run_events
		WHERE run_id = $1 AND id > $2 ORDER BY id LIMIT $3`, runID, after, limit)
	if err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	defer rows.Close()
	var out []Event
	for rows.Next() {
		var e Event
		if err := rows.Scan(&e.ID, &e.RunID, &e.Type, &e.Agent, &e.Data, &e.CreatedAt); err != nil {
			return nil, fmt.Errorf("events: %w", err)
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// GetEvent loads one event by id.
func (s *Store) GetEvent(ctx context.Context, id int64) (Event, error) {
	var e Event
	err := s.Pool.QueryRow(ctx, `SELECT id, run_id::text, type, agent, data, created_at FROM run_events WHERE id = $1`, id).
		Scan(&e.ID, &e.RunID, &e.Type, &e.Agent, &e.Data, &e.CreatedAt)
	if err != nil {
		return e, fmt.Errorf("get event %d: %w", id, err)
	}
	return e, nil
}
