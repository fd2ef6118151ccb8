package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aetherium-engine/aetherium/tracing"
)

// Event is one stored run event.
type Event struct {
	ID        int64           `json:"id"`
	RunID     string          `json:"run_id"`
	Type      string          `json:"type"`
	Agent     string          `json:"agent,omitempty"`
	Data      json.RawMessage `json:"data"`
	CreatedAt time.Time       `json:"created_at"`
	// TraceID is the trace of the span that wrote the event (issue 42): ""
	// when tracing was off or no span wrote it.
	TraceID string `json:"trace_id,omitempty"`
}

// AppendEvent stores an event once per (run, key); inserted is false for a duplicate.
func (s *Store) AppendEvent(ctx context.Context, runID, key, typ, agent string, data any) (id int64, inserted bool, err error) {
	raw, err := json.Marshal(data)
	if err != nil {
		return 0, false, fmt.Errorf("event %s: %w", typ, err)
	}
	err = s.db.QueryRow(ctx, `WITH ins AS (
			INSERT INTO run_events (run_id, key, type, agent, data, trace_id) VALUES ($1, $2, $3, $4, $5, $6)
			ON CONFLICT (run_id, key) DO NOTHING RETURNING id)
		SELECT COALESCE((SELECT id FROM ins), 0)`, runID, key, typ, agent, raw, tracing.TraceID(ctx)).Scan(&id)
	if err != nil {
		return 0, false, fmt.Errorf("append event %s: %w", typ, err)
	}
	return id, id != 0, nil
}

// TerminalEventKey keys a run's terminal event: one per run, whoever ends it.
const TerminalEventKey = "terminal"

// TerminalEvent is what AppendTerminalEvent stored or found.
type TerminalEvent struct {
	// ID is the event's; 0 when another writer's insert of it is not yet
	// committed (that writer announces it).
	ID int64
	// Inserted: this call stored it.
	Inserted bool
	// Announced is the run's end_announced: the end's event is stored and its
	// hooks ran (MarkEndAnnounced after them). FinishRun clears it.
	Announced bool
}

// AppendTerminalEvent stores a finished run's terminal event once (key
// TerminalEventKey) and reports, in the same statement, whether the end was
// already announced: a caller that finds the event stored by an earlier
// delivery whose hooks never ran (it died, or a hook failed) runs them, instead
// of taking "not inserted" for "heard".
func (s *Store) AppendTerminalEvent(ctx context.Context, runID, typ string, data any) (TerminalEvent, error) {
	raw, err := json.Marshal(data)
	if err != nil {
		return TerminalEvent{}, fmt.Errorf("event %s: %w", typ, err)
	}
	var t TerminalEvent
	err = s.db.QueryRow(ctx, `WITH ins AS (
			INSERT INTO run_events (run_id, key, type, agent, data, trace_id) VALUES ($1, $2, $3, '', $4, $5)
			ON CONFLICT (run_id, key) DO NOTHING RETURNING id)
		SELECT coalesce((SELECT id FROM ins), (SELECT id FROM run_events WHERE run_id = $1 AND key = $2), 0),
			EXISTS (SELECT 1 FROM ins),
			coalesce((SELECT end_announced FROM runs WHERE id = $1), false)`,
		runID, TerminalEventKey, typ, raw, tracing.TraceID(ctx)).Scan(&t.ID, &t.Inserted, &t.Announced)
	if err != nil {
		return TerminalEvent{}, fmt.Errorf("append terminal event %s of run %s: %w", typ, runID, err)
	}
	return t, nil
}

// EventsAfter returns up to limit events of a run with id > after, in order.
func (s *Store) EventsAfter(ctx context.Context, runID string, after int64, limit int) ([]Event, error) {
	scan := func(r pgx.CollectableRow) (Event, error) {
		var e Event
		err := r.Scan(&e.ID, &e.RunID, &e.Type, &e.Agent, &e.Data, &e.CreatedAt, &e.TraceID)
		return e, err
	}
	return queryRows(ctx, s.db, "events", []Event(nil), scan, `SELECT id, run_id::text, type, agent, data, created_at, trace_id FROM run_events
		WHERE run_id = $1 AND id > $2 ORDER BY id LIMIT $3`, runID, after, limit)
}

// TerminalEventID returns the id of a run's terminal event, if it is stored.
func (s *Store) TerminalEventID(ctx context.Context, runID string) (int64, bool, error) {
	var id int64
	err := s.db.QueryRow(ctx, `SELECT id FROM run_events WHERE run_id = $1 AND key = $2`, runID, TerminalEventKey).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("terminal event of run %s: %w", runID, err)
	}
	return id, true, nil
}

// GetEvent loads one event by id.
func (s *Store) GetEvent(ctx context.Context, id int64) (Event, error) {
	var e Event
	err := s.db.QueryRow(ctx, `SELECT id, run_id::text, type, agent, data, created_at, trace_id FROM run_events WHERE id = $1`, id).
		Scan(&e.ID, &e.RunID, &e.Type, &e.Agent, &e.Data, &e.CreatedAt, &e.TraceID)
	if err != nil {
		return e, fmt.Errorf("get event %d: %w", id, err)
	}
	return e, nil
}

// NewEvent is one event to append.
type NewEvent struct {
	Key, Type, Agent string
	Data             any
}

// AppendEvents stores events in one statement, each once per (run, key); it returns
// the ids and types of those inserted now, in order.
func (s *Store) AppendEvents(ctx context.Context, runID string, evs []NewEvent) ([]Event, error) {
	if len(evs) == 0 {
		return nil, nil
	}
	var b strings.Builder
	b.WriteString(`INSERT INTO run_events (run_id, key, type, agent, data, trace_id) VALUES `)
	args := []any{runID, tracing.TraceID(ctx)}
	for i, e := range evs {
		raw, err := json.Marshal(e.Data)
		if err != nil {
			return nil, fmt.Errorf("event %s: %w", e.Type, err)
		}
		if i > 0 {
			b.WriteString(",")
		}
		n := len(args)
		fmt.Fprintf(&b, "($1, $%d, $%d, $%d, $%d, $2)", n+1, n+2, n+3, n+4)
		args = append(args, e.Key, e.Type, e.Agent, raw)
	}
	b.WriteString(` ON CONFLICT (run_id, key) DO NOTHING RETURNING id, type`)
	return queryRows(ctx, s.db, "append events", []Event(nil), insertedEvent(runID), b.String(), args...)
}
