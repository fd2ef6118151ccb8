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
// many queries something makes. A backend publishes its statistics at most once
// a second while busy and only ten seconds after it went idle, but always when
// it exits: the fleet's pool is reset first, so every transaction made before
// the call is counted. It reads through a connection to another database, so
// the reading is not counted.
func (f *Fleet) Transactions() int64 {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	u, err := url.Parse(f.Cfg.DatabaseURL)
	if err != nil {
		f.t.Fatalf("database url: %v", err)
	}
	name := strings.TrimPrefix(u.Path, "/")
	f.Store.Pool.Reset()
	f.apisMu.Lock()
	for _, a := range f.apis {
		a.Store.Pool.Reset()
	}
	f.apisMu.Unlock()
	time.Sleep(300 * time.Millisecond) // the closed backends' exits
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
