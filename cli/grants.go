package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"time"
)

const grantsUsage = `usage:
  aetherium grants list    [--status active|expired|revoked|suspended|all]
  aetherium grants revoke  ID
  aetherium grants confirm ID     (rebind a grant suspended by a change of permissions.yaml)
Every command takes --api URL (default AETHERIUM_API_URL).`

// grant is what the CLI shows of a scoped grant (GET /api/grants).
type grant struct {
	ID         string `json:"id"`
	ApprovalID string `json:"approval_id"`
	// Owner is the principal whose runs the grant covers.
	Owner     string `json:"owner"`
	CreatedBy string `json:"created_by"`
	Scope     string `json:"scope"`
	// ScopeID is the run id, the project id or the team name.
	ScopeID string `json:"scope_id"`
	Tool    string `json:"tool"`
	Match   string `json:"match"`
	// Pattern is the command words, the URL prefix, or (exact) the arguments' hash.
	Pattern        string    `json:"pattern"`
	PolicyRevision string    `json:"policy_revision"`
	ConfirmedBy    string    `json:"confirmed_by"`
	RevokedBy      string    `json:"revoked_by"`
	Status         string    `json:"status"`
	CreatedAt      time.Time `json:"created_at"`
	ExpiresAt      time.Time `json:"expires_at"`
}

// printGrant writes one grant: what it covers (whose runs, which tool, how later
// calls match), its state and where it came from; inForce is the revision of
// permissions.yaml in force, which a suspended grant was not made under.
func printGrant(w io.Writer, g grant, inForce string) {
	fmt.Fprintf(w, "%s  %s  %s %s  tool %s  owner %s\n", g.ID, g.Status, g.Scope, g.ScopeID, g.Tool, g.Owner)
	if g.Match == "exact" {
		fmt.Fprintf(w, "  match:    exact (arguments sha256 %s)\n", g.Pattern)
	} else {
		fmt.Fprintf(w, "  match:    %s %s\n", g.Match, printable(g.Pattern))
	}
	switch {
	case g.Status == "active" || g.Status == "suspended":
		fmt.Fprintf(w, "  expires:  in %s\n", time.Until(g.ExpiresAt).Round(time.Second))
	case g.Status == "revoked":
		fmt.Fprintf(w, "  revoked:  by %s\n", g.RevokedBy)
	default:
		fmt.Fprintf(w, "  expired:  %s\n", g.ExpiresAt.Local().Format(time.DateTime))
	}
	from := "by " + g.CreatedBy + " at " + g.CreatedAt.Local().Format(time.DateTime)
	if g.ApprovalID != "" {
		from += ", approving " + g.ApprovalID
	}
	fmt.Fprintf(w, "  granted:  %s\n", from)
	policy := g.PolicyRevision
	if policy == "" {
		policy = "(none recorded)"
	}
	if g.ConfirmedBy != "" {
		policy += " (confirmed by " + g.ConfirmedBy + ")"
	}
	if g.Status == "suspended" {
		// Why it matches nothing now, and the one command that changes that.
		policy += fmt.Sprintf("; permissions in force: %s (grants confirm %s rebinds it)", inForce, g.ID)
	}
	fmt.Fprintf(w, "  policy:   %s\n", policy)
}

// grantsCmd lists, revokes and confirms scoped grants over the API.
func grantsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "aetherium grants: "+format+"\n", a...)
		return 1
	}
	if len(args) == 0 {
		return fail("%s", grantsUsage)
	}
	sub, rest := args[0], args[1:]
	switch sub {
	case "help", "-h", "-help", "--help":
		fmt.Fprintln(stdout, grantsUsage)
		return 0
	case "list", "revoke", "confirm":
	default:
		return fail("%s\n%s", unknownSub("grants", sub), grantsUsage)
	}
	fs := flag.NewFlagSet("grants "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		var only []string
		if sub == "list" {
			only = []string{"status"}
		}
		printUsage(stderr, grantsUsage, fs, append(only, "api"))
	}
	base := fs.String("api", apiURL(), "API base URL (AETHERIUM_API_URL)")
	status := fs.String("status", "", "list: only grants in this status (active, expired, revoked, suspended; default every status)")
	positional, err := parseInterleaved(fs, rest)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	var id string
	if sub != "list" && len(positional) > 0 {
		id, positional = positional[0], positional[1:]
	}
	if len(positional) > 0 {
		return fail("%s: unexpected argument %q\n%s", sub, positional[0], grantsUsage)
	}
	root := *base + "/api/grants"
	switch sub {
	case "list":
		u := root
		switch *status {
		case "", "all":
		case "active", "expired", "revoked", "suspended":
			u += "?status=" + *status
		default:
			return fail("--status %q: active, expired, revoked, suspended or all", *status)
		}
		var out struct {
			Grants []grant `json:"grants"`
			// PolicyRevision is the revision of permissions.yaml in force.
			PolicyRevision string `json:"policy_revision"`
		}
		if err := getJSON(ctx, u, &out); err != nil {
			return fail("%v", err)
		}
		if len(out.Grants) == 0 {
			fmt.Fprintln(stdout, "no grants")
			return 0
		}
		for i, g := range out.Grants {
			if i > 0 {
				fmt.Fprintln(stdout)
			}
			printGrant(stdout, g, out.PolicyRevision)
		}
		return 0
	default: // revoke, confirm
		if *status != "" {
			return fail("%s does not take --status", sub)
		}
		if id == "" {
			return fail("%s needs a grant id\n%s", sub, grantsUsage)
		}
		var g grant
		// An empty object, not no body: the API takes only JSON posts (415 otherwise).
		if err := postJSON(ctx, root+"/"+url.PathEscape(id)+"/"+sub, struct{}{}, &g); err != nil {
			return fail("%s %s: %v", sub, id, err)
		}
		fmt.Fprintf(stdout, "grant %s %s\n", id, g.Status)
		return 0
	}
}
