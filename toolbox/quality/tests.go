package quality

import (
	"bufio"
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aetherium-engine/aetherium/tools"
)

// TestArgs are run_tests' arguments.
type TestArgs struct {
	Path      string `json:"path,omitempty" jsonschema:"description=The project directory relative to the workspace (default: the workspace root)"`
	Framework string `json:"framework,omitempty" jsonschema:"enum=pytest,enum=go,enum=jest,enum=node,enum=dotnet,description=Default: detected from the directory (go.mod, package.json, pytest.ini/pyproject.toml/setup.cfg/test_*.py)"`
	Filter    string `json:"filter,omitempty" jsonschema:"description=Only tests matching it: pytest -k, go test -run, jest -t, node --test-name-pattern"`
	Timeout   int    `json:"timeout,omitempty" jsonschema:"minimum=1,maximum=540,description=Seconds; default 300. A suite still running then is stopped and what ran so far is reported with timed_out"`
}

// Failure is one failed test.
type Failure struct {
	Name    string `json:"name"`
	Message string `json:"message"`
}

// TestReport is run_tests' answer.
type TestReport struct {
	Framework  string    `json:"framework"`
	Passed     int       `json:"passed"`
	Failed     int       `json:"failed"`
	Skipped    int       `json:"skipped"`
	Errors     int       `json:"errors"`
	Duration   float64   `json:"duration"` // seconds, the whole run
	Failures   []Failure `json:"failures"`
	TimedOut   bool      `json:"timed_out"`
	ExitCode   int       `json:"exit_code"`
	Note       string    `json:"note,omitempty"`
	OutputTail string    `json:"output_tail"`
}

const maxFailures = 50

var filterRE = regexp.MustCompile(`^[A-Za-z0-9_ ./:\[\]()|^$*+?\-=,'"]{1,200}$`)

