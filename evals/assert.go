package evals

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Outcome is what the command learnt of a task's run.
type Outcome struct {
	RunID string
	// Status, Result, Error and Reason are the run's, as the API reports it.
	Status, Result, Error, Reason string
	// TokensUsed and CostUSD are the run's ("" cost: the API gave none).
	TokensUsed int64
	CostUSD    string
	Events     []Event
	// Duration is from submission to the end of the events.
	Duration time.Duration
	// Reused is true when the submission's idempotency key answered with a
	// run submitted before (an earlier invocation of the suite).
	Reused bool
	// Err is why the task has no complete run to judge: the submission was
	// refused, the events could not be read, the timeout passed.
	Err error
}

// Verdict is a judge's grade.
type Verdict struct {
	Pass   bool
	Reason string
}

// Judge grades a result against a rubric.
type Judge interface {
	Grade(ctx context.Context, rubric, prompt, result string) (Verdict, error)
}

// Assertion outcomes.
const (
	Passed  = "passed"
	Failed  = "failed"
	Skipped = "skipped"
)

// AssertionResult is one assertion's outcome.
type AssertionResult struct {
	Kind string `json:"kind"`
	// Line is the assertion's line in the suite (0: implied, the run must complete).
	Line   int    `json:"line"`
	Status string `json:"status"`
	// Expected and Got are what the assertion wanted and what the run showed.
	Expected string `json:"expected"`
	Got      string `json:"got"`
	// Reason is why it was skipped, or more about a failure.
	Reason string `json:"reason,omitempty"`
}

// TaskResult is a task's outcome.
type TaskResult struct {
	Task  string `json:"task"`
	RunID string `json:"run_id,omitempty"`
	// RunStatus is the run's final status ("" when it has none).
	RunStatus string `json:"run_status,omitempty"`
	Pass      bool   `json:"pass"`
	// Error is why the task could not be judged (no run, timeout, unreadable events).
	Error      string            `json:"error,omitempty"`
	Assertions []AssertionResult `json:"assertions"`
	CostUSD    float64           `json:"cost_usd"`
	Tokens     int64             `json:"tokens"`
	Turns      int               `json:"turns"`
	Duration   time.Duration     `json:"-"`
	// Seconds is Duration in seconds.
	Seconds float64 `json:"seconds"`
	Reused  bool    `json:"reused,omitempty"`
}

// FirstFailure is the first failed assertion, nil when none failed.
func (r TaskResult) FirstFailure() *AssertionResult {
	for i := range r.Assertions {
		if r.Assertions[i].Status == Failed {
			return &r.Assertions[i]
		}
	}
	return nil
}

// Evaluator judges outcomes. Judge is nil when no real model is configured;
// NoJudge then says why, and the judge assertions are skipped with it.
type Evaluator struct {
	Judge   Judge
	NoJudge string
}

// Evaluate judges a task's outcome. Without a status assertion the run must
// have completed.
func (ev Evaluator) Evaluate(ctx context.Context, t Task, o Outcome) TaskResult {
	r := TaskResult{Task: t.Name, RunID: o.RunID, RunStatus: o.Status, Duration: o.Duration, Seconds: o.Duration.Seconds(), Reused: o.Reused, Tokens: o.TokensUsed}
	if o.CostUSD != "" {
		if c, err := strconv.ParseFloat(o.CostUSD, 64); err == nil {
			r.CostUSD = c
		}
	}
	if o.Err != nil {
		r.Error = o.Err.Error()
		return r
	}
	tr, err := NewTrajectory(o.Events)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	r.Turns = tr.Turns
	if r.Tokens == 0 {
		r.Tokens = tr.Tokens
	}
	asserts := t.Assert
	if !slices.ContainsFunc(asserts, func(a Assertion) bool { return a.Status != "" }) {
		asserts = append([]Assertion{{Status: "completed"}}, asserts...)
	}
	r.Pass = true
	for _, a := range asserts {
		res := ev.check(ctx, a, t, o, tr, r)
		res.Kind, res.Line = a.Kind(), a.Line
		if res.Status == Failed {
			r.Pass = false
		}
		r.Assertions = append(r.Assertions, res)
	}
	return r
}

