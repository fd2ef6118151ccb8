package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/aetherium-engine/aetherium/api"
	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/replay"
)

const forkUsage = `usage: aetherium fork [--api URL] [--json] RUN_ID --at STEP [--team FILE | --model PROVIDER[/MODEL] | --prompt TEXT]
Fork a finished run at a step (docs/fork.md): a new run of yours that shares the
run's record up to STEP — the supervisor's history, the delegations it made, the
workspace rebuilt from the recorded edits; nothing of it runs again — and runs
live from STEP. STEP is a step of the supervisor's session as
'aetherium replay --verbose RUN_ID' numbers them. --team, --model or --prompt
(the supervisor's prompt) change the team from the fork on.
Prints the new run's id; follow it with 'aetherium events RUN_ID'.`

func forkCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("fork", flag.ContinueOnError)
	fs.SetOutput(stderr)
	setUsage(fs, forkUsage)
	base := fs.String("api", apiURL(), "API base URL (AETHERIUM_API_URL)")
	at := fs.Int("at", 0, "the step to fork at (the replay report's numbering)")
	teamFile := fs.String("team", "", "a team file (template YAML) the fork runs with from the step on")
	model := fs.String("model", "", "the model the fork's team runs with from the step on: PROVIDER or PROVIDER/MODEL")
	prompt := fs.String("prompt", "", "the supervisor's prompt from the step on")
	asJSON := fs.Bool("json", false, "print the answer as JSON")
	id, code, ok := runIDArg(fs, args, forkUsage, stderr)
	if !ok {
		return code
	}
	if *at < 1 {
		fmt.Fprintln(stderr, "aetherium fork: --at STEP is required (1 or more; 'aetherium replay --verbose' numbers the steps)")
		return 2
	}
	req := api.ForkRequest{At: *at, Prompt: *prompt}
	if *teamFile != "" {
		if *model != "" || *prompt != "" {
			fmt.Fprintln(stderr, "aetherium fork: give --team, or --model and --prompt: not both")
			return 2
		}
		t, err := readTeamFile(*teamFile)
		if err != nil {
			fmt.Fprintf(stderr, "aetherium fork: %v\n", err)
			return 2
		}
		if req.Team, err = json.Marshal(t); err != nil {
			fmt.Fprintf(stderr, "aetherium fork: %v\n", err)
			return 1
		}
	}
	if *model != "" {
		provider, name, _ := strings.Cut(*model, "/")
		req.Model = &llm.ModelConfig{Provider: provider, Model: name}
	}
	var res replay.ForkResult
	if err := postCollecting(ctx, *base+"/api/runs/"+url.PathEscape(id)+"/fork", req, &res, stderr); err != nil {
		fmt.Fprintf(stderr, "aetherium fork: %v\n", err)
		return 1
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return 1
		}
		return 0
	}
	fmt.Fprintf(stdout, "%s\n", res.RunID)
	fmt.Fprintf(stderr, "forked run %s at step %d: %d steps from the record, %d recorded edits restored (workspace %s); live from %s\n",
		res.ForkedFrom, res.At, res.Shared, res.Restored, short(res.WorkspaceHash), res.Live)
	return 0
}
