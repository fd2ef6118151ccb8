package filewatch_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/internal/filewatch"
)

func TestWatch(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, b, other := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml"), filepath.Join(dir, "other")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var calls atomic.Int32
	require.NoError(t, filewatch.Watch(ctx, slog.New(slog.DiscardHandler), 20*time.Millisecond, func() { calls.Add(1) }, a, "", b))

	require.NoError(t, os.WriteFile(other, []byte("x"), 0o600))
	time.Sleep(100 * time.Millisecond)
	require.Zero(t, calls.Load(), "a file not watched changes nothing")

	for i := range 5 { // a burst is one call
		require.NoError(t, os.WriteFile(a, []byte{byte(i)}, 0o600))
	}
	require.Eventually(t, func() bool { return calls.Load() == 1 }, 5*time.Second, 10*time.Millisecond)

	// Replaced by a rename, as editors do.
	tmp := filepath.Join(dir, ".b.tmp")
	require.NoError(t, os.WriteFile(tmp, []byte("new"), 0o600))
	require.NoError(t, os.Rename(tmp, b))
	require.Eventually(t, func() bool { return calls.Load() == 2 }, 5*time.Second, 10*time.Millisecond)

	cancel()
	time.Sleep(50 * time.Millisecond)
	require.NoError(t, os.WriteFile(a, []byte("late"), 0o600))
	time.Sleep(100 * time.Millisecond)
	require.EqualValues(t, 2, calls.Load(), "no call after ctx ends")
	require.NoError(t, filewatch.Watch(ctx, slog.New(slog.DiscardHandler), 0, func() {}, "", ""), "no path, no watch")
}
