package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/evals"
	"github.com/aetherium-engine/aetherium/fleettest"
)

// evalCLI runs aetherium eval against a fleet.
func evalCLI(t *testing.T, base string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Main(append(append([]string{"eval"}, args...), "--api", base), &out, &errOut)
	return code, out.String(), errOut.String()
}

// The example suite's ten tasks over the demo template on a real fleet (the
// script model), compared with an edited team: nine pass, says-goodbye fails
// with what it expected and what the run answered, the judge is skipped with
// its reason, the command exits 1, and the JUnit XML and JSON say the same.
// Run again, the suite submits nothing new: the idempotency keys answer with
// the runs of the first time.
func TestEvalExampleSuite(t *testing.T) {
	t.Parallel()
	f := fleettest.Start(t, fleettest.Options{})
	dir := t.TempDir()
	suite := fleettest.RepoPath(t, "examples/evals/demo.suite.yaml")
	lean := fleettest.RepoPath(t, "examples/evals/demo-lean.yaml")
	junitPath, jsonPath := filepath.Join(dir, "evals.xml"), filepath.Join(dir, "evals.json")
	runs := func() int {
		var n int
		require.NoError(t, f.Store.Pool.QueryRow(context.Background(), `SELECT count(*) FROM runs`).Scan(&n))
		return n
	}

	code, out, errOut := evalCLI(t, f.URL, suite, "--compare", lean, "--junit", junitPath, "--json", jsonPath, "--parallel", "8")
	require.Equal(t, 1, code, "a failed task fails the command\n%s\n%s", out, errOut)
	require.Equal(t, 20, runs(), "ten tasks against two team versions")
	require.Regexp(t, `says-goodbye\s+FAIL .*contains \(line \d+\): expected result contains "goodbye", got "hello\.txt is written"`, out)
	require.Regexp(t, `judged-greeting\s+pass \(skipped some\) .*judge skipped: the suite names no judge model`, out)
	require.Regexp(t, `TOTAL\s+9/10 passed`, out)
	// The lean team drops the progress reports and the read-back: two tasks
	// fewer pass, in five turns instead of seven.
	require.Contains(t, out, "comparison, A: template demo, B: demo-lean.yaml (")
	require.Regexp(t, `supervisor-reports-progress\s+pass\s+FAIL\s+\$0\.0000\s+\$0\.0000\s+7\s+5`, out)
	require.Regexp(t, `writer-writes-and-reads-back\s+pass\s+FAIL\s+`, out)
	require.Regexp(t, `TOTAL\s+9/10 \(90%\)\s+7/10 \(70%\)\s+\$0\.0000\s+\$0\.0000\s+70\s+50`, out)
	require.Contains(t, errOut, "[10/10]", "progress per task")

	raw, err := os.ReadFile(junitPath)
	require.NoError(t, err)
	doc := validJUnit(t, raw)
	require.Len(t, doc.Suites, 2)
	require.Equal(t, [5]int{20, 4, 0, 2, 0}, [5]int{doc.Tests, doc.Failures, doc.Errors, doc.Skipped, 0}, "4 failures: says-goodbye twice, the lean team's two")
	var goodbye *junitCaseDoc
	for i, c := range doc.Suites[0].Cases {
		if c.Name == "says-goodbye" {
			goodbye = &doc.Suites[0].Cases[i]
		}
	}
	require.NotNil(t, goodbye)
	require.NotNil(t, goodbye.Failure)
	require.Equal(t, "contains", goodbye.Failure.Type)
	require.Contains(t, goodbye.Failure.Message, `expected result contains "goodbye", got "hello.txt is written"`)

	var rep struct{ Reports []evals.Report }
	raw, err = os.ReadFile(jsonPath)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &rep))
	require.Len(t, rep.Reports, 2)
	require.Equal(t, evals.Totals{Tasks: 10, Passed: 9, Failed: 1, Skipped: 1, Turns: 70, PassRate: 0.9, Tokens: rep.Reports[0].Totals.Tokens}, rep.Reports[0].Totals)
	for _, tr := range rep.Reports[0].Tasks {
		require.NotEmpty(t, tr.RunID, tr.Task)
		require.Equal(t, "completed", tr.RunStatus, tr.Task)
	}

	// Again: the same keys, the same runs, nothing submitted twice.
	code, out, _ = evalCLI(t, f.URL, suite, "--junit", junitPath)
	require.Equal(t, 1, code)
	require.Equal(t, 20, runs(), "a second invocation reuses the runs")
	require.Regexp(t, `TOTAL\s+9/10 passed`, out)
	require.Contains(t, out, "10 of 10 runs were submitted before under the same keys")
	code, _, _ = evalCLI(t, f.URL, suite, "--new-runs")
	require.Equal(t, 1, code)
	require.Equal(t, 30, runs(), "--new-runs submits new runs")
}

