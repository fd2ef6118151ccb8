package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// module is a throwaway Go module whose tests pass, fail, skip, panic and do not
// build, one kind per package, for go test -json to report on for real.
var module = map[string]string{
	"go.mod": "module example.com/tt\n\ngo 1.26\n",
	"good/good_test.go": `package good

import "testing"

func TestQuiet(t *testing.T) { t.Log("log of a passing test") }

func TestTable(t *testing.T) {
	for _, n := range []string{"a", "b"} {
		t.Run(n, func(t *testing.T) { t.Parallel() })
	}
}

// Indented: scripts/fuzz.sh finds targets by "^func Fuzz" and would fuzz this
// fixture, which is no package of the module.
 func FuzzSeeds(f *testing.F) {
	f.Add("one")
	f.Add("two")
	f.Fuzz(func(t *testing.T, s string) {})
}
`,
	"failing/failing_test.go": `package failing

import "testing"

func TestPasses(t *testing.T) { t.Log("log of a passing test") }

func TestBroken(t *testing.T) {
	t.Run("inner", func(t *testing.T) {
		t.Log("what the failing test saw")
		t.Error("boom")
	})
	t.Run("fine", func(t *testing.T) { t.Log("log of a passing subtest") })
}
`,
	"skipping/skipping_test.go": `package skipping

import "testing"

func TestNeedsService(t *testing.T) { t.Skip("no service here") }

func TestRuns(t *testing.T) {}
`,
	"panicking/panicking_test.go": `package panicking

import "testing"

func TestPanics(t *testing.T) { panic("the panic message") }
`,
	"unbuilt/unbuilt.go":      "package unbuilt\n\nfunc F() { undefinedFunction() }\n",
	"unbuilt/unbuilt_test.go": "package unbuilt\n\nimport \"testing\"\n\nfunc TestNever(t *testing.T) {}\n",
}

// writeModule writes module to a new directory and returns it.
func writeModule(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range module {
		p := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
	}
	return dir
}

// goTestJSON runs go test -json on pkgs in dir and returns its combined output,
// as `make test` pipes it (2>&1), and whether go test failed.
func goTestJSON(t *testing.T, dir string, pkgs ...string) ([]byte, bool) {
	t.Helper()
	gobin, err := exec.LookPath("go")
	require.NoError(t, err, "the go command runs the module's tests")
	cmd := exec.Command(gobin, append([]string{"test", "-json", "-count=1"}, pkgs...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=", "GOTOOLCHAIN=local", "GOPROXY=off")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if err != nil {
		require.ErrorAs(t, err, &exit, "go test ran: %s", out)
	}
	return out, err != nil
}

// TestGoTestStream feeds real go test -json output through the command: what a
// person reads, the summary, the recorded stream and the exit status.
func TestGoTestStream(t *testing.T) {
	t.Parallel()
	dir := writeModule(t)
	for _, c := range []struct {
		name     string
		pkgs     []string
		args     []string
		code     int
		contains []string
		excludes []string
	}{
		{
			name: "passing packages print their ok line and the counts only",
			pkgs: []string{"./good", "./skipping"},
			code: 0,
			contains: []string{
				"ok  \texample.com/tt/good\t",
				"ok  \texample.com/tt/skipping\t",
				"tests: 8 passed (4 top-level; subtests and fuzz seeds included), 1 skipped, 0 failed; packages: 2, 0 failed\n",
				"  skipped: example.com/tt/skipping TestNeedsService: skipping_test.go:5: no service here\n",
				"slowest packages (2 of 2):\n",
				"slowest tests (5 of 5 top-level):\n",
			},
			excludes: []string{"log of a passing test", "=== RUN", "--- PASS", "\nPASS\n", "FAIL"},
		},
		{
			name: "-v prints every line as it comes, as go test -v",
			pkgs: []string{"./failing"},
			args: []string{"-v"},
			code: 1,
			contains: []string{
				"=== RUN   TestPasses\n    failing_test.go:5: log of a passing test\n--- PASS: TestPasses",
				"    failing_test.go:10: boom\n",
				"    failing_test.go:12: log of a passing subtest\n",
				"\nFAIL\nFAIL\texample.com/tt/failing\t",
				"  FAILED:  example.com/tt/failing TestBroken\n",
			},
		},
		{
			name: "a failing subtest prints its output and its parent's, not its passing siblings'",
			pkgs: []string{"./failing"},
			code: 1,
			contains: []string{
				"=== RUN   TestBroken/inner\n    failing_test.go:9: what the failing test saw\n    failing_test.go:10: boom\n--- FAIL: TestBroken/inner",
				"--- FAIL: TestBroken (",
				"FAIL\texample.com/tt/failing\t",
				"tests: 2 passed (1 top-level; subtests and fuzz seeds included), 0 skipped, 2 failed; packages: 1, 1 failed\n",
				"  FAILED:  example.com/tt/failing TestBroken/inner\n",
				"  FAILED:  example.com/tt/failing TestBroken\n",
				"  FAILED package: example.com/tt/failing\n",
			},
			excludes: []string{"log of a passing test", "log of a passing subtest", "--- PASS"},
		},
		{
			name: "a panic and a build failure print their messages and fail",
			pkgs: []string{"./panicking", "./unbuilt", "./good"},
			code: 1,
			contains: []string{
				"panic: the panic message",
				"undefinedFunction",
				"FAIL\texample.com/tt/unbuilt [build failed]\n",
				"FAIL\texample.com/tt/panicking\t",
				"ok  \texample.com/tt/good\t",
				"  FAILED:  example.com/tt/panicking TestPanics\n",
				"  FAILED package: example.com/tt/unbuilt\n",
			},
			excludes: []string{"log of a passing test"},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			stream, goFailed := goTestJSON(t, dir, c.pkgs...)
			require.Equal(t, c.code != 0, goFailed, "go test's own status: %s", stream)
			rec := filepath.Join(t.TempDir(), "test.json")
			var out, errOut bytes.Buffer
			code := run(append([]string{"-o", rec}, c.args...), bytes.NewReader(stream), &out, &errOut)
			require.Equal(t, c.code, code, "output:\n%s\nstderr: %s", out.String(), errOut.String())
			for _, s := range c.contains {
				require.Contains(t, out.String(), s)
			}
			for _, s := range c.excludes {
				require.NotContains(t, out.String(), s)
			}
			// The record is the JSON stream: its events, and nothing else.
			var want []string
			for _, l := range strings.SplitAfter(string(stream), "\n") {
				if strings.HasPrefix(l, "{") {
					want = append(want, l)
				}
			}
			recorded, err := os.ReadFile(rec)
			require.NoError(t, err)
			require.NotEmpty(t, want)
			require.Equal(t, strings.Join(want, ""), string(recorded))
		})
	}
}

