package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aetherium-engine/aetherium/egress"
)

// EgressConnection is one egress_connections row (egress.Connection: the
// sandboxes' egress proxy records them without linking the store).
type EgressConnection = egress.Connection

// InsertEgress records one connection.
func (s *Store) InsertEgress(ctx context.Context, c EgressConnection) error {
	at := c.At
	if at.IsZero() {
		at = time.Now()
	}
	_, err := s.db.Exec(ctx, `INSERT INTO egress_connections
		(run_id, agent, at, method, host, port, remote, allowed, reason, status, bytes_out, bytes_in, duration_ms)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)`,
		c.RunID, c.Agent, at, c.Method, c.Host, c.Port, c.Remote, c.Allowed, c.Reason, c.Status, c.BytesOut, c.BytesIn, c.DurationMS)
	if err != nil {
		return fmt.Errorf("insert egress_connections: %w", err)
	}
	return nil
}

// RunEgress lists a run's connections, oldest first, at most limit.
func (s *Store) RunEgress(ctx context.Context, runID string, limit int) ([]EgressConnection, error) {
	rows, err := s.db.Query(ctx, `SELECT id, run_id::text, agent, at, method, host, port, remote, allowed, reason,
		status, bytes_out, bytes_in, duration_ms FROM egress_connections WHERE run_id = $1 ORDER BY id LIMIT $2`, runID, limit)
	if err != nil {
		return nil, fmt.Errorf("run egress: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (EgressConnection, error) {
		var c EgressConnection
		err := r.Scan(&c.ID, &c.RunID, &c.Agent, &c.At, &c.Method, &c.Host, &c.Port, &c.Remote, &c.Allowed, &c.Reason,
			&c.Status, &c.BytesOut, &c.BytesIn, &c.DurationMS)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("run egress: %w", err)
	}
	return out, nil
}