// What a suite meets that is not a passing run: a run that fails (its
// script ends early) fails the implied status assertion with the run's
// reason, unless the task expects the failure; a run that waits for a person
// past the task's timeout is reported as timed out and cancelled; a team the
// API refuses is an error per task; none of it stops the others.
func TestEvalRunsThatDoNotComplete(t *testing.T) {
	t.Parallel()
	f := fleettest.Start(t, fleettest.Options{})
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
		return p
	}
	short := write("short.yaml", `
name: short
model: {provider: script}
supervisor: {name: lead, prompt: plan, mcp_servers: [planning, comms]}
script:
  agents:
    lead:
      - calls: [{tool: create_plan, args: {goal: g, steps: [one]}}]
`)
	asks := write("asks.yaml", `
name: asks
model: {provider: script}
supervisor: {name: lead, prompt: ask, mcp_servers: [comms]}
script:
  agents:
    lead:
      - calls: [{tool: ask_user, args: {question: "Which colour?"}}]
      - calls: [{tool: reply, args: {message: "done"}}]
`)
	suite := write("suite.yaml", `
name: hard
tasks:
  - name: must-complete
    prompt: go
  - name: expects-failure
    prompt: go again
    assert:
      - status: failed
      - called: [create_plan]
`)
	code, out, errOut := evalCLI(t, f.URL, suite, "--team", short)
	require.Equal(t, 1, code, errOut)
	require.Regexp(t, `must-complete\s+FAIL .*status \(implied\): expected completed, got failed \(script_exhausted: `, out)
	require.Regexp(t, `expects-failure\s+pass`, out)

	waits := write("waits.yaml", `
name: waits
timeout: 2s
tasks:
  - name: waits-for-a-person
    prompt: ask me
`)
	code, out, _ = evalCLI(t, f.URL, waits, "--team", asks)
	require.Equal(t, 1, code)
	m := regexp.MustCompile(`waits-for-a-person\s+ERROR .*timed out: run ([0-9a-f-]{36}) did not end within 2s \(the task's timeout\); cancelled it`).FindStringSubmatch(out)
	require.NotNil(t, m, out)
	var status string
	require.NoError(t, f.Store.Pool.QueryRow(context.Background(), `SELECT status FROM runs WHERE id = $1`, m[1]).Scan(&status))
	require.Equal(t, "cancelled", status)

	// The shipped template's name, taken by an inline team: refused per task.
	clash := write("clash.yaml", strings.Replace(string(mustRead(t, fleettest.RepoPath(t, "examples/evals/demo-lean.yaml"))), "name: demo-lean", "name: demo", 1))
	code, out, _ = evalCLI(t, f.URL, suite, "--team", clash, "--parallel", "1")
	require.Equal(t, 1, code)
	require.Regexp(t, `must-complete\s+ERROR .*submit: HTTP 400: name "demo" belongs to the shipped template`, out)
	require.Regexp(t, `expects-failure\s+ERROR .*submit: HTTP 400`, out)
}

// With a judge model configured (an OpenAI-compatible server, speaking the
// wire format), the judge grades each run's real result: the rubric and the
// fenced result reach the model, its verdicts pass one task and fail the
// other. Not parallel: the model's address comes from the environment, as
// for a user.
func TestEvalJudgeWithAModel(t *testing.T) {
	var asked atomic.Int32
	model := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Messages []struct{ Content string } `json:"messages"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) != 2 {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		asked.Add(1)
		q := req.Messages[1].Content
		// The judge's stand-in: pass when the rubric's word is in the result.
		rubric, _, _ := strings.Cut(strings.TrimPrefix(q, "RUBRIC:\nmentions "), "\n")
		_, result, _ := strings.Cut(q, "RESULT:\n")
		verdict := fmt.Sprintf(`{"pass": %t, "reason": "looked for %s"}`, strings.Contains(result, rubric), rubric)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"c","object":"chat.completion","created":1,"model":"judge-1","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":%q}}],"usage":{"prompt_tokens":9,"completion_tokens":9,"total_tokens":18}}`, verdict)
	}))
	t.Cleanup(model.Close)
	t.Setenv("AETHERIUM_OPENAI_BASE_URL", model.URL+"/v1")
	t.Setenv("AETHERIUM_OPENAI_API_KEY", "test-key")
	f := fleettest.Start(t, fleettest.Options{})
	suite := filepath.Join(t.TempDir(), "judged.yaml")
	require.NoError(t, os.WriteFile(suite, []byte(`
team: {template: demo}
variables: {topic: x}
judge: {provider: openai, model: judge-1}
tasks:
  - name: names-the-file
    prompt: greet
    assert: [{judge: {rubric: mentions hello.txt}}]
  - name: says-goodbye
    prompt: greet
    assert: [{judge: {rubric: mentions goodbye}}]
`), 0o644))
	code, out, errOut := evalCLI(t, f.URL, suite)
	require.Equal(t, 1, code, errOut)
	require.EqualValues(t, 2, asked.Load())
	require.Regexp(t, `names-the-file\s+pass\s`, out)
	require.Regexp(t, `says-goodbye\s+FAIL .*judge \(line \d+\): expected judged to meet: "mentions goodbye", got fails the rubric — looked for goodbye`, out)
}