// ev is one synthetic event line.
func ev(action, pkg, test string, elapsed float64, output string) string {
	b, _ := json.Marshal(event{Action: action, Package: pkg, Test: test, Elapsed: elapsed, Output: output})
	return string(b) + "\n"
}

// TestStreamEdges covers what a real run rarely shows: a stream cut inside a
// package, lines that are not JSON, lines longer than a scanner's default, the
// order and length of the slowest lists.
func TestStreamEdges(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 200<<10)
	var many strings.Builder
	for i := range 12 {
		pkg := fmt.Sprintf("p%02d", i)
		many.WriteString(ev("start", pkg, "", 0, ""))
		many.WriteString(ev("run", pkg, "TestT", 0, ""))
		many.WriteString(ev("pass", pkg, "TestT", float64(i), ""))
		many.WriteString(ev("pass", pkg, "", float64(20-i), ""))
	}
	for _, c := range []struct {
		name     string
		stream   string
		args     []string
		code     int
		contains []string
		excludes []string
	}{
		{
			name: "the stream ends inside a package: its output is shown and it fails",
			stream: ev("start", "p", "", 0, "") + ev("run", "p", "TestHang", 0, "") +
				ev("output", "p", "TestHang", 0, "    hang_test.go:3: waiting\n"),
			code:     1,
			contains: []string{"    hang_test.go:3: waiting\n", "  UNFINISHED package (the stream ended inside it): p\n"},
		},
		{
			name:     "lines that are not JSON pass through as they came",
			stream:   "go: downloading example.com/x v1.0.0\n{not json\n" + ev("start", "p", "", 0, "") + ev("skip", "p", "", 0, ""),
			code:     0,
			contains: []string{"go: downloading example.com/x v1.0.0\n{not json\n", "packages: 0, 0 failed"},
		},
		{
			name: "a line longer than 64 KiB is read whole",
			stream: ev("start", "p", "", 0, "") + ev("run", "p", "TestLong", 0, "") +
				ev("output", "p", "TestLong", 0, long+"\n") + ev("fail", "p", "TestLong", 0, "") + ev("fail", "p", "", 0, ""),
			code:     1,
			contains: []string{long + "\n", "  FAILED:  p TestLong\n"},
		},
		{
			name:   "the slowest lists are the longest first, cut at -top",
			stream: many.String(),
			args:   []string{"-top", "3"},
			code:   0,
			contains: []string{
				"slowest packages (3 of 12):\n      20.0s  p00\n      19.0s  p01\n      18.0s  p02\nslowest tests (3 of 12 top-level):\n      11.0s  p11 TestT\n      10.0s  p10 TestT\n       9.0s  p09 TestT\ntests: 12 passed",
			},
			excludes: []string{"p03\n", "p08 TestT"},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var out, errOut bytes.Buffer
			code := run(c.args, strings.NewReader(c.stream), &out, &errOut)
			require.Equal(t, c.code, code, "output:\n%s\nstderr: %s", out.String(), errOut.String())
			for _, s := range c.contains {
				require.Contains(t, out.String(), s)
			}
			for _, s := range c.excludes {
				require.NotContains(t, out.String(), s)
			}
		})
	}
}

