package fleet_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/fleet"
	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/tools"
)

// A delegate call that hits an infrastructure failure (the queue was down after the
// delegation row was written) fails the step, not the call: the model never sees
// it, the task is retried, the retry completes what was missing, and the work is
// done once.
func TestInfrastructureFailureRetriesTheStep(t *testing.T) {
	t.Parallel()
	var failed atomic.Int32
	outage := func(next tools.Handler) tools.Handler {
		return tools.HandlerFunc(func(ctx context.Context, call tools.Call) (tools.Result, error) {
			res, err := next.Handle(ctx, call)
			if call.Name == "delegate" && err == nil && failed.CompareAndSwap(0, 1) {
				return tools.Result{}, tools.Infrastructure(errors.New("enqueue agent:turn: dial tcp: connection refused"))
			}
			return res, err
		})
	}
	f := fleettest.Start(t, fleettest.Options{Fleet: fleet.Options{Middleware: []tools.Middleware{outage}}})
	id := f.SubmitTeam(team([]map[string]any{{"say": "written"}}, nil), "write")
	run := f.WaitTerminal(id, 90*time.Second)
	require.Equal(t, "completed", run.Status, run.Error)
	require.EqualValues(t, 1, failed.Load(), "the outage happened")

	ctx := context.Background()
	ds, err := f.Store.RunDelegations(ctx, id)
	require.NoError(t, err)
	require.Len(t, ds, 1, "the retry did not delegate twice")
	require.Equal(t, "written", ds[0].Result)

	var msgs string
	require.NoError(t, f.Store.Pool.QueryRow(ctx, `SELECT session_history(id)::text FROM sessions WHERE run_id = $1 AND agent = 'boss'`, id).Scan(&msgs))
	require.NotContains(t, msgs, "connection refused", "the model was not told about our outage")
	require.Contains(t, msgs, "written", "the delegate call's result is the worker's answer")

	f.Audit.Flush()
	rows, err := f.Store.RunAudit(ctx, id, 100)
	require.NoError(t, err)
	var delegates []string
	for _, r := range rows {
		if r.Tool == "delegate" {
			delegates = append(delegates, r.Decision)
		}
	}
	require.Equal(t, []string{"allowed"}, delegates, "one audit row for the call")
}
