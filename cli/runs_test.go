package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/fleet"
	"github.com/aetherium-engine/aetherium/fleettest"
)

// exported is what the tests read of runs export.
type exported struct {
	Run struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	} `json:"run"`
	Events []struct {
		Type string `json:"type"`
	} `json:"events"`
	Audit            []map[string]any `json:"audit"`
	AuditUnavailable string           `json:"audit_unavailable"`
}

func (e exported) types() []string {
	var out []string
	for _, ev := range e.Events {
		out = append(out, ev.Type)
	}
	return out
}

// runs list, show, cancel and export over a real fleet: a completed run and
// one waiting for its approval, which is then cancelled. Flags stand before or
// after the run id; the API's refusals are its message, not its JSON.
func TestRunsCommands(t *testing.T) {
	t.Parallel()
	f := fleettest.Start(t, fleettest.Options{Fleet: fleet.Options{ExtraTools: fleettest.StandInPDF}})
	done := f.SubmitTeam(map[string]any{
		"name": "greeter", "model": map[string]any{"provider": "script"},
		"supervisor": map[string]any{"name": "boss", "prompt": "greet", "mcp_servers": []string{"orchestration"}},
		"script": map[string]any{"agents": map[string]any{"boss": []map[string]any{
			{"calls": []map[string]any{{"tool": "reply", "args": map[string]any{"message": "hello"}}}},
		}}},
	}, "say hello")
	require.Equal(t, "completed", f.WaitTerminal(done, 60*time.Second).Status)
	waiting := f.SubmitTeam(json.RawMessage(mustRead(t, approvalTeam(t))), "fetch the paper")
	apr := pendingApprovalOf(t, f, waiting)
	missing := uuid.NewString()
	file := filepath.Join(t.TempDir(), "history.json")

	cli := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := Main(append(args, "--api", f.URL), &out, &errOut)
		return code, out.String(), errOut.String()
	}
	for _, c := range []struct {
		name string
		args []string
		code int
		out  []string
		not  []string
		err  string
	}{
		{name: "list", args: []string{"runs", "list"}, out: []string{"ID  ", "STATUS", "TEMPLATE/TEAM", "DURATION", "SUBMITTED",
			done + "  completed  greeter", waiting, "reviewed", "local", "just now"}},
		{name: "list by status", args: []string{"runs", "list", "--status", "completed"}, out: []string{done}, not: []string{waiting}},
		{name: "list by team", args: []string{"runs", "list", "--team", "reviewed"}, out: []string{waiting, "so far"}, not: []string{done}},
		{name: "list by owner", args: []string{"runs", "list", "--owner", "local", "--limit", "1"}, out: []string{waiting, "(the newest 1; --limit N for more)"}, not: []string{done}},
		{name: "list of nobody", args: []string{"runs", "list", "--owner", "nobody"}, out: []string{"no runs"}},
		{name: "list by project", args: []string{"runs", "list", "--project", "nowhere"}, out: []string{"no runs"}},
		{name: "list refuses an argument", args: []string{"runs", "list", "completed"}, code: 1, err: `unexpected argument "completed"`},
		{name: "list refuses a bad status", args: []string{"runs", "list", "--status", "asleep"}, code: 1, err: `HTTP 400: status "asleep" is not one of`},
		{name: "list refuses --out", args: []string{"runs", "list", "--out", "x"}, code: 1, err: "list does not take --out"},
		{name: "show, flags after the id", args: []string{"runs", "show", done, "--events", "2"}, out: []string{
			"run " + done + "  completed", "team greeter, owner local", "prompt: say hello", "result: hello",
			"latest 2 of ", "run.completed", "script/script"}},
		{name: "show a waiting run", args: []string{"runs", "show", waiting}, out: []string{
			"approval.requested", "aetherium approvals approve " + apr}},
		{name: "show a missing run", args: []string{"runs", "show", missing}, code: 1, err: "HTTP 404: run " + missing + " not found"},
		{name: "show a bad id", args: []string{"runs", "show", "nope"}, code: 1, err: `want a run id (a UUID), got "nope"`},
		{name: "export to a file", args: []string{"runs", "export", waiting, "--out", file}, out: []string{"wrote run " + waiting + "'s history to " + file}},
		{name: "cancel", args: []string{"runs", "cancel", waiting}, out: []string{"run " + waiting + " cancelled"}},
		{name: "cancel twice", args: []string{"runs", "cancel", waiting}, code: 1, err: "cancel " + waiting + ": HTTP 409: run " + waiting + " is already cancelled"},
		{name: "cancel a missing run", args: []string{"runs", "cancel", missing}, code: 1, err: "HTTP 404"},
		{name: "retry a missing run", args: []string{"runs", "retry", missing}, code: 1, err: "retry " + missing + ": HTTP 404: run " + missing + " not found"},
		{name: "retry a bad id", args: []string{"runs", "retry", "nope"}, code: 1, err: `want a run id (a UUID), got "nope"`},
		{name: "retry takes no flags of others", args: []string{"runs", "retry", done, "--out", "x"}, code: 1, err: "retry does not take --out"},
		{name: "events of a missing run", args: []string{"events", missing}, code: 1, err: "aetherium events: HTTP 404: run " + missing + " not found"},
	} {
		code, out, errOut := cli(c.args...)
		require.Equal(t, c.code, code, "%s: %s%s", c.name, out, errOut)
		for _, w := range c.out {
			require.Contains(t, out, w, c.name)
		}
		for _, w := range c.not {
			require.NotContains(t, out, w, c.name)
		}
		require.Contains(t, errOut, c.err, c.name)
		require.NotContains(t, errOut, `{"error"`, "%s: the API's message, not its body", c.name)
	}

	// runs retry submits the completed run again: a new run, which completes
	// as the first did.
	code, out, errOut := cli("runs", "retry", done)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, ", a retry of "+done)
	again, _, ok := strings.Cut(strings.TrimPrefix(out, "run "), " queued")
	require.True(t, ok, out)
	require.NotEqual(t, done, again)
	require.Contains(t, out, "aetherium runs show "+again)
	retried := f.WaitTerminal(again, 60*time.Second)
	require.Equal(t, "completed", retried.Status)
	require.Equal(t, "hello", retried.Result)

	// The cancelled run ended so: its status and its last event.
	require.Equal(t, "cancelled", f.WaitTerminal(waiting, 10*time.Second).Status)
	code, out, errOut = cli("runs", "export", waiting)
	require.Equal(t, 0, code, errOut)
	var cancelled exported
	require.NoError(t, json.Unmarshal([]byte(out), &cancelled), "export is JSON: %s", out)
	require.Equal(t, "cancelled", cancelled.Run.Status)
	types := cancelled.types()
	require.Equal(t, "run.cancelled", types[len(types)-1], types)
	require.Contains(t, types, "approval.requested")

	// The file written before the cancel: the waiting run's history so far.
	var before exported
	require.NoError(t, json.Unmarshal(mustRead(t, file), &before))
	require.Equal(t, waiting, before.Run.ID)
	require.Contains(t, before.types(), "approval.requested")
	require.NotContains(t, before.types(), "run.cancelled")
	st, err := os.Stat(file)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "a run's history is its owner's")

	// A completed run: every event to the terminal one, and its audit.
	code, out, errOut = cli("runs", "export", done)
	require.Equal(t, 0, code, errOut)
	var history exported
	require.NoError(t, json.Unmarshal([]byte(out), &history))
	require.Equal(t, done, history.Run.ID)
	require.Equal(t, "run.queued", history.types()[0])
	require.Equal(t, "run.completed", history.types()[len(history.Events)-1])
	require.Empty(t, history.AuditUnavailable)
	require.NotEmpty(t, history.Audit, "the reply call is audited")

	// list --json is the runs as JSON.
	code, out, errOut = cli("runs", "list", "--json", "--status", "cancelled")
	require.Equal(t, 0, code, errOut)
	var listed struct {
		Runs []struct {
			ID string `json:"id"`
		} `json:"runs"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &listed))
	require.Len(t, listed.Runs, 1)
	require.Equal(t, waiting, listed.Runs[0].ID)
	require.False(t, strings.Contains(out, done))
}
