package lease_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/internal/testdb"
	"github.com/aetherium-engine/aetherium/lease"
)

// The lease family records its layout; a process refuses to start on keys of
// a newer layout and records its own over none or an older one.
func TestLeaseLayoutIsRecordedAndANewerOneRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, c := range []struct {
		stored string // "" = none
		want   string
		future bool
	}{
		{"", "2", false},
		{"1", "2", false},
		{"2", "2", false},
		{"3", "3", true},
	} {
		rdb := testdb.Connect(t, testdb.Redis(t))
		m, err := lease.New(rdb, lease.Config{Prefix: "lt"}, lease.Options{})
		require.NoError(t, err)
		if c.stored != "" {
			require.NoError(t, rdb.Set(ctx, "{lt}:layout", c.stored, 0).Err())
		}
		err = m.CheckLayout(ctx)
		if c.future {
			require.ErrorIs(t, err, lease.ErrFutureLayout)
			require.ErrorContains(t, err, "is layout 3, this build knows 2")
		} else {
			require.NoError(t, err, c.stored)
		}
		got, err := rdb.Get(ctx, "{lt}:layout").Result()
		require.NoError(t, err)
		require.Equal(t, c.want, got, c.stored)
	}
}