func pass(expected, got string) AssertionResult {
	return AssertionResult{Status: Passed, Expected: expected, Got: got}
}

func verdict(ok bool, expected, got string) AssertionResult {
	if ok {
		return pass(expected, got)
	}
	return AssertionResult{Status: Failed, Expected: expected, Got: got}
}

// quoteResult shows a result in a report: on one line, cut.
func quoteResult(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	const n = 200
	if len(s) > n {
		r := []rune(s)
		if len(r) > n {
			s = string(r[:n]) + "…"
		}
	}
	return strconv.Quote(s)
}

func (ev Evaluator) check(ctx context.Context, a Assertion, t Task, o Outcome, tr Trajectory, r TaskResult) AssertionResult {
	switch a.Kind() {
	case KindStatus:
		got := o.Status
		if o.Error != "" {
			got += " (" + strings.TrimPrefix(o.Reason+": ", ": ") + o.Error + ")"
		}
		return verdict(o.Status == a.Status, a.Status, got)
	case KindCalled:
		called := toolNames(tr.callsOf(a.Agent))
		var missing []string
		for _, tool := range a.Called {
			if !slices.Contains(called, tool) {
				missing = append(missing, tool)
			}
		}
		res := verdict(len(missing) == 0, "called "+strings.Join(a.Called, ", ")+agentSuffix(a.Agent), calledList(called))
		if len(missing) > 0 {
			res.Reason = "not called: " + strings.Join(missing, ", ")
		}
		return res
	case KindNotCalled:
		var hit []string
		for _, c := range tr.callsOf(a.Agent) {
			if slices.Contains(a.NotCalled, c.Tool) {
				hit = append(hit, fmt.Sprintf("%s by %s (%s)", c.Tool, c.Agent, c.Decision))
			}
		}
		got := "none of them"
		if len(hit) > 0 {
			got = strings.Join(hit, ", ")
		}
		return verdict(len(hit) == 0, "not called "+strings.Join(a.NotCalled, ", ")+agentSuffix(a.Agent), got)
	case KindInOrder:
		called := toolNames(tr.callsOf(a.Agent))
		next := 0
		for _, tool := range called {
			if next < len(a.InOrder) && tool == a.InOrder[next] {
				next++
			}
		}
		res := verdict(next == len(a.InOrder), strings.Join(a.InOrder, " → ")+agentSuffix(a.Agent), calledList(called))
		if next < len(a.InOrder) {
			res.Reason = fmt.Sprintf("no %s after %s", a.InOrder[next], strings.Join(a.InOrder[:next], " → "))
			if next == 0 {
				res.Reason = "no " + a.InOrder[0]
			}
		}
		return res
	case KindGate:
		want := a.Gate.Tool + " " + a.Gate.Decision
		if a.Gate.Layer != "" {
			want += " at layer " + a.Gate.Layer
		}
		var got []string
		for _, c := range tr.callsOf(a.Agent) {
			if c.Tool != a.Gate.Tool {
				continue
			}
			if c.Decision == a.Gate.Decision && (a.Gate.Layer == "" || c.Layer == a.Gate.Layer) {
				return pass(want+agentSuffix(a.Agent), describeCall(c))
			}
			got = append(got, describeCall(c))
		}
		if len(got) == 0 {
			got = []string{"no call of " + a.Gate.Tool}
		}
		return verdict(false, want+agentSuffix(a.Agent), strings.Join(got, ", "))
	case KindDelegated:
		want := "a delegation to " + a.Delegated.To
		if a.Delegated.Status != "" {
			want += " that " + a.Delegated.Status
		}
		var got []string
		for _, d := range tr.Delegations {
			if d.To == a.Delegated.To && (a.Delegated.Status == "" || d.Status == a.Delegated.Status) {
				return pass(want, "to "+d.To+" "+d.Status)
			}
			got = append(got, "to "+d.To+" "+cmp.Or(d.Status, "(open)"))
		}
		if len(got) == 0 {
			got = []string{"no delegation"}
		}
		return verdict(false, want, strings.Join(got, ", "))
	case KindContains:
		return verdict(strings.Contains(o.Result, a.Contains), "result contains "+strconv.Quote(a.Contains), quoteResult(o.Result))
	case KindNotContains:
		return verdict(!strings.Contains(o.Result, a.NotContains), "result does not contain "+strconv.Quote(a.NotContains), quoteResult(o.Result))
	case KindRegex:
		return verdict(a.regex != nil && a.regex.MatchString(o.Result), "result matches /"+a.Regex+"/", quoteResult(o.Result))
	case KindJSONSchema:
		return checkSchema(a.schema, o.Result)
	case KindJudge:
		want := "judged to meet: " + strconv.Quote(a.Judge.Rubric)
		if ev.Judge == nil {
			return AssertionResult{Status: Skipped, Expected: want, Got: "not judged", Reason: cmp.Or(ev.NoJudge, "no judge model is configured")}
		}
		v, err := ev.Judge.Grade(ctx, a.Judge.Rubric, t.Prompt, o.Result)
		if err != nil {
			// A judge that cannot answer has not passed anything.
			return AssertionResult{Status: Failed, Expected: want, Got: "no verdict", Reason: err.Error()}
		}
		got := "fails the rubric"
		if v.Pass {
			got = "meets the rubric"
		}
		res := verdict(v.Pass, want, got)
		res.Reason = v.Reason
		return res
	case KindMaxCost:
		return verdict(r.CostUSD <= *a.MaxCostUSD, fmt.Sprintf("cost ≤ $%g", *a.MaxCostUSD), fmt.Sprintf("$%g", r.CostUSD))
	case KindMaxTokens:
		return verdict(r.Tokens <= *a.MaxTokens, fmt.Sprintf("tokens ≤ %d", *a.MaxTokens), strconv.FormatInt(r.Tokens, 10))
	case KindMaxTurns:
		return verdict(tr.Turns <= *a.MaxTurns, fmt.Sprintf("turns ≤ %d", *a.MaxTurns), strconv.Itoa(tr.Turns))
	}
	// Parse refuses an assertion of no or several kinds; one built in Go
	// that skipped it fails rather than passes.
	return AssertionResult{Status: Failed, Expected: "one assertion kind", Got: cmp.Or(a.Kind(), "none")}
}