// detect picks the framework of directory rel.
func detect(t target) (string, error) {
	r, err := openRoot(t.root)
	if err != nil {
		return "", err
	}
	defer r.Close()
	has := func(n string) bool { _, err := r.Stat(path.Join(t.rel, n)); return err == nil }
	if has("go.mod") {
		return "go", nil
	}
	if has("package.json") {
		b, _ := readSmall(r, path.Join(t.rel, "package.json"))
		var pj struct {
			Scripts         map[string]string `json:"scripts"`
			DevDependencies map[string]string `json:"devDependencies"`
			Dependencies    map[string]string `json:"dependencies"`
			Jest            json.RawMessage   `json:"jest"`
		}
		_ = json.Unmarshal(b, &pj)
		if _, ok := pj.DevDependencies["jest"]; ok || pj.Jest != nil || strings.Contains(pj.Scripts["test"], "jest") {
			return "jest", nil
		}
		if _, ok := pj.Dependencies["jest"]; ok {
			return "jest", nil
		}
		return "node", nil
	}
	for _, n := range []string{"pytest.ini", "pyproject.toml", "setup.cfg", "tox.ini", "conftest.py"} {
		if has(n) {
			return "pytest", nil
		}
	}
	des, err := r.ReadDir(t.rel)
	if err != nil {
		return "", err
	}
	names := make([]string, 0, min(len(des), 2000))
	for _, e := range des[:min(len(des), 2000)] {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	for _, n := range names {
		if strings.HasSuffix(n, ".csproj") || strings.HasSuffix(n, ".sln") {
			return "dotnet", nil
		}
	}
	for _, n := range names {
		if strings.HasSuffix(n, ".py") && (strings.HasPrefix(n, "test_") || strings.HasSuffix(n, "_test.py")) || n == "tests" && has("tests/__init__.py") {
			return "pytest", nil
		}
	}
	return "", fmt.Errorf("no test suite detected in %s (looked for go.mod, package.json, pytest.ini, pyproject.toml, setup.cfg, test_*.py); name the framework", t.rel)
}

func (s *server) runTests(ctx context.Context, call tools.Call, a TestArgs) (tools.Result, error) {
	sess := call.Session
	timeout, err := bound(a.Timeout, s.cfg.TestTimeout, s.cfg.MaxTimeout)
	if err != nil {
		return tools.Result{}, fmt.Errorf("run_tests: %w", err)
	}
	if a.Filter != "" && (!filterRE.MatchString(a.Filter) || strings.HasPrefix(a.Filter, "-")) {
		return tools.Result{}, fmt.Errorf("run_tests: filter %q: up to 200 characters of letters, digits, spaces and . / : [ ] ( ) | ^ $ * + ? - = , quotes, not starting with -", a.Filter)
	}
	t, err := resolve(call, a.Path)
	if err != nil {
		return tools.Result{}, fmt.Errorf("run_tests: %w", err)
	}
	if !t.dir {
		return tools.Result{}, fmt.Errorf("run_tests: %s is a file; name the project's directory", t.rel)
	}
	fw := a.Framework
	switch fw {
	case "":
		if fw, err = detect(t); err != nil {
			return tools.Result{}, fmt.Errorf("run_tests: %w", err)
		}
	case "pytest", "go", "jest", "node", "dotnet":
	default:
		return tools.Result{}, fmt.Errorf("run_tests: unknown framework %q: one of pytest, go, jest, node (dotnet is not available here)", a.Framework)
	}
	if fw == "dotnet" {
		return tools.Result{}, fmt.Errorf("run_tests: dotnet test is not available here (the toolchain image has no .NET SDK)")
	}
	var cmd []string
	report := ""
	switch fw {
	case "pytest":
		report = "/tmp/junit.xml"
		cmd = []string{"python3", "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rN", "--junitxml=" + report}
		if a.Filter != "" {
			cmd = append(cmd, "-k", a.Filter)
		}
	case "go":
		cmd = []string{"go", "test", "-json", "-count=1"}
		if a.Filter != "" {
			cmd = append(cmd, "-run", a.Filter)
		}
		cmd = append(cmd, "./...")
	case "jest":
		report = "/tmp/jest.json"
		cmd = []string{"jest", "--ci", "--json", "--outputFile=" + report, "--runInBand", "--no-watchman", "--watchAll=false", "--cacheDirectory=/tmp/jest-cache", "--rootDir", inContainer(t.rel)}
		if a.Filter != "" {
			cmd = append(cmd, "-t", a.Filter)
		}
	case "node":
		cmd = []string{"node", "--test", "--test-reporter=tap"}
		if a.Filter != "" {
			cmd = append(cmd, "--test-name-pattern="+a.Filter)
		}
	}
	r, err := s.exec(ctx, sess, t, t.rel, cmd, report, timeout)
	if err != nil {
		return tools.Result{}, fmt.Errorf("run_tests: %w", err)
	}
	rep := TestReport{Framework: fw, Failures: []Failure{}, TimedOut: r.timedOut, ExitCode: r.rc, Duration: r.duration.Round(time.Millisecond).Seconds()}
	var perr error
	output := r.stdout
	switch fw {
	case "pytest":
		perr = parseJUnit([]byte(r.report), &rep)
	case "go":
		output = parseGoTest(r.stdout, &rep)
	case "jest":
		perr = parseJest([]byte(r.report), &rep)
	case "node":
		parseTAP(r.stdout, &rep)
	}
	if perr != nil || (r.report == "" && report != "") {
		rep.Note = fmt.Sprintf("%s wrote no readable report", fw)
		if perr != nil {
			rep.Note += ": " + perr.Error()
		}
		if r.timedOut {
			rep.Note += " (it was stopped at the timeout before writing it)"
		}
	}
	if len(rep.Failures) > maxFailures {
		rep.Failures = rep.Failures[:maxFailures]
	}
	out := strings.TrimSpace(output)
	if e := strings.TrimSpace(r.stderr); e != "" {
		out = strings.TrimSpace(out + "\n" + e)
	}
	rep.OutputTail = tail(out, s.cfg.TailBytes)
	return tools.JSON(rep)
}

// parseJUnit reads pytest's --junitxml: <testsuites><testsuite><testcase> with
// <failure>, <error> or <skipped> children.
func parseJUnit(b []byte, rep *TestReport) error {
	type msg struct {
		Message string `xml:"message,attr"`
		Text    string `xml:",chardata"`
	}
	type testcase struct {
		Class   string `xml:"classname,attr"`
		Name    string `xml:"name,attr"`
		Failure *msg   `xml:"failure"`
		Error   *msg   `xml:"error"`
		Skipped *msg   `xml:"skipped"`
	}
	type suite struct {
		Cases []testcase `xml:"testcase"`
	}
	var doc struct {
		XMLName xml.Name
		Suites  []suite    `xml:"testsuite"`
		Cases   []testcase `xml:"testcase"`
	}
	if ok, err := decodeOutput(b, &doc, xml.Unmarshal); !ok || err != nil {
		return err
	}
	cases := doc.Cases
	for _, s := range doc.Suites {
		cases = append(cases, s.Cases...)
	}
	for _, c := range cases {
		if c.Name == "" {
			// pytest interrupted at the timeout closes the report with a
			// nameless testcase for the test it was running.
			continue
		}
		name := c.Name
		if c.Class != "" {
			name = c.Class + "::" + c.Name
		}
		switch {
		case c.Failure != nil:
			rep.Failed++
			rep.Failures = append(rep.Failures, Failure{Name: name, Message: firstNonEmpty(c.Failure.Message, tail(c.Failure.Text, 1000))})
		case c.Error != nil:
			rep.Errors++
			rep.Failures = append(rep.Failures, Failure{Name: name, Message: firstNonEmpty(c.Error.Message, tail(c.Error.Text, 1000))})
		case c.Skipped != nil:
			rep.Skipped++
		default:
			rep.Passed++
		}
	}
	return nil
}

func firstNonEmpty(a ...string) string {
	for _, s := range a {
		if strings.TrimSpace(s) != "" {
			return strings.TrimSpace(s)
		}
	}
	return ""
}

// parseGoTest reads `go test -json` events. Counts are of tests (subtests
// included), each by its final action; a build failure or a package that
// failed without a failing test counts as an error. It returns the plain
// output (the events' Output fields) for the tail.
func parseGoTest(out string, rep *TestReport) string {
	type event struct {
		Action  string
		Package string
		Test    string
		Output  string
	}
	var plain strings.Builder
	outputs := map[string]*strings.Builder{}
	started := map[string]bool{}
	failedTests := map[string]bool{} // package → a test failed
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			plain.Write(line)
			plain.WriteByte('\n')
			continue
		}
		key := e.Package + " " + e.Test
		switch e.Action {
		case "output":
			if plain.Len() < 1<<20 {
				plain.WriteString(e.Output)
			}
			if e.Test != "" {
				b := outputs[key]
				if b == nil {
					b = &strings.Builder{}
					outputs[key] = b
				}
				if b.Len() < 8<<10 {
					b.WriteString(e.Output)
				}
			}
		case "run":
			if e.Test != "" {
				started[key] = true
			}
		case "pass", "fail", "skip":
			if e.Test == "" {
				if e.Action == "fail" && !failedTests[e.Package] && !running(started, e.Package) {
					rep.Errors++
					rep.Failures = append(rep.Failures, Failure{Name: e.Package, Message: "package failed (build error, panic, or a failure outside any test)"})
				}
				continue
			}
			delete(started, key)
			switch e.Action {
			case "pass":
				rep.Passed++
			case "skip":
				rep.Skipped++
			case "fail":
				rep.Failed++
				failedTests[e.Package] = true
				msg := ""
				if b := outputs[key]; b != nil {
					msg = goFailMessage(b.String())
				}
				rep.Failures = append(rep.Failures, Failure{Name: e.Package + "." + e.Test, Message: msg})
			}
		}
	}
	// Build errors arrive as plain lines or build-output events; the failed
	// package's "fail" already counted them.
	for _, k := range sortedKeys(started) {
		rep.Failures = append(rep.Failures, Failure{Name: strings.Replace(k, " ", ".", 1), Message: "did not finish (still running when the suite ended)"})
	}
	return plain.String()
}

