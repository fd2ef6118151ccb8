package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// SessionFormat is the newest session record format this build reads and
// writes (sessions.format; docs/how-to/upgrade.md). A session of a newer format is
// refused by AcquireStep with ErrFutureSession.
const SessionFormat = 1

// ErrFutureSession is wrapped by AcquireStep's error for a session whose
// format is newer than SessionFormat: a newer build wrote it.
var ErrFutureSession = fmt.Errorf("session record format is newer than this build reads (up to %d)", SessionFormat)

// Process is one process of the fleet as it reports itself (fleet_processes).
type Process struct {
	// ID is unique per process start: host, pid and start time.
	ID   string
	Role string
	Host string
	PID  int
	// Build is the binary's version (its VCS revision when it has one).
	Build string
	// Contract is the newest payload contract it reads and writes;
	// MinContract the oldest it reads.
	Contract    int
	MinContract int
	StartedAt   time.Time
	SeenAt      time.Time
}

// ReportProcess records p as alive now (inserting its row the first time).
func (s *Store) ReportProcess(ctx context.Context, p Process) error {
	_, err := s.db.Exec(ctx, `INSERT INTO fleet_processes AS f (id, role, host, pid, build, contract, min_contract)
		VALUES ($1, $2, $3, $4, $5, $6, $7)
		ON CONFLICT (id) DO UPDATE SET seen_at = now(), contract = excluded.contract, min_contract = excluded.min_contract`,
		p.ID, p.Role, p.Host, p.PID, p.Build, p.Contract, p.MinContract)
	if err != nil {
		return fmt.Errorf("report process %s: %w", p.ID, err)
	}
	return nil
}

// LeaveProcess removes process id's row (a clean stop).
func (s *Store) LeaveProcess(ctx context.Context, id string) error {
	if _, err := s.db.Exec(ctx, `DELETE FROM fleet_processes WHERE id = $1`, id); err != nil {
		return fmt.Errorf("leave process %s: %w", id, err)
	}
	return nil
}

// LiveProcesses are the processes seen within ttl, oldest first. Rows older
// than forget (crashed processes) are deleted on the way.
func (s *Store) LiveProcesses(ctx context.Context, ttl, forget time.Duration) ([]Process, error) {
	if _, err := s.db.Exec(ctx, `DELETE FROM fleet_processes WHERE seen_at < now() - $1::interval`, forget.String()); err != nil {
		return nil, fmt.Errorf("forget processes: %w", err)
	}
	rows, err := s.db.Query(ctx, `SELECT id, role, host, pid, build, contract, min_contract, started_at, seen_at
		FROM fleet_processes WHERE seen_at >= now() - $1::interval ORDER BY started_at, id`, ttl.String())
	if err != nil {
		return nil, fmt.Errorf("live processes: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Process, error) {
		var p Process
		err := r.Scan(&p.ID, &p.Role, &p.Host, &p.PID, &p.Build, &p.Contract, &p.MinContract, &p.StartedAt, &p.SeenAt)
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("live processes: %w", err)
	}
	return out, nil
}
