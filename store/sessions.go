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

// EnsureSession creates the session when it does not exist yet (idempotent).
func (s *Store) EnsureSession(ctx context.Context, sess Session) error {
	msgs, err := json.Marshal(sess.Messages)
	if err != nil {
		return err
	}
	var del *string
	if sess.DelegationID != "" {
		del = &sess.DelegationID
	}
	_, err = s.Pool.Exec(ctx, `INSERT INTO sessions (id, run_id, agent, role, delegation_id, messages)
		VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (id) DO NOTHING`,
		sess.ID, sess.RunID, sess.Agent, sess.Role, del, msgs)
	if err != nil {
		return fmt.Errorf("ensure session %s: %w", sess.ID, err)
	}
	return nil
}

// AcquireSession takes the session's step lease for token when it is free or expired.
// ok is false when another live delivery holds it.
func (s *Store) AcquireSession(ctx context.Context, id, token string, lease time.Duration) (Session, bool, error) {
	var sess Session
	var raw []byte
	var del *string
	err := s.Pool.QueryRow(ctx, `UPDATE sessions SET lease_token = $2, lease_until = now() + $3::interval
		WHERE id = $1 AND (lease_until < now() OR lease_token = $2)
		RETURNING id, run_id::text, agent, role, delegation_id, messages, status, steps, failures, version`,
		id, token, lease.String()).Scan(&sess.ID, &sess.RunID, &sess.Agent, &sess.Role, &del, &raw,
		&sess.Status, &sess.Steps, &sess.Failures, &sess.Version)
	if errors.Is(err, pgx.ErrNoRows) {
		var exists bool
		if err := s.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM sessions WHERE id = $1)`, id).Scan(&exists); err != nil {
			return sess, false, fmt.Errorf("acquire session %s: %w", id, err)
		}
		if !exists {
			return sess, false, fmt.Errorf("acquire session %s: %w", id, ErrNotFound)
		}
		return sess, false, nil
	}
	if err != nil {
		return sess, false, fmt.Errorf("acquire session %s: %w", id, err)
	}
	if del != nil {
		sess.DelegationID = *del
	}
	if err := json.Unmarshal(raw, &sess.Messages); err != nil {
		return sess, false, fmt.Errorf("session %s messages: %w", id, err)
	}
	return sess, true, nil
}

// ReleaseSession gives the lease up so the next delivery need not wait for expiry.
func (s *Store) ReleaseSession(ctx context.Context, id, token string) error {
	_, err := s.Pool.Exec(ctx, `UPDATE sessions SET lease_until = 'epoch' WHERE id = $1 AND lease_token = $2`, id, token)
	if err != nil {
		return fmt.Errorf("release session %s: %w", id, err)
	}
	return nil
}

// SessionStatus reads a session's status without taking the lease.
func (s *Store) SessionStatus(ctx context.Context, id string) (string, error) {
	var st string
	err := s.Pool.QueryRow(ctx, `SELECT status FROM sessions WHERE id = $1`, id).Scan(&st)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", ErrNotFound
	}
	return st, err
}