// running reports whether a test of pkg started and did not finish: the
// package failed because it was stopped (the timeout), which the unfinished
// test already says.
func running(started map[string]bool, pkg string) bool {
	for k := range started {
		if strings.HasPrefix(k, pkg+" ") {
			return true
		}
	}
	return false
}

// goFailMessage keeps a failed test's own lines, not its === RUN/--- FAIL frame.
func goFailMessage(s string) string {
	var keep []string
	for _, l := range strings.Split(s, "\n") {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- ") {
			continue
		}
		keep = append(keep, t)
	}
	return tail(strings.Join(keep, "\n"), 1000)
}

// parseJest reads jest's --json result.
func parseJest(b []byte, rep *TestReport) error {
	var doc struct {
		NumPassedTests  int `json:"numPassedTests"`
		NumFailedTests  int `json:"numFailedTests"`
		NumPendingTests int `json:"numPendingTests"`
		NumTodoTests    int `json:"numTodoTests"`
		TestResults     []struct {
			Name             string `json:"name"`
			Status           string `json:"status"`
			Message          string `json:"message"`
			AssertionResults []struct {
				FullName        string   `json:"fullName"`
				Status          string   `json:"status"`
				FailureMessages []string `json:"failureMessages"`
			} `json:"assertionResults"`
		} `json:"testResults"`
	}
	if ok, err := decodeOutput(b, &doc, json.Unmarshal); !ok || err != nil {
		return err
	}
	rep.Passed, rep.Failed, rep.Skipped = doc.NumPassedTests, doc.NumFailedTests, doc.NumPendingTests+doc.NumTodoTests
	for _, f := range doc.TestResults {
		if f.Status == "failed" && len(f.AssertionResults) == 0 {
			// A suite that could not run (syntax error, failing import).
			rep.Errors++
			rep.Failures = append(rep.Failures, Failure{Name: relFile(f.Name, ""), Message: tail(f.Message, 1000)})
		}
		for _, a := range f.AssertionResults {
			if a.Status == "failed" {
				rep.Failures = append(rep.Failures, Failure{Name: a.FullName, Message: tail(strings.Join(a.FailureMessages, "\n"), 1000)})
			}
		}
	}
	return nil
}

