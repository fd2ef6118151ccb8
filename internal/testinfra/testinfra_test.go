package testinfra_test

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/internal/testinfra"
)

func TestWithDB(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, db, want string }{
		{"postgres://u@h:5432/postgres?sslmode=disable", "x", "postgres://u@h:5432/x?sslmode=disable"},
		{"postgres://u@h/postgres", "y", "postgres://u@h/y"},
	} {
		require.Equal(t, tc.want, testinfra.WithDB(tc.in, tc.db))
	}
}

func TestFreePortAndRepoRoot(t *testing.T) {
	t.Parallel()
	p, err := testinfra.FreePort()
	require.NoError(t, err)
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
	require.NoError(t, err, "the port is free")
	require.NoError(t, l.Close())
	raw, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	require.NoError(t, err)
	low, err := strconv.Atoi(strings.Fields(string(raw))[0])
	require.NoError(t, err)
	require.Less(t, p, low, "below the ephemeral range the kernel hands out for :0 and outgoing connections")
	seen := map[int]bool{p: true}
	for range 50 {
		q, err := testinfra.FreePort()
		require.NoError(t, err)
		require.False(t, seen[q], "port %d handed out twice", q)
		seen[q] = true
	}
	root, err := testinfra.RepoRoot()
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(root, "go.mod"))
	require.NoError(t, err)
}
