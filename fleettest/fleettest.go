// Package fleettest builds running fleets for tests on real, isolated
// infrastructure (internal/testdb): a fresh PostgreSQL database per test and a
// private redis-server process per test.
package fleettest

import (
	"testing"

	"github.com/aetherium-engine/aetherium/internal/testdb"
	"github.com/aetherium-engine/aetherium/store"
)

// AdminURL is the PostgreSQL server tests create their databases on.
func AdminURL() string { return testdb.AdminURL() }

func unavailable(t testing.TB, format string, a ...any) {
	t.Helper()
	testdb.Unavailable(t, format, a...)
}

// Database returns the URL of a fresh, migrated database dropped at cleanup.
func Database(t testing.TB) string { t.Helper(); return testdb.Database(t) }

// Store opens a Store on a fresh database.
func Store(t testing.TB) *store.Store { t.Helper(); return testdb.Store(t) }

// Redis starts a private redis-server and returns its URL (testdb.Redis).
func Redis(t testing.TB) string { t.Helper(); return testdb.Redis(t) }
