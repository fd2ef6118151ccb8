package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/fleet"
	"github.com/aetherium-engine/aetherium/security"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/tools"
)

const policyUsage = `usage:
  aetherium policy test FILE [--runs last:N | --since DURATION] [--current FILE] [--show N] [--json]
Replays the permission gate's file-controlled layers (always_deny rules, advisory rules, the
flow: section) over recorded tool calls (the audit trail in PostgreSQL) and prints the calls
the permissions file FILE decides differently from the rules in force (security.permissions_file,
or --current), grouped by rule. Nothing runs: no tool, no model. Default --runs last:100.
--since takes a Go duration or days (7d). Talks to PostgreSQL directly, like migrate
(database_url, AETHERIUM_DATABASE_URL): reading every run's calls is an operator's job.
docs/policy-test.md explains what the record can and cannot tell.`

// Defaults of policy test.
const (
	// DefaultPolicyRuns is the runs policy test replays without --runs or --since.
	DefaultPolicyRuns = 100
	// MaxPolicyRuns bounds --runs last:N.
	MaxPolicyRuns = 100_000
	// DefaultPolicyShow is how many calls per rule the table lists.
	DefaultPolicyShow = 10
	// MaxPolicyListed bounds the calls per rule a report keeps (the JSON
	// lists them all up to it; the counts are always exact).
	MaxPolicyListed = 10_000
	// MaxPolicyFile bounds the permissions file read.
	MaxPolicyFile = 4 << 20
	// policyArgsCell bounds the arguments a listed call shows.
	policyArgsCell = 160
	// policyProgressEvery is how many calls pass between progress lines.
	policyProgressEvery = 5000
)

func policyCmd(ctx context.Context, args []string, out, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New(policyUsage)
	}
	if args[0] != "test" {
		return fmt.Errorf("%s\n%s", unknownSub("policy", args[0]), policyUsage)
	}
	fs := flag.NewFlagSet("policy test", flag.ContinueOnError)
	fs.SetOutput(stderr)
	setUsage(fs, policyUsage)
	runs := fs.String("runs", "", "the calls of the N most recent runs: last:N (default last:100)")
	since := fs.String("since", "", "the calls made since this long ago: a Go duration or days, e.g. 36h, 7d")
	current := fs.String("current", "", "the rules to compare with (default: security.permissions_file, the rules in force)")
	show := fs.Int("show", DefaultPolicyShow, "table: calls listed per rule (the counts are always complete; --json lists them all)")
	asJSON := fs.Bool("json", false, "print JSON")
	positional, err := parseInterleaved(fs, args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	if err != nil {
		return fmt.Errorf("%w\n%s", err, policyUsage)
	}
	if len(positional) != 1 {
		return fmt.Errorf("policy test takes one permissions FILE\n%s", policyUsage)
	}
	scan, selection, err := policyScan(*runs, *since, time.Now())
	if err != nil {
		return err
	}
	candidate, err := readRules(positional[0], false)
	if err != nil {
		return err
	}
	cfg, err := config.Load()
	if err != nil {
		return err
	}
	curPath := cmp.Or(*current, cfg.Security.PermissionsFile)
	// The rules in force: a missing file is no rules, as the gate loads it.
	cur, err := readRules(curPath, *current == "")
	if err != nil {
		return fmt.Errorf("the current rules: %w", err)
	}
	st, err := fleet.OpenStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer st.Close()
	root, err := filepath.Abs(cfg.Workspaces)
	if err != nil {
		return fmt.Errorf("workspaces: %w", err)
	}
	rep, err := policyTest(ctx, st, policyInput{
		Current: cur, Candidate: candidate, Scan: scan, Selection: selection, WorkspaceRoot: root,
		Flow: security.FlowSettings{Mode: cfg.Security.Flow, PrivateContent: cfg.Security.FlowPrivateContent},
	}, stderr)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return rep.write(out, *show)
}

// policyRules is a permissions file read for a what-if.
type policyRules struct {
	Path     string `json:"path"`
	Revision string `json:"revision"`
	Rules    int    `json:"rules"`
	set      *security.RuleSet
}

