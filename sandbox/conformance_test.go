package sandbox_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/sandbox"
	"github.com/aetherium-engine/aetherium/sandbox/sandboxtest"
)

// executors are the implementations every conformance case runs against.
var executors = []struct {
	name string
	new  func(t *testing.T) sandbox.Executor
}{
	{"docker", func(t *testing.T) sandbox.Executor { return sandboxtest.Docker(t) }},
	{"local", func(t *testing.T) sandbox.Executor {
		x, err := sandbox.NewLocal(sandbox.Config{AllowLocal: true, Timeout: 30 * time.Second})
		require.NoError(t, err)
		return x
	}},
}

// fixture is one executor with one project and its workspace.
type fixture struct {
	x       sandbox.Executor
	project string
	ws      string
}

func (f fixture) run(t *testing.T, cmd string) sandbox.Result {
	t.Helper()
	res, err := f.x.Exec(context.Background(), sandbox.Request{Project: f.project, Workspace: f.ws, Command: cmd})
	require.NoError(t, err, cmd)
	return res
}

// running counts processes whose command line matches the extended regex re, as seen
// from inside the executor (the pattern is written so it never matches itself).
func (f fixture) running(t *testing.T, re string) int {
	t.Helper()
	res := f.run(t, `for d in /proc/[0-9]*; do (tr '\0' ' ' < $d/cmdline) 2>/dev/null; echo; done | grep -cE '`+re+`'; true`)
	var n int
	_, err := fmt.Sscan(strings.TrimSpace(res.Output), &n)
	require.NoError(t, err, res.Output)
	return n
}

func TestConformance(t *testing.T) {
	t.Parallel()
	for _, impl := range executors {
		t.Run(impl.name, func(t *testing.T) {
			t.Parallel()
			f := fixture{x: impl.new(t), project: sandboxtest.Project(), ws: sandboxtest.Workspace(t)}
			conformance(t, f)
		})
	}
}

