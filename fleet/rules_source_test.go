package fleet_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/fleettest"
)

// writerDecisions runs a run to its end and returns "tool decision layer" for each
// of the writer's calls, in order.
func writerDecisions(t *testing.T, f *fleettest.Fleet, id string) []string {
	t.Helper()
	evs := f.Follow(id, 0, 60*time.Second)
	require.Equal(t, "run.completed", evs[len(evs)-1].Type)
	var out []string
	for _, e := range evs {
		if e.Type != "tool.call" || e.Agent != "writer" {
			continue
		}
		var d struct{ Tool, Decision, Layer string }
		require.NoError(t, json.Unmarshal(e.Data, &d))
		out = append(out, d.Tool+" "+d.Decision+" "+d.Layer)
	}
	return out
}

// TestRulesSeeNormalizedPathsAndTheTeamSource runs the gate in a fleet: path rules
// are not dodged by spelling the path another way, and a source: inline rule holds
// for an inline team whatever it is called, while the shipped template is unaffected.
func TestRulesSeeNormalizedPathsAndTheTeamSource(t *testing.T) {
	t.Parallel()
	rules := filepath.Join(t.TempDir(), "permissions.yaml")
	require.NoError(t, os.WriteFile(rules, []byte(`
rules:
  - match: {tool: write_file, path_pattern: "^secret/"}
    action: always_deny
    reason: "secret/ is off limits"
  - match: {tool: read_file, source: inline}
    action: always_deny
    reason: "inline teams read nothing"
`), 0o644))
	f := fleettest.Start(t, fleettest.Options{Configure: func(c *config.Config) { c.Security.PermissionsFile = rules }})

	tm := team([]map[string]any{
		call("write_file", map[string]any{"path": "/workspace/secret/a", "content": "x"}),
		call("write_file", map[string]any{"path": "./secret/b", "content": "x"}),
		call("write_file", map[string]any{"path": "notes/../secret//c", "content": "x"}),
		call("write_file", map[string]any{"path": "ok.txt", "content": "x"}),
		call("read_file", map[string]any{"path": "ok.txt"}),
		{"say": "done"},
	}, map[string]any{"name": "renamed-anything"})
	require.Equal(t, []string{
		"write_file denied rules",
		"write_file denied rules",
		"write_file denied rules",
		"write_file allowed ",
		"read_file denied rules",
	}, writerDecisions(t, f, f.SubmitTeam(tm, "try")))

	got := writerDecisions(t, f, f.Submit("demo", "greet", map[string]any{"topic": "t"}))
	require.Equal(t, []string{"write_file allowed ", "read_file allowed "}, got, "the template's team is not an inline team")
}