// readRules reads and parses a permissions file with the gate's parser, so a
// broken one is refused with the errors a hot reload logs (line, field).
// missingOK: a missing file is no rules.
func readRules(path string, missingOK bool) (policyRules, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) && missingOK {
		return policyRules{Path: path, Revision: security.NoPolicyRevision, set: &security.RuleSet{}}, nil
	}
	if err != nil {
		return policyRules{}, err
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, MaxPolicyFile+1))
	if err != nil {
		return policyRules{}, fmt.Errorf("%s: %w", path, err)
	}
	if len(raw) > MaxPolicyFile {
		return policyRules{}, fmt.Errorf("%s: over %d bytes: not a permissions file", path, MaxPolicyFile)
	}
	rs, err := security.ParseRules(raw)
	if err != nil {
		return policyRules{}, fmt.Errorf("%s: %w", path, err)
	}
	return policyRules{Path: path, Revision: rs.Revision(), Rules: rs.Len(), set: rs}, nil
}

// policyScan turns --runs and --since into the calls to read.
func policyScan(runs, since string, now time.Time) (policyScanSpec, string, error) {
	if runs != "" && since != "" {
		return policyScanSpec{}, "", errors.New("policy test: give --runs or --since, not both")
	}
	if since != "" {
		d, err := parseSince(since)
		if err != nil {
			return policyScanSpec{}, "", err
		}
		at := now.Add(-d)
		return policyScanSpec{Since: at}, "calls since " + at.UTC().Format(time.RFC3339), nil
	}
	n := DefaultPolicyRuns
	if runs != "" {
		v, ok := strings.CutPrefix(runs, "last:")
		k, err := strconv.Atoi(v)
		if !ok || err != nil || k < 1 || k > MaxPolicyRuns {
			return policyScanSpec{}, "", fmt.Errorf("policy test: --runs %q: want last:N, N from 1 to %d", runs, MaxPolicyRuns)
		}
		n = k
	}
	return policyScanSpec{LastRuns: n}, fmt.Sprintf("the calls of the last %d runs", n), nil
}

// parseSince reads a Go duration, or a whole number of days ("7d").
func parseSince(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		if n, err := strconv.Atoi(days); err == nil && n > 0 && n <= 3650 {
			return time.Duration(n) * 24 * time.Hour, nil
		}
	} else if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return d, nil
	}
	return 0, fmt.Errorf("policy test: --since %q: want a positive duration such as 36h or 7d", s)
}

// policyScanSpec is what to replay: the last LastRuns runs, or since Since.
type policyScanSpec struct {
	LastRuns int
	Since    time.Time
}

// policyInput is one what-if: two rule files over a selection of the record.
type policyInput struct {
	Current, Candidate policyRules
	Scan               policyScanSpec
	Selection          string
	// Flow is the fleet's flow settings (security.flow, …) the files' flow:
	// sections override.
	Flow security.FlowSettings
	// WorkspaceRoot is the absolute workspaces directory: a host path in a
	// call's arguments is matched workspace-relative, as the gate matched it.
	WorkspaceRoot string
	// Page is the calls read per query (0: store.DefaultCallPage).
	Page int
	// ProgressEvery is how many calls pass between progress lines (0:
	// policyProgressEvery).
	ProgressEvery int
}

// policyReport is the result of policy test, the JSON of --json.
type policyReport struct {
	Current   policyRules `json:"current"`
	Candidate policyRules `json:"candidate"`
	Selection string      `json:"selection"`
	Runs      int         `json:"runs,omitempty"`
	// Scanned are the calls replayed; ArgsCut those whose record keeps only
	// the head of their arguments (Standard calls' 240-byte summary).
	Scanned int64 `json:"scanned"`
	ArgsCut int64 `json:"args_cut"`
	// Changed are the calls the candidate decides differently.
	Changed int64         `json:"changed"`
	Groups  []policyGroup `json:"groups"`
}

// policyGroup is the calls one rule (or the flow section) changes one way.
type policyGroup struct {
	Kind string `json:"kind"`
	// Side is the file whose rule makes the change: candidate (a rule added
	// or changed) or current (a rule removed or changed).
	Side string `json:"side"`
	// Rule is the rule (nil for a change of the flow section).
	Rule *security.RuleRef `json:"rule,omitempty"`
	// Flow names the flow section's change for a team.
	Flow      string       `json:"flow,omitempty"`
	Calls     int64        `json:"calls"`
	Runs      int          `json:"runs"`
	Listed    []policyCall `json:"listed"`
	Truncated bool         `json:"truncated,omitempty"`
	runs      map[string]bool
}