func conformance(t *testing.T, f fixture) {
	t.Run("output and exit code", func(t *testing.T) {
		t.Parallel()
		cases := []struct {
			cmd  string
			out  string
			code int
		}{
			{"echo out; echo err >&2; exit 3", "out\nerr\n", 3},
			{"true", "", 0},
			{"false", "", 1},
			{"printf 'a\\nb'", "a\nb", 0},
			{"exit 42", "", 42},
			{"kill -TERM $$", "", 128 + 15},
			{"echo 'héllo wörld'", "héllo wörld\n", 0},
		}
		for _, c := range cases {
			res := f.run(t, c.cmd)
			require.Equal(t, c.out, res.Output, c.cmd)
			require.Equal(t, c.code, res.ExitCode, c.cmd)
			require.False(t, res.TimedOut, c.cmd)
			require.False(t, res.Truncated, c.cmd)
			require.EqualValues(t, len(c.out), res.OutputBytes, c.cmd)
			require.Equal(t, f.x.Kind(), res.Executor)
		}
	})

	t.Run("runs in the workspace", func(t *testing.T) {
		t.Parallel()
		res := f.run(t, "echo data > made-by-shell.txt && cat made-by-shell.txt")
		require.Equal(t, "data\n", res.Output)
		b, err := os.ReadFile(filepath.Join(f.ws, "made-by-shell.txt"))
		require.NoError(t, err)
		require.Equal(t, "data\n", string(b))

		// A fresh project: files the host made before its sandbox started are
		// handed to the sandbox user.
		g := fixture{x: f.x, project: sandboxtest.Project(), ws: sandboxtest.Workspace(t)}
		require.NoError(t, os.MkdirAll(filepath.Join(g.ws, "sub", "deeper"), 0o755))
		res, err = g.x.Exec(context.Background(), sandbox.Request{Project: g.project, Workspace: g.ws, Dir: "sub/deeper", Command: "echo in-sub > here.txt; basename \"$PWD\""})
		require.NoError(t, err)
		require.Equal(t, "deeper\n", res.Output)
		require.FileExists(t, filepath.Join(g.ws, "sub", "deeper", "here.txt"))
	})

	t.Run("invalid requests", func(t *testing.T) {
		t.Parallel()
		for _, req := range []sandbox.Request{
			{Project: f.project, Workspace: f.ws, Command: "   "},
			{Project: f.project, Workspace: f.ws, Command: "echo a\x00b"},
			{Project: "", Workspace: f.ws, Command: "true"},
			{Project: f.project, Workspace: "", Command: "true"},
			{Project: f.project, Workspace: f.ws, Command: "true", Dir: "../.."},
			{Project: f.project, Workspace: f.ws, Command: "true", Dir: "/etc"},
			{Project: f.project, Workspace: f.ws, Command: "true", Dir: "no/such/dir"},
		} {
			_, err := f.x.Exec(context.Background(), req)
			require.ErrorIs(t, err, sandbox.ErrInvalidRequest, "%+v", req)
		}
	})

	t.Run("timeout kills the process tree", func(t *testing.T) {
		t.Parallel()
		res, err := f.x.Exec(context.Background(), sandbox.Request{
			Project: f.project, Workspace: f.ws, Timeout: time.Second,
			Command: "echo started; sleep 31337 & sleep 31338; echo never",
		})
		require.NoError(t, err)
		require.True(t, res.TimedOut)
		require.Equal(t, sandbox.ExitTimedOut, res.ExitCode)
		require.Equal(t, "started\n", res.Output)
		require.Eventually(t, func() bool { return f.running(t, "sleep 3133[7]|sleep 3133[8]") == 0 }, 10*time.Second, 100*time.Millisecond,
			"the sleeps outlived the timeout")
	})

	t.Run("cancelled context kills the command", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			time.Sleep(500 * time.Millisecond)
			cancel()
		}()
		_, err := f.x.Exec(ctx, sandbox.Request{Project: f.project, Workspace: f.ws, Command: "sleep 31339"})
		require.ErrorIs(t, err, context.Canceled)
		require.Eventually(t, func() bool { return f.running(t, "sleep 3133[9]") == 0 }, 10*time.Second, 100*time.Millisecond)
	})

	t.Run("output over the cap is truncated with a marker", func(t *testing.T) {
		t.Parallel()
		res := f.run(t, "echo FIRST; i=0; while [ $i -lt 20000 ]; do echo 0123456789; i=$((i+1)); done; echo LAST")
		require.Equal(t, 0, res.ExitCode)
		require.True(t, res.Truncated)
		require.EqualValues(t, len("FIRST\n")+20000*11+len("LAST\n"), res.OutputBytes)
		require.Contains(t, res.Output, sandbox.TruncationMarker)
		require.True(t, strings.HasPrefix(res.Output, "FIRST\n0123456789\n"), "head kept")
		require.True(t, strings.HasSuffix(res.Output, "0123456789\nLAST\n"), "tail kept")
		require.Less(t, len(res.Output), 64<<10+200)
	})

	t.Run("environment is scrubbed", func(t *testing.T) {
		t.Parallel()
		res := f.run(t, "env")
		allowed := map[string]bool{
			"PATH": true, "HOME": true, "LANG": true, "TMPDIR": true, "PWD": true, "SHLVL": true,
			"HOSTNAME": true, "OLDPWD": true, "_": true, "AETHERIUM_EXEC": true,
		}
		var keys []string
		for _, line := range strings.Split(strings.TrimSpace(res.Output), "\n") {
			k, _, _ := strings.Cut(line, "=")
			if !allowed[k] {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		require.Empty(t, keys, "variables leaked into the command: %s", res.Output)
	})

	t.Run("concurrent execs", func(t *testing.T) {
		t.Parallel()
		const n = 20
		var wg sync.WaitGroup
		results := make([]sandbox.Result, n)
		errs := make([]error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i], errs[i] = f.x.Exec(context.Background(), sandbox.Request{
					Project: f.project, Workspace: f.ws,
					Command: fmt.Sprintf("echo start-%d; sleep 0.%d; echo end-%d >&2; exit %d", i, i%3, i, i%7),
				})
			}()
		}
		wg.Wait()
		for i := range n {
			require.NoError(t, errs[i], i)
			require.Equal(t, fmt.Sprintf("start-%d\nend-%d\n", i, i), results[i].Output, i)
			require.Equal(t, i%7, results[i].ExitCode, i)
		}
	})

	t.Run("release is idempotent and the project comes back", func(t *testing.T) {
		t.Parallel()
		proj := sandboxtest.Project()
		g := fixture{x: f.x, project: proj, ws: sandboxtest.Workspace(t)}
		require.Equal(t, "one\n", g.run(t, "echo one | tee keep.txt").Output)
		require.NoError(t, f.x.Release(context.Background(), proj))
		require.NoError(t, f.x.Release(context.Background(), proj))
		require.Equal(t, "one\n", g.run(t, "cat keep.txt").Output, "the workspace outlives the sandbox")
		require.NoError(t, f.x.Release(context.Background(), proj))
	})

	t.Run("says whether it is a sandbox", func(t *testing.T) {
		t.Parallel()
		res := f.run(t, "true")
		if f.x.Kind() == "local" {
			require.False(t, res.Sandboxed)
			require.Contains(t, res.Notice, "NOT a sandbox")
		} else {
			require.True(t, res.Sandboxed)
			require.Empty(t, res.Notice)
		}
	})
}

