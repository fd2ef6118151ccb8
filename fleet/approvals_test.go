package fleet_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/cli"
	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/egress"
	"github.com/aetherium-engine/aetherium/egress/shell"
	"github.com/aetherium-engine/aetherium/fleet"
	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/sandbox"
	"github.com/aetherium-engine/aetherium/store"
)

type approvalView struct {
	store.Approval
	View egress.ApprovalView `json:"view"`
}

// setupApprovals runs a fleet whose writer may run shell commands (in a local
// executor) and download PDFs (a stand-in), with a window long enough that only
// the test decides.
func setupApprovals(t *testing.T) *fleettest.Fleet {
	t.Helper()
	x, err := sandbox.NewLocal(sandbox.Config{AllowLocal: true, Timeout: 30 * time.Second})
	require.NoError(t, err)
	return fleettest.Start(t, fleettest.Options{
		Configure: func(c *config.Config) { c.Security.ApprovalWindow = time.Minute },
		Fleet:     fleet.Options{Executor: x, ExtraTools: withStandInPDF},
	})
}

func submitWriter(t *testing.T, f *fleettest.Fleet, calls ...map[string]any) string {
	t.Helper()
	return submitWriterWith(t, f, nil, calls...)
}

// submitWriterWith is submitWriter with the team's extra keys (loopback for a
// URL on 127.0.0.1; an allowlist also gives the shell's sandbox a network).
func submitWriterWith(t *testing.T, f *fleettest.Fleet, extra map[string]any, calls ...map[string]any) string {
	t.Helper()
	tm := team(append(calls, map[string]any{"say": "done"}), extra)
	tm["workers"] = []map[string]any{{"name": "writer", "prompt": "w", "mcp_servers": []string{"workspace", "shell", "research"}}}
	return f.SubmitTeam(tm, "ask a human")
}

// The approver sees the commands the call would run and the URL, with only the
// secret masked, plus the hash; the CLI shows the same. The call's arguments are
// altered in the session (where the resumed step reads them) before the approval:
// the tool does not run and the refusal says why.
func TestApprovalViewAndBindingEndToEnd(t *testing.T) {
	t.Parallel()
	f := setupApprovals(t)
	ctx := context.Background()
	const pat = "ghp_R7x9Kq2LmN4pV8sT1wZ5yB3cD6fG0hJ2kL4m"
	cmd := "echo start > log.txt && GITHUB_TOKEN=" + pat + " rm -rf build"
	id := submitWriter(t, f, call("run_shell", map[string]any{"command": cmd}))

	a := pendingApproval(t, f, id)
	var got approvalView
	code, raw := f.Do("GET", "/api/approvals/"+a.ID, nil, &got)
	require.Equal(t, http.StatusOK, code, string(raw))
	require.NotContains(t, string(raw), pat, "the secret never reaches the approver")
	parsed, err := shell.ShellCommands(cmd)
	require.NoError(t, err)
	var want []string
	for _, c := range parsed {
		want = append(want, strings.ReplaceAll(c, pat, "[REDACTED:github-pat]"))
	}
	require.Equal(t, want, got.View.Commands, "the commands, masked only where the secret is")
	var shown struct{ Command string }
	require.NoError(t, json.Unmarshal(got.Args, &shown))
	require.Equal(t, "echo start > log.txt && GITHUB_TOKEN=[REDACTED:github-pat] rm -rf build", shown.Command, "every argument, masked in place")
	hash, err := egress.ArgsHash(json.RawMessage(`{"command":` + mustJSON(t, cmd) + `}`))
	require.NoError(t, err)
	require.Equal(t, hash, got.ArgsHash)

	var out, errOut bytes.Buffer
	require.Equal(t, 0, cli.Main([]string{"approvals", "show", a.ID, "--api", f.URL}, &out, &errOut), errOut.String())
	for _, c := range want {
		require.Contains(t, out.String(), c)
	}
	require.Contains(t, out.String(), "sha256:   "+hash)
	require.NotContains(t, out.String(), pat)

	// Alter the stored call while it waits (the session is idle), then approve:
	// the step that resumes re-enters the gate with the altered call.
	var sessID, msgs string
	// The step that asked saves its session after the request: wait until it let go.
	require.Eventually(t, func() bool {
		var idle bool
		err := f.Store.Pool.QueryRow(ctx, `SELECT status = 'waiting' AND lease_until < now() FROM sessions
			WHERE run_id = $1 AND agent = 'writer'`, id).Scan(&idle)
		return err == nil && idle
	}, 30*time.Second, 20*time.Millisecond)
	require.NoError(t, f.Store.Pool.QueryRow(ctx, `SELECT id, session_history(id)::text FROM sessions WHERE run_id = $1 AND agent = 'writer'`, id).Scan(&sessID, &msgs))
	var messages []llm.Message
	require.NoError(t, json.Unmarshal([]byte(msgs), &messages))
	altered := -1
	for i := range messages {
		for j := range messages[i].ToolCalls {
			if messages[i].ToolCalls[j].Name == "run_shell" {
				messages[i].ToolCalls[j].Args = json.RawMessage(`{"command":"rm -rf build src"}`)
				require.Equal(t, -1, altered, "one run_shell call")
				altered = i
			}
		}
	}
	require.GreaterOrEqual(t, altered, 0)
	newMsg, err := json.Marshal(messages[altered])
	require.NoError(t, err)
	// The history is append-only: the stored row of the call is altered in place
	// (no compaction yet: the i-th message is row i).
	tag, err := f.Store.Pool.Exec(ctx, `UPDATE session_messages SET message = $3 WHERE session_id = $1 AND seq = $2`, sessID, altered, newMsg)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
	code, raw = f.Do("POST", "/api/approvals/"+a.ID+"/approve", map[string]string{"reason": "ok"}, nil)
	require.Equal(t, http.StatusOK, code, string(raw))

	require.Equal(t, "completed", f.WaitTerminal(id, 60*time.Second).Status)
	f.Audit.Flush()
	rows, err := f.Store.RunAudit(ctx, id, 100)
	require.NoError(t, err)
	var shell *store.AuditRow
	for i := range rows {
		if rows[i].Tool == "run_shell" {
			shell = &rows[i]
		}
	}
	require.NotNil(t, shell)
	require.Equal(t, "denied", shell.Decision)
	require.Equal(t, "approval", shell.DenyLayer)
	require.Contains(t, shell.DenyReason, "arguments changed since approval")
	require.Contains(t, shell.DenyReason, hash)
	require.NoError(t, f.Store.Pool.QueryRow(ctx, `SELECT session_history(id)::text FROM sessions WHERE id = $1`, sessID).Scan(&msgs))
	require.Contains(t, msgs, "arguments changed since approval", "the model hears why")
}

