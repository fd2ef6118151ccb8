package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

func getJSON(ctx context.Context, url string, into any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	authorize(req)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w (is the API running? AETHERIUM_API_URL)", url, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if resp.StatusCode/100 != 2 {
		var e struct{ Error string }
		if json.Unmarshal(data, &e) == nil && e.Error != "" {
			return fmt.Errorf("HTTP %d: %s", resp.StatusCode, e.Error)
		}
		return fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(data)))
	}
	return json.Unmarshal(data, into)
}

const approvalsUsage = `usage:
  aetherium approvals list    [--status pending|approved|edited|denied|answered|timed_out|cancelled|all] [--run RUN_ID] [--kind call|question]
  aetherium approvals show    ID
  aetherium approvals approve ID [--reason R] [--grant run|project|team [--match exact|command|url_prefix] [--pattern P] [--ttl 1h]]
  aetherium approvals deny    ID --reason R          (the agent reads R as a human's feedback)
  aetherium approvals edit    ID --args JSON | --args-file FILE|- [--reason R]
  aetherium approvals answer  ID ANSWER…             (a question of ask_user; or --choice N)
Every command takes --api URL (default AETHERIUM_API_URL).`

// approvalView is what the approver decides on: the parsed commands or URL of a
// call, the question and choices of an ask_user question.
type approvalView struct {
	Commands   []string `json:"commands"`
	ParseError string   `json:"parse_error"`
	URL        string   `json:"url"`
	Question   string   `json:"question"`
	Choices    []string `json:"choices"`
	AllowOther bool     `json:"allow_other"`
}

// approval is what the CLI shows of an approval: the API's fields the approver
// decides on, and what the decision recorded.
type approval struct {
	ID        string          `json:"id"`
	Kind      string          `json:"kind"`
	RunID     string          `json:"run_id"`
	Agent     string          `json:"agent"`
	Tool      string          `json:"tool"`
	Why       string          `json:"why"`
	Status    string          `json:"status"`
	ExpiresAt time.Time       `json:"expires_at"`
	Args      json.RawMessage `json:"args"`
	ArgsHash  string          `json:"args_hash"`
	// RawView is decoded apart (view): a view this CLI does not know the shape of
	// must not hide the rest of the approval.
	RawView        json.RawMessage `json:"view"`
	EditedArgs     json.RawMessage `json:"edited_args"`
	EditedArgsHash string          `json:"edited_args_hash"`
	Answer         string          `json:"answer"`
	GrantID        string          `json:"grant_id"`
	PolicyRevision string          `json:"policy_revision"`
	DecidedBy      string          `json:"decided_by"`
	DecisionReason string          `json:"decision_reason"`
}

func (a approval) view() approvalView {
	var v approvalView
	_ = json.Unmarshal(a.RawView, &v)
	return v
}

// isQuestion: an approval of ask_user. Older APIs have no kind: a call.
func (a approval) isQuestion() bool { return a.Kind == "question" }

// hasJSON reports whether raw holds a value (not absent, not null).
func hasJSON(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s != "" && s != "null"
}

