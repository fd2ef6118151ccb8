// Package fleettest gives tests real, isolated infrastructure: a fresh PostgreSQL
// database per test (cloned from a migrated template database) and a private
// redis-server process per test. A test that cannot reach them fails under CI=true
// and skips otherwise.
package fleettest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/aetherium-engine/aetherium/internal/testinfra"
	"github.com/aetherium-engine/aetherium/store"
)

// AdminURL is the PostgreSQL server tests create their databases on
// (testinfra.AdminURL).
func AdminURL() string { return testinfra.AdminURL() }

func unavailable(t testing.TB, format string, a ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, a...)
	if os.Getenv("CI") != "" {
		t.Fatalf("%s (CI=true: services are required; run scripts/services.sh)", msg)
	}
	t.Skipf("%s (run scripts/services.sh)", msg)
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
		unavailable(t, "postgres at %s: %v", AdminURL(), err)
	}
	admin, err := pgx.Connect(ctx, AdminURL())
	if err != nil {
		unavailable(t, "postgres at %s: %v", AdminURL(), err)
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
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		unavailable(t, "redis-server not installed")
	}
	port, err := testinfra.FreePort()
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	dir := t.TempDir()
	cmd := exec.Command(bin, "--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--daemonize", "no", "--logfile", filepath.Join(dir, "redis.log"))
	if err := cmd.Start(); err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
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
