package api_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/api"
	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/lease"
	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/store"
)

// Who may decide: an approver decides calls, never of its own runs by default;
// a run's owner answers its questions; a broad grant needs grant_broad by name;
// grants are listed and revoked within the caller's scope.
func TestWhoMayDecide(t *testing.T) {
	t.Parallel()
	tokens := map[string][]string{
		"alice":  {api.RoleSubmit, api.RoleRead},
		"bob":    {api.RoleSubmit, api.RoleRead},
		"oncall": {api.RoleRead, api.RoleApprove},
		"broad":  {api.RoleApprove, api.RoleGrantBroad},
		"root":   {api.RoleAdmin},
	}
	f := fleettest.Start(t, fleettest.Options{NoWorker: true, Configure: func(c *config.Config) {
		c.API.Tokens = nil
		for name, roles := range tokens {
			c.API.Tokens = append(c.API.Tokens, api.Token{Name: name, SHA256: api.HashToken(name + "-secret"), Roles: roles})
		}
		c.Security.AllowSelfApproval = false
		c.Streams.Leases = lease.Config{Services: []lease.Service{{Name: "comfyui", Capacity: 1, TTL: time.Minute}}}
	}})
	o := &owners{Fleet: f}
	aliceRun, bobRun, rootRun := o.submit(t, "alice"), o.submit(t, "bob"), o.submit(t, "root")
	ask := func(runID string) string {
		a, _, err := f.Store.RequestApproval(t.Context(), store.Approval{
			ID: "apr_q" + runID[:8], RunID: runID, SessionID: queue.SupervisorSession(runID).String(), CallID: "ask-1", Agent: "lead", Tool: "ask_user", Tier: "standard",
			Why: "question", Kind: store.KindQuestion, View: json.RawMessage(`{"question":"Which?","choices":["a","b"]}`),
		}, time.Hour)
		require.NoError(t, err)
		return a.ID
	}
	shell := func(runID string) string {
		a, _, err := f.Store.RequestApproval(t.Context(), store.Approval{
			ID: "apr_s" + runID[:8], RunID: runID, SessionID: queue.SupervisorSession(runID).String(), CallID: "shell-1", Agent: "lead",
			Tool: "run_shell", Tier: "elevated", Why: "destructive command", Args: json.RawMessage(`{"command":"rm -rf build"}`),
		}, time.Hour)
		require.NoError(t, err)
		return a.ID
	}
	aliceCall, bobCall, rootCall := o.approval(t, aliceRun), shell(bobRun), o.approval(t, rootRun)
	aliceQ := ask(aliceRun)

	for _, tc := range []struct {
		name, token, path string
		body              any
		code              int
	}{
		{"a submitter cannot approve", "alice", "/api/approvals/" + aliceCall + "/approve", nil, http.StatusForbidden},
		{"another owner cannot answer", "bob", "/api/approvals/" + aliceQ + "/answer", map[string]string{"answer": "a"}, http.StatusForbidden},
		{"no self-approval, even for admin", "root", "/api/approvals/" + rootCall + "/approve", nil, http.StatusForbidden},
		{"no self-edit", "root", "/api/approvals/" + rootCall + "/edit", map[string]any{"args": map[string]string{"command": "ls"}}, http.StatusForbidden},
		{"a broad grant needs grant_broad", "oncall", "/api/approvals/" + bobCall + "/approve",
			map[string]any{"grant": map[string]string{"scope": "run", "match": "command", "pattern": "*"}}, http.StatusBadRequest},
		{"the owner answers", "alice", "/api/approvals/" + aliceQ + "/answer", map[string]string{"answer": "b"}, http.StatusOK},
		{"the owner rejects its own", "root", "/api/approvals/" + rootCall + "/deny", map[string]string{"reason": "no"}, http.StatusOK},
		{"grant_broad makes one", "broad", "/api/approvals/" + bobCall + "/approve",
			map[string]any{"grant": map[string]string{"scope": "run", "match": "command", "pattern": "*"}}, http.StatusOK},
		{"an approver grants on another's run", "oncall", "/api/approvals/" + aliceCall + "/approve",
			map[string]any{"grant": map[string]string{"scope": "run", "match": "exact"}}, http.StatusOK},
	} {
		code, _, raw := o.call(t, tc.token, "POST", tc.path, tc.body)
		require.Equal(t, tc.code, code, "%s: %s", tc.name, raw)
	}

	grants := func(token string) map[string]store.Grant {
		code, _, raw := o.call(t, token, "GET", "/api/grants", nil)
		require.Equal(t, http.StatusOK, code, string(raw))
		var out struct{ Grants []store.Grant }
		require.NoError(t, json.Unmarshal(raw, &out))
		m := map[string]store.Grant{}
		for _, g := range out.Grants {
			m[g.Owner] = g
		}
		return m
	}
	all := grants("oncall")
	require.Len(t, all, 2, "the approver sees every grant")
	require.Equal(t, "broad", all["bob"].CreatedBy)
	require.Equal(t, "*", all["bob"].Pattern)
	mine := grants("alice")
	require.Len(t, mine, 1, "a submitter sees the grants of its own runs")
	code, _, raw := o.call(t, "alice", "POST", "/api/grants/"+all["bob"].ID+"/revoke", nil)
	require.Equal(t, http.StatusForbidden, code, string(raw))
	code, _, raw = o.call(t, "alice", "POST", "/api/grants/"+all["alice"].ID+"/confirm", nil)
	require.Equal(t, http.StatusForbidden, code, "confirming is an approver's: %s", raw)
	code, _, raw = o.call(t, "alice", "POST", "/api/grants/"+all["alice"].ID+"/revoke", nil)
	require.Equal(t, http.StatusOK, code, "the owner revokes its own: %s", raw)
	code, _, raw = o.call(t, "oncall", "POST", "/api/grants/grt_nope/revoke", nil)
	require.Equal(t, http.StatusNotFound, code, string(raw))
	code, _, raw = o.call(t, "oncall", "POST", "/api/grants/nope/revoke", nil)
	require.Equal(t, http.StatusBadRequest, code, string(raw))
}
