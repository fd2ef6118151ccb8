package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
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

// approval is what the CLI shows of an approval: the API's fields the approver
// decides on.
type approval struct {
	ID        string          `json:"id"`
	RunID     string          `json:"run_id"`
	Agent     string          `json:"agent"`
	Tool      string          `json:"tool"`
	Why       string          `json:"why"`
	Status    string          `json:"status"`
	ExpiresAt time.Time       `json:"expires_at"`
	Args      json.RawMessage `json:"args"`
	ArgsHash  string          `json:"args_hash"`
	View      struct {
		Commands   []string `json:"commands"`
		ParseError string   `json:"parse_error"`
		URL        string   `json:"url"`
	} `json:"view"`
	DecidedBy      string `json:"decided_by"`
	DecisionReason string `json:"decision_reason"`
}

// printApproval writes what the approver decides on, as GET /api/approvals/{id}
// holds it: the commands it would run (or the URL), the masked arguments, the hash.
func printApproval(w io.Writer, a approval) {
	fmt.Fprintf(w, "%s  %s  run %s  agent %s  tool %s\n", a.ID, a.Status, a.RunID, a.Agent, a.Tool)
	fmt.Fprintf(w, "  why:      %s\n", a.Why)
	if a.Status == "pending" {
		fmt.Fprintf(w, "  expires:  in %s\n", time.Until(a.ExpiresAt).Round(time.Second))
	} else if a.DecidedBy != "" {
		fmt.Fprintf(w, "  decided:  by %s: %s\n", a.DecidedBy, a.DecisionReason)
	}
	if len(a.View.Commands) > 0 {
		fmt.Fprintln(w, "  commands:")
		for i, c := range a.View.Commands {
			fmt.Fprintf(w, "    %d. %s\n", i+1, c)
		}
	}
	if a.View.ParseError != "" {
		fmt.Fprintf(w, "  parse error: %s\n", a.View.ParseError)
	}
	if a.View.URL != "" {
		fmt.Fprintf(w, "  url:      %s\n", a.View.URL)
	}
	fmt.Fprintf(w, "  args:     %s\n", a.Args)
	fmt.Fprintf(w, "  sha256:   %s\n", a.ArgsHash)
}

// approvalsCmd: list | show <id> | approve <id> | deny <id> [--reason r].
func approvalsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "aetherium approvals: "+format+"\n", a...)
		return 1
	}
	if len(args) == 0 {
		return fail("usage: aetherium approvals list [--status pending|approved|denied|timed_out|cancelled|all] | show <id> | approve <id> [--reason r] | deny <id> [--reason r]")
	}
	fs := flag.NewFlagSet("approvals", flag.ContinueOnError)
	fs.SetOutput(stderr)
	base := fs.String("api", apiURL(), "API base URL (AETHERIUM_API_URL)")
	status := fs.String("status", "pending", "filter for list (all for every status)")
	reason := fs.String("reason", "", "reason recorded with the decision")
	sub, rest := args[0], args[1:]
	var id string
	if (sub == "approve" || sub == "deny" || sub == "show") && len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		id, rest = rest[0], rest[1:]
	}
	if err := fs.Parse(rest); err != nil {
		return 2
	}
	switch sub {
	case "list":
		q := ""
		if *status != "all" {
			q = "?status=" + *status
		}
		var out struct {
			Approvals []approval `json:"approvals"`
		}
		if err := getJSON(ctx, *base+"/api/approvals"+q, &out); err != nil {
			return fail("%v", err)
		}
		if len(out.Approvals) == 0 {
			fmt.Fprintln(stdout, "no approvals")
			return 0
		}
		for i, a := range out.Approvals {
			if i > 0 {
				fmt.Fprintln(stdout)
			}
			printApproval(stdout, a)
		}
		return 0
	case "show":
		if id == "" {
			return fail("show needs an approval id")
		}
		var a approval
		if err := getJSON(ctx, *base+"/api/approvals/"+id, &a); err != nil {
			return fail("%v", err)
		}
		printApproval(stdout, a)
		return 0
	case "approve", "deny":
		if id == "" {
			return fail("%s needs an approval id", sub)
		}
		var out struct {
			Status    string `json:"status"`
			DecidedBy string `json:"decided_by"`
		}
		if err := postJSON(ctx, *base+"/api/approvals/"+id+"/"+sub, map[string]string{"reason": *reason}, &out); err != nil {
			return fail("%v", err)
		}
		fmt.Fprintf(stdout, "approval %s %s by %s\n", id, out.Status, out.DecidedBy)
		return 0
	default:
		return fail("unknown subcommand %q (list, show, approve, deny)", sub)
	}
}
