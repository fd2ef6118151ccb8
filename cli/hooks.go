package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/aetherium-engine/aetherium/templates"
)

const hooksUsage = `usage:
  aetherium hooks list       [--json]                     your inbound webhooks
  aetherium hooks show       HOOK_ID                      one hook (never its secret)
  aetherium hooks create     --name N --scheme github|stripe|hmac (--template NAME | --team FILE)
                             --prompt TEXT [--var NAME=/json/pointer]… [--project SLUG]
                             [--priority N] [--secret S] [--disabled]
                                                         prints the secret once: give it to the sender
  aetherium hooks rotate     HOOK_ID [--secret S]         a new secret (printed once); the old one stops at once
  aetherium hooks delete     HOOK_ID                      the hook and its deliveries
  aetherium hooks deliveries HOOK_ID [--limit N]          its deliveries, newest first: accepted, refused and why
Every command takes --api URL (default AETHERIUM_API_URL). Deliveries go to POST /hooks/HOOK_ID (docs/hooks.md).`

// hooksFlags are the flags each subcommand takes beyond --api.
var hooksFlags = map[string][]string{
	"list":       {"json"},
	"show":       {},
	"create":     {"name", "scheme", "template", "team", "prompt", "var", "project", "priority", "secret", "disabled"},
	"rotate":     {"secret"},
	"delete":     {},
	"deliveries": {"limit"},
}

var hookIDArg = regexp.MustCompile(`^hk_[0-9a-f]{32}$`)

// hookView is what the CLI prints of a hook.
type hookView struct {
	ID        string            `json:"id"`
	Owner     string            `json:"owner"`
	Name      string            `json:"name"`
	Scheme    string            `json:"scheme"`
	Template  string            `json:"template"`
	Team      json.RawMessage   `json:"team"`
	Prompt    string            `json:"prompt"`
	Variables map[string]string `json:"variables"`
	Project   string            `json:"project"`
	Priority  int               `json:"priority"`
	Enabled   bool              `json:"enabled"`
	CreatedAt string            `json:"created_at"`
	RotatedAt string            `json:"rotated_at"`
	URL       string            `json:"url"`
	Secret    string            `json:"secret"`
}

// hooksCmd: list | show | create | rotate | delete | deliveries (hooksUsage).
func hooksCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	sc, ok := newSubcommand("hooks", hooksUsage, hooksFlags, args, stderr)
	if !ok {
		return 1
	}
	sub, rest, allowed, fs, base, fail := sc.name, sc.rest, sc.allowed, sc.fs, sc.base, sc.fail
	asJSON := fs.Bool("json", false, "list: print the hooks as JSON")
	name := fs.String("name", "", "create: a label for people")
	scheme := fs.String("scheme", "", "create: how the sender signs: github, stripe or hmac")
	tmpl := fs.String("template", "", "create: a shipped template the runs use")
	teamFile := fs.String("team", "", "create: an inline team (template YAML file) the runs use")
	prompt := fs.String("prompt", "", "create: the runs' prompt; {{.NAME}} takes a mapped variable")
	var vars multiFlag
	fs.Var(&vars, "var", "create: NAME=/json/pointer maps a template variable to a value of the payload (RFC 6901; repeatable)")
	project := fs.String("project", "", "create: the project (slug) the runs work in")
	priority := fs.Int("priority", 0, "create: the runs' priority, 1-5 (default 3)")
	secret := fs.String("secret", "", "create, rotate: the secret the sender gave you (a Stripe endpoint's whsec_…); default: a random one")
	disabled := fs.Bool("disabled", false, "create: keep it disabled (its deliveries are refused)")
	limit := fs.Int("limit", 50, "deliveries: at most this many, newest first (1 to 1000)")
	positional, code, ok := parseSub(fs, rest, sub, allowed, hooksUsage, fail)
	if !ok {
		return code
	}
	root := *base + "/api/hooks"
	switch sub {
	case "list":
		if len(positional) > 0 {
			return fail("list: unexpected argument %q", positional[0])
		}
		var out struct {
			Hooks []hookView `json:"hooks"`
		}
		if err := getJSON(ctx, root, &out); err != nil {
			return fail("%v", err)
		}
		if *asJSON {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			_ = enc.Encode(out)
			return 0
		}
		if len(out.Hooks) == 0 {
			fmt.Fprintln(stdout, "no hooks (aetherium hooks create --help)")
			return 0
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tNAME\tSCHEME\tRUNS\tOWNER\tENABLED\tCREATED")
		for _, h := range out.Hooks {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%v\t%s\n", h.ID, h.Name, h.Scheme, hookRuns(h), h.Owner, h.Enabled, h.CreatedAt)
		}
		_ = tw.Flush()
		return 0
	case "create":
		if len(positional) > 0 {
			return fail("create: unexpected argument %q (everything is a flag)", positional[0])
		}
		body, err := hookBody(*name, *scheme, *tmpl, *teamFile, *prompt, vars, *project, *priority, *secret, *disabled)
		if err != nil {
			return fail("create: %v", err)
		}
		var h hookView
		if err := postJSON(ctx, root, body, &h); err != nil {
			return fail("create: %v", err)
		}
		printHook(stdout, h, *base)
		return 0
	}
	if len(positional) != 1 {
		return fail("%s needs one hook id\n%s", sub, hooksUsage)
	}
	id := positional[0]
	if !hookIDArg.MatchString(id) {
		return fail("want a hook id (hk_ and 32 hex digits), got %q", id)
	}
	one := root + "/" + url.PathEscape(id)
	switch sub {
	case "show":
		var h hookView
		if err := getJSON(ctx, one, &h); err != nil {
			return fail("%v", err)
		}
		printHook(stdout, h, *base)
	case "rotate":
		body := map[string]any{}
		if *secret != "" {
			body["secret"] = *secret
		}
		var h hookView
		if err := postJSON(ctx, one+"/rotate", body, &h); err != nil {
			return fail("rotate %s: %v", id, err)
		}
		printHook(stdout, h, *base)
	case "delete":
		if err := doJSON(ctx, http.MethodDelete, one, nil, nil); err != nil {
			return fail("delete %s: %v", id, err)
		}
		fmt.Fprintf(stdout, "hook %s deleted; its URL answers 404 from now on\n", id)
	default: // deliveries
		if *limit < 1 || *limit > 1000 {
			return fail("--limit %d: between 1 and 1000", *limit)
		}
		var out struct {
			Deliveries []struct {
				ID         int64  `json:"id"`
				DeliveryID string `json:"delivery_id"`
				ReceivedAt string `json:"received_at"`
				Outcome    string `json:"outcome"`
				Reason     string `json:"reason"`
				Detail     string `json:"detail"`
				RunID      string `json:"run_id"`
			} `json:"deliveries"`
		}
		if err := getJSON(ctx, fmt.Sprintf("%s/deliveries?limit=%d", one, *limit), &out); err != nil {
			return fail("%v", err)
		}
		if len(out.Deliveries) == 0 {
			fmt.Fprintln(stdout, "no deliveries yet")
			return 0
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "RECEIVED\tDELIVERY\tOUTCOME\tREASON\tRUN\tDETAIL")
		for _, d := range out.Deliveries {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", d.ReceivedAt, orDash(d.DeliveryID), d.Outcome, orDash(d.Reason), orDash(d.RunID), oneLine(d.Detail, 80))
		}
		_ = tw.Flush()
	}
	return 0
}

