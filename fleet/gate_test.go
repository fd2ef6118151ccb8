package fleet_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/fleet"
	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/store"
)

// withStandInPDF stands in for download_pdf: here the gate, not the tool, is
// under test.
var withStandInPDF = fleettest.StandInPDF

// pendingApproval waits for the run's next pending approval.
func pendingApproval(t *testing.T, f *fleettest.Fleet, runID string) store.Approval {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var out struct {
			Approvals []store.Approval `json:"approvals"`
		}
		code, raw := f.Do("GET", "/api/approvals?status=pending&run_id="+runID, nil, &out)
		require.Equal(t, http.StatusOK, code, string(raw))
		if len(out.Approvals) > 0 {
			return out.Approvals[0]
		}
		require.True(t, time.Now().Before(deadline), "no pending approval appeared")
		time.Sleep(30 * time.Millisecond)
	}
}

func TestGateEveryLayerEndToEnd(t *testing.T) {
	t.Parallel()
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) }))
	t.Cleanup(target.Close)

	rules := filepath.Join(t.TempDir(), "permissions.yaml")
	require.NoError(t, os.WriteFile(rules, []byte(`
rules:
  - match: {tool: write_file, path_pattern: "^secrets/"}
    action: always_deny
    reason: "secrets/ is off limits"
`), 0o644))
	f := fleettest.Start(t, fleettest.Options{
		Configure: func(c *config.Config) {
			c.Security.PermissionsFile = rules
			c.Security.ApprovalWindow = 2 * time.Second
		},
		Fleet: fleet.Options{ExtraTools: withStandInPDF},
	})
	const pat = "ghp_R7x9Kq2LmN4pV8sT1wZ5yB3cD6fG0hJ2kL4m"
	writer := []map[string]any{
		call("create_plan", map[string]any{"steps": []string{"x"}}),                                                                             // capability
		call("write_file", map[string]any{"path": "secrets/key.txt", "content": "x"}),                                                           // rules
		call("http_request", map[string]any{"method": "GET", "url": target.URL, "headers": map[string]string{"Authorization": "token " + pat}}), // dlp
		call("http_request", map[string]any{"method": "GET", "url": "http://example.com/"}),                                                     // egress
		call("download_pdf", map[string]any{"url": target.URL + "/a.pdf"}),                                                                      // approved
		call("download_pdf", map[string]any{"url": target.URL + "/b.pdf"}),                                                                      // denied
		call("download_pdf", map[string]any{"url": target.URL + "/c.pdf"}),                                                                      // timed out
		{"say": "done trying"},
	}
	tm := team(writer, loopback)
	tm["workers"] = []map[string]any{{"name": "writer", "prompt": "w", "mcp_servers": []string{"workspace", "research"}}}
	id := f.SubmitTeam(tm, "exercise the gate")

	a := pendingApproval(t, f, id)
	require.Equal(t, "download_pdf", a.Tool)
	require.Equal(t, "restricted tool", a.Why)
	require.Eventually(t, func() bool { return f.GetRun(id).Status == "waiting" }, 10*time.Second, 20*time.Millisecond)
	var decided store.Approval
	code, raw := f.Do("POST", "/api/approvals/"+a.ID+"/approve", map[string]string{"reason": "fine"}, &decided)
	require.Equal(t, http.StatusOK, code, string(raw))
	require.Equal(t, "approved", decided.Status)
	code, raw = f.Do("POST", "/api/approvals/"+a.ID+"/deny", nil, nil)
	require.Equal(t, http.StatusConflict, code, "a second decision is a 409: %s", raw)

	b := pendingApproval(t, f, id)
	require.NotEqual(t, a.ID, b.ID)
	code, raw = f.Do("POST", "/api/approvals/"+b.ID+"/deny", map[string]string{"reason": "not this one"}, nil)
	require.Equal(t, http.StatusOK, code, string(raw))

	c := pendingApproval(t, f, id) // left alone: times out after 2s
	evs := f.Follow(id, 0, 60*time.Second)
	require.Equal(t, "run.completed", evs[len(evs)-1].Type)

	ctx := context.Background()
	timedOut, err := f.Store.GetApproval(ctx, c.ID)
	require.NoError(t, err)
	require.Equal(t, "timed_out", timedOut.Status)

	f.Audit.Flush()
	rows, err := f.Store.RunAudit(ctx, id, 100)
	require.NoError(t, err)
	type got struct{ tool, decision, layer, approvedBy string }
	var writerRows []got
	for _, r := range rows {
		if r.Agent == "writer" {
			writerRows = append(writerRows, got{r.Tool, r.Decision, r.DenyLayer, r.ApprovedBy})
		}
		require.NotContains(t, r.Summary+r.DenyReason+string(r.Args), pat, "the secret never reaches the audit trail")
	}
	require.Equal(t, []got{
		{"create_plan", "denied", "capability", ""},
		{"write_file", "denied", "rules", ""},
		{"http_request", "denied", "dlp", ""},
		{"http_request", "denied", "egress", ""},
		{"download_pdf", "allowed", "", "local"},
		{"download_pdf", "denied", "approval", ""},
		{"download_pdf", "timed_out", "approval", ""},
	}, writerRows)
	for _, r := range rows {
		switch {
		case r.Tool == "write_file":
			require.Equal(t, "secrets/ is off limits", r.DenyReason)
		case r.Tool == "download_pdf" && r.Decision == "denied":
			require.Contains(t, r.DenyReason, "not this one")
		case r.Tool == "download_pdf" && r.Decision == "allowed":
			require.NotNil(t, r.Result, "restricted rows keep the full result")
			require.Contains(t, *r.Result, "downloaded")
		}
	}
	// The same outcomes reached the model as tool messages.
	var msgs string
	require.NoError(t, f.Store.Pool.QueryRow(ctx, `SELECT session_history(id)::text FROM sessions WHERE run_id = $1 AND agent = 'writer'`, id).Scan(&msgs))
	for _, want := range []string{"denied by capability", "denied by rules: secrets/ is off limits", "denied by dlp", "denied by egress", "downloaded", "denied by approval: rejected by a human reviewer (local): not this one", "timed_out"} {
		require.Contains(t, msgs, want)
	}
	// The refusal names the rule, never the secret (the model's own call holds it).
	require.Contains(t, msgs, `denied by dlp: outgoing arguments carry a credential (gitleaks rule github-pat`)

	var evTypes []string
	for _, e := range evs {
		evTypes = append(evTypes, e.Type)
	}
	requireSubsequence(t, evTypes, []string{"approval.requested", "approval.decided", "approval.requested", "approval.decided", "approval.requested", "approval.decided", "run.completed"})
	var d struct{ Status string }
	for _, e := range evs {
		if e.Type == "approval.decided" {
			require.NoError(t, json.Unmarshal(e.Data, &d))
		}
	}
	require.Equal(t, "timed_out", d.Status)
}

