package evals

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteTable prints a report: a line per task (pass or fail, the first
// failed assertion with what it expected and what it got, cost, turns,
// duration) and the totals.
func WriteTable(w io.Writer, r Report) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "TASK\tRESULT\tCOST\tTURNS\tDURATION\tFAILED ASSERTION\n")
	for _, t := range r.Tasks {
		fmt.Fprintf(tw, "%s\t%s\t$%.4f\t%d\t%s\t%s\n", oneLine(t.Task, 40), t.Summary(), t.CostUSD, t.Turns, t.Duration.Round(10*time.Millisecond), t.why())
	}
	fmt.Fprintf(tw, "TOTAL\t%d/%d passed\t$%.4f\t%d\t%s\t\n", r.Totals.Passed, r.Totals.Tasks, r.Totals.CostUSD, r.Totals.Turns, r.Duration.Round(10*time.Millisecond))
	if err := tw.Flush(); err != nil {
		return err
	}
	reused := 0
	for _, t := range r.Tasks {
		if t.Reused {
			reused++
		}
	}
	if reused > 0 {
		// Said, because a changed fleet (a new model, new rules) would not show
		// in runs submitted before it.
		_, err := fmt.Fprintf(w, "%d of %d runs were submitted before under the same keys (suite, task, team) and are judged again; --new-runs submits new ones\n", reused, len(r.Tasks))
		return err
	}
	return nil
}

// Summary is the task's outcome in a word or three, as the table says it.
func (t TaskResult) Summary() string {
	switch {
	case t.Error != "":
		return "ERROR"
	case !t.Pass:
		return "FAIL"
	case t.hasSkipped():
		return "pass (skipped some)"
	}
	return "pass"
}

// why is the table's explanation of a task that did not simply pass.
func (t TaskResult) why() string {
	if t.Error != "" {
		return oneLine(t.Error, 160)
	}
	if f := t.FirstFailure(); f != nil {
		return oneLine(f.describe(), 200)
	}
	for _, a := range t.Assertions {
		if a.Status == Skipped {
			return oneLine(a.Kind+" skipped: "+a.Reason, 160)
		}
	}
	return ""
}

// describe is an assertion's outcome in a line: where, expected, got.
func (a AssertionResult) describe() string {
	where := "implied"
	if a.Line > 0 {
		where = fmt.Sprintf("line %d", a.Line)
	}
	s := fmt.Sprintf("%s (%s): expected %s, got %s", a.Kind, where, a.Expected, a.Got)
	if a.Reason != "" {
		s += " — " + a.Reason
	}
	return s
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}

// WriteComparison prints two reports of one suite side by side: each task's
// result, cost and turns under each team version, and the totals (pass rate,
// cost, turns).
func WriteComparison(w io.Writer, a, b Report) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "TASK\tA: %s\tB: %s\tA COST\tB COST\tA TURNS\tB TURNS\n", oneLine(a.Team, 30), oneLine(b.Team, 30))
	byName := make(map[string]TaskResult, len(b.Tasks))
	for _, t := range b.Tasks {
		byName[t.Task] = t
	}
	for _, ta := range a.Tasks {
		tb := byName[ta.Task]
		fmt.Fprintf(tw, "%s\t%s\t%s\t$%.4f\t$%.4f\t%d\t%d\n", oneLine(ta.Task, 40), ta.Summary(), tb.Summary(), ta.CostUSD, tb.CostUSD, ta.Turns, tb.Turns)
	}
	fmt.Fprintf(tw, "TOTAL\t%d/%d (%.0f%%)\t%d/%d (%.0f%%)\t$%.4f\t$%.4f\t%d\t%d\n",
		a.Totals.Passed, a.Totals.Tasks, 100*a.Totals.PassRate, b.Totals.Passed, b.Totals.Tasks, 100*b.Totals.PassRate,
		a.Totals.CostUSD, b.Totals.CostUSD, a.Totals.Turns, b.Totals.Turns)
	return tw.Flush()
}

// WriteJSON writes the reports as one JSON document: {"reports": [...]}.
func WriteJSON(w io.Writer, reports ...Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		Reports []Report `json:"reports"`
	}{reports})
}

