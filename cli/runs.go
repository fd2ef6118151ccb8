package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
)

// runView is what `runs show` prints of GET /api/runs/{id}.
type runView struct {
	ID            string `json:"id"`
	Status        string `json:"status"`
	Prompt        string `json:"prompt"`
	Template      string `json:"template"`
	Result        string `json:"result"`
	Team          string `json:"team"`
	Owner         string `json:"owner"`
	Project       string `json:"project"`
	Reason        string `json:"reason"`
	Error         string `json:"error"`
	TokensUsed    int64  `json:"tokens_used"`
	TokenBudget   int64  `json:"token_budget"`
	CostUSD       string `json:"cost_usd"`
	CostBudgetUSD string `json:"cost_budget_usd"`
	CreatedAt     string `json:"created_at"`
	FinishedAt    string `json:"finished_at"`
}

// costReport is GET /api/runs/{id}/costs.
type costReport struct {
	TotalUSD string `json:"total_usd"`
	Unpriced int64  `json:"unpriced_calls"`
	Lines    []struct {
		Provider         string `json:"provider"`
		Model            string `json:"model"`
		Calls            int64  `json:"calls"`
		Fallbacks        int64  `json:"fallbacks"`
		Unpriced         int64  `json:"unpriced"`
		InputTokens      int64  `json:"input_tokens"`
		OutputTokens     int64  `json:"output_tokens"`
		CachedTokens     int64  `json:"cached_tokens"`
		CacheWriteTokens int64  `json:"cache_write_tokens"`
		CostUSD          string `json:"cost_usd"`
	} `json:"lines"`
}

const runsUsage = `usage:
  aetherium runs list   [--status S] [--owner P] [--team T] [--project SLUG] [--limit N] [--json]
  aetherium runs show   RUN_ID [--events N]     its state, cost by model and its latest events
  aetherium runs cancel RUN_ID                  stop it (its owner or an admin)
  aetherium runs retry  RUN_ID                  submit its request again: a new run of yours
  aetherium runs export RUN_ID [--out FILE]     its history as JSON: the run, its events, its audit
  aetherium runs import --owner P FILE...       write retention archives (retention.export_dir) back
                                                into the database, for replay; --owner '*' takes any
Every command but import takes --api URL (default AETHERIUM_API_URL); import talks to
PostgreSQL directly (database_url, AETHERIUM_DATABASE_URL), like migrate.`

// runsFlags are the flags each subcommand takes beyond --api (as approvals:
// one flag set, a flag of another subcommand refused by name).
var runsFlags = map[string][]string{
	"list":   {"status", "owner", "team", "project", "limit", "json"},
	"show":   {"events"},
	"cancel": {},
	"retry":  {},
	"export": {"out"},
	"import": {"owner", "json"},
}