var tapPoint = regexp.MustCompile(`^(\s*)(not ok|ok) \d+(?: - (.*?))?(?:\s+#\s*(SKIP|TODO)\b.*)?$`)

// parseTAP reads node --test's TAP: subtests are printed, indented, before the
// test point of their parent, so a point is a leaf (a test, not a file or a
// describe block) when the point before it is not deeper. Failures take the
// message of their YAML block's "error:" line.
func parseTAP(out string, rep *TestReport) {
	lines := strings.Split(out, "\n")
	prevIndent := -1
	for i, l := range lines {
		m := tapPoint.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		indent := len(m[1])
		leaf := prevIndent <= indent
		prevIndent = indent
		if !leaf {
			continue
		}
		name := strings.TrimSpace(m[3])
		switch {
		case m[4] != "":
			rep.Skipped++
		case m[2] == "ok":
			rep.Passed++
		default:
			rep.Failed++
			rep.Failures = append(rep.Failures, Failure{Name: name, Message: tapError(lines[i+1:])})
		}
	}
}

// tapError finds "error: …" in the YAML diagnostics after a failed point.
func tapError(rest []string) string {
	for i, l := range rest {
		t := strings.TrimSpace(l)
		if tapPoint.MatchString(l) || i > 40 {
			break
		}
		if v, ok := strings.CutPrefix(t, "error: "); ok {
			v = strings.Trim(v, `'"|-`)
			if v == "" && i+1 < len(rest) {
				v = strings.TrimSpace(rest[i+1])
			}
			if u, err := strconv.Unquote(`"` + v + `"`); err == nil {
				v = u
			}
			return v
		}
	}
	return ""
}