// A late approval is a 409 that says it expired; cancelling a run closes its
// approvals, and deciding one is a 409 that says the run was cancelled.
func TestApprovalExpiryAndCancelOverTheAPI(t *testing.T) {
	t.Parallel()
	f := setupApprovals(t)
	ctx := context.Background()

	late := submitWriterWith(t, f, loopback, call("download_pdf", map[string]any{"url": "http://127.0.0.1:1/a.pdf"}))
	a := pendingApproval(t, f, late)
	_, err := f.Store.Pool.Exec(ctx, `UPDATE approvals SET expires_at = now() - interval '1 second' WHERE id = $1`, a.ID)
	require.NoError(t, err)
	var e struct{ Error string }
	code, raw := f.Do("POST", "/api/approvals/"+a.ID+"/approve", nil, &e)
	require.Equal(t, http.StatusConflict, code, string(raw))
	require.Contains(t, e.Error, "expired")
	var got store.Approval
	code, _ = f.Do("GET", "/api/approvals/"+a.ID, nil, &got)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, store.ApprovalTimedOut, got.Status, "timed out before the expiry task ran")
	require.Equal(t, "completed", f.WaitTerminal(late, 60*time.Second).Status, "the run went on without the call")

	cancelled := submitWriterWith(t, f, loopback, call("download_pdf", map[string]any{"url": "http://127.0.0.1:1/b.pdf"}))
	b := pendingApproval(t, f, cancelled)
	code, raw = f.Do("POST", "/api/runs/"+cancelled+"/cancel", nil, nil)
	require.Equal(t, http.StatusOK, code, string(raw))
	code, _ = f.Do("GET", "/api/approvals/"+b.ID, nil, &got)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, store.ApprovalCancelled, got.Status)
	code, raw = f.Do("POST", "/api/approvals/"+b.ID+"/approve", nil, &e)
	require.Equal(t, http.StatusConflict, code, string(raw))
	require.Contains(t, e.Error, "run was cancelled")
	var list struct{ Approvals []store.Approval }
	code, _ = f.Do("GET", "/api/approvals?status=cancelled&run_id="+cancelled, nil, &list)
	require.Equal(t, http.StatusOK, code)
	require.Len(t, list.Approvals, 1)
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}
