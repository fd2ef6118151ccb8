package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"text/tabwriter"

	"github.com/google/uuid"
)

// runView is what `runs show` prints of GET /api/runs/{id}.
type runView struct {
	ID            string `json:"id"`
	Status        string `json:"status"`
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

// runsCmd is `aetherium runs show <id>`: a run's state, tokens and what its
// model calls cost, by model.
func runsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "show" {
		fmt.Fprintln(stderr, "usage: aetherium runs show [--api URL] <run-id>")
		return 2
	}
	fs := flag.NewFlagSet("runs show", flag.ContinueOnError)
	fs.SetOutput(stderr)
	base := fs.String("api", apiURL(), "API base URL (AETHERIUM_API_URL)")
	rest := args[1:]
	var id string
	if len(rest) > 0 && rest[0] != "" && rest[0][0] != '-' {
		id, rest = rest[0], rest[1:]
	}
	if err := fs.Parse(rest); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if id == "" && fs.NArg() == 1 {
		id = fs.Arg(0)
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "aetherium runs show: "+format+"\n", a...)
		return 1
	}
	if _, err := uuid.Parse(id); err != nil {
		return fail("want a run id (a UUID), got %q", id)
	}
	var run runView
	if err := getJSON(ctx, *base+"/api/runs/"+url.PathEscape(id), &run); err != nil {
		return fail("%v", err)
	}
	var costs costReport
	if err := getJSON(ctx, *base+"/api/runs/"+url.PathEscape(id)+"/costs", &costs); err != nil {
		return fail("%v", err)
	}
	printRun(stdout, run, costs)
	return 0
}

func printRun(w io.Writer, r runView, c costReport) {
	fmt.Fprintf(w, "run %s  %s\n", r.ID, r.Status)
	if r.Reason != "" || r.Error != "" {
		fmt.Fprintf(w, "  %s: %s\n", r.Reason, r.Error)
	}
	fmt.Fprintf(w, "  team %s, owner %s", r.Team, r.Owner)
	if r.Project != "" {
		fmt.Fprintf(w, ", project %s", r.Project)
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