// TestCheck: -check over the streams of CI's phases counts every phase's tests
// and fails on a failure or on a skip no other phase made up for.
func TestCheck(t *testing.T) {
	t.Parallel()
	passing := ev("run", "p", "TestA", 0, "") + ev("pass", "p", "TestA", 1, "") +
		ev("run", "p", "TestA/sub", 0, "") + ev("pass", "p", "TestA/sub", 1, "") + ev("pass", "p", "", 2, "")
	skipsCompose := ev("run", "deploy", "TestCompose", 0, "") +
		ev("output", "deploy", "TestCompose", 0, "    compose_test.go:71: AETHERIUM_COMPOSE_TEST=1 runs it\n") +
		ev("skip", "deploy", "TestCompose", 0, "") + ev("pass", "deploy", "", 0, "")
	runsCompose := ev("run", "deploy", "TestCompose", 0, "") + ev("pass", "deploy", "TestCompose", 200, "") + ev("pass", "deploy", "", 200, "")
	failing := ev("run", "p", "TestB", 0, "") + ev("fail", "p", "TestB", 0, "") + ev("fail", "p", "", 0, "")
	for _, c := range []struct {
		name     string
		streams  []string
		code     int
		contains []string
	}{
		{
			name:     "a skip another phase ran is no gap",
			streams:  []string{passing + skipsCompose, runsCompose},
			code:     0,
			contains: []string{"tests run: 3 passed (", ": 2, ", ": 1; subtests", "skipped in ", "run in another phase: deploy TestCompose\n"},
		},
		{
			name:     "a skip no phase ran fails",
			streams:  []string{passing + skipsCompose},
			code:     1,
			contains: []string{"tests run: 2 passed", "  SKIPPED (and not run in any phase): deploy TestCompose: compose_test.go:71: AETHERIUM_COMPOSE_TEST=1 runs it\n"},
		},
		{
			name: "a fuzz input its target declines is listed, not a gap",
			streams: []string{passing + ev("run", "api", "FuzzLastEventID", 0, "") + ev("run", "api", "FuzzLastEventID/seed#34", 0, "") +
				ev("output", "api", "FuzzLastEventID/seed#34", 0, "    fuzz_test.go:49: not a value an HTTP client can send\n") +
				ev("skip", "api", "FuzzLastEventID/seed#34", 0, "") + ev("pass", "api", "FuzzLastEventID", 1, "") + ev("pass", "api", "", 1, "")},
			code:     0,
			contains: []string{"tests run: 3 passed", "  fuzz input its target declines (t.Skip inside f.Fuzz): api FuzzLastEventID/seed#34: fuzz_test.go:49: not a value an HTTP client can send\n"},
		},
		{
			name:     "a fuzz target that skips as a whole fails",
			streams:  []string{ev("run", "api", "FuzzLastEventID", 0, "") + ev("skip", "api", "FuzzLastEventID", 0, "") + ev("pass", "api", "", 1, "")},
			code:     1,
			contains: []string{"  SKIPPED (and not run in any phase): api FuzzLastEventID: (no message)\n"},
		},
		{
			name:     "a failure fails",
			streams:  []string{passing, failing},
			code:     1,
			contains: []string{": 1 tests and 1 packages FAILED, 0 unfinished\n"},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var files []string
			for i, s := range c.streams {
				f := filepath.Join(t.TempDir(), fmt.Sprintf("phase%d.json", i))
				require.NoError(t, os.WriteFile(f, []byte(s), 0o644))
				files = append(files, f)
			}
			var out, errOut bytes.Buffer
			code := run(append([]string{"-check"}, files...), strings.NewReader(""), &out, &errOut)
			require.Equal(t, c.code, code, "output:\n%s\nstderr: %s", out.String(), errOut.String())
			for _, s := range c.contains {
				require.Contains(t, out.String(), s)
			}
		})
	}
	var out, errOut bytes.Buffer
	require.Equal(t, 2, run([]string{"-check"}, strings.NewReader(""), &out, &errOut), "-check without files")
	require.Contains(t, errOut.String(), "no recorded streams given")
}
