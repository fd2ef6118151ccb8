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
)

const schedulesUsage = `usage:
  aetherium schedules list   [--json]
  aetherium schedules show   ID [--next N] [--fires N]   its definition, next fire times and latest ticks
  aetherium schedules create --name N --cron EXPR (--template T | --team FILE) --prompt P [--tz ZONE]
                             [--var k=v]… [--project SLUG] [--priority 1-5] [--jitter 5m]
                             [--overlap skip|queue_one|cancel_previous|allow_all]
                             [--catch-up none|last|all] [--catch-up-limit N] [--paused]
  aetherium schedules pause  ID
  aetherium schedules resume ID                          from its next tick after now
  aetherium schedules delete ID                          (its runs are kept)
Every command takes --api URL (default AETHERIUM_API_URL). docs/schedules.md explains the policies.`

// schedulesFlags are the flags each subcommand takes beyond --api.
var schedulesFlags = map[string][]string{
	"list":   {"json"},
	"show":   {"next", "fires"},
	"create": {"name", "cron", "tz", "template", "team", "prompt", "var", "project", "priority", "jitter", "overlap", "catch-up", "catch-up-limit", "paused"},
	"pause":  {},
	"resume": {},
	"delete": {},
}

// scheduleView is what the CLI prints of a schedule.
type scheduleView struct {
	ID           string         `json:"id"`
	Owner        string         `json:"owner"`
	Name         string         `json:"name"`
	Cron         string         `json:"cron"`
	TimeZone     string         `json:"time_zone"`
	Template     string         `json:"template"`
	Prompt       string         `json:"prompt"`
	Variables    map[string]any `json:"variables"`
	Project      string         `json:"project"`
	Priority     int            `json:"priority"`
	Jitter       string         `json:"jitter"`
	Overlap      string         `json:"overlap"`
	CatchUp      string         `json:"catch_up"`
	CatchUpLimit int            `json:"catch_up_limit"`
	Paused       bool           `json:"paused"`
	NextFires    []struct {
		Tick   time.Time `json:"tick"`
		FireAt time.Time `json:"fire_at"`
	} `json:"next_fires"`
	LastTick   *time.Time `json:"last_tick"`
	LastStatus string     `json:"last_status"`
	LastReason string     `json:"last_reason"`
	LastRunID  string     `json:"last_run_id"`
	Missed     int64      `json:"missed"`
}

type fireView struct {
	Tick   time.Time `json:"tick"`
	FireAt time.Time `json:"fire_at"`
	Status string    `json:"status"`
	Reason string    `json:"reason"`
	Detail string    `json:"detail"`
	RunID  string    `json:"run_id"`
}

// varsFlag collects --var k=v (repeatable).
type varsFlag map[string]any

func (v varsFlag) String() string { return "" }

func (v varsFlag) Set(s string) error {
	k, val, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want k=v, got %q", s)
	}
	v[k] = val
	return nil
}