// runsCmd: list | show | cancel | retry | export | import (runsUsage).
func runsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	sc, ok := newSubcommand("runs", runsUsage, runsFlags, args, stderr)
	if !ok {
		return 1
	}
	sub, rest, allowed, fs, base, fail := sc.name, sc.rest, sc.allowed, sc.fs, sc.base, sc.fail
	status := fs.String("status", "", "list: only runs in this status (queued, running, waiting, completed, failed, cancelled)")
	owner := fs.String("owner", "", "list: only runs of this principal; import: the principal the archived runs must belong to ('*': any)")
	team := fs.String("team", "", "list: only runs of this team (its name) or template")
	project := fs.String("project", "", "list: only runs in this project (its slug)")
	limit := fs.Int("limit", 20, "list: at most this many runs, newest first (1 to 500)")
	asJSON := fs.Bool("json", false, "list: print the runs as JSON; import: print what each archive did as JSON")
	nEvents := fs.Int("events", 15, "show: how many of the latest events to print (0: none)")
	out := fs.String("out", "", "export: write the JSON to this file instead of stdout")
	positional, code, ok := parseSub(fs, rest, sub, allowed, runsUsage, fail)
	if !ok {
		return code
	}
	if sub == "import" {
		return runsImport(ctx, positional, *owner, *asJSON, stdout, fail)
	}
	if sub == "list" {
		if len(positional) > 0 {
			return fail("list: unexpected argument %q (filters are flags: --status, --owner, --team, --project)", positional[0])
		}
		if *limit < 1 || *limit > 500 {
			return fail("--limit %d: between 1 and 500", *limit)
		}
		return runsList(ctx, *base, runFilter{status: *status, owner: *owner, team: *team, project: *project}, *limit, *asJSON, stdout, fail)
	}
	if len(positional) != 1 {
		return fail("%s needs one run id\n%s", sub, runsUsage)
	}
	id := positional[0]
	if _, err := uuid.Parse(id); err != nil {
		return fail("want a run id (a UUID), got %q", id)
	}
	one := *base + "/api/runs/" + url.PathEscape(id)
	switch sub {
	case "show":
		var run runView
		if err := getJSON(ctx, one, &run); err != nil {
			return fail("%v", err)
		}
		var costs costReport
		if err := getJSON(ctx, one+"/costs", &costs); err != nil {
			return fail("%v", err)
		}
		printRun(stdout, run, costs, time.Now())
		if *nEvents <= 0 {
			return 0
		}
		evs, err := storedEvents(ctx, *base, id)
		if err != nil {
			return fail("%v", err)
		}
		if len(evs) > *nEvents {
			fmt.Fprintf(stdout, "latest %d of %d events (aetherium events %s prints them all):\n", *nEvents, len(evs), id)
			evs = evs[len(evs)-*nEvents:]
		} else {
			fmt.Fprintf(stdout, "events:\n")
		}
		for _, e := range evs {
			fmt.Fprintln(stdout, "  "+strings.ReplaceAll(describe(e.sseEvent), "\n", "\n  "))
		}
		return 0
	case "cancel":
		var run runView
		// An empty object, not no body: the API takes only JSON posts.
		if err := postJSON(ctx, one+"/cancel", struct{}{}, &run); err != nil {
			return fail("cancel %s: %v", id, err)
		}
		fmt.Fprintf(stdout, "run %s %s: its agents stop at their next step; its events end with run.cancelled (aetherium runs show %s)\n", id, run.Status, id)
		return 0
	case "retry":
		var sub struct {
			RunID    string `json:"run_id"`
			Position int    `json:"position"`
		}
		// Each invocation is one new run: under a fresh Idempotency-Key, sent
		// again if the answer is lost, as run does.
		if _, err := submitOnce(ctx, one+"/retry", randomKey(), struct{}{}, &sub); err != nil {
			return fail("retry %s: %v", id, err)
		}
		fmt.Fprintf(stdout, "run %s queued, a retry of %s", sub.RunID, id)
		if sub.Position > 0 {
			fmt.Fprintf(stdout, " (place %d in its fairness key's line: the key is at its run limit)", sub.Position)
		}
		fmt.Fprintf(stdout, "\n  follow it: aetherium events %s · see it: aetherium runs show %s\n", sub.RunID, sub.RunID)
		return 0
	default: // export
		return runsExport(ctx, one, *base, id, *out, stdout, fail)
	}
}

// runFilter is what runs list keeps. GET /api/runs filters by status and by a
// text (q) found in a run's id, prompt, template, project, owner or team name;
// owner, team and project are matched exactly here, on pages narrowed by q.
type runFilter struct{ status, owner, team, project string }

func (f runFilter) keeps(r runView) bool {
	return (f.owner == "" || r.Owner == f.owner) &&
		(f.team == "" || r.Team == f.team || r.Template == f.team) &&
		(f.project == "" || r.Project == f.project)
}

// query is the API's filter: GET /api/runs filters by status, owner, team
// and project itself (keeps re-checks what a page holds).
func (f runFilter) query() url.Values {
	q := url.Values{}
	for k, v := range map[string]string{"status": f.status, "owner": f.owner, "team": f.team, "project": f.project} {
		if v != "" {
			q.Set(k, v)
		}
	}
	return q
}

// maxListPages bounds the pages runs list reads for the exact filters: a
// filter that keeps few of many runs ends with what it found, saying so.
const maxListPages = 20

func runsList(ctx context.Context, base string, f runFilter, limit int, asJSON bool, stdout io.Writer, fail func(string, ...any) int) int {
	q := f.query()
	q.Set("limit", fmt.Sprint(min(500, max(limit, 100))))
	if f == (runFilter{status: f.status}) {
		q.Set("limit", fmt.Sprint(limit))
	}
	var kept []runView
	more := false
	for page := 0; ; page++ {
		var out struct {
			Runs       []runView `json:"runs"`
			NextCursor string    `json:"next_cursor"`
		}
		if err := getJSON(ctx, base+"/api/runs?"+q.Encode(), &out); err != nil {
			return fail("%v", err)
		}
		for _, r := range out.Runs {
			switch {
			case !f.keeps(r):
			case len(kept) < limit:
				kept = append(kept, r)
			default:
				more = true // one it keeps past the limit
			}
		}
		if len(kept) >= limit || out.NextCursor == "" {
			more = more || out.NextCursor != ""
			break
		}
		if page+1 == maxListPages {
			more = true
			break
		}
		q.Set("cursor", out.NextCursor)
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if kept == nil {
			kept = []runView{}
		}
		_ = enc.Encode(map[string]any{"runs": kept})
		return 0
	}
	if len(kept) == 0 {
		fmt.Fprintln(stdout, "no runs")
		return 0
	}
	printRunList(stdout, kept, time.Now())
	switch {
	case more && len(kept) == limit:
		fmt.Fprintf(stdout, "(the newest %d; --limit N for more)\n", limit)
	case more:
		fmt.Fprintf(stdout, "(the newest matches among the latest %d runs read)\n", maxListPages*500)
	}
	return 0
}

