package store_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/internal/testdb"
	"github.com/aetherium-engine/aetherium/store"
)

func TestPoolConnsFor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		concurrency int
		want        int32
	}{{1, store.MinDefaultPoolConns}, {16, 4}, {17, 5}, {20, 5}, {25, 7}, {64, 16}, {100, store.MaxDefaultPoolConns}} {
		require.Equal(t, tc.want, store.PoolConnsFor(tc.concurrency), "concurrency %d", tc.concurrency)
	}
}

func TestOpenPoolKeepsTheURLsPoolSize(t *testing.T) {
	t.Parallel()
	testdb.Store(t) // the server is up (fails in CI otherwise)
	url := testdb.AdminURL()
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	for _, tc := range []struct {
		name, url string
		conns     int32
		want      int32
	}{
		{"the process's size", url, 12, 12},
		{"the URL's own size wins", url + sep + "pool_max_conns=3", 12, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st, err := store.OpenPool(context.Background(), tc.url, tc.conns)
			require.NoError(t, err)
			t.Cleanup(st.Close)
			require.Equal(t, tc.want, st.Pool.Config().MaxConns)
		})
	}
}
