package fleet_test

import (
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
	"github.com/aetherium-engine/aetherium/sandbox/sandboxtest"
	"github.com/aetherium-engine/aetherium/wsquota"
	"github.com/aetherium-engine/aetherium/wsquota/wsquotatest"
)

// A run that writes past its workspace's quota gets the quota error as tool
// results — from run_shell (a process in the sandbox) and from write_file — frees
// space and finishes; another run on the same fleet meanwhile completes as usual.
func TestWorkspaceQuotaReachesTheModel(t *testing.T) {
	t.Parallel()
	wsquotatest.Require(t)
	d := sandboxtest.Docker(t)
	f := fleettest.Start(t, fleettest.Options{Fleet: fleet.Options{Executor: d}, Configure: func(c *config.Config) {
		c.WorkspaceLimits.Quota = 16 << 20
		c.API.BodyLimit = 4 << 20
	}})
	filler := []map[string]any{
		call("run_shell", map[string]any{"command": "head -c 33554432 /dev/zero > big"}),
		// ext4 keeps back about a MiB of a full 16 MiB filesystem: a MB does not fit.
		call("write_file", map[string]any{"path": "more.txt", "content": strings.Repeat("x", 1_000_000)}),
		call("run_shell", map[string]any{"command": "rm big && echo freed"}),
		call("write_file", map[string]any{"path": "note.txt", "content": "fits again\n"}),
		{"say": "done"},
	}
	// The script's megabyte counts as tokens.
	tm := team(filler, map[string]any{"budget": map[string]any{"max_tokens": 10_000_000}})
	tm["workers"] = []map[string]any{{"name": "writer", "prompt": "fill", "mcp_servers": []string{"workspace", "shell"}}}
	id := f.SubmitTeam(tm, "fill the workspace")
	other := f.Submit("demo", "Greet", map[string]any{"topic": "quota"})

	evs := f.Follow(id, 0, 2*time.Minute)
	require.Equal(t, "run.completed", evs[len(evs)-1].Type, "%+v", evs[len(evs)-1])
	type callEvent struct{ Tool, Decision, Error, Result string }
	var calls []callEvent
	for _, e := range evs {
		if e.Type == "tool.call" && e.Agent == "writer" {
			var c callEvent
			require.NoError(t, json.Unmarshal(e.Data, &c))
			calls = append(calls, c)
		}
	}
	require.Len(t, calls, 4)
	quotaErr := `workspace quota exceeded: 1[56]\.\d MiB of 16\.0 MiB`
	// Result is the tool message exactly as the model got it.
	require.Equal(t, "error", calls[0].Decision, "%+v", calls[0])
	require.Regexp(t, `^error: run_shell: `+quotaErr+`: the command failed with the workspace full \(delete files in it to make room\); its output:\nhead: standard output: I/O error\n\[exit 1`, calls[0].Result)
	require.Equal(t, "error", calls[1].Decision)
	require.Regexp(t, `^error: `+quotaErr+` \(write_file: .*no space left on device\)$`, calls[1].Result)
	require.Equal(t, "allowed", calls[2].Decision, "%+v", calls[2])
	require.True(t, strings.HasPrefix(calls[2].Result, "freed\n[exit 0"), calls[2].Result)
	require.Equal(t, "allowed", calls[3].Decision, "%+v", calls[3])

	ws := filepath.Join(f.Cfg.Workspaces, id)
	u, ok := wsquota.UsageOf(ws)
	require.True(t, ok)
	require.LessOrEqual(t, u.Used, int64(16<<20))
	b, err := os.ReadFile(filepath.Join(ws, "note.txt"))
	require.NoError(t, err, "the workspace stays readable after the run")
	require.Equal(t, "fits again\n", string(b))

	require.Equal(t, "completed", f.WaitTerminal(other, time.Minute).Status, "the rest of the fleet keeps working")
	b, err = os.ReadFile(filepath.Join(f.Cfg.Workspaces, other, "hello.txt"))
	require.NoError(t, err)
	require.NotEmpty(t, b)
}

// The free-disk guard: the API answers 507 (JSON, nothing stored or enqueued) and a
// worker refuses to create a new workspace, failing the run with a reason.
func TestFreeDiskGuardRefusesNewWork(t *testing.T) {
	t.Parallel()
	cfg := fleettest.Config(t)
	cfg.WorkspaceLimits.Quota = 0 // the guard does not depend on quotas
	full := cfg
	full.WorkspaceLimits.MinFree = wsquota.MinFree{Bytes: 1 << 60}

	// An API whose guard passes, over workers whose guard does not.
	api := fleettest.StartWith(t, cfg, fleettest.Options{NoWorker: true})
	workers := fleettest.StartWith(t, full, fleettest.Options{})

	var body struct{ Error string }
	code, raw := workers.Do("POST", "/api/orchestrator/run-from-template",
		map[string]any{"template": "demo", "prompt": "Greet", "variables": map[string]any{"topic": "x"}}, &body)
	require.Equal(t, http.StatusInsufficientStorage, code, string(raw))
	require.Regexp(t, `^workspaces disk nearly full: [\d.]+ [KMGT]iB free of [\d.]+ [KMGT]iB at .+, below workspace_min_free 1024\.0 PiB`, body.Error)
	var list struct{ Runs []json.RawMessage }
	code, raw = workers.Do("GET", "/api/runs", nil, &list)
	require.Equal(t, http.StatusOK, code, string(raw))
	require.Empty(t, list.Runs, "a refused submit stores no run")

	id := api.Submit("demo", "Greet", map[string]any{"topic": "x"})
	run := api.WaitTerminal(id, time.Minute)
	require.Equal(t, "failed", run.Status)
	require.Equal(t, "workspace_disk_full", run.Reason)
	require.Contains(t, run.Error, "workspaces disk nearly full")
}