func TestLocalIsRefusedUnlessEnabled(t *testing.T) {
	t.Parallel()
	_, err := sandbox.NewLocal(sandbox.Config{})
	require.ErrorIs(t, err, sandbox.ErrLocalDisabled)
	_, err = sandbox.New(context.Background(), sandbox.Config{Kind: "local"}, nil)
	require.ErrorIs(t, err, sandbox.ErrLocalDisabled)
	_, err = sandbox.New(context.Background(), sandbox.Config{Kind: "chroot"}, nil)
	require.Error(t, err)
	// auto never falls back to the host when the engine is missing and local is off.
	_, err = sandbox.New(context.Background(), sandbox.Config{Kind: "auto", Docker: sandbox.DockerConfig{Host: "unix:///nonexistent/docker.sock"}}, nil)
	require.ErrorIs(t, err, sandbox.ErrNoEngine)
	x, err := sandbox.New(context.Background(), sandbox.Config{Kind: "auto", AllowLocal: true, Docker: sandbox.DockerConfig{Host: "unix:///nonexistent/docker.sock"}}, nil)
	require.NoError(t, err)
	require.Equal(t, "local", x.Kind())
	_, err = x.Logs(context.Background(), "p", sandbox.LogOptions{})
	require.ErrorIs(t, err, sandbox.ErrNoLogs)
}

func TestCapture(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		limit  int
		writes []string
		want   string
		trunc  bool
	}{
		{"fits", 10, []string{"abc", "def"}, "abcdef", false},
		{"exactly the cap", 6, []string{"abc", "def"}, "abcdef", false},
		{"head and tail kept", 6, []string{"abcdefghij"}, "abc\n[... output truncated: 4 of 10 bytes omitted ...]\nhij", true},
		{"many small writes", 4, []string{"a", "b", "c", "d", "e", "f", "g"}, "ab\n[... output truncated: 3 of 7 bytes omitted ...]\nfg", true},
		{"whole runes", 4, []string{"é", "xyz", "ü"}, "é\n[... output truncated: 3 of 7 bytes omitted ...]\nü", true},
		{"cut inside a rune", 4, []string{"aé", "zzz"}, "a\uFFFD\n[... output truncated: 2 of 6 bytes omitted ...]\nzz", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cp := sandbox.NewCapture(c.limit)
			total := 0
			for _, w := range c.writes {
				n, err := cp.Write([]byte(w))
				require.NoError(t, err)
				require.Equal(t, len(w), n)
				total += len(w)
			}
			require.Equal(t, c.want, cp.String())
			require.Equal(t, c.trunc, cp.Truncated())
			require.EqualValues(t, total, cp.Total())
		})
	}
}
