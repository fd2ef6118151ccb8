package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/api"
	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/queue/fair"
)

func setupFairness(t *testing.T) *owners {
	t.Helper()
	one := 1
	f := fleettest.Start(t, fleettest.Options{NoWorker: true, Configure: func(c *config.Config) {
		c.API.Tokens = nil
		for name, roles := range ownerTokens {
			c.API.Tokens = append(c.API.Tokens, api.Token{Name: name, SHA256: api.HashToken(name + "-secret"), Roles: roles})
		}
		c.Fairness = queue.Fairness{
			Keys:        map[string]queue.KeyPolicy{"alice": {Runs: 1, Weight: &one}},
			MaxPriority: map[string]int{api.RoleSubmit: 3},
		}
	}})
	return &owners{Fleet: f}
}

type submitted struct {
	RunID    string `json:"run_id"`
	Status   string `json:"status"`
	Priority int    `json:"priority"`
	Position int    `json:"position"`
}

type runState struct {
	Status   string `json:"status"`
	Priority int    `json:"priority"`
	Waiting  bool   `json:"waiting"`
	Position int    `json:"position"`
}

// A run over its key's limit is accepted and waits with its place in line
// shown; the end of the key's running run admits it.
func TestSubmitOverRunLimitWaitsInLine(t *testing.T) {
	t.Parallel()
	o := setupFairness(t)
	post := func(token string, body map[string]any) (int, submitted, string) {
		code, _, raw := o.call(t, token, "POST", "/api/orchestrator/run-from-template", body)
		var s submitted
		if code == http.StatusAccepted {
			require.NoError(t, json.Unmarshal(raw, &s))
		}
		return code, s, string(raw)
	}
	get := func(id string) runState {
		code, _, raw := o.call(t, "alice", "GET", "/api/runs/"+id, nil)
		require.Equal(t, http.StatusOK, code, string(raw))
		var r runState
		require.NoError(t, json.Unmarshal(raw, &r))
		return r
	}
	code, first, raw := post("alice", demoRun)
	require.Equal(t, http.StatusAccepted, code, raw)
	require.Zero(t, first.Position, "admitted at once")
	require.Equal(t, queue.DefaultPriority, first.Priority)
	code, second, raw := post("alice", demoRun)
	require.Equal(t, http.StatusAccepted, code, "over the limit: accepted, not refused: %s", raw)
	require.Equal(t, 1, second.Position)
	require.Equal(t, runState{Status: "queued", Priority: 3, Waiting: true, Position: 1}, get(second.RunID))
	code, bobs, raw := post("bob", demoRun)
	require.Equal(t, http.StatusAccepted, code, raw)
	require.Zero(t, bobs.Position, "bob's key has no limit")

	code, _, cancelRaw := o.call(t, "alice", "POST", "/api/runs/"+first.RunID+"/cancel", nil)
	require.Equal(t, http.StatusOK, code, string(cancelRaw))
	require.Equal(t, runState{Status: "queued", Priority: 3}, get(second.RunID), "admitted by the cancel")
	// With no worker, the runs' first steps wait in the fair dispatcher: the
	// cancelled run's gave its place up, the admitted run's took one.
	d, err := fair.New(o.Redis, fair.Config{})
	require.NoError(t, err)
	pending, err := d.Cancel(context.Background(), queue.SuperviseTaskID(first.RunID, "start"))
	require.NoError(t, err)
	require.False(t, pending, "withdrawn by the cancel")
	pending, err = d.Cancel(context.Background(), queue.SuperviseTaskID(second.RunID, "start"))
	require.NoError(t, err)
	require.True(t, pending, "the admitted run's first step is in line")
	require.Eventually(t, func() bool {
		evs, err := o.Store.EventsAfter(context.Background(), second.RunID, 0, 100)
		require.NoError(t, err)
		for _, e := range evs {
			if e.Type == "run.admitted" {
				return true
			}
		}
		return false
	}, 10*time.Second, 50*time.Millisecond)
}

// Priorities: 1-5 within what the caller's roles allow; anything else is a
// 400 that names the field and stores nothing.
func TestSubmitPriority(t *testing.T) {
	t.Parallel()
	o := setupFairness(t)
	for _, c := range []struct {
		token    string
		priority any
		code     int
	}{
		{"bob", 1, http.StatusAccepted},
		{"bob", 3, http.StatusAccepted},
		{"bob", 4, http.StatusBadRequest}, // submit may go up to 3 here
		{"root", 5, http.StatusAccepted},  // admin is not limited
		{"root", 6, http.StatusBadRequest},
		{"root", -1, http.StatusBadRequest},
		{"root", "high", http.StatusBadRequest},
		{"root", 2.5, http.StatusBadRequest},
	} {
		body := map[string]any{"template": "demo", "prompt": "x", "variables": map[string]any{"topic": "t"}, "priority": c.priority}
		code, _, raw := o.call(t, c.token, "POST", "/api/orchestrator/run-from-template", body)
		require.Equal(t, c.code, code, "%s priority %v: %s", c.token, c.priority, raw)
		if code == http.StatusBadRequest {
			require.Contains(t, string(raw), "priority")
			continue
		}
		var s submitted
		require.NoError(t, json.Unmarshal(raw, &s))
		require.Equal(t, c.priority, s.Priority)
	}
}