func checkSchema(sch *jsonschema.Schema, result string) AssertionResult {
	const want = "result valid against the JSON schema"
	if sch == nil {
		return AssertionResult{Status: Failed, Expected: want, Got: "the schema was not compiled (Parse the suite)"}
	}
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(strings.TrimSpace(result)))
	if err != nil {
		return AssertionResult{Status: Failed, Expected: want, Got: "not JSON: " + quoteResult(result), Reason: err.Error()}
	}
	if err := sch.Validate(inst); err != nil {
		var ve *jsonschema.ValidationError
		got := err.Error()
		if errors.As(err, &ve) {
			got = schemaCauses(ve)
		}
		return AssertionResult{Status: Failed, Expected: want, Got: got}
	}
	return pass(want, "valid")
}

// schemaCauses are a validation error's leaves, where in the result each is.
func schemaCauses(ve *jsonschema.ValidationError) string {
	var leaves []string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		for _, c := range e.Causes {
			walk(c)
		}
		if len(e.Causes) == 0 && len(leaves) < 5 {
			leaves = append(leaves, "/"+strings.Join(e.InstanceLocation, "/")+": "+fmt.Sprint(e.ErrorKind))
		}
	}
	walk(ve)
	return strings.Join(leaves, "; ")
}

func toolNames(calls []Call) []string {
	out := make([]string, len(calls))
	for i, c := range calls {
		out[i] = c.Tool
	}
	return out
}

func calledList(tools []string) string {
	if len(tools) == 0 {
		return "no calls"
	}
	return strings.Join(tools, ", ")
}

func describeCall(c Call) string {
	s := c.Tool + " " + c.Decision
	if c.Layer != "" {
		s += " at layer " + c.Layer
	}
	return s + " (" + c.Agent + ")"
}

func agentSuffix(agent string) string {
	if agent == "" {
		return ""
	}
	return " (agent " + agent + ")"
}