// printApproval writes what the approver decides on, as GET /api/approvals/{id}
// holds it: the commands it would run (or the URL), the masked arguments, the hash;
// of a question the question and its numbered choices; and what a decision
// recorded (the edited arguments beside the model's, the grant, the answer).
// Model-written text goes through printable: a terminal escape in it must not
// reach the approver's terminal.
func printApproval(w io.Writer, a approval) {
	kind := "tool " + a.Tool
	if a.isQuestion() {
		kind = "question"
	}
	fmt.Fprintf(w, "%s  %s  run %s  agent %s  %s\n", a.ID, a.Status, a.RunID, a.Agent, kind)
	if a.Why != "" && !a.isQuestion() {
		fmt.Fprintf(w, "  why:      %s\n", printable(a.Why))
	}
	if a.Status == "pending" {
		fmt.Fprintf(w, "  expires:  in %s\n", time.Until(a.ExpiresAt).Round(time.Second))
	} else if a.DecidedBy != "" {
		decided := "by " + a.DecidedBy
		if a.DecisionReason != "" {
			decided += ": " + printable(a.DecisionReason)
		}
		fmt.Fprintf(w, "  decided:  %s\n", decided)
	}
	v := a.view()
	if a.isQuestion() {
		fmt.Fprintf(w, "  question: %s\n", printable(v.Question))
		if len(v.Choices) > 0 {
			fmt.Fprintln(w, "  choices:")
			for i, c := range v.Choices {
				fmt.Fprintf(w, "    %d. %s\n", i+1, printable(c))
			}
			if v.AllowOther {
				fmt.Fprintln(w, "    (or any other answer)")
			}
		}
		if a.Answer != "" || a.Status == "answered" {
			fmt.Fprintf(w, "  answer:   %s\n", printable(a.Answer))
		}
		return
	}
	if len(v.Commands) > 0 {
		fmt.Fprintln(w, "  commands:")
		for i, c := range v.Commands {
			fmt.Fprintf(w, "    %d. %s\n", i+1, printable(c))
		}
	}
	if v.ParseError != "" {
		fmt.Fprintf(w, "  parse error: %s\n", printable(v.ParseError))
	}
	if v.URL != "" {
		fmt.Fprintf(w, "  url:      %s\n", printable(v.URL))
	}
	if hasJSON(a.EditedArgs) {
		// Both sets: the approver must see what the model asked for and what ran.
		fmt.Fprintf(w, "  original args: %s\n", printable(string(a.Args)))
		fmt.Fprintf(w, "  sha256:        %s\n", a.ArgsHash)
		fmt.Fprintf(w, "  edited args:   %s\n", printable(string(a.EditedArgs)))
		fmt.Fprintf(w, "  sha256:        %s\n", a.EditedArgsHash)
	} else {
		fmt.Fprintf(w, "  args:     %s\n", printable(string(a.Args)))
		fmt.Fprintf(w, "  sha256:   %s\n", a.ArgsHash)
	}
	if a.GrantID != "" {
		fmt.Fprintf(w, "  grant:    %s\n", a.GrantID)
	}
	if a.PolicyRevision != "" {
		fmt.Fprintf(w, "  policy:   %s\n", a.PolicyRevision)
	}
}

// approvalFlags are the flags each subcommand takes (beyond --api): one flag set
// parses them all, so a flag of another subcommand (deny --grant) is refused by
// name instead of silently ignored.
var approvalFlags = map[string][]string{
	"list":    {"status", "run", "kind"},
	"show":    {},
	"approve": {"reason", "grant", "match", "pattern", "ttl"},
	"deny":    {"reason"},
	"edit":    {"reason", "args", "args-file"},
	"answer":  {"choice"},
}

