package cli

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/fleet"
	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/replay"
)

// aetherium replay over a real fleet: a finished run replays with no
// divergence (text, --verbose, --json); a run still waiting for its approval
// and a run that does not exist are refused with the API's words.
func TestReplayCommand(t *testing.T) {
	t.Parallel()
	f := fleettest.Start(t, fleettest.Options{Fleet: fleet.Options{ExtraTools: fleettest.StandInPDF}})
	done := f.Submit("demo", "Greet the user in a file", map[string]any{"topic": "greetings"})
	require.Equal(t, "completed", f.WaitTerminal(done, 60*time.Second).Status)
	waiting := f.SubmitTeam(json.RawMessage(mustRead(t, approvalTeam(t))), "fetch the paper")
	pendingApprovalOf(t, f, waiting)

	cli := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := Main(append(args, "--api", f.URL), &out, &errOut)
		return code, out.String(), errOut.String()
	}
	tests := []struct {
		name string
		args []string
		code int
		out  []string
		err  string
	}{
		{name: "text", args: []string{"replay", done}, out: []string{"run " + done + " (completed): 2 sessions, 9 steps replayed, 0 tool executions (8 calls served from the record)", "no divergence; final state hash "}},
		{name: "verbose", args: []string{"replay", "--verbose", done}, out: []string{"STEP", "RECORDED HASH", "write_file", "allowed", "accepted", "true"}},
		{name: "not finished", args: []string{"replay", waiting}, code: 1, err: "not finished"},
		{name: "missing", args: []string{"replay", uuid.NewString()}, code: 1, err: "not found"},
		{name: "not a run id", args: []string{"replay", "nope"}, code: 2, err: "want a run id"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := cli(tc.args...)
			require.Equal(t, tc.code, code, "stdout %s\nstderr %s", out, errOut)
			for _, want := range tc.out {
				require.Contains(t, out, want)
			}
			if tc.err != "" {
				require.Contains(t, errOut, tc.err)
			}
		})
	}

	// Through an API process alone (the split deployment), whose wait for the
	// worker runs out at once: the command asks again and collects the
	// worker's report.
	lone := f.StartAPIWith(func(c *config.Config) { c.Replay.Wait = time.Nanosecond })
	var loneOut, loneErr bytes.Buffer
	loneCode := Main([]string{"replay", done, "--api", lone.URL}, &loneOut, &loneErr)
	require.Equal(t, 0, loneCode, loneErr.String())
	require.Contains(t, loneErr.String(), "still running on a worker; asking again in 1s")
	require.Contains(t, loneOut.String(), "2 sessions, 9 steps replayed, 0 tool executions")

	code, out, errOut := cli("replay", "--json", done)
	require.Equal(t, 0, code, errOut)
	var rep replay.Report
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	require.False(t, rep.Diverged)
	require.Len(t, rep.StepList, 9)
	require.Zero(t, rep.ToolExecutions)
}
