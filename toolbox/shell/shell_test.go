package shell_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/internal/testdb"

	"github.com/aetherium-engine/aetherium/sandbox"
	"github.com/aetherium-engine/aetherium/sandbox/sandboxtest"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/toolbox"
	"github.com/aetherium-engine/aetherium/toolbox/shell"
	"github.com/aetherium-engine/aetherium/tools"
)

// env is one run with a workspace, the full toolset on a router, a real store and
// an executor.
type env struct {
	t      *testing.T
	st     *store.Store
	x      sandbox.Executor
	router *tools.Router
	runID  string
	ws     string
	domain []string
}

func setup(t *testing.T, x sandbox.Executor, sh shell.Config) *env {
	t.Helper()
	st := testdb.Store(t)
	reg, err := toolbox.New(toolbox.Deps{Store: st, Executor: x, Shell: sh})
	require.NoError(t, err)
	e := &env{t: t, st: st, x: x, router: tools.NewRouter(reg), runID: uuid.NewString(), ws: sandboxtest.Workspace(t)}
	require.NoError(t, st.CreateRun(context.Background(), store.Run{ID: e.runID, Prompt: "p", Team: json.RawMessage(`{}`)}))
	t.Cleanup(func() { _ = x.Release(context.Background(), e.runID) })
	return e
}

func (e *env) call(tool string, args any) (string, error) {
	raw, err := json.Marshal(args)
	require.NoError(e.t, err)
	ctx, caller := context.Background(), &tools.Session{
		RunID: e.runID, SessionID: "s1", Agent: "builder", Role: "worker", Workspace: e.ws, AllowedDomains: e.domain,
		Access: tools.Access{Tools: []string{"run_shell", "read_logs", "write_file", "edit_file", "read_file"}},
	}
	res, err := e.router.Dispatch(ctx, tools.Call{Session: caller, ID: "c", Name: tool, Args: raw})
	return res.Content, err
}

func (e *env) must(tool string, args any) string {
	e.t.Helper()
	out, err := e.call(tool, args)
	require.NoError(e.t, err, "%s %v", tool, args)
	return out
}

func (e *env) commands() []store.Command {
	e.t.Helper()
	rows, err := e.st.ListCommands(context.Background(), e.runID, 0)
	require.NoError(e.t, err)
	return rows
}

func TestRunShellRecordsEveryInvocation(t *testing.T) {
	t.Parallel()
	e := setup(t, sandboxtest.Docker(t, func(c *sandbox.Config) { c.MaxOutputBytes = 2000 }), shell.Config{})

	out := e.must("run_shell", map[string]any{"command": "echo hello; echo oops >&2; exit 3"})
	require.True(t, strings.HasPrefix(out, "hello\noops\n[exit 3, "), out)

	out = e.must("run_shell", map[string]any{"command": "sleep 30", "timeout": 1})
	require.Contains(t, out, "[timed out after")
	require.Contains(t, out, "exit 124]")

	out = e.must("run_shell", map[string]any{"command": "head -c 5000 /dev/zero | tr '\\0' z"})
	require.Contains(t, out, sandbox.TruncationMarker)
	require.Contains(t, out, "output truncated: 5000 bytes in all")

	require.NoError(t, os.MkdirAll(filepath.Join(e.ws, "sub"), 0o755))
	out = e.must("run_shell", map[string]any{"command": "pwd", "workdir": "sub"})
	require.True(t, strings.HasPrefix(out, "/workspace/sub\n"), out)

	// An executor refusal is an invocation too: recorded with exit -1.
	_, err := e.call("run_shell", map[string]any{"command": "true", "workdir": "no-such-dir"})
	require.ErrorIs(t, err, sandbox.ErrInvalidRequest)

	// Refused before reaching the executor: not a command, not recorded.
	for _, args := range []map[string]any{
		{"command": "   "},
		{"command": "true", "workdir": "../.."},
		{"command": "true", "workdir": "/etc"},
		{"command": strings.Repeat("x", 20000)},
		{"command": "true", "timeout": -1},
	} {
		_, err := e.call("run_shell", args)
		require.Error(t, err, "%v", args)
	}

	rows := e.commands()
	type row struct {
		cmd                 string
		code                int
		truncated, timedOut bool
		bytes               int64
	}
	var got []row
	for _, r := range rows {
		require.Equal(t, "builder", r.Agent)
		require.Equal(t, e.runID, r.RunID)
		got = append(got, row{r.Command, r.ExitCode, r.Truncated, r.TimedOut, r.OutputBytes})
	}
	require.Equal(t, []row{
		{"echo hello; echo oops >&2; exit 3", 3, false, false, 11},
		{"sleep 30", 124, false, true, 0},
		{"head -c 5000 /dev/zero | tr '\\0' z", 0, true, false, 5000},
		{"pwd", 0, false, false, int64(len("/workspace/sub\n"))},
		{"true", -1, false, false, 0},
	}, got)
	require.GreaterOrEqual(t, rows[1].DurationMS, int64(1000), "the timeout row carries the time it ran")
}