// approvalsCmd: list | show | approve | deny | edit | answer (approvalsUsage).
func approvalsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "aetherium approvals: "+format+"\n", a...)
		return 1
	}
	if len(args) == 0 {
		return fail("%s", approvalsUsage)
	}
	sub, rest := args[0], args[1:]
	switch sub {
	case "help", "-h", "-help", "--help":
		fmt.Fprintln(stdout, approvalsUsage)
		return 0
	}
	allowed, known := approvalFlags[sub]
	if !known {
		return fail("%s\n%s", unknownSub("approvals", sub), approvalsUsage)
	}
	fs := flag.NewFlagSet("approvals "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { printUsage(stderr, approvalsUsage, fs, allowed) }
	base := fs.String("api", apiURL(), "API base URL (AETHERIUM_API_URL)")
	status := fs.String("status", "pending", "list: only approvals in this status (all for every status)")
	runID := fs.String("run", "", "list: only the approvals of this run")
	kind := fs.String("kind", "", "list: only calls or only questions (call, question)")
	reason := fs.String("reason", "", "reason recorded with the decision (deny: the feedback the agent reads)")
	grantScope := fs.String("grant", "", "approve: also grant later matching calls, for this scope (run, project, team)")
	match := fs.String("match", "", "approve --grant: how later calls match (exact, command, url_prefix); default exact")
	pattern := fs.String("pattern", "", "approve --grant: the command words (go test *) or the URL prefix")
	ttl := fs.String("ttl", "", "approve --grant: how long the grant lasts (Go duration; the API's default 1h)")
	editArgs := fs.String("args", "", "edit: the new arguments, a JSON object")
	argsFile := fs.String("args-file", "", "edit: a file holding the new arguments (- for stdin)")
	choice := fs.Int("choice", 0, "answer: the number of one of the question's choices (as show numbers them)")
	positional, code, ok := parseSub(fs, rest, sub, allowed, approvalsUsage, fail)
	if !ok {
		return code
	}
	var id string
	if sub != "list" {
		if len(positional) == 0 {
			return fail("%s needs an approval id\n%s", sub, approvalsUsage)
		}
		id, positional = positional[0], positional[1:]
	}
	if sub != "answer" && len(positional) > 0 {
		return fail("%s: unexpected argument %q\n%s", sub, positional[0], approvalsUsage)
	}
	root := *base + "/api/approvals"
	one := root + "/" + url.PathEscape(id)
	switch sub {
	case "list":
		return approvalsList(ctx, root, *status, *runID, *kind, stdout, fail)
	case "show":
		var a approval
		if err := getJSON(ctx, one, &a); err != nil {
			return fail("%v", err)
		}
		printApproval(stdout, a)
		return 0
	case "approve":
		body := map[string]any{"reason": *reason}
		if *grantScope == "" {
			if *match != "" || *pattern != "" || *ttl != "" {
				return fail("--match, --pattern and --ttl describe a grant: add --grant run|project|team")
			}
		} else {
			g, err := grantSpec(*grantScope, *match, *pattern, *ttl)
			if err != nil {
				return fail("%v", err)
			}
			body["grant"] = g
		}
		return decideApproval(ctx, one, id, "approve", body, stdout, fail)
	case "deny":
		if strings.TrimSpace(*reason) == "" {
			return fail("deny needs --reason: the agent reads it as a human's feedback")
		}
		return decideApproval(ctx, one, id, "deny", map[string]any{"reason": *reason}, stdout, fail)
	case "edit":
		raw, err := editedArgs(*editArgs, *argsFile)
		if err != nil {
			return fail("%v", err)
		}
		return decideApproval(ctx, one, id, "edit", map[string]any{"args": raw, "reason": *reason}, stdout, fail)
	default: // answer
		answer := strings.Join(positional, " ")
		if *choice != 0 {
			if answer != "" {
				return fail("answer takes either --choice N or the answer's text, not both")
			}
			var a approval
			if err := getJSON(ctx, one, &a); err != nil {
				return fail("%v", err)
			}
			choices := a.view().Choices
			if *choice < 1 || *choice > len(choices) {
				return fail("--choice %d: approval %s has %d choices", *choice, id, len(choices))
			}
			answer = choices[*choice-1]
		}
		if strings.TrimSpace(answer) == "" {
			return fail("answer needs the answer's text (or --choice N)\n%s", approvalsUsage)
		}
		return decideApproval(ctx, one, id, "answer", map[string]any{"answer": answer}, stdout, fail)
	}
}

// parseInterleaved parses flags wherever they stand among the positional
// arguments (approve ID --reason R, as the docs write it, and approve --reason R
// ID alike; the flag package alone stops at the first positional one) and
// returns the positional ones in order. Everything after "--" is positional: an
// answer may start with a dash.
// parseSub parses a subcommand's arguments (flags in any position) and refuses
// the flags of the command's other subcommands: allowed are sub's own (--api
// always). ok is false when the command ends here with code (help: 0, a bad
// flag: 2, a stray one: fail's).
func parseSub(fs *flag.FlagSet, rest []string, sub string, allowed []string, usage string, fail func(string, ...any) int) ([]string, int, bool) {
	positional, err := parseInterleaved(fs, rest)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, 0, false
		}
		return nil, 2, false
	}
	var stray []string
	fs.Visit(func(f *flag.Flag) {
		if f.Name != "api" && !contains(allowed, f.Name) {
			stray = append(stray, "--"+f.Name)
		}
	})
	if len(stray) > 0 {
		return nil, fail("%s does not take %s\n%s", sub, strings.Join(stray, ", "), usage), false
	}
	return positional, 0, true
}