// printRunList is the table of runs list: the full id (what show, cancel and
// export take), status, template or team, owner, how long it ran (runs so
// far), when it was submitted, and why it failed.
func printRunList(w io.Writer, runs []runView, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATUS\tTEMPLATE/TEAM\tOWNER\tDURATION\tSUBMITTED\tERROR")
	for _, r := range runs {
		what := r.Team
		if r.Template != "" {
			what = r.Template
		}
		if r.Project != "" {
			what += " @" + r.Project
		}
		errText := ""
		if r.Error != "" || r.Reason != "" {
			errText = oneLine(printable(strings.TrimPrefix(r.Reason+": "+r.Error, ": ")), 60)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.Status, printable(what), r.Owner, runDuration(r, now), ago(now, parseTime(r.CreatedAt)), errText)
	}
	_ = tw.Flush()
}

func parseTime(s string) time.Time {
	t, _ := time.Parse(time.RFC3339Nano, s)
	return t
}

// runDuration is how long a run ran: to its end, or so far.
func runDuration(r runView, now time.Time) string {
	start := parseTime(r.CreatedAt)
	if start.IsZero() {
		return "-"
	}
	end := now
	if r.FinishedAt != "" {
		end = parseTime(r.FinishedAt)
	}
	d := humanDuration(end.Sub(start))
	if r.FinishedAt == "" {
		d += " so far"
	}
	return d
}

// humanDuration rounds d to what a person reads at a glance: 850ms, 12s, 4m05s, 2h10m, 3d4h.
func humanDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	default:
		return fmt.Sprintf("%dd%dh", int(d.Hours())/24, int(d.Hours())%24)
	}
}

// ago is t relative to now: just now, 5s ago, 3m ago, 2h ago, 4d ago; a date
// past a month.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	switch {
	case d < 2*time.Second:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	case d < 30*24*time.Hour:
		return fmt.Sprintf("%dd ago", int(d.Hours())/24)
	default:
		return t.Local().Format(time.DateOnly)
	}
}

// runsExport writes the run's history as one JSON document: the run, its
// costs, every stored event (the post-run ones too) and its tool-call audit.
// The audit is left out, with why, when the token may not read it.
func runsExport(ctx context.Context, one, base, id, out string, stdout io.Writer, fail func(string, ...any) int) int {
	var run, costs json.RawMessage
	if err := getJSON(ctx, one, &run); err != nil {
		return fail("%v", err)
	}
	if err := getJSON(ctx, one+"/costs", &costs); err != nil {
		return fail("%v", err)
	}
	evs, err := storedEvents(ctx, base, id)
	if err != nil {
		return fail("%v", err)
	}
	doc := runExport{Run: run, Costs: costs, Events: make([]json.RawMessage, len(evs)), ExportedAt: time.Now().UTC()}
	for i, e := range evs {
		doc.Events[i] = e.raw
	}
	var audit struct {
		Audit json.RawMessage `json:"audit"`
	}
	if err := getJSON(ctx, one+"/audit", &audit); err != nil {
		if ctx.Err() != nil {
			return fail("%v", err)
		}
		doc.AuditUnavailable = err.Error()
	} else {
		doc.Audit = audit.Audit
	}
	raw, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return fail("%v", err)
	}
	raw = append(raw, '\n')
	if out == "" {
		_, _ = stdout.Write(raw)
		return 0
	}
	// Its owner's only: a run's history holds its prompts and its agents' work.
	if err := os.WriteFile(out, raw, 0o600); err != nil {
		return fail("%v", err)
	}
	fmt.Fprintf(stdout, "wrote run %s's history to %s: %d events", id, out, len(evs))
	if doc.AuditUnavailable != "" {
		fmt.Fprintf(stdout, ", no audit (%s)", doc.AuditUnavailable)
	}
	fmt.Fprintln(stdout)
	return 0
}