// policyCall is one changed call as the report lists it.
type policyCall struct {
	ID     int64     `json:"id"`
	At     time.Time `json:"at"`
	RunID  string    `json:"run_id"`
	Team   string    `json:"team"`
	Agent  string    `json:"agent"`
	Tool   string    `json:"tool"`
	Source string    `json:"source"`
	// Args are the recorded (redacted) arguments, cut to 160 bytes.
	Args    string `json:"args"`
	ArgsCut bool   `json:"args_cut,omitempty"`
	// Recorded is the gate's decision when the call ran.
	Recorded string `json:"recorded"`
	Before   string `json:"before"`
	After    string `json:"after"`
	// Reason is the deciding rule's reason on the side that changes.
	Reason string `json:"reason,omitempty"`
}

var policyKindOrder = []string{security.ChangeDeny, security.ChangeAsk, security.ChangeAllow, security.ChangeRule, security.ChangeAdvisory, security.ChangeFlow}

// policyTest replays in.Scan's calls through both files, page by page, and
// groups the calls whose verdicts differ. progress gets a line per
// policyProgressEvery calls on a long scan.
func policyTest(ctx context.Context, st *store.Store, in policyInput, progress io.Writer) (policyReport, error) {
	rep := policyReport{Current: in.Current, Candidate: in.Candidate, Selection: in.Selection, Groups: []policyGroup{}}
	page := cmp.Or(in.Page, store.DefaultCallPage)
	sc := store.CallScan{Since: in.Scan.Since, Limit: page}
	if in.Scan.LastRuns > 0 {
		ids, err := st.LatestRunIDs(ctx, in.Scan.LastRuns)
		if err != nil {
			return rep, err
		}
		rep.Runs, sc.RunIDs = len(ids), append([]string{}, ids...)
	}
	total, err := st.CountRecordedCalls(ctx, sc)
	if err != nil {
		return rep, err
	}
	groups := map[string]*policyGroup{}
	every := int64(cmp.Or(in.ProgressEvery, policyProgressEvery))
	next := every
	for {
		n, last, err := st.EachRecordedCall(ctx, sc, func(c store.RecordedCall) error {
			rep.Scanned++
			call := recordedCall(c, in.WorkspaceRoot)
			if call.ArgsCut {
				rep.ArgsCut++
			}
			before := security.WhatIf(in.Current.set, call, in.Flow)
			after := security.WhatIf(in.Candidate.set, call, in.Flow)
			ch, ok := security.Diff(before, after)
			if !ok {
				return nil
			}
			rep.Changed++
			g := groupOf(groups, ch, c.Team)
			g.Calls++
			g.runs[c.RunID] = true
			if len(g.Listed) < MaxPolicyListed {
				g.Listed = append(g.Listed, listed(c, call, ch))
			} else {
				g.Truncated = true
			}
			return nil
		})
		if err != nil {
			return rep, err
		}
		if rep.Scanned >= next && progress != nil {
			fmt.Fprintf(progress, "policy test: %d of %d calls replayed, %d changed\n", rep.Scanned, total, rep.Changed)
			next += every
		}
		if n < page {
			break
		}
		sc.After = last
	}
	for _, g := range groups {
		g.Runs = len(g.runs)
		rep.Groups = append(rep.Groups, *g)
	}
	slices.SortFunc(rep.Groups, func(a, b policyGroup) int {
		return cmp.Or(cmp.Compare(slices.Index(policyKindOrder, a.Kind), slices.Index(policyKindOrder, b.Kind)),
			cmp.Compare(a.Side, b.Side), cmp.Compare(ruleIndex(a.Rule), ruleIndex(b.Rule)), cmp.Compare(a.Flow, b.Flow))
	})
	return rep, nil
}

// recordedCall is an audit row as the rules see a call: the redacted
// arguments (a Standard call's summary when it is whole JSON), the run's team
// source and the workspace's host path.
func recordedCall(c store.RecordedCall, root string) security.RecordedCall {
	args := c.Args
	cut := false
	if len(args) == 0 && c.Summary != "" {
		if json.Valid([]byte(c.Summary)) {
			args = json.RawMessage(c.Summary)
		} else {
			args, cut = jsonHead(c.Summary), true
		}
	}
	ws := ""
	if c.Workspace != "" && root != "" {
		ws = filepath.Join(root, c.Workspace)
	}
	return security.RecordedCall{
		CallFacts: security.CallFacts{Tool: c.Tool, Team: c.Team, Agent: c.Agent, Source: tools.TeamSourceOf(c.Template), Workspace: ws, Args: args},
		Layer:     c.DenyLayer, ArgsCut: cut,
	}
}

