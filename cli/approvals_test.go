package cli_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/cli"
	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/store"
)

// cliRun runs `aetherium args…` and returns its exit code, stdout and stderr.
func cliRun(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	c := cli.Main(args, &out, &errOut)
	return c, out.String(), errOut.String()
}

// callApproval requests a pending approval of a run_shell call in run.
func callApproval(t *testing.T, f *fleettest.Fleet, run string, n int, command string) string {
	t.Helper()
	args, err := json.Marshal(map[string]string{"command": command})
	require.NoError(t, err)
	view, err := json.Marshal(map[string][]string{"commands": {command}})
	require.NoError(t, err)
	a, created, err := f.Store.RequestApproval(context.Background(), store.Approval{
		ID: fmt.Sprintf("apr_cli%d_%s", n, strings.ReplaceAll(run, "-", "")[:16]), RunID: run, SessionID: queue.SupervisorSession(run).String(),
		CallID: fmt.Sprint("call-", n), Agent: "lead", Tool: "run_shell", Tier: "restricted", Why: "destructive command",
		Args: args, View: view, ArgsHash: fmt.Sprintf("%x", sha256.Sum256(args)),
		// As the gate records it: a grant made under another revision is suspended.
		PolicyRevision: f.Approvals.PolicyRevision(),
	}, time.Hour)
	require.NoError(t, err)
	require.True(t, created)
	return a.ID
}

func TestApprovalsHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"approvals", "--help"}, {"approvals", "-h"}, {"approvals", "help"}} {
		c, out, errOut := cliRun(args...)
		require.Equal(t, 0, c, errOut)
		require.Contains(t, out, "aetherium approvals answer", args)
		require.Contains(t, out, "--grant run|project|team", args)
		require.NotContains(t, errOut, "unknown subcommand", args)
	}
	c, out, _ := cliRun("grants", "--help")
	require.Equal(t, 0, c)
	require.Contains(t, out, "aetherium grants confirm ID")
	c, _, errOut := cliRun("approvals")
	require.Equal(t, 1, c)
	require.Contains(t, errOut, "usage:")
	c, out, _ = cliRun("help")
	require.Equal(t, 0, c)
	require.Contains(t, out, "grants list|revoke|confirm")
}

// What the CLI refuses before asking the API, naming the flag; nothing reaches
// the API (it is down: a request would fail with "is the API running?").
func TestApprovalsRefusesBadFlags(t *testing.T) {
	t.Parallel()
	down := "http://127.0.0.1:1"
	for _, c := range []struct {
		name string
		args []string
		err  string
	}{
		{"unknown subcommand", []string{"approvals", "purge"}, `unknown subcommand "purge"`},
		{"no id", []string{"approvals", "approve", "--api", down}, "approve needs an approval id"},
		{"grant flags without grant", []string{"approvals", "approve", "apr_x", "--api", down, "--match", "command"}, "add --grant run|project|team"},
		{"bad scope", []string{"approvals", "approve", "apr_x", "--api", down, "--grant", "world"}, `--grant "world": run, project or team`},
		{"bad match", []string{"approvals", "approve", "apr_x", "--api", down, "--grant", "run", "--match", "regex"}, `--match "regex"`},
		{"command without pattern", []string{"approvals", "approve", "apr_x", "--api", down, "--grant", "team", "--match", "command"}, "--match command needs --pattern"},
		{"pattern with exact", []string{"approvals", "approve", "apr_x", "--api", down, "--grant", "run", "--pattern", "go *"}, "--pattern is for --match command or url_prefix"},
		{"bad ttl", []string{"approvals", "approve", "apr_x", "--api", down, "--grant", "run", "--ttl", "soon"}, `--ttl "soon"`},
		{"deny without reason", []string{"approvals", "deny", "apr_x", "--api", down}, "deny needs --reason"},
		{"deny with a grant", []string{"approvals", "deny", "apr_x", "--api", down, "--reason", "no", "--grant", "run"}, "deny does not take --grant"},
		{"edit without args", []string{"approvals", "edit", "apr_x", "--api", down}, "--args JSON or --args-file FILE"},
		{"edit with both", []string{"approvals", "edit", "apr_x", "--api", down, "--args", "{}", "--args-file", "x.json"}, "not both"},
		{"edit with an array", []string{"approvals", "edit", "apr_x", "--api", down, "--args", "[1]"}, "must be a JSON object"},
		{"edit with null", []string{"approvals", "edit", "apr_x", "--api", down, "--args", "null"}, "must be a JSON object"},
		{"edit with a missing file", []string{"approvals", "edit", "apr_x", "--api", down, "--args-file", "/nonexistent/args.json"}, "--args-file: open /nonexistent/args.json"},
		{"answer without text", []string{"approvals", "answer", "apr_x", "--api", down}, "answer needs the answer's text"},
		{"answer with both", []string{"approvals", "answer", "apr_x", "--api", down, "--choice", "1", "postgres"}, "either --choice N or the answer's text"},
		{"list of a bad kind", []string{"approvals", "list", "--api", down, "--kind", "tool"}, `--kind "tool": call or question`},
		{"show with two ids", []string{"approvals", "show", "apr_x", "apr_y", "--api", down}, `unexpected argument "apr_y"`},
		{"api down", []string{"approvals", "show", "apr_x", "--api", down}, "is the API running?"},
		{"grants: unknown subcommand", []string{"grants", "delete"}, `unknown subcommand "delete"`},
		{"grants: revoke without id", []string{"grants", "revoke", "--api", down}, "revoke needs a grant id"},
		{"grants: bad status", []string{"grants", "list", "--api", down, "--status", "gone"}, `--status "gone"`},
		{"grants: confirm with status", []string{"grants", "confirm", "gr_x", "--api", down, "--status", "active"}, "confirm does not take --status"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			code, _, errOut := cliRun(c.args...)
			require.Equal(t, 1, code, errOut)
			require.Contains(t, errOut, c.err)
			if c.name != "api down" {
				require.NotContains(t, errOut, "is the API running?")
			}
		})
	}
}

