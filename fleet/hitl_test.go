package fleet_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/fleet"
	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/sandbox"
	"github.com/aetherium-engine/aetherium/store"
)

// setupHITL runs a fleet like setupApprovals whose permissions file is the
// test's own (rules, and a hot reload that changes the policy revision).
func setupHITL(t *testing.T, rules string, configure func(*config.Config)) (*fleettest.Fleet, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "permissions.yaml")
	require.NoError(t, os.WriteFile(path, []byte(rules), 0o644))
	x, err := sandbox.NewLocal(sandbox.Config{AllowLocal: true, Timeout: 30 * time.Second})
	require.NoError(t, err)
	f := fleettest.Start(t, fleettest.Options{
		Configure: func(c *config.Config) {
			c.Security.ApprovalWindow = time.Minute
			c.Security.PermissionsFile = path
			if configure != nil {
				configure(c)
			}
		},
		Fleet: fleet.Options{Executor: x, ExtraTools: withStandInPDF},
	})
	watchCtx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	require.NoError(t, f.WatchRules(watchCtx))
	return f, path
}

// writerMessages is what the writer's model was told, as text.
func writerMessages(t *testing.T, f *fleettest.Fleet, runID string) string {
	t.Helper()
	var msgs string
	require.NoError(t, f.Store.Pool.QueryRow(context.Background(),
		`SELECT session_history(id)::text FROM sessions WHERE run_id = $1 AND agent = 'writer'`, runID).Scan(&msgs))
	return msgs
}

// toolRow is the audit row of the run's one call of tool.
func toolRow(t *testing.T, f *fleettest.Fleet, runID, tool string) store.AuditRow {
	t.Helper()
	f.Audit.Flush()
	rows, err := f.Store.RunAudit(context.Background(), runID, 100)
	require.NoError(t, err)
	var found []store.AuditRow
	for _, r := range rows {
		if r.Tool == tool {
			found = append(found, r)
		}
	}
	require.Len(t, found, 1, "one %s row", tool)
	return found[0]
}

const hitlRules = `
rules:
  - match: {tool: run_shell, arg_pattern: "/etc"}
    action: always_deny
    reason: "nothing under /etc"
`

