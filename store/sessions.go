package store

import (
	"context"
	"encoding/json"
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
	msgs, err := json.Marshal(initial.Messages)
	if err != nil {
		return Session{}, false, err
	}
	var del *string
	if initial.DelegationID != "" {
		del = &initial.DelegationID
	}
	var sess Session
	var raw []byte
	err = s.db.QueryRow(ctx, `INSERT INTO sessions AS s (id, run_id, agent, role, delegation_id, messages, lease_token, lease_until)
		VALUES ($1, $2, $3, $4, $5, $6, $7, now() + $8::interval)
		ON CONFLICT (id) DO UPDATE SET lease_token = excluded.lease_token, lease_until = excluded.lease_until
			WHERE s.lease_until < now() OR s.lease_token = excluded.lease_token
		RETURNING s.id, s.run_id::text, s.agent, s.role, s.delegation_id, s.messages, s.status, s.steps, s.failures, s.version`,
		initial.ID, initial.RunID, initial.Agent, initial.Role, del, msgs, token, lease.String()).Scan(
		&sess.ID, &sess.RunID, &sess.Agent, &sess.Role, &del, &raw, &sess.Status, &sess.Steps, &sess.Failures, &sess.Version)
	if errors.Is(err, pgx.ErrNoRows) {
		return Session{}, false, nil // the WHERE refused: leased by a live delivery
	}
	if err != nil {
		return Session{}, false, fmt.Errorf("acquire session %s: %w", initial.ID, err)
	}
	if del != nil {
		sess.DelegationID = *del
	}
	if err := json.Unmarshal(raw, &sess.Messages); err != nil {
		return Session{}, false, fmt.Errorf("session %s messages: %w", initial.ID, err)
	}
	return sess, true, nil
}

// ReleaseSession gives the lease up so the next delivery need not wait for expiry.
func (s *Store) ReleaseSession(ctx context.Context, id, token string) error {
	_, err := s.db.Exec(ctx, `UPDATE sessions SET lease_until = 'epoch' WHERE id = $1 AND lease_token = $2`, id, token)
	if err != nil {
		return fmt.Errorf("release session %s: %w", id, err)
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
