// Package testinfra is what the test helpers (fleettest, sandboxtest) and the bench
// and drills harness share to find the real infrastructure they run on: the
// PostgreSQL server to create databases on, free loopback ports, the repository
// root. It holds no state.
package testinfra

import (
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
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

// FreePort returns a loopback TCP port nobody listens on right now, chosen below
// the kernel's ephemeral range. A port the kernel handed out for 127.0.0.1:0 is one
// it hands out again, to the next outgoing connection or :0 listener of any test
// running beside this one; a port a second process binds later (a container's
// published port, a redis-server's) then finds it taken now and then (CI
// 2026-12-03: "bind: address already in use" for a GPU service's port). Below the
// range only another FreePort caller can pick it: a port handed out is claimed by a
// file under the temp directory (O_EXCL, so across the test binaries `go test` runs
// side by side) and not handed out again by anyone for portClaim, time enough for
// its taker to bind it.
func FreePort() (int, error) {
	lo, hi := freePortRange()
	dir := filepath.Join(os.TempDir(), "aetherium-test-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return 0, fmt.Errorf("testinfra: port claims: %w", err)
	}
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 200 {
		p := lo + mrand.IntN(hi-lo)
		if portsGiven[p] || !claimPort(dir, p) {
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		_ = l.Close()
		portsGiven[p] = true
		return p, nil
	}
	return 0, fmt.Errorf("testinfra: no free loopback port in [%d, %d) after 200 tries", lo, hi)
}

// portClaim is how long a claimed port is kept from other FreePort callers.
const portClaim = 2 * time.Minute

// claimPort creates dir/<p> exclusively; a claim older than portClaim is stale and
// taken over (its taker has bound the port by then, or never will).
func claimPort(dir string, p int) bool {
	name := filepath.Join(dir, strconv.Itoa(p))
	for range 2 {
		f, err := os.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o666)
		if err == nil {
			_ = f.Close()
			return true
		}
		st, serr := os.Stat(name)
		if !errors.Is(err, os.ErrExist) || serr != nil || time.Since(st.ModTime()) < portClaim {
			return false
		}
		_ = os.Remove(name)
	}
	return false
}

var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{}
)

// freePortRange is [15000, the ephemeral range's low end), or [15000, 32768) when
// /proc does not say; a machine whose range starts lower gets at least 4,000 ports
// above 10000.
func freePortRange() (lo, hi int) {
	lo, hi = 15000, 32768
	raw, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return lo, hi
	}
	f := strings.Fields(string(raw))
	if len(f) < 1 {
		return lo, hi
	}
	if n, err := strconv.Atoi(f[0]); err == nil {
		hi = n
	}
	if hi-lo < 4000 {
		lo = max(10000, hi-4000)
	}
	if hi <= lo {
		return 15000, 32768
	}
	return lo, hi
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
