// Command testtimes reads `go test -json` on its standard input and prints what
// `go test` without -json would: each package's ok/FAIL line, the output of the
// tests that failed (a passing test's logs stay out of the CI log), build errors
// and any line that is not JSON. It records the stream in a file (-o) and ends
// with the slowest packages and tests and the counts: tests passed (every "pass"
// action of a test, subtests and fuzz seeds included), skipped (each listed with
// its reason), failed. It exits 1 if a test or a package failed, a package did not
// build or the stream ended inside a package (go test killed); `make test` pipes
// go test into it under pipefail, so go test's own status stands as well.
//
//	go test -json ./... 2>&1 | go run ./internal/testtimes -o bin/test.json
//	go test -json -run TestCompose ./deploy/ | go run ./internal/testtimes -v -o bin/compose.json
//	go run ./internal/testtimes -check bin/test.json bin/compose.json
//
// -check reads recorded streams (.ci/run's phases) and prints the tests that ran
// in all of them; it fails if a test failed or was skipped in one stream and did
// not pass in another (deploy's TestCompose skips in `make test` and runs in the
// compose phase): under CI=true a test that cannot run must fail, not skip. An
// input a fuzz function declines with t.Skip (a seed the api target's header mode
// cannot send) is listed, not a failure: it ran, and was filtered as designed.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// DefaultTop is how many of the slowest packages and tests the summary lists.
const DefaultTop = 10

// maxLine bounds one line of the stream: a test's output line can be long (a
// JSON body in a log), and bufio.Scanner's default of 64 KiB would stop the read.
const maxLine = 16 << 20

// event is one line of `go test -json` (cmd/test2json, plus the build-output and
// build-fail events go test has emitted since Go 1.24).
type event struct {
	Action      string
	Package     string
	ImportPath  string
	Test        string
	Elapsed     float64
	Output      string
	FailedBuild string
}

// timing is a package's or a top-level test's wall time.
type timing struct {
	Package, Test string
	Seconds       float64
}

// skip is a test that skipped, with the message it gave.
type skip struct {
	Package, Test, Reason string
}

// summary is what a stream showed.
type summary struct {
	// Passed counts every test "pass" action: subtests and fuzz seeds included.
	Passed, PassedTop int
	Skipped           []skip
	FailedTests       []string
	Packages          []timing
	FailedPackages    []string
	Tests             []timing
	// Unfinished are packages the stream started and never ended.
	Unfinished []string
	// passed holds "package test" of every passing test, for -check.
	passed map[string]bool
}

// ok reports whether nothing failed.
func (s *summary) ok() bool {
	return len(s.FailedTests) == 0 && len(s.FailedPackages) == 0 && len(s.Unfinished) == 0
}

// line is one output line of a package, with the test that printed it ("" for
// the package itself).
type line struct{ test, text string }

// pkgState buffers a package's output until it ends: only then is it known which
// tests failed, and go test prints a package's output as one block anyway.
type pkgState struct {
	lines []line
	// status is a test's last action: "run", then "pass", "fail" or "skip".
	status map[string]string
}

// filter reads the stream from in, prints the readable output to out, copies the
// JSON lines to record (if not nil) and returns what the stream showed. Package
// names are shown relative to module. verbose prints every output line as it
// comes, as go test -v does (a long test's progress, live).
func filter(in io.Reader, out, record io.Writer, module string, verbose bool) (*summary, error) {
	s := &summary{passed: map[string]bool{}}
	pkgs := map[string]*pkgState{}
	var order []string // packages in the order they started, for Unfinished
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	for sc.Scan() {
		raw := sc.Bytes()
		var e event
		if !bytes.HasPrefix(raw, []byte("{")) || json.Unmarshal(raw, &e) != nil || e.Action == "" {
			// Not go test's JSON (a merged stderr line, "go: downloading …"): as it came.
			fmt.Fprintf(out, "%s\n", raw)
			continue
		}
		if record != nil {
			if _, err := fmt.Fprintf(record, "%s\n", raw); err != nil {
				return s, fmt.Errorf("recording the stream: %w", err)
			}
		}
		switch e.Action {
		case "build-output":
			fmt.Fprint(out, e.Output)
			continue
		case "build-fail":
			// The package's own "fail" event (FailedBuild) follows and counts it.
			continue
		}
		name := relative(e.Package, module)
		p := pkgs[e.Package]
		if p == nil {
			p = &pkgState{status: map[string]string{}}
			pkgs[e.Package] = p
			order = append(order, e.Package)
		}
		if verbose && e.Action == "output" {
			fmt.Fprint(out, e.Output)
		}
		if e.Test == "" {
			switch e.Action {
			case "output":
				p.lines = append(p.lines, line{"", e.Output})
			case "pass", "fail", "skip":
				if !verbose {
					flush(out, p)
				}
				delete(pkgs, e.Package)
				if e.Action == "skip" { // no test files
					continue
				}
				s.Packages = append(s.Packages, timing{Package: name, Seconds: e.Elapsed})
				if e.Action == "fail" {
					s.FailedPackages = append(s.FailedPackages, name)
				}
			}
			continue
		}
		switch e.Action {
		case "output":
			p.lines = append(p.lines, line{e.Test, e.Output})
		case "run":
			p.status[e.Test] = "run"
		case "pass", "fail", "skip":
			p.status[e.Test] = e.Action
			top := !strings.Contains(e.Test, "/")
			if top {
				s.Tests = append(s.Tests, timing{Package: name, Test: e.Test, Seconds: e.Elapsed})
			}
			switch e.Action {
			case "pass":
				s.Passed++
				if top {
					s.PassedTop++
				}
				s.passed[name+" "+e.Test] = true
			case "fail":
				s.FailedTests = append(s.FailedTests, name+" "+e.Test)
			case "skip":
				s.Skipped = append(s.Skipped, skip{Package: name, Test: e.Test, Reason: skipReason(p.lines, e.Test)})
			}
		}
	}
	if err := sc.Err(); err != nil {
		return s, fmt.Errorf("reading the stream: %w", err)
	}
	for _, pkg := range order {
		if p := pkgs[pkg]; p != nil {
			if !verbose {
				flush(out, p)
			}
			s.Unfinished = append(s.Unfinished, relative(pkg, module))
		}
	}
	return s, nil
}

