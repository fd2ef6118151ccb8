package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aetherium-engine/aetherium/llm"
)

// Session is one agent's persisted conversation.
type Session struct {
	ID           string
	RunID        string
	Agent        string
	Role         string
	DelegationID string
	Messages     []llm.Message
	Status       string // active | waiting | done
	Steps        int
	Failures     int
	Version      int64
}

// AcquireSession takes the step lease of session initial.ID for token when it is
// free or expired, creating the session from initial on its first delivery — one
// statement either way. ok is false when another live delivery holds it.
func (s *Store) AcquireSession(ctx context.Context, initial Session, token string, lease time.Duration) (Session, bool, error) {
	if initial.Messages == nil {
		initial.Messages = []llm.Message{}
	}
	got, err := s.AcquireStep(ctx, Acquire{Initial: initial, Token: token, Lease: lease})
	return got.Session, got.OK, err
}

// ReleaseSession gives the lease up so the next delivery need not wait for expiry.
// ErrLeaseLost (and nothing changed) when another delivery holds the session now:
// a late release — from a worker cut off past its lease — never frees the lease
// of the step that took over.
func (s *Store) ReleaseSession(ctx context.Context, id, token string) error {
	tag, err := s.db.Exec(ctx, `UPDATE sessions SET lease_until = 'epoch' WHERE id = $1 AND lease_token = $2`, id, token)
	if err != nil {
		return fmt.Errorf("release session %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("release session %s: %w", id, ErrLeaseLost)
	}
	return nil
}

// SessionStatus reads a session's status without taking the lease.
func (s *Store) SessionStatus(ctx context.Context, id string) (string, error) {
	var st string
	err := s.db.QueryRow(ctx, `SELECT status FROM sessions WHERE id = $1`, id).Scan(&st)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", ErrNotFound
	}
	return st, err
}

// SessionMessages reads a session's saved history without taking the lease: the
// flow rules derive what a delegation's parent or child has read from it.
func (s *Store) SessionMessages(ctx context.Context, id string) ([]llm.Message, error) {
	var msgs []llm.Message
	err := s.db.QueryRow(ctx, `SELECT messages FROM sessions WHERE id = $1`, id).Scan(&msgs)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("session %s messages: %w", id, err)
	}
	return msgs, nil
}
