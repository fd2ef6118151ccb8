package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ForkSeed is what a fork (issue 44, docs/fork.md) starts from: the record of
// run From up to its step At. CreateRunOnce writes it in the transaction that
// inserts the run, so no step of the new run can see the run without it.
type ForkSeed struct {
	// From is the run forked; At the step (replay's numbering) it was forked at.
	From string
	At   int
	// Sessions are the new run's sessions, each with its history (the record's
	// up to the fork point), written with their rows. A session whose
	// LeaseToken is set is written leased to it for LeaseFor: no step can take
	// it until the forker releases it (ReleaseSession) once the fork's
	// workspace is restored.
	Sessions   []Session
	LeaseToken string
	LeaseFor   time.Duration
	// Delegations are the new run's delegations (the record's, finished, under
	// new ids).
	Delegations []Delegation
}

// RunFork is where a run was forked from ("" and 0 for a run that is no fork).
type RunFork struct {
	From string `json:"forked_from,omitempty"`
	At   int    `json:"forked_at,omitempty"`
}

// ForkOf reads where run id was forked from.
func (s *Store) ForkOf(ctx context.Context, id string) (RunFork, error) {
	var f RunFork
	err := s.db.QueryRow(ctx, `SELECT coalesce(forked_from::text, ''), forked_at FROM runs WHERE id = $1::uuid`, id).Scan(&f.From, &f.At)
	if errors.Is(err, pgx.ErrNoRows) {
		return f, ErrNotFound
	}
	if err != nil {
		return f, fmt.Errorf("fork of run %s: %w", id, err)
	}
	return f, nil
}

// seedFork writes a fork's seed for the run just inserted in tx.
func seedFork(ctx context.Context, tx pgx.Tx, runID string, f *ForkSeed) error {
	if _, err := tx.Exec(ctx, `UPDATE runs SET forked_from = $2::uuid, forked_at = $3 WHERE id = $1::uuid`, runID, f.From, f.At); err != nil {
		return fmt.Errorf("seed fork: %w", err)
	}
	for _, d := range f.Delegations {
		tools, err := json.Marshal(d.Tools)
		if err != nil {
			return fmt.Errorf("seed fork: delegation %s: %w", d.ID, err)
		}
		if d.Tools == nil {
			tools = nil
		}
		if _, err := tx.Exec(ctx, `INSERT INTO delegations (id, run_id, parent_session, tool_call_id, agent, task, tools, kind, status, result, error, completed_at)
			VALUES ($1, $2::uuid, $3, $4, $5, $6, $7::jsonb, $8, $9, $10, $11, $12)`,
			d.ID, runID, d.ParentSession, d.ToolCallID, d.Agent, d.Task, tools, d.Kind, d.Status, d.Result, d.Error, d.CompletedAt); err != nil {
			return fmt.Errorf("seed fork: delegation %s: %w", d.ID, err)
		}
	}
	for _, sess := range f.Sessions {
		token, until := "", "epoch"
		if f.LeaseToken != "" && sess.DelegationID == "" {
			token, until = f.LeaseToken, ""
		}
		if _, err := tx.Exec(ctx, `INSERT INTO sessions (id, run_id, agent, role, delegation_id, status, steps, lease_token, lease_until)
			VALUES ($1, $2::uuid, $3, $4, nullif($5, ''), $6, $7, $8, CASE WHEN $9 = '' THEN now() + $10::bigint * interval '1 microsecond' ELSE 'epoch'::timestamptz END)`,
			sess.ID, runID, sess.Agent, sess.Role, sess.DelegationID, sess.Status, sess.Steps, token, until, f.LeaseFor.Microseconds()); err != nil {
			return fmt.Errorf("seed fork: session %s: %w", sess.ID, err)
		}
		rows := make([]string, len(sess.Messages))
		for i, m := range sess.Messages {
			raw, err := json.Marshal(m)
			if err != nil {
				return fmt.Errorf("seed fork: session %s message %d: %w", sess.ID, i, err)
			}
			rows[i] = string(raw)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO session_messages (session_id, seq, message)
			SELECT $1, u.n - 1, u.m::jsonb FROM unnest($2::text[]) WITH ORDINALITY AS u(m, n)`, sess.ID, rows); err != nil {
			return fmt.Errorf("seed fork: session %s history: %w", sess.ID, err)
		}
	}
	return nil
}
