package shell_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/fleet"
	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/sandbox/sandboxtest"
)

func step(tool string, args map[string]any) map[string]any {
	return map[string]any{"calls": []map[string]any{{"tool": tool, "args": args}}}
}

// A whole run on the script model: one worker writes a file; another writes, edits,
// searches, runs ls/cat in the run's Docker sandbox, edits again, reverts both files
// and checks the result with cat. Every call passes the permission gate; the audit
// trail and command_log record them.
func TestWorkspaceAndShellEndToEnd(t *testing.T) {
	t.Parallel()
	d := sandboxtest.Docker(t)
	f := fleettest.Start(t, fleettest.Options{Fleet: fleet.Options{Executor: d}})

	// The writer's session creates the file; the builder's session changes it and
	// reverts to what it found.
	writer := []map[string]any{
		step("write_file", map[string]any{"path": "app/main.txt", "content": "hello world\nsecond line\n"}),
		{"say": "wrote app/main.txt"},
	}
	builder := []map[string]any{
		step("write_file", map[string]any{"path": "notes.txt", "content": "scratch\n"}),
		step("edit_file", map[string]any{"path": "app/main.txt", "search": "hello world", "replace": "hello fleet"}),
		step("search_files", map[string]any{"query": "fleet"}),
		step("run_shell", map[string]any{"command": "ls app && cat app/main.txt"}),
		step("edit_file", map[string]any{"path": "app/main.txt", "search": "second  line", "replace": "edited again"}),
		step("revert_file", map[string]any{"path": "app/main.txt"}),
		step("revert_file", map[string]any{"path": "notes.txt"}),
		step("run_shell", map[string]any{"command": "cat app/main.txt; ls"}),
		step("list_files", map[string]any{}),
		{"say": "built and checked app/main.txt"},
	}
	team := map[string]any{
		"name":  "shell-e2e",
		"model": map[string]any{"provider": "script"},
		"supervisor": map[string]any{
			"name": "boss", "prompt": "coordinate", "mcp_servers": []string{"orchestration"},
		},
		"workers": []map[string]any{
			{"name": "writer", "prompt": "write", "mcp_servers": []string{"workspace"}},
			{"name": "builder", "prompt": "build", "mcp_servers": []string{"workspace", "shell"}},
		},
		"script": map[string]any{"agents": map[string]any{
			"boss": []map[string]any{
				step("delegate", map[string]any{"agent": "writer", "task": "write app/main.txt"}),
				step("delegate", map[string]any{"agent": "builder", "task": "change app/main.txt, check it, put it back"}),
				step("reply", map[string]any{"message": "done"}),
			},
			"writer":  writer,
			"builder": builder,
		}},
	}
	id := f.SubmitTeam(team, "build and check a file")
	evs := f.Follow(id, 0, 120*time.Second)
	require.Equal(t, "run.completed", evs[len(evs)-1].Type, "%+v", evs[len(evs)-1])

	// Every builder call was allowed and succeeded; results as the model saw them.
	type callEvent struct {
		Tool, Decision, Error, Result string
	}
	var calls []callEvent
	for _, e := range evs {
		if e.Type != "tool.call" || e.Agent != "builder" {
			continue
		}
		var c callEvent
		require.NoError(t, json.Unmarshal(e.Data, &c))
		require.Equal(t, "allowed", c.Decision, "%+v", c)
		require.Empty(t, c.Error, "%+v", c)
		calls = append(calls, c)
	}
	require.Len(t, calls, 9)
	require.Contains(t, calls[0].Result, "created notes.txt")
	require.Contains(t, calls[1].Result, "1 exact match at line 1")
	require.Contains(t, calls[2].Result, "app/main.txt:1: hello fleet")
	require.True(t, strings.HasPrefix(calls[3].Result, "main.txt\nhello fleet\nsecond line\n[exit 0"), calls[3].Result)
	require.Contains(t, calls[4].Result, "whitespace-tolerant match at line 2")
	require.Contains(t, calls[5].Result, "before this session's first edit")
	require.Contains(t, calls[6].Result, "removed it")
	require.True(t, strings.HasPrefix(calls[7].Result, "hello world\nsecond line\napp\n[exit 0"), "revert restored the file as the session found it: %s", calls[7].Result)
	require.Contains(t, calls[8].Result, "main.txt")
	require.NotContains(t, calls[8].Result, "notes.txt")

	b, err := os.ReadFile(filepath.Join(f.Cfg.Workspaces, id, "app", "main.txt"))
	require.NoError(t, err)
	require.Equal(t, "hello world\nsecond line\n", string(b))

	ctx := context.Background()
	cmds, err := f.Store.ListCommands(ctx, id, 0)
	require.NoError(t, err)
	require.Len(t, cmds, 2)
	require.Equal(t, "ls app && cat app/main.txt", cmds[0].Command)
	require.Equal(t, "cat app/main.txt; ls", cmds[1].Command)
	for _, c := range cmds {
		require.Equal(t, "builder", c.Agent)
		require.Equal(t, 0, c.ExitCode)
		require.False(t, c.TimedOut)
		require.Positive(t, c.OutputBytes)
	}
	require.EqualValues(t, len("main.txt\nhello fleet\nsecond line\n"), cmds[0].OutputBytes)

	f.Audit.Flush()
	rows, err := f.Store.RunAudit(ctx, id, 100)
	require.NoError(t, err)
	var tools []string
	for _, r := range rows {
		if r.Agent != "builder" {
			continue
		}
		require.Equal(t, "allowed", r.Decision, "%+v", r)
		tools = append(tools, r.Tool+":"+r.Tier)
		if r.Tool == "run_shell" {
			require.NotNil(t, r.Result, "elevated calls keep the full result")
			require.Contains(t, *r.Result, "[exit 0")
			require.Contains(t, string(r.Args), "cat app/main.txt")
			require.Contains(t, *r.Result, "second line")
		}
	}
	require.Equal(t, []string{
		"write_file:standard", "edit_file:standard", "search_files:standard", "run_shell:elevated",
		"edit_file:standard", "revert_file:standard", "revert_file:standard", "run_shell:elevated", "list_files:standard",
	}, tools)

	// The run's sandbox is one container, this run's. The maintenance's orphan
	// sweep (every scheduler.period) removes it once the run has ended, so on a
	// loaded machine it may be gone already: never another one.
	projects, err := d.Projects(ctx)
	require.NoError(t, err)
	require.Subset(t, []string{id}, projects)
	require.NoError(t, d.Release(ctx, id))
}
