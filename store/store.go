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
// when its database URL names none: one connection per PoolTasksPerConn tasks,
// at least MinDefaultPoolConns and at most MaxDefaultPoolConns.
//
// Why a quarter: a step's save is one statement, so a task holds a connection
// for a small part of its step, and connections beyond what PostgreSQL's cores
// run at once only move the queue from the pool (a cheap FIFO) into the
// database (backends contending for its cores and locks). Every process sizes
// its pool alone, and a fleet's bursts add up: `make bench` section 4 at
// 1-second model turns (every run's turns in step, so the saves come together)
// with four processes of concurrency 25 settled at 98.7–98.9 % of ideal with
// the earlier default (the concurrency, up to 16: 64 backends on two cores,
// the save's mean 7 ms) and at 99.2–99.3 % with 6–7 each; section 2's
// CPU-bound workload at concurrency 20 ran as fast with 5 connections as with
// 16 and its turns cost PostgreSQL less CPU (2026-12-07). pgx's own default,
// max(4, cores), was too small before the saves were one statement (section 2's
// runtime trace: pgxpool.Acquire the largest blocking cost with four).
func PoolConnsFor(concurrency int) int32 {
	return int32(min(max((concurrency+PoolTasksPerConn-1)/PoolTasksPerConn, MinDefaultPoolConns), MaxDefaultPoolConns))
}

const (
	// PoolTasksPerConn is the concurrent tasks PoolConnsFor gives a connection.
	PoolTasksPerConn = 4
	// MinDefaultPoolConns is PoolConnsFor's floor.
	MinDefaultPoolConns = 4
	// MaxDefaultPoolConns caps PoolConnsFor.
	MaxDefaultPoolConns = 16
)

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
