package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"text/tabwriter"

	"github.com/google/uuid"

	"github.com/aetherium-engine/aetherium/replay"
)

const replayUsage = `usage: aetherium replay [--json] [--verbose] [--api URL] RUN_ID
Replay a finished run from its record (docs/replay.md): the engine judges every
session's steps again (the gate, delegations, reply checks, caps, the circuit
breaker) with the model's answers and the tools' results served from the record.
No tool runs and nothing of the run changes. Prints the first step where the
engine now decides differently, both sides shown; --verbose every step with its
state hashes; --json the whole report.
Exit status: 0 no divergence, 3 a divergence, 1 an error (a run not finished,
a record the engine cannot walk).`

// exitDiverged is the exit status of a replay that found a divergence.
const exitDiverged = 3

func replayCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	setUsage(fs, replayUsage)
	base := fs.String("api", apiURL(), "API base URL (AETHERIUM_API_URL)")
	asJSON := fs.Bool("json", false, "print the report as JSON (every step included)")
	verbose := fs.Bool("verbose", false, "print every step, recorded and replayed, with its state hashes")
	id, code, ok := runIDArg(fs, args, replayUsage, stderr)
	if !ok {
		return code
	}
	fmt.Fprintf(stderr, "replaying run %s…\n", id)
	var rep replay.Report
	if err := postCollecting(ctx, *base+"/api/runs/"+url.PathEscape(id)+"/replay", struct{}{}, &rep, stderr); err != nil {
		fmt.Fprintf(stderr, "aetherium replay: %v\n", err)
		return 1
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			fmt.Fprintf(stderr, "aetherium replay: %v\n", err)
			return 1
		}
	} else {
		printReplay(stdout, rep, *verbose)
	}
	if rep.Diverged {
		return exitDiverged
	}
	return 0
}

// printReplay prints a report for a person.
func printReplay(w io.Writer, rep replay.Report, verbose bool) {
	fmt.Fprintf(w, "run %s (%s): %d sessions, %d steps replayed, %d tool executions (%d calls served from the record)\n",
		rep.RunID, rep.Status, rep.Sessions, rep.Steps, rep.ToolExecutions, rep.ServedFromRecord)
	if verbose {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "STEP\tAGENT\tTURN\tKIND\tTOOL\tRECORDED\tREPLAYED\tSAME\tRECORDED HASH\tREPLAYED HASH")
		for _, st := range rep.StepList {
			fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%s\t%s\t%v\t%s\t%s\n", st.Index, st.Agent, st.Turn, st.Kind, st.Tool,
				sideText(st.Recorded), sideText(st.Replayed), st.Same, short(st.RecordedHash), short(st.ReplayedHash))
		}
		_ = tw.Flush()
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	d := rep.Divergence
	if d == nil {
		fmt.Fprintf(w, "no divergence; final state hash %s\n", rep.FinalHash)
		return
	}
	fmt.Fprintf(w, "DIVERGED at step %d: %s\n", d.Index, d.What)
	fmt.Fprintf(w, "  session   %s (%s, %s), turn %d\n", d.Session, d.Agent, d.Role, d.Turn)
	if d.Tool != "" {
		fmt.Fprintf(w, "  call      %s %s\n", d.Tool, d.CallID)
	}
	fmt.Fprintf(w, "  recorded  %s\n  replayed  %s\n", sideText(d.Recorded), sideText(d.Replayed))
	fmt.Fprintf(w, "  hashes    recorded %s, replayed %s\n", d.RecordedHash, d.ReplayedHash)
	fmt.Fprintf(w, "%d steps differ in all\n", rep.Differing)
}

// sideText is one side of a step in words: "denied by rules: no greetings".
func sideText(s replay.Side) string {
	out := s.Decision
	if s.Layer != "" {
		out += " by " + s.Layer
	}
	if s.Delegations > 0 {
		out += fmt.Sprintf(" (%d delegations)", s.Delegations)
	}
	if s.Error != "" {
		out += ": " + oneLine(s.Error, 120)
	}
	return out
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// runIDArg parses a command's flags and its one positional argument, a run id
// (a UUID). ok is false when the command must exit with code: 0 after -h, 2
// after a usage or argument error (said on stderr).
func runIDArg(fs *flag.FlagSet, args []string, usage string, stderr io.Writer) (id string, code int, ok bool) {
	positional, err := parseInterleaved(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return "", 0, false
		}
		return "", 2, false
	}
	if len(positional) != 1 {
		fmt.Fprintln(stderr, usage)
		return "", 2, false
	}
	if _, err := uuid.Parse(positional[0]); err != nil {
		fmt.Fprintf(stderr, "aetherium %s: want a run id (a UUID), got %q\n", fs.Name(), positional[0])
		return "", 2, false
	}
	return positional[0], 0, true
}