// runExport is the document of runs export.
type runExport struct {
	Run    json.RawMessage   `json:"run"`
	Costs  json.RawMessage   `json:"costs"`
	Events []json.RawMessage `json:"events"`
	Audit  json.RawMessage   `json:"audit,omitempty"`
	// AuditUnavailable is why the audit is absent (the API's refusal).
	AuditUnavailable string    `json:"audit_unavailable,omitempty"`
	ExportedAt       time.Time `json:"exported_at"`
}

// storedEvent is an event with its JSON as the API sent it.
type storedEvent struct {
	sseEvent
	raw json.RawMessage
}

// eventPageSize is the page size runs show and export read a run's events
// in (GET /api/runs/:id/events?format=json takes up to 5,000): a thousand events of
// a few KiB each stay well under what getJSON reads of an answer (8 MiB).
const eventPageSize = 1000

// storedEvents reads the events stored so far, page by page from the API's
// JSON list of them: to the terminal event and the post-run ones after it, or,
// of a run still running, what it recorded until now.
func storedEvents(ctx context.Context, base, runID string) ([]storedEvent, error) {
	var evs []storedEvent
	var after int64
	for {
		var page struct {
			Events    []json.RawMessage `json:"events"`
			NextAfter int64             `json:"next_after"`
		}
		u := fmt.Sprintf("%s/api/runs/%s/events?format=json&after=%d&limit=%d", base, url.PathEscape(runID), after, eventPageSize)
		if err := getJSON(ctx, u, &page); err != nil {
			return nil, fmt.Errorf("events: %w", err)
		}
		for _, raw := range page.Events {
			var e sseEvent
			if err := json.Unmarshal(raw, &e); err != nil {
				return nil, fmt.Errorf("events: %w", err)
			}
			evs = append(evs, storedEvent{sseEvent: e, raw: raw})
		}
		if len(page.Events) < eventPageSize || page.NextAfter <= after {
			return evs, nil
		}
		after = page.NextAfter
	}
}

func printRun(w io.Writer, r runView, c costReport, now time.Time) {
	fmt.Fprintf(w, "run %s  %s\n", r.ID, r.Status)
	if r.Reason != "" || r.Error != "" {
		fmt.Fprintf(w, "  %s: %s\n", r.Reason, printable(r.Error))
	}
	what := "team " + r.Team
	if r.Template != "" {
		what = "template " + r.Template + " (" + what + ")"
	}
	fmt.Fprintf(w, "  %s, owner %s", what, r.Owner)
	if r.Project != "" {
		fmt.Fprintf(w, ", project %s", r.Project)
	}
	fmt.Fprintf(w, "\n  submitted %s (%s), ran %s", ago(now, parseTime(r.CreatedAt)), r.CreatedAt, runDuration(r, now))
	if r.Prompt != "" {
		fmt.Fprintf(w, "\n  prompt: %s", oneLine(printable(r.Prompt), 200))
	}
	if r.Result != "" {
		fmt.Fprintf(w, "\n  result: %s", oneLine(printable(r.Result), 200))
	}
	fmt.Fprintf(w, "\n  tokens %d of %d\n  cost $%s", r.TokensUsed, r.TokenBudget, r.CostUSD)
	if r.CostBudgetUSD != "" {
		fmt.Fprintf(w, " of $%s", r.CostBudgetUSD)
	}
	fmt.Fprintln(w)
	if len(c.Lines) == 0 {
		fmt.Fprintln(w, "  no model calls")
		return
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  MODEL\tCALLS\tINPUT\tCACHED\tCACHE WRITE\tOUTPUT\tCOST")
	for _, l := range c.Lines {
		calls := fmt.Sprint(l.Calls)
		if l.Fallbacks > 0 {
			calls += fmt.Sprintf(" (%d as fallback)", l.Fallbacks)
		}
		cost := "$" + l.CostUSD
		if l.Unpriced > 0 {
			cost += fmt.Sprintf(" (%d unpriced)", l.Unpriced)
		}
		fmt.Fprintf(tw, "  %s/%s\t%s\t%d\t%d\t%d\t%d\t%s\n", l.Provider, l.Model, calls, l.InputTokens, l.CachedTokens, l.CacheWriteTokens, l.OutputTokens, cost)
	}
	_ = tw.Flush()
	if c.Unpriced > 0 {
		fmt.Fprintf(w, "  %d calls of models without a price are not in the total (llm.prices)\n", c.Unpriced)
	}
}