func TestShellAndWorkspaceToolsShareFiles(t *testing.T) {
	t.Parallel()
	e := setup(t, sandboxtest.Docker(t), shell.Config{})
	// The worker (root here) writes; the sandbox user must still be able to change it.
	e.must("write_file", map[string]any{"path": "notes/todo.txt", "content": "one\n"})
	out := e.must("run_shell", map[string]any{"command": "echo two >> notes/todo.txt && mkdir -p notes/more && echo three > notes/more/x && cat notes/todo.txt"})
	require.True(t, strings.HasPrefix(out, "one\ntwo\n[exit 0"), out)
	require.Equal(t, "one\ntwo\n", e.must("read_file", map[string]any{"path": "notes/todo.txt"}))
	e.must("edit_file", map[string]any{"path": "notes/more/x", "search": "three", "replace": "THREE"})
	require.Contains(t, e.must("run_shell", map[string]any{"command": "cat notes/more/x"}), "THREE")
}

func TestRunShellNetworkFollowsTheTeam(t *testing.T) {
	t.Parallel()
	d := sandboxtest.Docker(t)
	e := setup(t, d, shell.Config{})
	e.domain = []string{"example.com"}
	e.must("run_shell", map[string]any{"command": "true"})
	info, err := d.Inspect(context.Background(), e.runID)
	require.NoError(t, err)
	// Egress goes only through the egress proxy; an executor without one never
	// falls back to an unfiltered bridge (egressproxy's tests cover the proxied
	// per-run network).
	require.Equal(t, "none", string(info.HostConfig.NetworkMode), "allowed_domains without an egress proxy")

	f := setup(t, d, shell.Config{})
	f.must("run_shell", map[string]any{"command": "true"})
	info, err = d.Inspect(context.Background(), f.runID)
	require.NoError(t, err)
	require.Equal(t, "none", string(info.HostConfig.NetworkMode))
}

func TestRunShellLocalSaysItIsNotASandbox(t *testing.T) {
	t.Parallel()
	x, err := sandbox.NewLocal(sandbox.Config{AllowLocal: true})
	require.NoError(t, err)
	e := setup(t, x, shell.Config{})
	out := e.must("run_shell", map[string]any{"command": "echo local"})
	require.Contains(t, out, "local\n[exit 0")
	require.Contains(t, out, "NOT a sandbox")
	require.Len(t, e.commands(), 1)
	_, err = e.call("read_logs", map[string]any{"source": "docker"})
	require.ErrorIs(t, err, sandbox.ErrNoLogs)
}

func TestMissingDependenciesFailAtCallTime(t *testing.T) {
	t.Parallel()
	reg, err := toolbox.New(toolbox.Deps{})
	require.NoError(t, err, "a catalog-only registry still builds")
	spec, ok := reg.Spec("run_shell")
	require.True(t, ok)
	require.Equal(t, tools.Elevated, spec.Tier)
	spec, ok = reg.Spec("read_logs")
	require.True(t, ok)
	require.Equal(t, tools.Elevated, spec.Tier)
	ctx, caller := context.Background(), &tools.Session{
		RunID: uuid.NewString(), Workspace: t.TempDir(), Access: tools.Access{Tools: []string{"run_shell", "read_logs"}},
	}
	r := tools.NewRouter(reg)
	_, err = r.Dispatch(ctx, tools.Call{Session: caller, Name: "run_shell", Args: json.RawMessage(`{"command":"true"}`)})
	require.ErrorContains(t, err, "no command executor")
	_, err = r.Dispatch(ctx, tools.Call{Session: caller, Name: "read_logs", Args: json.RawMessage(`{"source":"docker"}`)})
	require.ErrorContains(t, err, "no sandbox executor")

	// An executor without a command log: commands never run unrecorded.
	x, err := sandbox.NewLocal(sandbox.Config{AllowLocal: true})
	require.NoError(t, err)
	reg, err = toolbox.New(toolbox.Deps{Executor: x})
	require.NoError(t, err)
	marker := filepath.Join(t.TempDir(), "ran")
	_, err = tools.NewRouter(reg).Dispatch(ctx, tools.Call{Session: caller, Name: "run_shell", Args: json.RawMessage(fmt.Sprintf(`{"command":"touch %s"}`, marker))})
	require.ErrorContains(t, err, "no command log")
	require.NoFileExists(t, marker)
}