// A suite the parser refuses never reaches the fleet: exit 2 and the line.
func TestEvalRefusesABadSuite(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, c := range []struct{ name, body, want string }{
		{"unknown key", "name: x\ntasks:\n  - name: a\n    prompt: p\n    asert: []\n", "line 5: field asert not found"},
		{"bad regex", "tasks:\n  - name: a\n    prompt: p\n    assert:\n      - regex: 'a(b'\n", `line 5: task "a", assertion 1: regex "a(b" does not compile`},
		{"no team", "tasks:\n  - name: a\n    prompt: p\n", "no team: give --team FILE or --template NAME"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-")+".yaml")
			require.NoError(t, os.WriteFile(p, []byte(c.body), 0o644))
			code, _, errOut := evalCLI(t, "http://127.0.0.1:1", p)
			require.Equal(t, 2, code)
			require.Contains(t, errOut, c.want)
			require.NotContains(t, errOut, "is the API running", "nothing was submitted")
		})
	}
}

// junitDoc is JUnit XML as a CI server reads it.
type junitDoc struct {
	XMLName  xml.Name `xml:"testsuites"`
	Tests    int      `xml:"tests,attr"`
	Failures int      `xml:"failures,attr"`
	Errors   int      `xml:"errors,attr"`
	Skipped  int      `xml:"skipped,attr"`
	Time     string   `xml:"time,attr"`
	Suites   []struct {
		Name     string         `xml:"name,attr"`
		Tests    int            `xml:"tests,attr"`
		Failures int            `xml:"failures,attr"`
		Errors   int            `xml:"errors,attr"`
		Skipped  int            `xml:"skipped,attr"`
		Time     string         `xml:"time,attr"`
		Cases    []junitCaseDoc `xml:"testcase"`
	} `xml:"testsuite"`
}

type junitCaseDoc struct {
	Name      string `xml:"name,attr"`
	Classname string `xml:"classname,attr"`
	Time      string `xml:"time,attr"`
	Failure   *struct {
		Message string `xml:"message,attr"`
		Type    string `xml:"type,attr"`
		Text    string `xml:",chardata"`
	} `xml:"failure"`
	Error *struct {
		Message string `xml:"message,attr"`
	} `xml:"error"`
	Skipped *struct {
		Message string `xml:"message,attr"`
	} `xml:"skipped"`
}

// validJUnit checks what the JUnit schema says and a reader relies on:
// well-formed XML, testsuites > testsuite > testcase with the required
// names and times, at most one outcome element per case, and counts that
// agree with the cases, per suite and in total.
func validJUnit(t *testing.T, raw []byte) junitDoc {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(raw))
	dec.Strict = true
	for {
		_, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, "well-formed XML")
	}
	var doc junitDoc
	require.NoError(t, xml.Unmarshal(raw, &doc))
	float := func(s string) {
		v, err := strconv.ParseFloat(s, 64)
		require.NoError(t, err, "time %q", s)
		require.GreaterOrEqual(t, v, 0.0)
	}
	float(doc.Time)
	var tests, failures, errs, skipped int
	for _, s := range doc.Suites {
		require.NotEmpty(t, s.Name)
		float(s.Time)
		var f, e, sk int
		for _, c := range s.Cases {
			require.NotEmpty(t, c.Name)
			require.NotEmpty(t, c.Classname)
			float(c.Time)
			outcomes := 0
			if c.Failure != nil {
				f, outcomes = f+1, outcomes+1
				require.NotEmpty(t, c.Failure.Message)
			}
			if c.Error != nil {
				e, outcomes = e+1, outcomes+1
			}
			if c.Skipped != nil {
				sk, outcomes = sk+1, outcomes+1
			}
			require.LessOrEqual(t, outcomes, 1, "case %s", c.Name)
		}
		require.Equal(t, [4]int{len(s.Cases), f, e, sk}, [4]int{s.Tests, s.Failures, s.Errors, s.Skipped}, "suite %s counts", s.Name)
		tests, failures, errs, skipped = tests+s.Tests, failures+f, errs+e, skipped+sk
	}
	require.Equal(t, [4]int{tests, failures, errs, skipped}, [4]int{doc.Tests, doc.Failures, doc.Errors, doc.Skipped}, "totals")
	return doc
}