// jsonHead is the complete part of a JSON object cut short (a Standard call's
// summary): the members read whole before the cut, the one the cut went
// through dropped, the brackets closed. A rule's patterns match any value, so
// a deny matched on the head holds for the whole arguments; a miss may not
// (ArgsCut says so). nil when no object starts the text.
func jsonHead(s string) json.RawMessage {
	dec := json.NewDecoder(strings.NewReader(strings.TrimSuffix(s, "…")))
	dec.UseNumber()
	type frame struct {
		obj bool
		n   int // members or elements written
	}
	var stack []frame
	var out []byte
	keyAt := -1 // where the pending key (its value not read yet) starts in out
	for {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		if len(stack) == 0 && len(out) > 0 {
			break // the object ended: what follows is not ours
		}
		top := len(stack) - 1
		isKey := top >= 0 && stack[top].obj && keyAt < 0
		if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
			out = append(out, byte(d))
			stack = stack[:top]
			continue
		}
		if top < 0 && tok != json.Delim('{') {
			return nil
		}
		if top >= 0 && (isKey || !stack[top].obj) && stack[top].n > 0 {
			out = append(out, ',')
		}
		if isKey {
			keyAt = len(out)
			if stack[top].n > 0 {
				keyAt-- // the comma goes with the key
			}
			k, _ := json.Marshal(tok)
			out = append(append(out, k...), ':')
			continue
		}
		if top >= 0 {
			stack[top].n++
			keyAt = -1
		}
		if d, ok := tok.(json.Delim); ok {
			out = append(out, byte(d))
			stack = append(stack, frame{obj: d == '{'})
			continue
		}
		v, _ := json.Marshal(tok)
		out = append(out, v...)
	}
	if len(out) == 0 {
		return nil
	}
	if keyAt >= 0 {
		out = out[:keyAt]
	}
	for i := len(stack) - 1; i >= 0; i-- {
		if stack[i].obj {
			out = append(out, '}')
		} else {
			out = append(out, ']')
		}
	}
	if !json.Valid(out) {
		return nil
	}
	return out
}

// groupOf is the group of a change: the rule that makes it, on the side it is
// on, or the flow section of the call's team.
func groupOf(groups map[string]*policyGroup, ch security.Change, team string) *policyGroup {
	g := policyGroup{Kind: ch.Kind}
	switch ch.Kind {
	case security.ChangeAllow:
		g.Side, g.Rule = "current", ch.Before.Rule
	case security.ChangeAdvisory:
		g.Side, g.Rule = "candidate", firstMissing(ch.After.Advisory, ch.Before.Advisory)
		if g.Rule == nil {
			g.Side, g.Rule = "current", firstMissing(ch.Before.Advisory, ch.After.Advisory)
		}
	default:
		g.Side, g.Rule = "candidate", ch.After.Rule
	}
	if g.Rule == nil {
		f := ch.After.Flow
		g.Flow = fmt.Sprintf("team %q: mode %s, private_content %s", team, f.Mode, f.PrivateContent)
		if ch.Kind == security.ChangeFlow {
			g.Flow = fmt.Sprintf("team %q: %s → %s", team, flowText(ch.Before.Flow), flowText(ch.After.Flow))
		}
	}
	key := g.Kind + "\x00" + g.Side + "\x00" + strconv.Itoa(ruleIndex(g.Rule)) + "\x00" + g.Flow
	if p, ok := groups[key]; ok {
		return p
	}
	g.runs = map[string]bool{}
	groups[key] = &g
	return &g
}

func flowText(f security.FlowSettings) string {
	s := "mode " + f.Mode + ", private_content " + f.PrivateContent
	if len(f.Instructions) > 0 {
		s += ", instruction_files +" + strings.Join(f.Instructions, ",")
	}
	return s
}

// firstMissing is the first rule of a that b does not hold.
func firstMissing(a, b []security.RuleRef) *security.RuleRef {
	for i := range a {
		if !slices.ContainsFunc(b, func(r security.RuleRef) bool { return r.Rule == a[i].Rule }) {
			return &a[i]
		}
	}
	return nil
}

func ruleIndex(r *security.RuleRef) int {
	if r == nil {
		return -1
	}
	return r.Index
}

func listed(c store.RecordedCall, call security.RecordedCall, ch security.Change) policyCall {
	args := string(call.Args)
	if args == "" {
		args = c.Summary
	}
	reason := ""
	switch {
	case ch.Kind == security.ChangeAllow && ch.Before.Rule != nil:
		reason = ch.Before.Rule.Reason
	case ch.After.Rule != nil:
		reason = ch.After.Rule.Reason
	}
	return policyCall{ID: c.ID, At: c.At, RunID: c.RunID, Team: c.Team, Agent: c.Agent, Tool: c.Tool, Source: call.Source,
		Args: oneLine(args, policyArgsCell), ArgsCut: call.ArgsCut, Recorded: recorded(c),
		Before: verdictText(ch.Before), After: verdictText(ch.After), Reason: reason}
}