// JUnit XML: the shape CI servers read (testsuites > testsuite > testcase,
// a failure, error or skipped element per case that did not simply pass).
type (
	junitSuites struct {
		XMLName xml.Name `xml:"testsuites"`
		junitCounts
		Suites []junitSuite `xml:"testsuite"`
	}
	// junitCounts are the attributes testsuites and testsuite share.
	junitCounts struct {
		Name     string `xml:"name,attr"`
		Tests    int    `xml:"tests,attr"`
		Failures int    `xml:"failures,attr"`
		Errors   int    `xml:"errors,attr"`
		Skipped  int    `xml:"skipped,attr"`
		Time     string `xml:"time,attr"`
	}
	junitSuite struct {
		junitCounts
		Timestamp  string          `xml:"timestamp,attr,omitempty"`
		Properties []junitProperty `xml:"properties>property"`
		Cases      []junitCase     `xml:"testcase"`
	}
	junitProperty struct {
		Name  string `xml:"name,attr"`
		Value string `xml:"value,attr"`
	}
	junitCase struct {
		Name      string        `xml:"name,attr"`
		Classname string        `xml:"classname,attr"`
		Time      string        `xml:"time,attr"`
		Skipped   *junitMessage `xml:"skipped"`
		Error     *junitMessage `xml:"error"`
		Failure   *junitMessage `xml:"failure"`
		SystemOut string        `xml:"system-out,omitempty"`
	}
	junitMessage struct {
		Message string `xml:"message,attr"`
		Type    string `xml:"type,attr,omitempty"`
		Text    string `xml:",chardata"`
	}
)

// WriteJUnit writes the reports as JUnit XML, one testsuite per report
// (team version). encoding/xml escapes what the results hold, and replaces
// characters XML cannot carry.
func WriteJUnit(w io.Writer, started time.Time, reports ...Report) error {
	doc := junitSuites{}
	var total time.Duration
	for _, r := range reports {
		doc.Name = r.Suite
		s := junitSuite{
			junitCounts: junitCounts{Name: r.Suite + " [" + r.Team + "]", Tests: r.Totals.Tasks, Failures: r.Totals.Failed, Errors: r.Totals.Errors,
				Skipped: r.Totals.Skipped, Time: seconds(r.Duration)},
			Properties: []junitProperty{{Name: "team", Value: r.Team}, {Name: "cost_usd", Value: fmt.Sprintf("%.6f", r.Totals.CostUSD)}, {Name: "turns", Value: fmt.Sprint(r.Totals.Turns)}},
		}
		if !started.IsZero() {
			s.Timestamp = started.UTC().Format("2006-01-02T15:04:05")
		}
		for _, t := range r.Tasks {
			c := junitCase{Name: t.Task, Classname: r.Suite + "." + r.Team, Time: seconds(t.Duration), SystemOut: t.details()}
			switch {
			case t.Error != "":
				c.Error = &junitMessage{Message: oneLine(t.Error, 300), Type: "error", Text: t.Error}
			case !t.Pass:
				f := t.FirstFailure()
				c.Failure = &junitMessage{Message: oneLine(f.describe(), 300), Type: f.Kind, Text: t.failures()}
			case t.hasSkipped():
				c.Skipped = &junitMessage{Message: oneLine(t.why(), 300)}
			}
			s.Cases = append(s.Cases, c)
		}
		doc.Suites = append(doc.Suites, s)
		doc.Tests += s.Tests
		doc.Failures += s.Failures
		doc.Errors += s.Errors
		doc.Skipped += s.Skipped
		total += r.Duration
	}
	doc.Time = seconds(total)
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return fmt.Errorf("junit: %w", err)
	}
	_, err := io.WriteString(w, "\n")
	return err
}

func seconds(d time.Duration) string { return fmt.Sprintf("%.3f", d.Seconds()) }

// details lists every assertion of a task, for the case's system-out.
func (t TaskResult) details() string {
	var b strings.Builder
	fmt.Fprintf(&b, "run %s %s; cost $%.6f, tokens %d, turns %d\n", t.RunID, t.RunStatus, t.CostUSD, t.Tokens, t.Turns)
	for _, a := range t.Assertions {
		fmt.Fprintf(&b, "%s: %s\n", a.Status, a.describe())
	}
	return b.String()
}

// failures lists a task's failed assertions.
func (t TaskResult) failures() string {
	var b strings.Builder
	for _, a := range t.Assertions {
		if a.Status == Failed {
			b.WriteString(a.describe())
			b.WriteByte('\n')
		}
	}
	return b.String()
}
