package fleet_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/store"
)

// A run the circuit breaker fails while its writer's delegation is running
// (issue 41: "writer running" forever) ends with that delegation failed, as the
// API shows it, and its stream announces it (delegation.finished, failed,
// naming the breaker) before run.failed.
func TestBreakerFailedRunClosesDelegation(t *testing.T) {
	t.Parallel()
	f := fleettest.Start(t, fleettest.Options{})
	bad := call("nope", nil)
	id := f.SubmitTeam(team([]map[string]any{bad, bad, bad, bad, bad, bad}, nil), "x")
	evs := f.Follow(id, 0, 30*time.Second)
	require.Equal(t, "run.failed", evs[len(evs)-1].Type)
	require.Equal(t, "circuit_breaker", f.GetRun(id).Reason)

	var finished []map[string]any
	for _, e := range evs {
		if e.Type != "delegation.finished" {
			continue
		}
		var d map[string]any
		require.NoError(t, json.Unmarshal(e.Data, &d))
		finished = append(finished, d)
	}
	require.Len(t, finished, 1, "the writer's delegation is announced once, before the run's end")
	require.Equal(t, store.DelegationFailed, finished[0]["status"])
	require.Contains(t, finished[0]["error"], "circuit_breaker")

	var got struct {
		Delegations []store.Delegation `json:"delegations"`
	}
	code, raw := f.Do("GET", "/api/runs/"+id+"/delegations", nil, &got)
	require.Equal(t, http.StatusOK, code, string(raw))
	require.Len(t, got.Delegations, 1)
	d := got.Delegations[0]
	require.Equal(t, "writer", d.Agent)
	require.Equal(t, store.DelegationFailed, d.Status)
	require.Equal(t, finished[0]["delegation_id"], d.ID)
	require.Contains(t, d.Error, "consecutive failed tool calls")
}