// An edit runs the edited call, bound to its own hash, after the whole gate
// judged it again: the model hears that its call was edited, the audit row keeps
// both argument sets and the editor. An edit into what a rule forbids, or into a
// URL outside the team's domains, is refused by that layer and audited so.
func TestEditGoesThroughTheWholeGate(t *testing.T) {
	t.Parallel()
	f, _ := setupHITL(t, hitlRules, nil)

	edit := func(t *testing.T, runID string, args any) store.Approval {
		t.Helper()
		a := pendingApproval(t, f, runID)
		var got store.Approval
		code, raw := f.Do("POST", "/api/approvals/"+a.ID+"/edit", map[string]any{"args": args, "reason": "only build"}, &got)
		require.Equal(t, http.StatusOK, code, string(raw))
		require.Equal(t, store.ApprovalEdited, got.Status)
		require.Equal(t, "completed", f.WaitTerminal(runID, 60*time.Second).Status)
		return got
	}

	t.Run("edited and run", func(t *testing.T) {
		t.Parallel()
		id := submitWriter(t, f, call("run_shell", map[string]any{"command": "mkdir -p build src && rm -rf build src"}))
		got := edit(t, id, map[string]any{"command": "mkdir -p build && rm -rf build && echo only-build"})
		row := toolRow(t, f, id, "run_shell")
		require.Equal(t, "allowed", row.Decision, row.DenyReason)
		require.Equal(t, got.ID, row.ApprovalID)
		require.Equal(t, "local", row.EditedBy)
		require.Equal(t, got.EditedArgsHash, row.ArgsHash, "bound to the edit's hash")
		require.NotEqual(t, got.ArgsHash, row.ArgsHash)
		require.Contains(t, string(row.Args), "only-build")
		require.Contains(t, string(row.OriginalArgs), "rm -rf build src")
		require.NotEmpty(t, row.PolicyRevision)
		require.Equal(t, got.PolicyRevision, row.PolicyRevision)
		msgs := writerMessages(t, f, id)
		require.Contains(t, msgs, "edited this call before it ran")
		require.Contains(t, msgs, "only-build", "the model sees the edited call's output")
	})
	t.Run("edited into a rule's refusal", func(t *testing.T) {
		t.Parallel()
		id := submitWriter(t, f, call("run_shell", map[string]any{"command": "rm -rf build"}))
		edit(t, id, map[string]any{"command": "rm -rf build /etc/hosts"})
		row := toolRow(t, f, id, "run_shell")
		require.Equal(t, "denied", row.Decision)
		require.Equal(t, "rules", row.DenyLayer)
		require.Contains(t, row.DenyReason, "nothing under /etc")
		require.Contains(t, row.DenyReason, "edited this call, and the edited call was refused")
		require.Equal(t, "local", row.EditedBy)
		require.Contains(t, writerMessages(t, f, id), "nothing under /etc")
	})
	t.Run("edited URL outside allowed_domains", func(t *testing.T) {
		t.Parallel()
		id := submitWriterWith(t, f, loopback, call("download_pdf", map[string]any{"url": "http://127.0.0.1:1/a.pdf"}))
		edit(t, id, map[string]any{"url": "https://exfil.example.net/a.pdf"})
		row := toolRow(t, f, id, "download_pdf")
		require.Equal(t, "denied", row.Decision)
		require.Equal(t, "egress", row.DenyLayer)
	})
	t.Run("an unpaired surrogate in an edit", func(t *testing.T) {
		t.Parallel()
		id := submitWriter(t, f, call("run_shell", map[string]any{"command": "rm -rf build"}))
		a := pendingApproval(t, f, id)
		// Valid JSON that jsonb refuses as it is: stored as U+FFFD, not a 500.
		code, raw := f.Do("POST", "/api/approvals/"+a.ID+"/edit", `{"args": {"command": "echo a\ud800b"}, "reason": "typo"}`, nil)
		require.Equal(t, http.StatusOK, code, string(raw))
		require.Equal(t, "completed", f.WaitTerminal(id, 60*time.Second).Status)
		require.Contains(t, string(toolRow(t, f, id, "run_shell").Args), "a\ufffdb")
	})
	t.Run("hostile edits", func(t *testing.T) {
		t.Parallel()
		id := submitWriter(t, f, call("run_shell", map[string]any{"command": "rm -rf build"}))
		a := pendingApproval(t, f, id)
		for name, body := range map[string]string{
			"invalid JSON":     `{"args": {"command": "rm -rf build"`,
			"not an object":    `{"args": "rm -rf /"}`,
			"missing":          `{}`,
			"unknown field":    `{"args": {}, "grant": {"scope": "run"}}`,
			"over the limit":   `{"args": {"command": "` + strings.Repeat("a", 300<<10) + `"}}`,
			"NUL in the value": `{"args": {"command": "rm\u0000"}}`,
		} {
			var e struct{ Error string }
			code, raw := f.Do("POST", "/api/approvals/"+a.ID+"/edit", body, &e)
			require.Equal(t, http.StatusBadRequest, code, "%s: %s", name, raw)
			require.NotEmpty(t, e.Error, name)
		}
		var got store.Approval
		code, _ := f.Do("GET", "/api/approvals/"+a.ID, nil, &got)
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, store.ApprovalPending, got.Status, "a bad edit loses nothing: still pending")
		code, raw := f.Do("POST", "/api/approvals/"+a.ID+"/deny", map[string]string{"reason": "no"}, nil)
		require.Equal(t, http.StatusOK, code, string(raw))
		code, raw = f.Do("POST", "/api/approvals/"+a.ID+"/edit", map[string]any{"args": map[string]string{"command": "true"}}, nil)
		require.Equal(t, http.StatusConflict, code, "deciding twice: %s", raw)
		require.Equal(t, "completed", f.WaitTerminal(id, 60*time.Second).Status)
	})
}