// hookBody is the POST /api/hooks body of the create flags.
func hookBody(name, scheme, tmpl, teamFile, prompt string, vars []string, project string, priority int, secret string, disabled bool) (map[string]any, error) {
	if (tmpl == "") == (teamFile == "") {
		return nil, fmt.Errorf("give exactly one of --template or --team")
	}
	if strings.TrimSpace(name) == "" || scheme == "" || strings.TrimSpace(prompt) == "" {
		return nil, fmt.Errorf("--name, --scheme and --prompt are required")
	}
	mapping := map[string]string{}
	for _, v := range vars {
		k, p, ok := strings.Cut(v, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--var %q: want NAME=/json/pointer", v)
		}
		mapping[k] = p
	}
	body := map[string]any{"name": name, "scheme": scheme, "prompt": prompt, "variables": mapping}
	if tmpl != "" {
		body["template"] = tmpl
	} else {
		raw, err := os.ReadFile(teamFile)
		if err != nil {
			return nil, err
		}
		t, err := templates.ParseYAML(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", teamFile, err)
		}
		body["team"] = t
	}
	for k, v := range map[string]string{"project": project, "secret": secret} {
		if v != "" {
			body[k] = v
		}
	}
	if priority != 0 {
		body["priority"] = priority
	}
	if disabled {
		body["enabled"] = false
	}
	return body, nil
}

func hookRuns(h hookView) string {
	if h.Template != "" {
		return h.Template
	}
	var t struct {
		Name string `json:"name"`
	}
	_ = json.Unmarshal(h.Team, &t)
	return "team " + t.Name
}

func printHook(w io.Writer, h hookView, base string) {
	fmt.Fprintf(w, "hook %s  %q  scheme %s  owner %s  enabled %v\n", h.ID, h.Name, h.Scheme, h.Owner, h.Enabled)
	fmt.Fprintf(w, "  deliveries to: POST %s%s (or on api.hooks.addr)\n", base, h.URL)
	fmt.Fprintf(w, "  runs: %s, prompt %q", hookRuns(h), h.Prompt)
	if h.Project != "" {
		fmt.Fprintf(w, ", project %s", h.Project)
	}
	fmt.Fprintln(w)
	names := make([]string, 0, len(h.Variables))
	for k := range h.Variables {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		fmt.Fprintf(w, "  variable %s = payload at %q\n", k, h.Variables[k])
	}
	if h.Secret != "" {
		fmt.Fprintf(w, "  secret: %s\n  (shown this once: configure it in the sender now; aetherium hooks rotate makes a new one)\n", h.Secret)
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