// flush prints what go test without -json prints of a finished package: its own
// lines but the bare "PASS", and every line of a test that did not pass or skip
// (failed, or still running when the package died: a timeout's or a panic's test).
func flush(out io.Writer, p *pkgState) {
	for _, l := range p.lines {
		if l.test == "" {
			if l.text != "PASS\n" {
				fmt.Fprint(out, l.text)
			}
			continue
		}
		if st := p.status[l.test]; st != "pass" && st != "skip" {
			fmt.Fprint(out, l.text)
		}
	}
}

// skipReason is the last line test printed before its "--- SKIP" line: the
// message of its t.Skip.
func skipReason(lines []line, test string) string {
	for i := len(lines) - 1; i >= 0; i-- {
		l := lines[i]
		t := strings.TrimSpace(l.text)
		if l.test != test || t == "" || strings.HasPrefix(t, "--- SKIP") || strings.HasPrefix(t, "=== ") {
			continue
		}
		return t
	}
	return "(no message)"
}

// relative shows pkg relative to the module: "fleet", "." for the module's root.
func relative(pkg, module string) string {
	switch {
	case module == "":
		return pkg
	case pkg == module:
		return "."
	default:
		return strings.TrimPrefix(pkg, module+"/")
	}
}

// modulePath is the module of go.mod in the working directory, "" without one.
func modulePath() string {
	b, err := os.ReadFile("go.mod")
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if m, ok := strings.CutPrefix(strings.TrimSpace(l), "module "); ok {
			return strings.Trim(strings.TrimSpace(m), `"`)
		}
	}
	return ""
}

// slowest returns the n longest of ts, longest first (ties by name, so the list
// is stable).
func slowest(ts []timing, n int) []timing {
	ts = append([]timing(nil), ts...)
	sort.SliceStable(ts, func(i, j int) bool {
		if ts[i].Seconds != ts[j].Seconds {
			return ts[i].Seconds > ts[j].Seconds
		}
		return ts[i].Package+" "+ts[i].Test < ts[j].Package+" "+ts[j].Test
	})
	return ts[:min(n, len(ts))]
}

// report prints the slowest packages and tests and the counts.
func (s *summary) report(w io.Writer, top int) {
	fmt.Fprintf(w, "\nslowest packages (%d of %d):\n", min(top, len(s.Packages)), len(s.Packages))
	for _, t := range slowest(s.Packages, top) {
		fmt.Fprintf(w, "  %8.1fs  %s\n", t.Seconds, t.Package)
	}
	fmt.Fprintf(w, "slowest tests (%d of %d top-level):\n", min(top, len(s.Tests)), len(s.Tests))
	for _, t := range slowest(s.Tests, top) {
		fmt.Fprintf(w, "  %8.1fs  %s %s\n", t.Seconds, t.Package, t.Test)
	}
	fmt.Fprintf(w, "tests: %d passed (%d top-level; subtests and fuzz seeds included), %d skipped, %d failed; packages: %d, %d failed\n",
		s.Passed, s.PassedTop, len(s.Skipped), len(s.FailedTests), len(s.Packages), len(s.FailedPackages))
	for _, k := range s.Skipped {
		fmt.Fprintf(w, "  skipped: %s %s: %s\n", k.Package, k.Test, k.Reason)
	}
	for _, f := range s.FailedTests {
		fmt.Fprintf(w, "  FAILED:  %s\n", f)
	}
	for _, f := range s.FailedPackages {
		fmt.Fprintf(w, "  FAILED package: %s\n", f)
	}
	for _, u := range s.Unfinished {
		fmt.Fprintf(w, "  UNFINISHED package (the stream ended inside it): %s\n", u)
	}
}