func TestReadLogs(t *testing.T) {
	t.Parallel()
	bin := t.TempDir()
	fake := filepath.Join(bin, "journalctl")
	// A stand-in journalctl that shows the arguments it was given.
	require.NoError(t, os.WriteFile(fake, []byte("#!/bin/sh\necho \"journal: $*\"\n"), 0o755))
	e := setup(t, sandboxtest.Docker(t), shell.Config{JournalUnits: []string{"nginx.service"}, Journalctl: fake, MaxLogLines: 50})

	// docker: the sandbox container's log.
	_, err := e.call("read_logs", map[string]any{"source": "docker"})
	require.ErrorIs(t, err, sandbox.ErrNoSandbox)
	e.must("run_shell", map[string]any{"command": "for i in $(seq 1 30); do echo server-line-$i >> /tmp/console.log; done"})
	require.Eventually(t, func() bool {
		out, err := e.call("read_logs", map[string]any{"source": "docker", "tail": 3})
		return err == nil && out == "server-line-28\nserver-line-29\nserver-line-30\n"
	}, 10*time.Second, 100*time.Millisecond)
	out := e.must("read_logs", map[string]any{"source": "docker", "since": "1h"})
	require.Contains(t, out, "server-line-1\n")

	// file: the tail of a workspace log.
	var lines strings.Builder
	for i := 1; i <= 500; i++ {
		fmt.Fprintf(&lines, "app line %d\n", i)
	}
	require.NoError(t, os.MkdirAll(filepath.Join(e.ws, "logs"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(e.ws, "logs", "app.log"), []byte(lines.String()), 0o644))
	require.Equal(t, "app line 499\napp line 500\n", e.must("read_logs", map[string]any{"source": "file", "path": "logs/app.log", "tail": 2}))
	out = e.must("read_logs", map[string]any{"source": "file", "path": "logs/app.log", "tail": 5000})
	require.Equal(t, 50, strings.Count(out, "\n"), "tail is capped by MaxLogLines")
	require.NoError(t, os.Symlink("/etc/passwd", filepath.Join(e.ws, "logs", "pw.log")))
	for _, p := range []string{"../../etc/passwd", "/var/log/syslog", "logs/pw.log", "logs"} {
		_, err := e.call("read_logs", map[string]any{"source": "file", "path": p})
		require.Error(t, err, p)
	}

	// journal: only allowed units, through journalctl with tail and since.
	out = e.must("read_logs", map[string]any{"source": "journal", "unit": "nginx.service", "tail": 7, "since": "2026-01-02T03:04:05Z"})
	require.Equal(t, "journal: --no-pager --quiet --output=short-iso --unit=nginx.service --lines=7 --since=@1767323045\n", out)
	_, err = e.call("read_logs", map[string]any{"source": "journal", "unit": "sshd.service"})
	require.ErrorContains(t, err, "not one of the allowed units")
	_, err = e.call("read_logs", map[string]any{"source": "journal", "unit": "nginx.service; rm -rf /"})
	require.ErrorContains(t, err, "not a valid systemd unit")

	_, err = e.call("read_logs", map[string]any{"source": "docker", "since": "yesterday"})
	require.ErrorContains(t, err, "since")
	_, err = e.call("read_logs", map[string]any{"source": "syslog"})
	require.Error(t, err)

	// The journal is off unless units are allowed.
	off := setup(t, sandboxtest.Docker(t), shell.Config{Journalctl: fake})
	_, err = off.call("read_logs", map[string]any{"source": "journal", "unit": "nginx.service"})
	require.ErrorContains(t, err, "disabled by configuration")
}
