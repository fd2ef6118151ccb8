package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// EventMark is a stored event as a sweep of events sees it: its id and type,
// and whether it is older than the sweep's grace.
type EventMark struct {
	ID   int64
	Type string
	// Settled: created longer than the grace ago, so every event with a lower
	// id is committed or gone (an event is one short statement).
	Settled bool
}

// WebhookCursor returns how far hook's sweep has seen the run events: on the
// hook's first sweep, the newest event created more than 2 × grace ago (a hook
// added to the configuration hears the events of the last moments again, not
// the whole history).
func (s *Store) WebhookCursor(ctx context.Context, hook string, grace time.Duration) (int64, error) {
	var id int64
	err := s.db.QueryRow(ctx, `WITH ins AS (
			INSERT INTO webhook_cursors (hook, event_id)
			SELECT $1, coalesce((SELECT id FROM run_events WHERE created_at < now() - 2 * $2::interval ORDER BY id DESC LIMIT 1), 0)
			WHERE NOT EXISTS (SELECT 1 FROM webhook_cursors WHERE hook = $1)
			ON CONFLICT (hook) DO NOTHING RETURNING event_id)
		SELECT coalesce((SELECT event_id FROM ins), (SELECT event_id FROM webhook_cursors WHERE hook = $1))`,
		hook, grace.String()).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("webhook cursor of %s: %w", hook, err)
	}
	return id, nil
}

// EventsAfterID returns up to limit events with an id above after, in id
// order, each marked Settled when created more than grace ago.
func (s *Store) EventsAfterID(ctx context.Context, after int64, grace time.Duration, limit int) ([]EventMark, error) {
	scan := func(r pgx.CollectableRow) (EventMark, error) {
		var m EventMark
		return m, r.Scan(&m.ID, &m.Type, &m.Settled)
	}
	return queryRows(ctx, s.db, "events after an id", []EventMark(nil), scan, `SELECT id, type, created_at < now() - $2::interval FROM run_events
		WHERE id > $1 ORDER BY id LIMIT $3`, after, grace.String(), limit)
}

// AdvanceWebhookCursor moves hook's cursor from `from` to `to`; false when
// another sweep moved it first (it enqueued the same deliveries: their task ids
// are the event's).
func (s *Store) AdvanceWebhookCursor(ctx context.Context, hook string, from, to int64) (bool, error) {
	tag, err := s.db.Exec(ctx, `UPDATE webhook_cursors SET event_id = $3, updated_at = now() WHERE hook = $1 AND event_id = $2`, hook, from, to)
	if err != nil {
		return false, fmt.Errorf("webhook cursor of %s: %w", hook, err)
	}
	return tag.RowsAffected() == 1, nil
}