// list, show, approve and deny over a running API; the API's refusals are
// printed as HTTP status and message, never as a JSON body.
func TestApprovalsDecideCalls(t *testing.T) {
	t.Parallel()
	f := fleettest.Start(t, fleettest.Options{NoWorker: true})
	run := f.Submit("demo", "x", map[string]any{"topic": "t"})
	approveMe := callApproval(t, f, run, 1, "rm -rf build/")
	denyMe := callApproval(t, f, run, 2, "git push --force")
	other := uuid.NewString()
	// The parallel reads end (the group returns) before the decisions below start.
	t.Run("reads", func(t *testing.T) {
		for _, c := range []struct {
			name string
			args []string
			code int
			out  []string
			err  string
		}{
			{"list", []string{"list"}, 0, []string{approveMe + "  pending  run " + run, "tool run_shell", "1. rm -rf build/", denyMe}, ""},
			{"list of the run", []string{"list", "--run", run, "--status", "all"}, 0, []string{approveMe, denyMe}, ""},
			{"list of another run", []string{"list", "--run", other}, 0, []string{"no approvals"}, ""},
			{"list of calls", []string{"list", "--kind", "call"}, 0, []string{approveMe}, ""},
			{"show", []string{"show", approveMe}, 0, []string{"why:      destructive command", `args:     {"command":"rm -rf build/"}`, "sha256:"}, ""},
			{"show a missing approval", []string{"show", "apr_missing"}, 1, nil, "HTTP 404: approval apr_missing not found"},
			{"show an invalid id", []string{"show", "nope"}, 1, nil, `HTTP 400: approval id "nope" is not valid`},
			{"bad status", []string{"list", "--status", "maybe"}, 1, nil, "HTTP 400: status \"maybe\""},
		} {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				args := append([]string{"approvals", c.args[0], "--api", f.URL}, c.args[1:]...)
				code, out, errOut := cliRun(args...)
				require.Equal(t, c.code, code, errOut)
				for _, want := range c.out {
					require.Contains(t, out, want)
				}
				require.Contains(t, errOut, c.err)
				require.NotContains(t, errOut, `{"error"`, "the API's message, not its body")
			})
		}
	})

	// Decisions, in order: the second decision on an approval is a 409.
	code, out, errOut := cliRun("approvals", "approve", approveMe, "--api", f.URL, "--reason", "build/ is scratch")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "approval "+approveMe+" approved by ")
	code, _, errOut = cliRun("approvals", "deny", approveMe, "--api", f.URL, "--reason", "changed my mind")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "deny "+approveMe+": HTTP 409")
	code, out, errOut = cliRun("approvals", "deny", "--api", f.URL, "--reason", "never force-push main", denyMe)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "approval "+denyMe+" denied by ")
	code, out, errOut = cliRun("approvals", "show", denyMe, "--api", f.URL)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "never force-push main")
	code, out, errOut = cliRun("approvals", "list", "--api", f.URL)
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "no approvals\n", out, "both are decided")
}
