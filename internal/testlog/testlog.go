// Package testlog gives tests a *slog.Logger that writes to the test's own log
// (warnings and errors, with the run/agent attributes logctx adds), so a failing
// test shows what the code under test logged and a passing one stays quiet. It
// is its own package so that a package's tests need not link the whole fleet
// (fleettest) to get one.
package testlog

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/aetherium-engine/aetherium/logctx"
)

// Logger writes slog output at warning level and above to t's log.
func Logger(t testing.TB) *slog.Logger {
	return slog.New(logctx.NewHandler(slog.NewTextHandler(writer{t}, &slog.HandlerOptions{Level: slog.LevelWarn})))
}

type writer struct{ t testing.TB }

func (w writer) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
