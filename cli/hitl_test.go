package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/store"
)

// question requests a pending ask_user question in run, as the tool does.
func question(t *testing.T, f *fleettest.Fleet, run string, n int, q string, choices []string, allowOther bool) string {
	t.Helper()
	view, err := json.Marshal(map[string]any{"question": q, "choices": choices, "allow_other": allowOther})
	require.NoError(t, err)
	a, created, err := f.Store.RequestApproval(context.Background(), store.Approval{
		ID: fmt.Sprintf("apr_cliq%d_%s", n, strings.ReplaceAll(run, "-", "")[:16]), Kind: store.KindQuestion, RunID: run,
		SessionID: queue.SupervisorSession(run).String(), CallID: fmt.Sprint("ask-", n), Team: "demo", Agent: "lead", Tool: "ask_user",
		Tier: "standard", Args: json.RawMessage(`{}`), View: view, Why: "ask_user",
	}, time.Hour)
	require.NoError(t, err)
	require.True(t, created)
	return a.ID
}

// step is one CLI invocation and what it must print.
type step struct {
	name string
	args []string
	code int
	out  []string
	// not must not be in stdout.
	not []string
	err string
}

// steps runs the steps in order (each decides what the next one sees) against
// the API at url, passed as --api after the subcommand.
func steps(t *testing.T, url string, list []step) {
	t.Helper()
	for _, s := range list {
		args := append([]string{s.args[0], s.args[1], "--api", url}, s.args[2:]...)
		code, out, errOut := cliRun(args...)
		require.Equal(t, s.code, code, "%s: %s%s", s.name, out, errOut)
		for _, want := range s.out {
			require.Contains(t, out, want, s.name)
		}
		for _, unwanted := range s.not {
			require.NotContains(t, out, unwanted, s.name)
		}
		require.Contains(t, errOut, s.err, s.name)
		require.NotContains(t, errOut, `{"error"`, "%s: the API's message, not its body", s.name)
	}
}

// Questions are listed, shown and answered (by text or by choice number); a
// call is edited, showing both argument sets; the CLI's refusals come from the
// API with their status.
func TestApprovalsQuestionsAndEdits(t *testing.T) {
	t.Parallel()
	f := fleettest.Start(t, fleettest.Options{NoWorker: true})
	run := f.Submit("demo", "x", map[string]any{"topic": "t"})
	db := question(t, f, run, 1, "Which database should the service use?", []string{"postgres", "sqlite"}, false)
	name := question(t, f, run, 2, "What should the service be called?", []string{"ledger", "vault"}, true)
	byNumber := question(t, f, run, 3, "Which port?", []string{"8080", "9090"}, false)
	editMe := callApproval(t, f, run, 4, "rm -rf build/")
	editFromFile := callApproval(t, f, run, 5, "rm -rf dist/")
	argsFile := filepath.Join(t.TempDir(), "args.json")
	require.NoError(t, os.WriteFile(argsFile, []byte(`{"command": "rm -rf dist/cache"}`+"\n"), 0o644))

	steps(t, f.URL, []step{
		{name: "questions", args: []string{"approvals", "list", "--kind", "question"}, out: []string{
			db + "  pending  run " + run + "  agent lead  question", "question: Which database should the service use?",
			"    1. postgres\n    2. sqlite\n", name, "(or any other answer)"}, not: []string{editMe}},
		{name: "calls", args: []string{"approvals", "list", "--kind", "call"}, out: []string{editMe, editFromFile}, not: []string{db}},
		{name: "show a question", args: []string{"approvals", "show", db}, out: []string{"question: Which database", "1. postgres"}, not: []string{"args:"}},
		{name: "approve a question", args: []string{"approvals", "approve", db}, code: 1, err: "approve " + db + ": HTTP 409: wrong decision for this kind of approval: " + db + " is a question: answer it"},
		{name: "answer a call", args: []string{"approvals", "answer", editMe, "yes"}, code: 1, err: "HTTP 409"},
		{name: "not a choice", args: []string{"approvals", "answer", db, "mysql"}, code: 1, err: "answer " + db + ": HTTP 400: the answer must be one of the choices"},
		{name: "answer", args: []string{"approvals", "answer", db, "postgres"}, out: []string{"approval " + db + " answered by local"}},
		{name: "answer twice", args: []string{"approvals", "answer", db, "sqlite"}, code: 1, err: "HTTP 409"},
		{name: "show the answer", args: []string{"approvals", "show", db}, out: []string{db + "  answered", "answer:   postgres", "decided:  by local"}},
		{name: "no such choice", args: []string{"approvals", "answer", byNumber, "--choice", "3"}, code: 1, err: "--choice 3: approval " + byNumber + " has 2 choices"},
		{name: "answer by number", args: []string{"approvals", "answer", byNumber, "--choice", "2"}, out: []string{"answered"}},
		{name: "show the chosen", args: []string{"approvals", "show", byNumber}, out: []string{"answer:   9090"}},
		{name: "a free answer of words", args: []string{"approvals", "answer", name, "call", "it", "ledger"}, out: []string{"answered"}},
		{name: "show the free answer", args: []string{"approvals", "show", name}, out: []string{"answer:   call it ledger"}},

		{name: "edit a question", args: []string{"approvals", "edit", name, "--args", `{"a":1}`}, code: 1, err: "HTTP 409"},
		{name: "edit", args: []string{"approvals", "edit", editMe, "--args", `{"command":"rm -rf build/tmp"}`, "--reason", "only the tmp dir"},
			out: []string{"approval " + editMe + " edited by local"}},
		{name: "show the edit", args: []string{"approvals", "show", editMe}, out: []string{
			editMe + "  edited", "decided:  by local: only the tmp dir",
			`original args: {"command":"rm -rf build/"}`, `edited args:   {"command":"rm -rf build/tmp"}`}},
		{name: "edit from a file", args: []string{"approvals", "edit", editFromFile, "--args-file", argsFile}, out: []string{"edited"}},
		{name: "show the edit from a file", args: []string{"approvals", "show", editFromFile}, out: []string{`edited args:   {"command":"rm -rf dist/cache"}`, "decided:  by local\n"}},
		{name: "edit twice", args: []string{"approvals", "edit", editMe, "--args", `{"command":"ls"}`}, code: 1, err: "HTTP 409"},
		{name: "history", args: []string{"approvals", "list", "--status", "answered"}, out: []string{db, name, byNumber}, not: []string{editMe}},
	})
}