// An approval requested by the second call of a model answer comes after the first
// call's tool.call event in the stream.
func TestApprovalRequestKeepsTheCallOrder(t *testing.T) {
	t.Parallel()
	f := fleettest.Start(t, fleettest.Options{Fleet: fleet.Options{ExtraTools: withStandInPDF}})
	writer := []map[string]any{
		{"calls": []map[string]any{
			{"tool": "write_file", "args": map[string]any{"path": "first.txt", "content": "x"}},
			{"tool": "download_pdf", "args": map[string]any{"url": "http://127.0.0.1:1/a.pdf"}},
		}},
		{"say": "done"},
	}
	tm := team(writer, loopback)
	tm["workers"] = []map[string]any{{"name": "writer", "prompt": "w", "mcp_servers": []string{"workspace", "research"}}}
	id := f.SubmitTeam(tm, "write, then ask")
	a := pendingApproval(t, f, id)
	code, raw := f.Do("POST", "/api/approvals/"+a.ID+"/deny", map[string]string{"reason": "no"}, nil)
	require.Equal(t, http.StatusOK, code, string(raw))
	evs := f.Follow(id, 0, 60*time.Second)
	var order []string
	for _, e := range evs {
		switch {
		case e.Type == "approval.requested":
			order = append(order, "approval.requested")
		case e.Type == "tool.call":
			var d struct{ Tool string }
			require.NoError(t, json.Unmarshal(e.Data, &d))
			order = append(order, "tool.call "+d.Tool)
		}
	}
	requireSubsequence(t, order, []string{"tool.call write_file", "approval.requested", "tool.call download_pdf"})
}

func TestRulesHotReloadUnderRunningWorker(t *testing.T) {
	t.Parallel()
	rules := filepath.Join(t.TempDir(), "permissions.yaml")
	require.NoError(t, os.WriteFile(rules, []byte("rules: []\n"), 0o644))
	f := fleettest.Start(t, fleettest.Options{Configure: func(c *config.Config) { c.Security.PermissionsFile = rules }})
	watchCtx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	require.NoError(t, f.WatchRules(watchCtx))

	writeRun := func() (decision, layer string) {
		id := f.SubmitTeam(team([]map[string]any{
			call("write_file", map[string]any{"path": "notes.md", "content": "x"}),
			{"say": "ok"},
		}, nil), "write")
		evs := f.Follow(id, 0, 60*time.Second)
		for _, e := range evs {
			if e.Type == "tool.call" && e.Agent == "writer" {
				var d struct{ Decision, Layer string }
				require.NoError(t, json.Unmarshal(e.Data, &d))
				return d.Decision, d.Layer
			}
		}
		t.Fatal("no writer tool call")
		return "", ""
	}
	dec, _ := writeRun()
	require.Equal(t, "allowed", dec)

	require.NoError(t, os.WriteFile(rules, []byte(`
rules:
  - match: {tool: write_file, path_pattern: "\\.md$"}
    action: always_deny
    reason: "no markdown"
`), 0o644))
	require.Eventually(t, func() bool { return f.Rules.Current().Len() == 1 }, 10*time.Second, 20*time.Millisecond)
	dec, layer := writeRun()
	require.Equal(t, "denied", dec)
	require.Equal(t, "rules", layer)

	// A broken file keeps the last good rules.
	require.NoError(t, os.WriteFile(rules, []byte("rules: [ {match: {tool: \"(\"}\n"), 0o644))
	require.Eventually(t, func() bool { return f.Rules.LastError() != "" }, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, 1, f.Rules.Current().Len())
	dec, layer = writeRun()
	require.Equal(t, "denied", dec)
	require.Equal(t, "rules", layer)
}
