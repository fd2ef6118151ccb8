// Package store holds the PostgreSQL repositories: runs, sessions, delegations, run
// events, plans and todos. State transitions are conditional UPDATEs so a duplicate
// task delivery finds nothing to change.
package store

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/aetherium-engine/aetherium/migrations"
)

// Sentinel errors.
var (
	ErrNotFound = errors.New("not found")
	// ErrLeaseLost means another delivery took over the session: stop, persist nothing.
	ErrLeaseLost = errors.New("session lease lost")
)

// Store wraps the pool.
type Store struct {
	// Pool is the connection pool (nil for a Store made by InTx).
	Pool *pgxpool.Pool
	// db runs the repositories' statements: the pool, or one transaction.
	db DBTX
}

// DBTX is what the repositories need of a connection: a *pgxpool.Pool or a pgx.Tx.
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
	// Begin starts a transaction (a savepoint inside one).
	Begin(ctx context.Context) (pgx.Tx, error)
}

// InTx returns a Store whose statements run in tx, so a test can roll everything
// back (River's TestTx). Migrations, Ping and Close need the pool and are not
// available on it.
func InTx(tx pgx.Tx) *Store { return &Store{db: tx} }

// Open connects and pings, with pgx's pool size (pool_max_conns in the URL, or
// max(4, cores)).
func Open(ctx context.Context, url string) (*Store, error) { return OpenPool(ctx, url, 0) }

// PoolConnsFor is the pool size a process running concurrency tasks at once gets
// when its database URL names none: pgx's default of max(4, cores) left a worker of
// concurrency 20 waiting for a connection most of a delegation step (the runtime
// trace of `make bench` section 2: pgxpool.Acquire was the largest blocking cost,
// the four connections each busy waiting for a commit's fsync). Capped so that
// four worker processes and the API stay under PostgreSQL's default
// max_connections of 100; connections are opened on demand, so an idle process
// holds few.
func PoolConnsFor(concurrency int) int32 { return int32(min(max(concurrency, 4), MaxDefaultPoolConns)) }

// MaxDefaultPoolConns caps PoolConnsFor.
const MaxDefaultPoolConns = 16

// OpenPool is Open with maxConns connections in the pool when the URL does not
// set pool_max_conns (0 keeps pgx's default).
func OpenPool(ctx context.Context, url string, maxConns int32) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("database url: %w", err)
	}
	if maxConns > 0 && !strings.Contains(url, "pool_max_conns") {
		cfg.MaxConns = maxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect postgres: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect postgres %s@%s:%d/%s: %w", cfg.ConnConfig.User, cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database, err)
	}
	return &Store{Pool: pool, db: pool}, nil
}

// Close closes the pool.
func (s *Store) Close() { s.Pool.Close() }

// Ping checks the database (readiness).
func (s *Store) Ping(ctx context.Context) error { return s.Pool.Ping(ctx) }

// Migrator returns a goose provider over the embedded migrations.
func (s *Store) Migrator() (*goose.Provider, func() error, error) {
	db := stdlib.OpenDBFromPool(s.Pool)
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS)
	if err != nil {
		db.Close()
		return nil, nil, fmt.Errorf("migrations: %w", err)
	}
	return p, db.Close, nil
}

// MigrateUp applies every pending migration.
func (s *Store) MigrateUp(ctx context.Context) error {
	p, closeDB, err := s.Migrator()
	if err != nil {
		return err
	}
	defer closeDB()
	// Concurrent starters (compose's api + workers) would race on goose's version
	// table: serialize them on an advisory lock.
	conn, err := s.Pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(7274001)"); err != nil {
		return fmt.Errorf("migrate lock: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock(7274001)") //nolint:errcheck
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("migrate up: %w", err)
	}
	return nil
}
