package fleet_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/worker"
)

// fanOutTeam is an inline team whose supervisor plays boss and whose workers
// (each with the orchestration tools, so they can delegate too) play theirs.
func fanOutTeam(boss []map[string]any, workers map[string][]map[string]any) map[string]any {
	agents := map[string]any{"boss": boss}
	var nodes []map[string]any
	for name, script := range workers {
		nodes = append(nodes, map[string]any{"name": name, "prompt": "work", "mcp_servers": []string{"orchestration"}})
		agents[name] = script
	}
	return map[string]any{
		"name": "fanout", "model": map[string]any{"provider": "script"},
		"supervisor": map[string]any{"name": "boss", "prompt": "coordinate", "mcp_servers": []string{"orchestration"}},
		"workers":    nodes,
		"script":     map[string]any{"agents": agents},
	}
}

func delegateCalls(n int, agent string) []map[string]any {
	cs := make([]map[string]any, n)
	for i := range cs {
		cs[i] = map[string]any{"tool": "delegate", "args": map[string]any{"agent": agent, "task": fmt.Sprintf("task %d", i+1)}}
	}
	return cs
}

// countCapDenials counts the run's audit rows of calls the caps refused, by the
// reason's name.
func countCapDenials(t *testing.T, f *fleettest.Fleet, runID, reason string) int {
	t.Helper()
	var n int
	require.NoError(t, f.Store.Pool.QueryRow(context.Background(), `SELECT count(*) FROM tool_audit
		WHERE run_id = $1 AND decision = 'denied' AND deny_layer = 'cap' AND deny_reason LIKE $2 || '%'`, runID, reason).Scan(&n))
	return n
}

// One model message with 150 delegate calls (issue 34: 150 delegations and 3,151
// audit rows): only the first max_calls_per_message run; each of the others is
// answered with a refusal naming the cap, audited as a denial of the cap layer,
// and the run goes on to its reply.
func TestCallsPerMessageCapped(t *testing.T) {
	t.Parallel()
	f := fleettest.Start(t, fleettest.Options{})
	const calls = 150
	capN := worker.DefaultMaxCallsPerMessage
	id := f.SubmitTeam(fanOutTeam([]map[string]any{
		{"calls": delegateCalls(calls, "writer")},
		{"calls": []map[string]any{{"tool": "reply", "args": map[string]any{"message": "done"}}}},
	}, map[string][]map[string]any{"writer": {{"say": "did it"}}}), "fan out")
	run := f.WaitTerminal(id, 120*time.Second)
	require.Equal(t, "completed", run.Status, run.Error)

	ctx := context.Background()
	ds, err := f.Store.RunDelegations(ctx, id)
	require.NoError(t, err)
	require.Len(t, ds, capN, "only the calls within the cap delegated")

	require.Equal(t, calls-capN, countCapDenials(t, f, id, "calls_per_message"))
	// Every call of the message has one row (run or refused), plus the reply's,
	// which lands with the supervisor's save just after the reply ends the run.
	var rows int
	require.Eventually(t, func() bool {
		require.NoError(t, f.Store.Pool.QueryRow(ctx, `SELECT count(*) FROM tool_audit WHERE run_id = $1`, id).Scan(&rows))
		return rows == calls+1
	}, 10*time.Second, 50*time.Millisecond, "audit rows: %d", rows)

	// Every refused call got a result the model can act on.
	var refusals int
	require.NoError(t, f.Store.Pool.QueryRow(ctx, `SELECT count(*) FROM sessions s, jsonb_array_elements(session_history(s.id)) m
		WHERE s.run_id = $1 AND s.agent = 'boss' AND m->>'role' = 'tool' AND m->>'content' LIKE '%max_calls_per_message%'`, id).Scan(&refusals))
	require.Equal(t, calls-capN, refusals)
}

// Delegations per run are capped across sessions, by the store's count: two
// workers, running at once, each delegate twice while the run may make only
// four delegations in all (the supervisor's two included). Exactly two of their
// calls are refused, with a result and an audit row naming the cap.
func TestDelegationsPerRunCapped(t *testing.T) {
	t.Parallel()
	const runCap = 4
	f := fleettest.Start(t, fleettest.Options{Configure: func(c *config.Config) { c.Worker.MaxDelegationsPerRun = runCap }})
	twice := []map[string]any{{"calls": delegateCalls(2, "helper")}, {"say": "delegated"}}
	id := f.SubmitTeam(fanOutTeam([]map[string]any{
		{"calls": append(delegateCalls(1, "a"), delegateCalls(1, "b")...)},
		{"calls": []map[string]any{{"tool": "reply", "args": map[string]any{"message": "done"}}}},
	}, map[string][]map[string]any{"a": twice, "b": twice, "helper": {{"say": "helped"}}}), "fan out")
	run := f.WaitTerminal(id, 120*time.Second)
	require.Equal(t, "completed", run.Status, run.Error)

	ds, err := f.Store.RunDelegations(context.Background(), id)
	require.NoError(t, err)
	require.Len(t, ds, runCap)
	require.Equal(t, 2, countCapDenials(t, f, id, "delegations_per_run"))

	var msgs []string
	rows, err := f.Store.Pool.Query(context.Background(), `SELECT m->>'content' FROM sessions s, jsonb_array_elements(session_history(s.id)) m
		WHERE s.run_id = $1 AND s.agent IN ('a', 'b') AND m->>'role' = 'tool'`, id)
	require.NoError(t, err)
	for rows.Next() {
		var m string
		require.NoError(t, rows.Scan(&m))
		msgs = append(msgs, m)
	}
	require.NoError(t, rows.Err())
	refused := 0
	for _, m := range msgs {
		if strings.Contains(m, "max_delegations_per_run") {
			refused++
		}
	}
	require.Equal(t, 2, refused, "the refused calls' results name the cap: %q", msgs)
}