// approve --grant makes a grant the approval names; grants list, revoke and
// confirm it; what the API refuses (too broad, too long, closed) is its message.
func TestApprovalsGrants(t *testing.T) {
	t.Parallel()
	f := fleettest.Start(t, fleettest.Options{NoWorker: true})
	run := f.Submit("demo", "x", map[string]any{"topic": "t"})
	grantMe := callApproval(t, f, run, 1, "go test ./...")
	exact := callApproval(t, f, run, 2, "make lint")

	steps(t, f.URL, []step{
		{name: "no grants", args: []string{"grants", "list"}, out: []string{"no grants"}},
		{name: "too broad", args: []string{"approvals", "approve", grantMe, "--grant", "run", "--match", "command", "--pattern", "*"},
			code: 1, err: "HTTP 400: too broad"},
		{name: "too long", args: []string{"approvals", "approve", grantMe, "--grant", "run", "--ttl", "1000h"}, code: 1, err: "HTTP 400: 1000h0m0s is over security.grant_max_ttl"},
		{name: "approve with a grant", args: []string{"approvals", "approve", grantMe, "--reason", "tests are safe", "--grant", "run", "--match", "command",
			"--pattern", "go test *", "--ttl", "30m"}, out: []string{"approval " + grantMe + " approved by local, grant grt_"}},
		{name: "approve with an exact grant", args: []string{"approvals", "approve", exact, "--grant", "run"}, out: []string{", grant grt_"}},
	})
	_, out, _ := cliRun("approvals", "show", grantMe, "--api", f.URL)
	m := regexp.MustCompile(`grant:    (grt_\S+)`).FindStringSubmatch(out)
	require.NotNil(t, m, "show names the grant: %s", out)
	id := m[1]
	a, err := f.Store.GetApproval(context.Background(), exact)
	require.NoError(t, err)

	steps(t, f.URL, []step{
		{name: "list", args: []string{"grants", "list"}, out: []string{id + "  active  run " + run + "  tool run_shell  owner local",
			"match:    command go test *", "expires:  in ", "granted:  by local", "approving " + grantMe,
			"match:    exact (arguments sha256 " + a.ArgsHash + ")", "policy:   " + f.Approvals.PolicyRevision() + "\n"}},
		{name: "list active", args: []string{"grants", "list", "--status", "active"}, out: []string{id}},
		{name: "none revoked", args: []string{"grants", "list", "--status", "revoked"}, out: []string{"no grants"}},
		{name: "revoke", args: []string{"grants", "revoke", id}, out: []string{"grant " + id + " revoked"}},
		{name: "list revoked", args: []string{"grants", "list", "--status", "revoked"}, out: []string{id, "revoked:  by local"}},
		{name: "confirm a revoked grant", args: []string{"grants", "confirm", id}, code: 1, err: "confirm " + id + ": HTTP 409"},
		{name: "revoke a missing grant", args: []string{"grants", "revoke", "grt_missing"}, code: 1, err: "HTTP 404"},
		{name: "revoke an invalid id", args: []string{"grants", "revoke", "nope"}, code: 1, err: `HTTP 400: grant id "nope" is not valid`},
	})
}

