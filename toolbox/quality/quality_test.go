package quality_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/sandbox"
	"github.com/aetherium-engine/aetherium/sandbox/sandboxtest"
	"github.com/aetherium-engine/aetherium/toolbox/quality"
	"github.com/aetherium-engine/aetherium/tools"
)

// env is a registry whose quality tools run in the real toolchain image
// (built by sandbox/images/build.sh when missing: minutes, once).
func env(t *testing.T) *tools.Router {
	t.Helper()
	image := sandboxtest.FamilyImage(t, "toolchain")
	d := sandboxtest.Docker(t, func(c *sandbox.Config) {
		c.Docker.Image = sandbox.ImageSet{sandbox.PurposeToolchain: image}
	})
	reg := tools.NewRegistry()
	quality.Register(reg, quality.Deps{Runner: d}, quality.Config{})
	return tools.NewRouter(reg)
}

// fixtureWorkspace copies fixture directories of testdata into a fresh workspace
// (readable by the sandbox's user).
func fixtureWorkspace(t *testing.T, fixtures ...string) string {
	t.Helper()
	ws := sandboxtest.Workspace(t)
	for _, f := range fixtures {
		src := filepath.Join("testdata", f)
		require.NoError(t, filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel("testdata", p)
			dst := filepath.Join(ws, rel)
			if d.IsDir() {
				return os.MkdirAll(dst, 0o755)
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(dst, b, 0o644)
		}))
	}
	return ws
}

func call(t *testing.T, r *tools.Router, ws, tool string, args any) (string, error) {
	t.Helper()
	raw, err := json.Marshal(args)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	caller := &tools.Session{AllowedDomains: []string{"127.0.0.1"}, RunID: "run-quality-test", SessionID: "s", Agent: "qa", Workspace: ws,
		Access: tools.Access{Tools: []string{"analyze_code", "run_tests"}}}
	res, err := r.Dispatch(ctx, tools.Call{Session: caller, ID: "c", Name: tool, Args: raw})
	return res.Content, err
}

func TestAnalyzeCode(t *testing.T) {
	t.Parallel()
	r := env(t)
	ws := fixtureWorkspace(t, "py", "js", "gomod", "sh", "misc", "docs")
	type key struct {
		File, Rule string
		Line       int
	}
	tests := []struct {
		name      string
		args      map[string]any
		want      []key
		counts    map[string]int
		notes     []string
		linterHas string
	}{
		{name: "python flake8", args: map[string]any{"path": "py/calc.py"},
			want: []key{{"py/calc.py", "F401", 1}, {"py/calc.py", "F821", 9}}, counts: map[string]int{"error": 2, "warning": 0, "info": 0}},
		{name: "python pylint", args: map[string]any{"path": "py/calc.py", "linter": "pylint"},
			want: []key{{"py/calc.py", "W0611 unused-import", 1}, {"py/calc.py", "E0602 undefined-variable", 9}}},
		{name: "javascript eslint default config, too-new syntax reported apart", args: map[string]any{"path": "js"},
			want: []key{{"js/math.js", "no-unused-vars", 5}, {"js/math.js", "no-undef", 8}}, counts: map[string]int{"error": 2, "warning": 0, "info": 0},
			linterHas: "this syntax needs a newer eslint than the sandbox has"},
		{name: "shell by extension and shebang", args: map[string]any{"path": "sh"},
			want: []key{{"sh/script.sh", "SC2086", 3}, {"sh/tool", "SC2045", 2}}},
		{name: "go vet and gofmt", args: map[string]any{"path": "gomod"},
			want: []key{{"gomod/calc.go", "unreachable", 11}, {"gomod/ugly.go", "gofmt", 0}}},
		{name: "c# and typescript", args: map[string]any{"path": "misc"},
			notes: []string{"C# analysis needs dotnet format, which is not installable here", "TypeScript needs a newer eslint than the sandbox has"}},
		{name: "nothing lintable", args: map[string]any{"path": "docs"}, notes: []string{"nothing lintable under docs"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out, err := call(t, r, ws, "analyze_code", tc.args)
			require.NoError(t, err)
			var an quality.Analysis
			require.NoError(t, json.Unmarshal([]byte(out), &an), out)
			got := map[key]bool{}
			for _, f := range an.Findings {
				got[key{f.File, f.Rule, f.Line}] = true
			}
			for _, w := range tc.want {
				require.True(t, got[w], "missing %+v in %s", w, out)
			}
			if tc.counts != nil {
				require.Equal(t, tc.counts, an.Counts, out)
			}
			for _, n := range tc.notes {
				require.Contains(t, fmt.Sprint(an.Notes), n, out)
			}
			if tc.linterHas != "" {
				require.Contains(t, fmt.Sprint(an.Linters), tc.linterHas, out)
				require.Contains(t, fmt.Sprint(an.Linters), "modern.mjs:2", out)
			}
		})
	}
}

