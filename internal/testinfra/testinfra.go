// Package testinfra is what the test helpers (fleettest, sandboxtest) and the bench
// and drills harness share to find the real infrastructure they run on: the
// PostgreSQL server to create databases on, free loopback ports, the repository
// root. It holds no state.
package testinfra

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// AdminURL is the PostgreSQL server tests, the bench and the drills create their
// databases on. Env AETHERIUM_TEST_DATABASE_URL; default the local Debian cluster
// (scripts/services.sh).
func AdminURL() string {
	if u := os.Getenv("AETHERIUM_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

// WithDB returns url with the database name replaced.
func WithDB(url, db string) string {
	base, query, _ := strings.Cut(url, "?")
	i := strings.LastIndex(base, "/")
	out := base[:i+1] + db
	if query != "" {
		out += "?" + query
	}
	return out
}

// FreePort returns a loopback TCP port nobody listens on right now.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// RepoRoot finds the module root (the directory holding go.mod) above the working
// directory (a test's is its package directory).
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod not found above the working directory")
		}
		dir = parent
	}
}

// HostIPv4 is one of this host's own non-loopback, non-link-local IPv4 addresses (a
// Docker bridge gateway counts: it is a host interface); false when it has none.
func HostIPv4() (netip.Addr, bool) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return netip.Addr{}, false
	}
	for _, a := range addrs {
		p, err := netip.ParsePrefix(a.String())
		if err == nil && p.Addr().Is4() && !p.Addr().IsLoopback() && !p.Addr().IsLinkLocalUnicast() {
			return p.Addr(), true
		}
	}
	return netip.Addr{}, false
}

// Unavailable fails t under CI=true, where every service a test needs is
// required, and skips it otherwise; hint says how to provide the service.
func Unavailable(t testing.TB, hint, format string, a ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, a...)
	if os.Getenv("CI") != "" {
		t.Fatalf("%s (CI=true: %s)", msg, hint)
	}
	t.Skipf("%s (%s)", msg, hint)
}