// A rejection's reason reaches the model as a human's feedback and fails
// nothing; a team that counts rejections has its circuit breaker count it.
func TestRejectWithFeedback(t *testing.T) {
	t.Parallel()
	f, _ := setupHITL(t, "", func(c *config.Config) { c.Worker.CircuitBreaker = 1 })
	for _, tc := range []struct {
		name   string
		count  bool
		status string
	}{
		{name: "feedback", status: "completed"},
		{name: "counted", count: true, status: "failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			extra := map[string]any{}
			if tc.count {
				extra["count_rejections"] = true
			}
			id := submitWriterWith(t, f, extra, call("run_shell", map[string]any{"command": "rm -rf src"}))
			a := pendingApproval(t, f, id)
			code, raw := f.Do("POST", "/api/approvals/"+a.ID+"/deny", map[string]string{"reason": "keep src; delete build/ instead"}, nil)
			require.Equal(t, http.StatusOK, code, string(raw))
			run := f.WaitTerminal(id, 60*time.Second)
			require.Equal(t, tc.status, run.Status, run.Error)
			if tc.count {
				require.Contains(t, run.Error, "rejected by a human reviewer (local): keep src; delete build/ instead")
				return
			}
			require.Contains(t, writerMessages(t, f, id), "rejected by a human reviewer (local): keep src; delete build/ instead")
		})
	}
}

// ask_user waits durably for a person's answer, which the model then reads; a
// bad answer is a 400 and loses nothing; a run cancelled while its agent waits
// ends at once, its question closed.
func TestAskUserOverTheAPI(t *testing.T) {
	t.Parallel()
	f, _ := setupHITL(t, "", nil)
	ask := func(t *testing.T) (string, store.Approval) {
		t.Helper()
		tm := team([]map[string]any{
			call("ask_user", map[string]any{"question": "Which database?", "choices": []string{"postgres", "sqlite"}}),
			{"say": "done"},
		}, nil)
		tm["workers"] = []map[string]any{{"name": "writer", "prompt": "w", "mcp_servers": []string{"workspace", "comms"}}}
		id := f.SubmitTeam(tm, "ask")
		a := pendingApproval(t, f, id)
		require.Equal(t, store.KindQuestion, a.Kind)
		var q struct {
			Question string   `json:"question"`
			Choices  []string `json:"choices"`
		}
		require.NoError(t, json.Unmarshal(a.View, &q))
		require.Equal(t, "Which database?", q.Question)
		require.Equal(t, []string{"postgres", "sqlite"}, q.Choices)
		return id, a
	}
	t.Run("answered", func(t *testing.T) {
		t.Parallel()
		id, a := ask(t)
		var e struct{ Error string }
		code, raw := f.Do("POST", "/api/approvals/"+a.ID+"/answer", map[string]string{"answer": "mysql"}, &e)
		require.Equal(t, http.StatusBadRequest, code, string(raw))
		require.Contains(t, e.Error, "one of the choices")
		code, raw = f.Do("POST", "/api/approvals/"+a.ID+"/approve", nil, &e)
		require.Equal(t, http.StatusConflict, code, string(raw))
		require.Contains(t, e.Error, "answer it")
		var got store.Approval
		code, raw = f.Do("POST", "/api/approvals/"+a.ID+"/answer", map[string]string{"answer": "sqlite"}, &got)
		require.Equal(t, http.StatusOK, code, string(raw))
		require.Equal(t, store.ApprovalAnswered, got.Status)
		require.Equal(t, "sqlite", got.Answer)
		require.Equal(t, "completed", f.WaitTerminal(id, 60*time.Second).Status)
		require.Contains(t, writerMessages(t, f, id), "local answered: sqlite")
		row := toolRow(t, f, id, "ask_user")
		require.Equal(t, "allowed", row.Decision)
		require.Equal(t, a.ID, row.ApprovalID)
		code, _ = f.Do("POST", "/api/approvals/"+a.ID+"/answer", map[string]string{"answer": "postgres"}, nil)
		require.Equal(t, http.StatusConflict, code, "answered once")
	})
	t.Run("cancelled while waiting", func(t *testing.T) {
		t.Parallel()
		id, a := ask(t)
		code, raw := f.Do("POST", "/api/runs/"+id+"/cancel", nil, nil)
		require.Equal(t, http.StatusOK, code, string(raw))
		require.Equal(t, "cancelled", f.WaitTerminal(id, 10*time.Second).Status)
		var got store.Approval
		code, _ = f.Do("GET", "/api/approvals/"+a.ID, nil, &got)
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, store.ApprovalCancelled, got.Status)
		code, _ = f.Do("POST", "/api/approvals/"+a.ID+"/answer", map[string]string{"answer": "sqlite"}, nil)
		require.Equal(t, http.StatusConflict, code)
	})
}

