package store_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/internal/testdb"
)

// Each fleet (database) has its own identity, the same on every read: the default
// sandbox scope, so two fleets on one Docker engine never sweep each other's
// containers.
func TestFleetIDIsStablePerDatabaseAndDistinctAcross(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := testdb.Store(t), testdb.Store(t)
	idA, err := a.FleetID(ctx)
	require.NoError(t, err)
	require.Regexp(t, `^fl[0-9a-f]{16}$`, idA)
	again, err := a.FleetID(ctx)
	require.NoError(t, err)
	require.Equal(t, idA, again)
	idB, err := b.FleetID(ctx)
	require.NoError(t, err)
	require.NotEqual(t, idA, idB)
}