func recorded(c store.RecordedCall) string {
	if c.DenyLayer != "" {
		return c.Decision + " (" + c.DenyLayer + ")"
	}
	return c.Decision
}

func verdictText(v security.Verdict) string {
	s := v.Decision
	if v.Rule != nil {
		s += fmt.Sprintf(" (rules[%d])", v.Rule.Index)
	} else if v.Layer != "" {
		s += " (" + v.Layer + ")"
	}
	for _, a := range v.Advisory {
		s += fmt.Sprintf(" +%s rules[%d]", a.Action, a.Index)
	}
	return s
}

// cell makes recorded text safe for a terminal: the record holds what the
// model sent (hostile: escape sequences, bidi overrides, newlines), so every
// character that is not graphic is shown as its escape (\x1b, \u202e).
func cell(s string) string {
	var b strings.Builder
	for _, r := range strings.ToValidUTF8(s, "\uFFFD") {
		if r == ' ' || (unicode.IsGraphic(r) && !unicode.Is(unicode.Bidi_Control, r)) {
			b.WriteRune(r)
			continue
		}
		q := strconv.QuoteRuneToASCII(r)
		b.WriteString(q[1 : len(q)-1])
	}
	return b.String()
}

func ruleText(r *security.RuleRef) string {
	m := r.Match
	var parts []string
	for _, f := range []struct{ k, v string }{{"tool", m.Tool}, {"team", m.Team}, {"agent", m.Agent}, {"source", m.Source},
		{"arg_pattern", m.ArgPattern}, {"path_pattern", m.PathPattern}, {"url_pattern", m.URLPattern}} {
		if f.v != "" {
			parts = append(parts, f.k+"="+strconv.Quote(f.v))
		}
	}
	s := r.Action + " {" + strings.Join(parts, " ") + "}"
	if r.Reason != "" {
		s += " " + strconv.Quote(r.Reason)
	}
	return s
}

func (g policyGroup) name() string {
	if g.Rule == nil {
		return "flow"
	}
	return fmt.Sprintf("%s rules[%d]", g.Side, g.Rule.Index)
}

func (g policyGroup) what() string {
	if g.Rule == nil {
		return cell(g.Flow)
	}
	return cell(ruleText(g.Rule))
}

// write prints the report as tables: the groups, then each group's calls.
func (r policyReport) write(out io.Writer, show int) error {
	fmt.Fprintf(out, "current:   %s (%s, %d rules)\n", r.Current.Path, r.Current.Revision, r.Current.Rules)
	fmt.Fprintf(out, "candidate: %s (%s, %d rules)\n", r.Candidate.Path, r.Candidate.Revision, r.Candidate.Rules)
	fmt.Fprintf(out, "replayed:  %d calls (%s", r.Scanned, r.Selection)
	if r.Runs > 0 {
		fmt.Fprintf(out, ": %d runs", r.Runs)
	}
	fmt.Fprintf(out, "); %d with arguments cut in the record (judged on their head: docs/policy-test.md)\n", r.ArgsCut)
	if len(r.Groups) == 0 {
		fmt.Fprintf(out, "\nno differences: the candidate decides every replayed call as the current rules do\n")
		return nil
	}
	fmt.Fprintf(out, "changed:   %d calls\n\n", r.Changed)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CHANGE\tRULE\tCALLS\tRUNS\tWHAT")
	for _, g := range r.Groups {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", g.Kind, g.name(), g.Calls, g.Runs, g.what())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, g := range r.Groups {
		fmt.Fprintf(out, "\n%s · %s: %d calls\n", g.Kind, g.name(), g.Calls)
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  CALL\tRUN\tTEAM\tAGENT\tTOOL\tRECORDED\tBEFORE\tAFTER\tARGS")
		for i, c := range g.Listed {
			if i == show {
				break
			}
			cut := ""
			if c.ArgsCut {
				cut = " (cut)"
			}
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s%s\n", c.ID, cell(c.RunID), cell(c.Team), cell(c.Agent), cell(c.Tool),
				c.Recorded, c.Before, c.After, cell(c.Args), cut)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if more := g.Calls - int64(min(show, len(g.Listed))); more > 0 {
			fmt.Fprintf(out, "  … and %d more (--show N, or --json)\n", more)
		}
	}
	return nil
}
