package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/api"
	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/store"
)

// Retry and clone: a run's request rebuilt from the stored run posts again as
// it is (round trip), and a retry is a new run of the caller with the same
// template or team, prompt, variables and priority, through the submit's own
// checks (the priority cap refuses what the caller may not submit); another
// owner's run is the missing-run 404, an MCP session run 409.
func TestRetryAndClone(t *testing.T) {
	t.Parallel()
	f := fleettest.Start(t, fleettest.Options{NoWorker: true, Configure: func(c *config.Config) {
		tokensOf(c, map[string][]string{
			"alice": {api.RoleSubmit, api.RoleRead},
			"bob":   {api.RoleSubmit, api.RoleRead},
			"carol": {api.RoleSubmit, api.RoleReadAll},
			"root":  {api.RoleAdmin},
			// The on-call approver: it reads the summary of a run that asks it.
			"oncall": {api.RoleRead, api.RoleApprove, api.RoleSubmit},
		})
		c.Fairness.MaxPriority = map[string]int{api.RoleSubmit: 2}
	}})
	ctx := context.Background()
	submit := func(who, endpoint string, body map[string]any) string {
		t.Helper()
		var out struct {
			RunID string `json:"run_id"`
		}
		code, _, raw := request(t, f, f.URL, who, "POST", endpoint, body, nil)
		require.Equal(t, http.StatusAccepted, code, string(raw))
		require.NoError(t, json.Unmarshal(raw, &out))
		return out.RunID
	}
	tmplRun := submit("alice", "/api/orchestrator/run-from-template", map[string]any{"template": "demo", "prompt": "greet", "variables": map[string]any{"topic": "tea"}, "priority": 2})
	team := inlineTeam("retry-team")
	team["supervisor"].(map[string]any)["prompt"] = "lead on {{.topic}}"
	inlineRun := submit("alice", "/api/orchestrator/run", map[string]any{"team": team, "prompt": "write", "variables": map[string]any{"topic": "coffee"}})
	rootRun := submit("root", "/api/orchestrator/run-from-template", map[string]any{"template": "demo", "prompt": "urgent", "variables": map[string]any{"topic": "x"}, "priority": 5})
	mcpRun, err := f.Store.EnsureMCPRun(ctx, "alice", "ide", json.RawMessage(`{"name":"mcp:ide"}`), "")
	require.NoError(t, err)

	// same says run b was submitted as run a: its template or team, prompt, variables, priority, project.
	same := func(a, b, owner string) {
		t.Helper()
		ra, err := f.Store.GetRun(ctx, a)
		require.NoError(t, err)
		rb, err := f.Store.GetRun(ctx, b)
		require.NoError(t, err)
		require.NotEqual(t, ra.ID, rb.ID)
		require.Equal(t, owner, rb.Owner)
		require.Equal(t, store.RunQueued, rb.Status)
		require.Equal(t, ra.Template, rb.Template)
		require.Equal(t, ra.Prompt, rb.Prompt)
		require.JSONEq(t, string(ra.Variables), string(rb.Variables))
		require.JSONEq(t, string(ra.Team), string(rb.Team), "the same rendered team")
		require.Equal(t, ra.Priority, rb.Priority)
		require.Equal(t, ra.Project, rb.Project)
	}
	retry := func(who, id string) (int, string, []byte) {
		t.Helper()
		code, _, raw := request(t, f, f.URL, who, "POST", "/api/runs/"+id+"/retry", nil, nil)
		var out struct {
			RunID string `json:"run_id"`
		}
		_ = json.Unmarshal(raw, &out)
		return code, out.RunID, raw
	}

	t.Run("retry a template run", func(t *testing.T) {
		code, id, raw := retry("alice", tmplRun)
		require.Equal(t, http.StatusAccepted, code, string(raw))
		same(tmplRun, id, "alice")
	})
	t.Run("retry an inline run", func(t *testing.T) {
		code, id, raw := retry("alice", inlineRun)
		require.Equal(t, http.StatusAccepted, code, string(raw))
		same(inlineRun, id, "alice")
		r, err := f.Store.GetRun(ctx, id)
		require.NoError(t, err)
		require.Contains(t, string(r.Team), "lead on coffee")
	})
	t.Run("each retry is a new run", func(t *testing.T) {
		_, a, _ := retry("alice", tmplRun)
		_, b, _ := retry("alice", tmplRun)
		require.NotEqual(t, a, b)
		evs, err := f.Store.EventsAfter(ctx, b, 0, 10)
		require.NoError(t, err)
		require.NotEmpty(t, evs)
		require.Equal(t, "run.queued", evs[0].Type)
		var data struct {
			Trigger string `json:"trigger"`
		}
		require.NoError(t, json.Unmarshal(evs[0].Data, &data))
		require.Equal(t, "retry:"+tmplRun, data.Trigger, "the event says it is a retry")
	})
	t.Run("an Idempotency-Key makes a retry once", func(t *testing.T) {
		key := map[string]string{api.IdempotencyKeyHeader: "retry-once"}
		code, h1, raw1 := request(t, f, f.URL, "alice", "POST", "/api/runs/"+tmplRun+"/retry", nil, key)
		require.Equal(t, http.StatusAccepted, code, string(raw1))
		code, h2, raw2 := request(t, f, f.URL, "alice", "POST", "/api/runs/"+tmplRun+"/retry", nil, key)
		require.Equal(t, http.StatusAccepted, code, string(raw2))
		require.JSONEq(t, string(raw1), string(raw2), "the key's first run")
		require.Empty(t, h1.Get(api.IdempotentReplayedHeader))
		require.Equal(t, "true", h2.Get(api.IdempotentReplayedHeader))
	})
	t.Run("an admin retries anyone's run as its own", func(t *testing.T) {
		code, id, raw := retry("root", tmplRun)
		require.Equal(t, http.StatusAccepted, code, string(raw))
		same(tmplRun, id, "root")
	})
	t.Run("the submit's priority cap applies", func(t *testing.T) {
		code, _, raw := retry("carol", rootRun) // carol sees it (read_all) but submits at most 2
		require.Equal(t, http.StatusBadRequest, code, string(raw))
		require.Contains(t, string(raw), "fairness.max_priority")
	})
	t.Run("another owner's run", func(t *testing.T) {
		for _, op := range [][2]string{{"POST", "/retry"}, {"GET", "/request"}} {
			code, _, raw := request(t, f, f.URL, "bob", op[0], "/api/runs/"+tmplRun+op[1], nil, nil)
			require.Equal(t, http.StatusNotFound, code, string(raw))
			require.JSONEq(t, `{"error":"run `+tmplRun+` not found","field":"id"}`, string(raw), "exactly a missing run")
		}
	})
	t.Run("the approver of a run's call sees its summary, not its request", func(t *testing.T) {
		_, _, err := f.Store.RequestApproval(ctx, store.Approval{
			ID: "apr_retry" + strings.ReplaceAll(inlineRun, "-", "")[:16], RunID: inlineRun, SessionID: queue.SupervisorSession(inlineRun).String(), CallID: "call-1",
			Agent: "lead", Tool: "run_shell", Tier: "restricted", Why: "ls", Args: json.RawMessage(`{"command":"ls"}`),
		}, time.Hour)
		require.NoError(t, err)
		code, _, raw := request(t, f, f.URL, "oncall", "GET", "/api/runs/"+inlineRun, nil, nil)
		require.Equal(t, http.StatusOK, code, string(raw))
		for _, op := range [][2]string{{"POST", "/retry"}, {"GET", "/request"}} {
			code, _, raw := request(t, f, f.URL, "oncall", op[0], "/api/runs/"+inlineRun+op[1], nil, nil)
			require.Equal(t, http.StatusNotFound, code, "%s: %s", op[1], raw)
		}
	})
	t.Run("an MCP session run has no request", func(t *testing.T) {
		code, _, raw := retry("alice", mcpRun.ID)
		require.Equal(t, http.StatusConflict, code, string(raw))
		require.Contains(t, string(raw), "MCP client's session")
		code, _, raw = request(t, f, f.URL, "alice", "GET", "/api/runs/"+mcpRun.ID+"/request", nil, nil)
		require.Equal(t, http.StatusConflict, code, string(raw))
	})
	t.Run("a bad id", func(t *testing.T) {
		code, _, _ := retry("alice", "nope")
		require.Equal(t, http.StatusBadRequest, code)
	})

	// The request round-trips: its body posted to its endpoint is accepted
	// and submits the same run.
	for _, tc := range []struct {
		name, run, endpoint string
		has                 []string
		lacks               []string
	}{
		{"template", tmplRun, "/api/orchestrator/run-from-template", []string{"template", "prompt", "variables", "project", "priority"}, []string{"team"}},
		{"inline", inlineRun, "/api/orchestrator/run", []string{"team", "prompt", "variables", "project"}, []string{"template", "priority"}},
	} {
		t.Run("request of a "+tc.name+" run", func(t *testing.T) {
			code, _, raw := request(t, f, f.URL, "alice", "GET", "/api/runs/"+tc.run+"/request", nil, nil)
			require.Equal(t, http.StatusOK, code, string(raw))
			var req struct {
				Endpoint string         `json:"endpoint"`
				Body     map[string]any `json:"body"`
			}
			require.NoError(t, json.Unmarshal(raw, &req))
			require.Equal(t, tc.endpoint, req.Endpoint)
			for _, k := range tc.has {
				require.Contains(t, req.Body, k)
			}
			for _, k := range tc.lacks {
				require.NotContains(t, req.Body, k)
			}
			id := submit("alice", req.Endpoint, req.Body)
			same(tc.run, id, "alice")
		})
	}
}