func TestAnalyzeCodeRefusesHostilePaths(t *testing.T) {
	t.Parallel()
	r := env(t)
	ws := fixtureWorkspace(t, "py")
	outside := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(outside, "x.py"), []byte("import os\n"), 0o644))
	require.NoError(t, os.Symlink(outside, filepath.Join(ws, "link")))
	require.NoError(t, os.MkdirAll(filepath.Join(ws, ".frame"), 0o755))
	for _, p := range []string{"../", "/etc", "link/x.py", "link", ".aetherium", ".frame"} {
		_, err := call(t, r, ws, "analyze_code", map[string]any{"path": p})
		require.Error(t, err, p)
	}
	_, err := call(t, r, ws, "analyze_code", map[string]any{"path": "py", "linter": "rm -rf"})
	require.ErrorContains(t, err, "flake8 or pylint")
}

func TestRunTests(t *testing.T) {
	t.Parallel()
	r := env(t)
	ws := fixtureWorkspace(t, "py", "pyhang", "js", "jest", "gomod")
	tests := []struct {
		name                            string
		args                            map[string]any
		framework                       string
		passed, failed, skipped, errors int
		timedOut                        bool
		failure                         string
	}{
		{name: "pytest", args: map[string]any{"path": "py"}, framework: "pytest", passed: 2, failed: 1, skipped: 1, failure: "test_calc::test_add_wrong"},
		{name: "pytest filter", args: map[string]any{"path": "py", "filter": "negative"}, framework: "pytest", passed: 1},
		{name: "node --test", args: map[string]any{"path": "js"}, framework: "node", passed: 2, failed: 1, skipped: 1, failure: "adds wrong"},
		{name: "jest", args: map[string]any{"path": "jest"}, framework: "jest", passed: 2, failed: 1, skipped: 1, failure: "adds wrong"},
		{name: "go test", args: map[string]any{"path": "gomod"}, framework: "go", passed: 2, failed: 1, skipped: 1, failure: "fixture.TestAddWrong"},
		{name: "hanging pytest stopped at its timeout", args: map[string]any{"path": "pyhang", "timeout": 15}, framework: "pytest", passed: 1, timedOut: true},
		// No hanging Go suite here: go test first compiles the standard library
		// into an empty cache (35-55 s at one CPU on a quiet machine, over 150 s
		// while the whole repository's tests run), so no timeout is both short and
		// sure to leave the test running. TestParseTestReports covers the stream
		// of a go test stopped at its timeout.
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			out, err := call(t, r, ws, "run_tests", tc.args)
			require.NoError(t, err)
			var rep quality.TestReport
			require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
			require.Equal(t, tc.framework, rep.Framework, out)
			require.Equal(t, []int{tc.passed, tc.failed, tc.skipped, tc.errors}, []int{rep.Passed, rep.Failed, rep.Skipped, rep.Errors}, out)
			require.Equal(t, tc.timedOut, rep.TimedOut, out)
			if tc.failure != "" {
				require.Equal(t, tc.failure, rep.Failures[0].Name, out)
			}
			if tc.timedOut {
				limit := time.Duration(tc.args["timeout"].(int))*time.Second + 45*time.Second
				require.Less(t, time.Since(start), limit, "the hanging suite is stopped at its timeout")
			}
			t.Logf("%s: %.1fs", tc.name, rep.Duration)
		})
	}
}