// Without security.allow_self_approval the run's owner cannot approve its own
// call: the CLI prints the API's 403 and its reason; a rejection stays possible.
func TestApprovalsSelfApprovalRefused(t *testing.T) {
	t.Parallel()
	f := fleettest.Start(t, fleettest.Options{NoWorker: true, Configure: func(c *config.Config) { c.Security.AllowSelfApproval = false }})
	run := f.Submit("demo", "x", map[string]any{"topic": "t"})
	id := callApproval(t, f, run, 1, "rm -rf build/")
	steps(t, f.URL, []step{
		{name: "approve", args: []string{"approvals", "approve", id}, code: 1, err: "approve " + id + ": HTTP 403: not allowed to decide: local submitted run " + run},
		{name: "edit", args: []string{"approvals", "edit", id, "--args", `{"command":"ls"}`}, code: 1, err: "HTTP 403"},
		{name: "deny", args: []string{"approvals", "deny", id, "--reason", "not today"}, out: []string{"denied by local"}},
	})
}

// End to end: an agent asks with ask_user, `approvals list --kind question`
// shows it, `approvals answer --choice` answers it, and the run completes with
// the answer in its model's history.
func TestApprovalsAnswerResumesTheAgent(t *testing.T) {
	t.Parallel()
	f := fleettest.Start(t, fleettest.Options{})
	run := f.SubmitTeam(map[string]any{
		"name":  "asking",
		"model": map[string]any{"provider": "script"},
		"supervisor": map[string]any{
			"name": "boss", "prompt": "coordinate", "mcp_servers": []string{"orchestration"},
		},
		"workers": []map[string]any{{"name": "writer", "prompt": "write", "mcp_servers": []string{"workspace", "comms"}}},
		"script": map[string]any{"agents": map[string]any{
			"boss": []map[string]any{
				{"calls": []map[string]any{{"tool": "delegate", "args": map[string]any{"agent": "writer", "task": "go"}}}},
				{"calls": []map[string]any{{"tool": "reply", "args": map[string]any{"message": "done"}}}},
			},
			"writer": []map[string]any{
				{"calls": []map[string]any{{"tool": "ask_user", "args": map[string]any{"question": "Which database?", "choices": []string{"postgres", "sqlite"}}}}},
				{"say": "done"},
			},
		}},
	}, "ask")
	var out string
	require.Eventually(t, func() bool {
		_, out, _ = cliRun("approvals", "list", "--api", f.URL, "--run", run, "--kind", "question")
		return strings.Contains(out, "question: Which database?")
	}, 30*time.Second, 50*time.Millisecond, "the question is listed")
	require.Contains(t, out, "    1. postgres\n    2. sqlite\n")
	id := strings.Fields(out)[0]
	code, answered, errOut := cliRun("approvals", "answer", id, "--api", f.URL, "--choice", "2")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, answered, "approval "+id+" answered by local")
	require.Equal(t, "completed", f.WaitTerminal(run, 60*time.Second).Status)
	var msgs string
	require.NoError(t, f.Store.Pool.QueryRow(context.Background(),
		`SELECT session_history(id)::text FROM sessions WHERE run_id = $1 AND agent = 'writer'`, run).Scan(&msgs))
	require.Contains(t, msgs, "local answered: sqlite")
}