// schedulesCmd: list | show | create | pause | resume | delete (schedulesUsage).
func schedulesCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	sc, ok := newSubcommand("schedules", schedulesUsage, schedulesFlags, args, stderr)
	if !ok {
		return 1
	}
	sub, rest, allowed, fs, base, fail := sc.name, sc.rest, sc.allowed, sc.fs, sc.base, sc.fail
	asJSON := fs.Bool("json", false, "list: print the schedules as JSON")
	next := fs.Int("next", 5, "show: how many next fire times to print (0 to 50)")
	nFires := fs.Int("fires", 10, "show: how many of the latest ticks to print (0: none)")
	name := fs.String("name", "", "create: the schedule's name (unique among yours)")
	cronExpr := fs.String("cron", "", `create: five fields (minute hour day-of-month month day-of-week, e.g. "0 3 * * 1-5"), or @hourly, @daily, @every 90m`)
	tz := fs.String("tz", "UTC", "create: the IANA time zone the expression is read in")
	template := fs.String("template", "", "create: a shipped template to run")
	teamFile := fs.String("team", "", "create: a JSON team file to run instead of a template (- for stdin)")
	prompt := fs.String("prompt", "", "create: the runs' prompt")
	vars := varsFlag{}
	fs.Var(vars, "var", "create: a template variable k=v (repeatable)")
	project := fs.String("project", "", "create: one of your projects (slug) the runs work in")
	priority := fs.Int("priority", 0, "create: the runs' priority, 1 to 5 (0: the default)")
	jitter := fs.String("jitter", "", "create: delay each tick by up to this (e.g. 5m), the same delay in every scheduler")
	overlap := fs.String("overlap", "", "create: while the previous run is in flight: skip (default), queue_one, cancel_previous, allow_all")
	catchUp := fs.String("catch-up", "", "create: ticks missed while no scheduler ran: none (default), last, all")
	catchUpLimit := fs.Int("catch-up-limit", 0, "create: with --catch-up all, at most this many")
	paused := fs.Bool("paused", false, "create: create it paused")
	positional, code, ok := parseSub(fs, rest, sub, allowed, schedulesUsage, fail)
	if !ok {
		return code
	}
	switch sub {
	case "list":
		if len(positional) > 0 {
			return fail("list: unexpected argument %q", positional[0])
		}
		var out struct {
			Schedules []scheduleView `json:"schedules"`
		}
		if err := getJSON(ctx, *base+"/api/schedules", &out); err != nil {
			return fail("%v", err)
		}
		if *asJSON {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			_ = enc.Encode(out)
			return 0
		}
		printScheduleList(stdout, out.Schedules)
		return 0
	case "create":
		if len(positional) > 0 {
			return fail("create: unexpected argument %q (every field is a flag)", positional[0])
		}
		body := map[string]any{"name": *name, "cron": *cronExpr, "time_zone": *tz, "prompt": *prompt, "variables": map[string]any(vars),
			"project": *project, "priority": *priority, "jitter": *jitter, "overlap": *overlap, "catch_up": *catchUp,
			"catch_up_limit": *catchUpLimit, "paused": *paused}
		switch {
		case *template != "" && *teamFile != "":
			return fail("create: --template or --team, not both")
		case *template != "":
			body["template"] = *template
		case *teamFile != "":
			raw, err := readFileOrStdin(*teamFile)
			if err != nil {
				return fail("create: --team: %v", err)
			}
			if !json.Valid(raw) {
				return fail("create: --team %s is not JSON (a team object as POST /api/orchestrator/run takes)", *teamFile)
			}
			body["team"] = json.RawMessage(raw)
		}
		var sc scheduleView
		// Under a fresh Idempotency-Key, sent again when the connection fails
		// before an answer: one schedule per invocation.
		if _, err := submitOnce(ctx, *base+"/api/schedules", randomKey(), body, &sc); err != nil {
			return fail("create: %v", err)
		}
		fmt.Fprintf(stdout, "schedule %s created\n", sc.ID)
		printSchedule(stdout, sc)
		return 0
	}
	if len(positional) != 1 {
		return fail("%s needs one schedule id\n%s", sub, schedulesUsage)
	}
	id := positional[0]
	if !strings.HasPrefix(id, "sch_") {
		return fail("want a schedule id (sch_…), got %q", id)
	}
	one := *base + "/api/schedules/" + url.PathEscape(id)
	switch sub {
	case "show":
		if *next < 0 || *next > 50 {
			return fail("--next %d: between 0 and 50", *next)
		}
		var sc scheduleView
		if err := getJSON(ctx, fmt.Sprintf("%s?next=%d", one, *next), &sc); err != nil {
			return fail("%v", err)
		}
		printSchedule(stdout, sc)
		if *nFires <= 0 {
			return 0
		}
		var fires struct {
			Fires []fireView `json:"fires"`
		}
		if err := getJSON(ctx, fmt.Sprintf("%s/fires?limit=%d", one, min(*nFires, 1000)), &fires); err != nil {
			return fail("%v", err)
		}
		printFires(stdout, fires.Fires)
		return 0
	case "pause", "resume":
		var sc scheduleView
		if err := postJSON(ctx, one+"/"+sub, struct{}{}, &sc); err != nil {
			return fail("%s %s: %v", sub, id, err)
		}
		fmt.Fprintf(stdout, "schedule %s %sd\n", id, sub)
		printSchedule(stdout, sc)
		return 0
	default: // delete
		if err := doJSON(ctx, "DELETE", one, nil, nil); err != nil {
			return fail("delete %s: %v", id, err)
		}
		fmt.Fprintf(stdout, "schedule %s deleted (its runs are kept)\n", id)
		return 0
	}
}

func readFileOrStdin(path string) ([]byte, error) {
	if path == "-" {
		return io.ReadAll(io.LimitReader(os.Stdin, 1<<20))
	}
	return os.ReadFile(path)
}

func printScheduleList(w io.Writer, scs []scheduleView) {
	if len(scs) == 0 {
		fmt.Fprintln(w, "no schedules")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tOWNER\tCRON\tTZ\tNEXT\tLAST")
	for _, sc := range scs {
		next := "paused"
		if !sc.Paused {
			next = "never"
			if len(sc.NextFires) > 0 {
				next = sc.NextFires[0].FireAt.Local().Format(time.DateTime)
			}
		}
		last := "-"
		if sc.LastTick != nil {
			last = strings.TrimSpace(sc.LastStatus + " " + sc.LastReason)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", sc.ID, printable(sc.Name), sc.Owner, printable(sc.Cron), sc.TimeZone, next, last)
	}
	_ = tw.Flush()
}

func printSchedule(w io.Writer, sc scheduleView) {
	what := "template " + sc.Template
	if sc.Template == "" {
		what = "an inline team"
	}
	fmt.Fprintf(w, "%s %q (owner %s): %s in %s, runs %s\n", sc.ID, printable(sc.Name), sc.Owner, printable(sc.Cron), sc.TimeZone, what)
	fmt.Fprintf(w, "  overlap %s, catch-up %s", sc.Overlap, sc.CatchUp)
	if sc.CatchUp == "all" {
		fmt.Fprintf(w, " (up to %d)", sc.CatchUpLimit)
	}
	if sc.Jitter != "" {
		fmt.Fprintf(w, ", jitter up to %s", sc.Jitter)
	}
	if sc.Project != "" {
		fmt.Fprintf(w, ", project %s", sc.Project)
	}
	fmt.Fprintln(w)
	if sc.Missed > 0 {
		fmt.Fprintf(w, "  %d ticks missed while no scheduler ran\n", sc.Missed)
	}
	if sc.Paused {
		fmt.Fprintf(w, "  paused: aetherium schedules resume %s\n", sc.ID)
		return
	}
	for _, t := range sc.NextFires {
		fmt.Fprintf(w, "  next: %s (tick %s)\n", t.FireAt.Local().Format(time.RFC3339), t.Tick.Local().Format(time.RFC3339))
	}
}

func printFires(w io.Writer, fires []fireView) {
	if len(fires) == 0 {
		fmt.Fprintln(w, "no ticks yet")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TICK\tSTATUS\tRUN / REASON")
	for _, f := range fires {
		what := f.RunID
		if what == "" {
			what = strings.TrimSpace(f.Reason + ": " + printable(oneLine(f.Detail, 100)))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", f.Tick.Local().Format(time.RFC3339), f.Status, what)
	}
	_ = tw.Flush()
}