// A grant lets the matching calls of its scope run without asking, never what
// a rule forbids, and expires on time.
func TestScopedGrants(t *testing.T) {
	t.Parallel()
	f, _ := setupHITL(t, hitlRules, nil)
	shellRun, grant, shellRows := grantHelpers(t, f)

	t.Run("covers the matching calls of its run, not others, nor a rule's refusal", func(t *testing.T) {
		t.Parallel()
		id := shellRun("rm -rf build", "rm -rf build dist", "rm -rf build /etc/x", "rm -rf src")
		g := grant(t, id, map[string]any{"scope": "run", "match": "command", "pattern": "rm -rf build *"})
		// The fourth call is not covered: it asks.
		a := pendingApproval(t, f, id)
		require.Contains(t, string(a.Args), "rm -rf src")
		code, raw := f.Do("POST", "/api/approvals/"+a.ID+"/deny", map[string]string{"reason": "no"}, nil)
		require.Equal(t, http.StatusOK, code, string(raw))
		require.Equal(t, "completed", f.WaitTerminal(id, 60*time.Second).Status)
		rows := shellRows(t, id)
		require.Len(t, rows, 4)
		require.Equal(t, g.ID, rows[0].ApprovalID, "the first call ran on its approval")
		require.Equal(t, g.GrantID, rows[1].GrantID, "the second under the grant")
		require.Equal(t, "allowed", rows[1].Decision)
		require.Equal(t, g.PolicyRevision, rows[1].PolicyRevision)
		require.Equal(t, "rules", rows[2].DenyLayer, "rules are judged before any grant")
		require.Equal(t, "denied", rows[3].Decision)
		require.Empty(t, rows[3].GrantID)

		var list struct {
			Grants         []store.Grant `json:"grants"`
			PolicyRevision string        `json:"policy_revision"`
		}
		code, _ = f.Do("GET", "/api/grants?status=active", nil, &list)
		require.Equal(t, http.StatusOK, code)
		found := false
		for _, gr := range list.Grants {
			if gr.ID == g.GrantID {
				found = true
				require.Equal(t, "rm -rf build *", gr.Pattern)
				require.Equal(t, "local", gr.CreatedBy)
				require.Equal(t, id, gr.ScopeID)
			}
		}
		require.True(t, found)
	})
	t.Run("expires on time", func(t *testing.T) {
		t.Parallel()
		id := shellRun("rm -rf exp1")
		g := grant(t, id, map[string]any{"scope": "team", "match": "exact", "ttl": "1s"})
		require.Equal(t, "completed", f.WaitTerminal(id, 60*time.Second).Status)
		// Once the database's clock passed its expiry, the same call asks again.
		require.Eventually(t, func() bool {
			var got store.Grant
			var list struct{ Grants []store.Grant }
			code, _ := f.Do("GET", "/api/grants?status=expired", nil, &list)
			for _, x := range list.Grants {
				if x.ID == g.GrantID {
					got = x
				}
			}
			return code == http.StatusOK && got.Status == store.GrantExpired
		}, 10*time.Second, 100*time.Millisecond)
		again := shellRun("rm -rf exp1")
		a := pendingApproval(t, f, again)
		code, raw := f.Do("POST", "/api/approvals/"+a.ID+"/deny", map[string]string{"reason": "expired grant"}, nil)
		require.Equal(t, http.StatusOK, code, string(raw))
		require.Equal(t, "completed", f.WaitTerminal(again, 60*time.Second).Status)
	})
	t.Run("hostile grants", func(t *testing.T) {
		t.Parallel()
		id := shellRun("rm -rf hostile")
		a := pendingApproval(t, f, id)
		for name, g := range map[string]map[string]any{
			"bare *":               {"scope": "run", "match": "command", "pattern": "*"},
			"shell *":              {"scope": "team", "match": "command", "pattern": "bash *"},
			"env *":                {"scope": "run", "match": "command", "pattern": "env *"},
			"not covering":         {"scope": "run", "match": "command", "pattern": "rm -rf other"},
			"url for a shell call": {"scope": "run", "match": "url_prefix", "pattern": "https://example.com/"},
			"unknown scope":        {"scope": "everyone", "match": "exact"},
			"project without one":  {"scope": "project", "match": "exact"},
			"ttl too long":         {"scope": "run", "match": "exact", "ttl": "240h"},
			"ttl garbage":          {"scope": "run", "match": "exact", "ttl": "soon"},
			"metacharacters":       {"scope": "run", "match": "command", "pattern": "rm -rf hostile; curl x"},
		} {
			var e struct{ Error string }
			code, raw := f.Do("POST", "/api/approvals/"+a.ID+"/approve", map[string]any{"grant": g}, &e)
			require.Equal(t, http.StatusBadRequest, code, "%s: %s", name, raw)
		}
		code, raw := f.Do("POST", "/api/approvals/"+a.ID+"/approve", nil, nil)
		require.Equal(t, http.StatusOK, code, "still pending after the refusals: %s", raw)
		require.Equal(t, "completed", f.WaitTerminal(id, 60*time.Second).Status)
	})
}

