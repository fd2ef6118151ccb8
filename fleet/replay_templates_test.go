package fleet_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/fleet"
	"github.com/aetherium-engine/aetherium/fleettest"
)

// requireCleanReplay replays a finished run of a shipped template (issue 44:
// every template's recorded runs replay): no divergence, no tool executed,
// nothing written to its audit or its events.
func requireCleanReplay(t *testing.T, f *fleettest.Fleet, id string) {
	t.Helper()
	ctx := context.Background()
	count := func() (int, int) {
		audit, err := f.Store.RunAudit(ctx, id, 10_000)
		require.NoError(t, err)
		evs, err := f.Store.EventsAfter(ctx, id, 0, 10_000)
		require.NoError(t, err)
		return len(audit), len(evs)
	}
	// The run's post-run work writes after its terminal event: the record is
	// settled when its events stop changing.
	last := -1
	require.Eventually(t, func() bool {
		_, n := count()
		settled := n == last
		last = n
		return settled
	}, 20*time.Second, 300*time.Millisecond)
	audit, evs := count()
	rep, err := f.Replay(ctx, id, fleet.ReplayOptions{})
	require.NoError(t, err)
	require.False(t, rep.Diverged, "the run diverges on replay: %+v", rep.Divergence)
	require.Zero(t, rep.ToolExecutions)
	require.Positive(t, rep.Steps)
	a2, e2 := count()
	require.Equal(t, audit, a2, "the replay wrote no audit row")
	require.Equal(t, evs, e2, "the replay emitted no event")
}