func TestRunTestsRefusesBadArguments(t *testing.T) {
	t.Parallel()
	r := env(t)
	ws := fixtureWorkspace(t, "py", "docs")
	for _, tc := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{"path": "py", "framework": "cargo"}, "unknown framework"},
		{map[string]any{"path": "py", "framework": "dotnet"}, "not available here"},
		{map[string]any{"path": "py", "timeout": 100000}, "limit"},
		{map[string]any{"path": "py", "filter": "--rootdir=/"}, "filter"},
		{map[string]any{"path": "py", "filter": "a\nb"}, "filter"},
		{map[string]any{"path": "docs"}, "no test suite detected"},
		{map[string]any{"path": "py/calc.py"}, "is a file"},
		{map[string]any{"path": "../.."}, "escapes"},
	} {
		_, err := call(t, r, ws, "run_tests", tc.args)
		require.ErrorContains(t, err, tc.want, tc.args)
	}
}

// TestRunTestsContainment runs hostile tests: they try to read and overwrite
// canary files on the host, write outside the workspace and connect to a
// listener on the host's loopback. None of it may happen.
func TestRunTestsContainment(t *testing.T) {
	t.Parallel()
	r := env(t)
	ws := fixtureWorkspace(t, "escape")
	canaryDir := t.TempDir()
	canary := filepath.Join(canaryDir, "canary.txt")
	require.NoError(t, os.WriteFile(canary, []byte("canary"), 0o666))
	require.NoError(t, os.Chmod(canaryDir, 0o777))
	outside := filepath.Join(canaryDir, "outside.txt")

	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	var conns atomic.Int32
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			c.Close()
		}
	}()
	cfg, err := json.Marshal(map[string]any{"file": canary, "outside": outside, "port": l.Addr().(*net.TCPAddr).Port})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(ws, "escape", "canary.json"), cfg, 0o644))

	require.NoError(t, os.MkdirAll(filepath.Join(ws, ".aetherium"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(ws, ".aetherium", "snapshot.txt"), []byte("snapshot"), 0o644))

	out, err := call(t, r, ws, "run_tests", map[string]any{"path": "escape"})
	require.NoError(t, err)
	var rep quality.TestReport
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	require.Equal(t, 5, rep.Passed+rep.Failed, "the hostile tests ran: %s", out)
	for _, f := range rep.Failures {
		require.NotContains(t, f.Name, "test_snapshots_hidden", "the workspace's .aetherium is visible to tests: %s", out)
	}

	b, err := os.ReadFile(canary)
	require.NoError(t, err)
	require.Equal(t, "canary", string(b))
	require.NoFileExists(t, outside)
	require.NoFileExists(t, filepath.Join(ws, "escaped.txt"))
	require.NoFileExists(t, filepath.Join(ws, "escape", "planted.txt"), "the workspace is read-only to the tests")
	require.Zero(t, conns.Load(), "the sandbox reached the host's loopback")
}

func TestMissingToolchainImageNamesMakeImages(t *testing.T) {
	t.Parallel()
	d := sandboxtest.Docker(t, func(c *sandbox.Config) {
		c.Docker.Image = sandbox.ImageSet{sandbox.PurposeToolchain: "aetherium-toolchain-missing:latest"}
	})
	reg := tools.NewRegistry()
	quality.Register(reg, quality.Deps{Runner: d}, quality.Config{})
	ws := fixtureWorkspace(t, "py")
	_, err := call(t, tools.NewRouter(reg), ws, "analyze_code", map[string]any{"path": "py"})
	require.ErrorContains(t, err, "toolchain image is missing")
	require.ErrorContains(t, err, "make images")
	require.ErrorIs(t, err, sandbox.ErrNoImage)
}

func TestWithoutASandboxTheToolsRefuse(t *testing.T) {
	t.Parallel()
	reg := tools.NewRegistry()
	quality.Register(reg, quality.Deps{}, quality.Config{})
	ws := fixtureWorkspace(t, "py")
	for _, tool := range []string{"analyze_code", "run_tests"} {
		_, err := call(t, tools.NewRouter(reg), ws, tool, map[string]any{"path": "py"})
		require.ErrorIs(t, err, quality.ErrNoSandbox, tool)
	}
}