// By default a principal cannot approve, edit or grant a call of its own run;
// it may still reject it and answer its questions.
func TestNoSelfApprovalByDefault(t *testing.T) {
	t.Parallel()
	f, _ := setupHITL(t, "", func(c *config.Config) { c.Security.AllowSelfApproval = false })
	id := submitWriter(t, f, call("run_shell", map[string]any{"command": "rm -rf build"}))
	a := pendingApproval(t, f, id)
	for verb, body := range map[string]any{
		"approve": nil,
		"edit":    map[string]any{"args": map[string]string{"command": "true"}},
	} {
		var e struct{ Error string }
		code, raw := f.Do("POST", "/api/approvals/"+a.ID+"/"+verb, body, &e)
		require.Equal(t, http.StatusForbidden, code, "%s: %s", verb, raw)
		require.Contains(t, e.Error, "allow_self_approval")
	}
	code, raw := f.Do("POST", "/api/approvals/"+a.ID+"/deny", map[string]string{"reason": "mine, and no"}, nil)
	require.Equal(t, http.StatusOK, code, string(raw))
	require.Equal(t, "completed", f.WaitTerminal(id, 60*time.Second).Status)
}

// A revocation takes effect for the next call; a change of the permissions file
// suspends a grant (the next matching call asks) until an approver confirms it
// under the new revision. Its own fleet: the change of the file would suspend
// the grants of every other test sharing it.
func TestGrantRevokedAndSuspendedByAPolicyChange(t *testing.T) {
	t.Parallel()
	f, rulesPath := setupHITL(t, hitlRules, nil)
	shellRun, grant, shellRows := grantHelpers(t, f)
	first := shellRun("rm -rf tmp1")
	g := grant(t, first, map[string]any{"scope": "team", "match": "command", "pattern": "rm -rf tmp1"})
	require.Equal(t, "completed", f.WaitTerminal(first, 60*time.Second).Status)

	covered := shellRun("rm -rf tmp1")
	require.Equal(t, "completed", f.WaitTerminal(covered, 60*time.Second).Status, "the team grant covers another run")
	require.Equal(t, g.GrantID, shellRows(t, covered)[0].GrantID)

	// A change of the permissions file suspends it.
	require.NoError(t, os.WriteFile(rulesPath, []byte(hitlRules+"\n# changed\n"), 0o644))
	require.Eventually(t, func() bool { return f.Rules.Current().Revision() != g.PolicyRevision }, 10*time.Second, 20*time.Millisecond)
	var gr store.Grant
	require.Eventually(t, func() bool {
		var list struct{ Grants []store.Grant }
		f.Do("GET", "/api/grants?status=suspended", nil, &list)
		for _, x := range list.Grants {
			if x.ID == g.GrantID {
				gr = x
				return true
			}
		}
		return false
	}, 10*time.Second, 50*time.Millisecond)
	require.Equal(t, store.GrantSuspended, gr.Status)
	suspended := shellRun("rm -rf tmp1")
	a := pendingApproval(t, f, suspended)
	require.Empty(t, a.GrantID)
	code, raw := f.Do("POST", "/api/grants/"+g.GrantID+"/confirm", nil, &gr)
	require.Equal(t, http.StatusOK, code, string(raw))
	require.Equal(t, store.GrantActive, gr.Status)
	require.Equal(t, f.Rules.Current().Revision(), gr.PolicyRevision)
	code, raw = f.Do("POST", "/api/approvals/"+a.ID+"/approve", nil, nil)
	require.Equal(t, http.StatusOK, code, string(raw))
	require.Equal(t, "completed", f.WaitTerminal(suspended, 60*time.Second).Status)

	confirmed := shellRun("rm -rf tmp1")
	require.Equal(t, "completed", f.WaitTerminal(confirmed, 60*time.Second).Status, "confirmed: it covers again")
	require.Equal(t, g.GrantID, shellRows(t, confirmed)[0].GrantID)

	code, raw = f.Do("POST", "/api/grants/"+g.GrantID+"/revoke", nil, &gr)
	require.Equal(t, http.StatusOK, code, string(raw))
	require.Equal(t, store.GrantRevoked, gr.Status)
	revoked := shellRun("rm -rf tmp1")
	b := pendingApproval(t, f, revoked)
	code, raw = f.Do("POST", "/api/approvals/"+b.ID+"/deny", map[string]string{"reason": "revoked"}, nil)
	require.Equal(t, http.StatusOK, code, string(raw))
	require.Equal(t, "completed", f.WaitTerminal(revoked, 60*time.Second).Status)
	code, _ = f.Do("POST", "/api/grants/"+g.GrantID+"/revoke", nil, nil)
	require.Equal(t, http.StatusConflict, code, "revoked once")
}