// check reads recorded streams and prints the tests that ran in all of them and
// the skips no other stream made up for. It returns false if a test failed or
// such a skip exists.
func check(files []string, w io.Writer, module string) (bool, error) {
	if len(files) == 0 {
		return false, errors.New("-check: no recorded streams given")
	}
	var sums []*summary
	passed := map[string]bool{}
	total := 0
	var parts []string
	for _, f := range files {
		r, err := os.Open(f)
		if err != nil {
			return false, err
		}
		s, err := filter(r, io.Discard, nil, module, false)
		r.Close()
		if err != nil {
			return false, fmt.Errorf("%s: %w", f, err)
		}
		sums = append(sums, s)
		for k := range s.passed {
			passed[k] = true
		}
		total += s.Passed
		parts = append(parts, fmt.Sprintf("%s: %d", f, s.Passed))
	}
	fmt.Fprintf(w, "tests run: %d passed (%s; subtests and fuzz seeds included)\n", total, strings.Join(parts, ", "))
	ok := true
	for i, s := range sums {
		for _, k := range s.Skipped {
			if passed[k.Package+" "+k.Test] {
				fmt.Fprintf(w, "  skipped in %s, run in another phase: %s %s\n", files[i], k.Package, k.Test)
				continue
			}
			if fuzzInput(k.Test) {
				// The fuzz function's own filter (t.Skip inside f.Fuzz): the
				// input was tried and declined, as the fuzzer declines it.
				fmt.Fprintf(w, "  fuzz input its target declines (t.Skip inside f.Fuzz): %s %s: %s\n", k.Package, k.Test, k.Reason)
				continue
			}
			ok = false
			fmt.Fprintf(w, "  SKIPPED (and not run in any phase): %s %s: %s\n", k.Package, k.Test, k.Reason)
		}
		if !s.ok() {
			ok = false
			fmt.Fprintf(w, "  %s: %d tests and %d packages FAILED, %d unfinished\n", files[i], len(s.FailedTests), len(s.FailedPackages), len(s.Unfinished))
		}
	}
	return ok, nil
}

// fuzzInput reports whether test is an input of a fuzz target (FuzzX/seed#3, or
// FuzzX/<hash> from testdata/fuzz) rather than a test of its own.
func fuzzInput(test string) bool {
	top, _, sub := strings.Cut(test, "/")
	return sub && strings.HasPrefix(top, "Fuzz")
}

func main() { os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) }

// run is the command on args; its exit status.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("testtimes", flag.ContinueOnError)
	fs.SetOutput(stderr)
	record := fs.String("o", "", "write the JSON stream to this `file` as well")
	top := fs.Int("top", DefaultTop, "list this many of the slowest packages and tests")
	verbose := fs.Bool("v", false, "print every output line as it comes, as go test -v does")
	checkMode := fs.Bool("check", false, "read the recorded streams named as arguments: count the tests, fail on a failure or on a test skipped in all of them")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	module := modulePath()
	if *checkMode {
		ok, err := check(fs.Args(), stdout, module)
		if err != nil {
			fmt.Fprintln(stderr, "testtimes:", err)
			return 2
		}
		if !ok {
			return 1
		}
		return 0
	}
	if fs.NArg() > 0 {
		fmt.Fprintln(stderr, "testtimes: reads go test -json on stdin; arguments only with -check")
		return 2
	}
	var rec *bufio.Writer
	if *record != "" {
		f, err := os.Create(*record)
		if err != nil {
			fmt.Fprintln(stderr, "testtimes:", err)
			return 2
		}
		defer f.Close()
		rec = bufio.NewWriter(f)
	}
	// stdout unbuffered: the CI log shows each package as it ends.
	var recW io.Writer // nil, not a nil *bufio.Writer, without -o
	if rec != nil {
		recW = rec
	}
	s, err := filter(stdin, stdout, recW, module, *verbose)
	if rec != nil {
		if ferr := rec.Flush(); err == nil && ferr != nil {
			err = fmt.Errorf("recording the stream: %w", ferr)
		}
	}
	s.report(stdout, *top)
	if err != nil {
		fmt.Fprintln(stderr, "testtimes:", err)
		return 2
	}
	if !s.ok() {
		return 1
	}
	return 0
}