func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var tail []string
	for i, a := range args {
		if a == "--" {
			args, tail = args[:i], args[i+1:]
			break
		}
	}
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return append(positional, tail...), nil
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func approvalsList(ctx context.Context, root, status, runID, kind string, stdout io.Writer, fail func(string, ...any) int) int {
	if kind != "" && kind != "call" && kind != "question" {
		return fail("--kind %q: call or question", kind)
	}
	q := url.Values{}
	if status != "all" && status != "" {
		q.Set("status", status)
	}
	if runID != "" {
		q.Set("run_id", runID)
	}
	if kind != "" {
		q.Set("kind", kind)
	}
	u := root
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var out struct {
		Approvals []approval `json:"approvals"`
	}
	if err := getJSON(ctx, u, &out); err != nil {
		return fail("%v", err)
	}
	// Filtered here too: the kind is what the operator asked for whatever the
	// API filters (an approval without a kind is a call).
	list := out.Approvals[:0]
	for _, a := range out.Approvals {
		if kind == "" || (kind == "question") == a.isQuestion() {
			list = append(list, a)
		}
	}
	if len(list) == 0 {
		fmt.Fprintln(stdout, "no approvals")
		return 0
	}
	for i, a := range list {
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		printApproval(stdout, a)
	}
	return 0
}

// decideApproval posts one decision and prints what the API recorded.
func decideApproval(ctx context.Context, one, id, verb string, body map[string]any, stdout io.Writer, fail func(string, ...any) int) int {
	var a approval
	if err := postJSON(ctx, one+"/"+verb, body, &a); err != nil {
		return fail("%s %s: %v", verb, id, err)
	}
	line := fmt.Sprintf("approval %s %s", id, a.Status)
	if a.DecidedBy != "" {
		line += " by " + a.DecidedBy
	}
	if a.GrantID != "" {
		line += ", grant " + a.GrantID
	}
	fmt.Fprintln(stdout, line)
	return 0
}

// grantSpec is the body's grant of approve --grant. What the API checks anyway
// (the ttl's ceiling, a pattern too broad) is left to it; what is plainly wrong
// is refused here with the flag's name.
func grantSpec(scope, match, pattern, ttl string) (map[string]any, error) {
	switch scope {
	case "run", "project", "team":
	default:
		return nil, fmt.Errorf("--grant %q: run, project or team", scope)
	}
	if match == "" {
		match = "exact"
	}
	switch match {
	case "exact":
		if pattern != "" {
			return nil, errors.New("--pattern is for --match command or url_prefix (exact matches the approval's own arguments)")
		}
	case "command", "url_prefix":
		if strings.TrimSpace(pattern) == "" {
			return nil, fmt.Errorf("--match %s needs --pattern", match)
		}
	default:
		return nil, fmt.Errorf("--match %q: exact, command or url_prefix", match)
	}
	g := map[string]any{"scope": scope, "match": match}
	if pattern != "" {
		g["pattern"] = pattern
	}
	if ttl != "" {
		d, err := time.ParseDuration(ttl)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("--ttl %q: a positive Go duration such as 30m or 2h", ttl)
		}
		g["ttl"] = ttl
	}
	return g, nil
}

// editedArgs reads the new arguments of edit: exactly one of --args and
// --args-file, a JSON object (the API says the same with a 400; said here, the
// operator learns which flag).
func editedArgs(inline, file string) (json.RawMessage, error) {
	var raw []byte
	switch {
	case inline != "" && file != "":
		return nil, errors.New("edit takes --args or --args-file, not both")
	case inline != "":
		raw = []byte(inline)
	case file == "-":
		b, err := io.ReadAll(io.LimitReader(os.Stdin, 1<<20))
		if err != nil {
			return nil, fmt.Errorf("--args-file -: read stdin: %w", err)
		}
		raw = b
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("--args-file: %w", err)
		}
		raw = b
	default:
		return nil, errors.New("edit needs the new arguments: --args JSON or --args-file FILE")
	}
	raw = bytes.TrimSpace(raw)
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		return nil, fmt.Errorf("the new arguments must be a JSON object (%s)", jsonProblem(err))
	}
	return json.RawMessage(raw), nil
}

func jsonProblem(err error) string {
	if err == nil {
		return "got null"
	}
	return err.Error()
}