// grantHelpers are the grant tests' steps: a run of shell calls (one per turn),
// approving its pending call with a grant, and its run_shell audit rows.
func grantHelpers(t *testing.T, f *fleettest.Fleet) (shellRun func(cmds ...string) string,
	grant func(t *testing.T, runID string, g map[string]any) store.Approval, shellRows func(t *testing.T, runID string) []store.AuditRow) {
	t.Helper()
	ctx := context.Background()
	// A run whose writer makes the given shell calls, one per turn.
	shellRun = func(cmds ...string) string {
		calls := make([]map[string]any, 0, len(cmds))
		for _, c := range cmds {
			calls = append(calls, call("run_shell", map[string]any{"command": c}))
		}
		return submitWriter(t, f, calls...)
	}
	grant = func(t *testing.T, runID string, g map[string]any) store.Approval {
		t.Helper()
		a := pendingApproval(t, f, runID)
		var got store.Approval
		code, raw := f.Do("POST", "/api/approvals/"+a.ID+"/approve", map[string]any{"grant": g}, &got)
		require.Equal(t, http.StatusOK, code, string(raw))
		require.NotEmpty(t, got.GrantID)
		return got
	}
	shellRows = func(t *testing.T, runID string) []store.AuditRow {
		t.Helper()
		f.Audit.Flush()
		rows, err := f.Store.RunAudit(ctx, runID, 100)
		require.NoError(t, err)
		var out []store.AuditRow
		for _, r := range rows {
			if r.Tool == "run_shell" {
				out = append(out, r)
			}
		}
		return out
	}

	return shellRun, grant, shellRows
}
