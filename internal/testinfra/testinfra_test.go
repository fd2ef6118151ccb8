package testinfra_test

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
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
	root, err := testinfra.RepoRoot()
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(root, "go.mod"))
	require.NoError(t, err)
}
