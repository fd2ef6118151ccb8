// Package testdb gives tests real, isolated infrastructure: a fresh PostgreSQL
// database per test (cloned from a migrated template database), a transaction on
// a shared migrated database rolled back at cleanup (TestTx, the cheap kind, for
// the logic of one package), and a private redis-server process per test. A test
// that cannot reach them fails under CI=true and skips otherwise. It imports no
// package of the module but store, so any package's own tests can use it.
package testdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/aetherium-engine/aetherium/internal/testinfra"
	"github.com/aetherium-engine/aetherium/store"
)

// AdminURL is the PostgreSQL server tests create their databases on
// (testinfra.AdminURL).
func AdminURL() string { return testinfra.AdminURL() }

// Unavailable fails the test under CI=true and skips it otherwise: a service the
// test needs is missing.
func Unavailable(t testing.TB, format string, a ...any) {
	t.Helper()
	testinfra.Unavailable(t, "run scripts/services.sh", format, a...)
}

func randomName(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

var (
	templateOnce sync.Once
	templateDB   string
	templateErr  error
)

// migratedTemplate creates (once per test binary) a migrated database to clone.
func migratedTemplate(ctx context.Context) (string, error) {
	templateOnce.Do(func() {
		admin, err := pgx.Connect(ctx, AdminURL())
		if err != nil {
			templateErr = err
			return
		}
		defer admin.Close(ctx)
		name := randomName("aeth_tmpl_")
		if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
			templateErr = err
			return
		}
		st, err := store.Open(ctx, testinfra.WithDB(AdminURL(), name))
		if err != nil {
			templateErr = err
			return
		}
		templateErr = st.MigrateUp(ctx)
		st.Close()
		templateDB = name
	})
	return templateDB, templateErr
}

// Database returns the URL of a fresh, migrated database dropped at cleanup.
func Database(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tmpl, err := migratedTemplate(ctx)
	if err != nil {
		Unavailable(t, "postgres at %s: %v", AdminURL(), err)
	}
	admin, err := pgx.Connect(ctx, AdminURL())
	if err != nil {
		Unavailable(t, "postgres at %s: %v", AdminURL(), err)
	}
	defer admin.Close(ctx)
	name := randomName("aeth_test_")
	// CREATE DATABASE … TEMPLATE fails while another session is connected to the
	// template; nobody connects to it after migration, but retry briefly anyway.
	for i := 0; ; i++ {
		_, err = admin.Exec(ctx, "CREATE DATABASE "+name+" TEMPLATE "+tmpl)
		if err == nil || i > 20 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("create test database: %v", err)
	}
	// A commit does not wait for its WAL to reach the disk: a test never
	// crashes PostgreSQL itself, so what it sees is the same, and the fleet's
	// tests (thousands of small transactions) stop waiting on the disk's
	// fsync. Visibility, locks and isolation are unchanged.
	if _, err := admin.Exec(ctx, "ALTER DATABASE "+name+" SET synchronous_commit = off"); err != nil {
		t.Fatalf("configure test database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		admin, err := pgx.Connect(ctx, AdminURL())
		if err != nil {
			return
		}
		defer admin.Close(ctx)
		_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	return testinfra.WithDB(AdminURL(), name)
}

// Store opens a Store on a fresh database.
func Store(t testing.TB) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), Database(t))
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(st.Close)
	return st
}

// Redis starts a private redis-server on a free loopback port and returns its URL.
// The process and its data directory are removed at cleanup.
func Redis(t testing.TB) string {
	t.Helper()
	port := startServer(t, func(port int, dir string) []string {
		return []string{"--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
			"--dir", dir, "--daemonize", "no", "--logfile", filepath.Join(dir, "redis.log")}
	})
	url := fmt.Sprintf("redis://127.0.0.1:%d/0", port)
	opt, _ := redis.ParseURL(url)
	c := redis.NewClient(opt)
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := c.Ping(context.Background()).Err(); err == nil {
			return url
		} else if time.Now().After(deadline) {
			t.Fatalf("redis-server on %d did not answer: %v", port, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startServer runs redis-server (a node, or a sentinel with --sentinel) with
// the arguments args gives for a free loopback port and a private directory,
// killed at cleanup, and returns the port.
func startServer(t testing.TB, args func(port int, dir string) []string) int {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		Unavailable(t, "redis-server not installed")
	}
	port, err := testinfra.FreePort()
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	cmd := exec.Command(bin, args(port, t.TempDir())...)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return port
}

var (
	sharedOnce sync.Once
	sharedURL  string
	sharedErr  error
)

// TestTx returns a transaction on a migrated database shared by the test binary,
// rolled back at cleanup: nothing a test writes is seen by another, and no database
// is created per test. Use store.InTx(tx) for a Store over it.
func TestTx(t testing.TB) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	sharedOnce.Do(func() {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		tmpl, err := migratedTemplate(cctx)
		if err != nil {
			sharedErr = err
			return
		}
		admin, err := pgx.Connect(cctx, AdminURL())
		if err != nil {
			sharedErr = err
			return
		}
		defer admin.Close(cctx)
		name := randomName("aeth_tx_")
		if _, err := admin.Exec(cctx, "CREATE DATABASE "+name+" TEMPLATE "+tmpl); err != nil {
			sharedErr = err
			return
		}
		sharedURL = testinfra.WithDB(AdminURL(), name)
	})
	if sharedErr != nil {
		Unavailable(t, "postgres at %s: %v", AdminURL(), sharedErr)
	}
	conn, err := pgx.Connect(ctx, sharedURL)
	if err != nil {
		t.Fatalf("connect test database: %v", err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	t.Cleanup(func() {
		_ = tx.Rollback(context.Background())
		_ = conn.Close(context.Background())
	})
	return tx
}

// Asynq returns an asynq client and inspector on the Redis at url, closed when
// the test ends: what a test of enqueueing needs to enqueue and to look.
func Asynq(t testing.TB, url string) (*asynq.Client, *asynq.Inspector) {
	t.Helper()
	opt, err := asynq.ParseRedisURI(url)
	if err != nil {
		t.Fatalf("testdb: asynq redis url: %v", err)
	}
	client, inspector := asynq.NewClient(opt), asynq.NewInspector(opt)
	t.Cleanup(func() {
		_ = client.Close()
		_ = inspector.Close()
	})
	return client, inspector
}
