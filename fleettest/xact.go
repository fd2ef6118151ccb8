package fleettest

import (
	"context"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Transactions is the fleet's database's count of transactions so far
// (pg_stat_database: xact_commit + xact_rollback), for tests that assert how
// many queries something makes. It counts everything: the fleet's liveness
// reports (every few seconds), autovacuum's transactions, each sweep; a test
// that asserts a handful of queries measures Reads of the tables in question.
// It reads through a connection to another database, so the reading is not
// counted.
func (f *Fleet) Transactions() int64 {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := f.flushStats()
	admin, err := pgx.Connect(ctx, AdminURL())
	if err != nil {
		f.t.Fatalf("postgres at %s: %v", AdminURL(), err)
	}
	defer admin.Close(ctx)
	var n int64
	if err := admin.QueryRow(ctx, `SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = $1`, name).Scan(&n); err != nil {
		f.t.Fatalf("transactions of %s: %v", name, err)
	}
	return n
}

// Reads is how many times the fleet has read the named tables so far
// (pg_stat_user_tables: sequential and index scans), for tests that assert
// that something does not query them. Unlike Transactions it does not count
// what does not touch them: the liveness reports, autovacuum (CI saw 7 and 9
// transactions in a 3-s window where the waits under test made none). The
// reading connection touches only the catalogs.
func (f *Fleet) Reads(tables ...string) int64 {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f.flushStats()
	conn, err := pgx.Connect(ctx, f.Cfg.DatabaseURL)
	if err != nil {
		f.t.Fatalf("postgres: %v", err)
	}
	defer conn.Close(ctx)
	var n, found int64
	if err := conn.QueryRow(ctx, `SELECT coalesce(sum(coalesce(seq_scan, 0) + coalesce(idx_scan, 0)), 0), count(*)
		FROM pg_stat_user_tables WHERE relname = ANY($1)`, tables).Scan(&n, &found); err != nil {
		f.t.Fatalf("reads of %v: %v", tables, err)
	}
	if found != int64(len(tables)) {
		f.t.Fatalf("reads of %v: only %d of them are tables of the fleet's database", tables, found)
	}
	return n
}

// flushStats makes the statistics of everything the fleet did so far
// readable and returns the database's name. A backend publishes its
// statistics at most once a second while busy and up to ten seconds after it
// went idle, but always when it exits: the fleet's pools are reset, so every
// backend that served them exits (an idle one at once, a busy one when it is
// released).
func (f *Fleet) flushStats() string {
	f.t.Helper()
	u, err := url.Parse(f.Cfg.DatabaseURL)
	if err != nil {
		f.t.Fatalf("database url: %v", err)
	}
	f.Store.Pool.Reset()
	f.apisMu.Lock()
	for _, a := range f.apis {
		a.Store.Pool.Reset()
	}
	f.apisMu.Unlock()
	time.Sleep(300 * time.Millisecond) // the closed backends' exits
	return strings.TrimPrefix(u.Path, "/")
}
