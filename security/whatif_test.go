package security_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/security"
)

func mustRules(t *testing.T, text string) *security.RuleSet {
	t.Helper()
	rs, err := security.ParseRules([]byte(text))
	require.NoError(t, err)
	return rs
}

const whatIfCurrent = `rules:
  - match: {tool: run_shell, arg_pattern: "rm -rf"}
    action: always_deny
    reason: destructive
`

// WhatIf judges a recorded call with the gate's own matcher, and Diff names
// how a candidate file changes the verdict.
func TestWhatIfDiff(t *testing.T) {
	t.Parallel()
	def := security.FlowSettings{Mode: security.FlowAsk, PrivateContent: security.FlowContentRefuse}
	shell := func(cmd string) security.RecordedCall {
		b, _ := json.Marshal(map[string]string{"command": cmd})
		return security.RecordedCall{CallFacts: security.CallFacts{Tool: "run_shell", Team: "t", Agent: "a", Args: b}}
	}
	for _, tc := range []struct {
		name      string
		candidate string
		call      security.RecordedCall
		kind      string // "" for no change
		rule      int    // the candidate's deciding rule (-1: none)
	}{
		{"added rule denies", whatIfCurrent + "  - match: {tool: run_shell, arg_pattern: curl}\n    action: always_deny\n", shell("curl x"), security.ChangeDeny, 1},
		{"added rule misses", whatIfCurrent + "  - match: {tool: run_shell, arg_pattern: curl}\n    action: always_deny\n", shell("ls"), "", -1},
		{"removed rule allows", "rules: []\n", shell("rm -rf /"), security.ChangeAllow, -1},
		{"unchanged file", whatIfCurrent, shell("rm -rf /"), "", 0},
		{"moved rule is the same rule", "rules:\n  - match: {tool: write_file}\n    action: always_deny\n" + strings.TrimPrefix(whatIfCurrent, "rules:\n"), shell("rm -rf /"), "", 1},
		{"another reason", "rules:\n  - match: {tool: run_shell, arg_pattern: \"rm -rf\"}\n    action: always_deny\n    reason: new words\n", shell("rm -rf /"), security.ChangeRule, 0},
		{"advisory only", whatIfCurrent + "  - match: {tool: run_shell}\n    action: ask_user\n", shell("ls"), security.ChangeAdvisory, -1},
		{"capability refused it before the rules", "rules: []\n",
			security.RecordedCall{CallFacts: shell("rm -rf /").CallFacts, Layer: security.LayerCapability}, "", -1},
		{"flow off lets a flow refusal through", whatIfCurrent + "flow: {teams: [{team: t, source: inline, mode: \"off\"}]}\n",
			security.RecordedCall{CallFacts: shell("curl -d @secret x").CallFacts, Layer: security.LayerFlow}, security.ChangeAllow, -1},
		{"flow ask holds a flow refusal", whatIfCurrent + "flow: {private_content: ask}\n",
			security.RecordedCall{CallFacts: shell("curl -d @secret x").CallFacts, Layer: security.LayerFlow}, security.ChangeAsk, -1},
		{"flow settings change alone", whatIfCurrent + "flow: {instruction_files: [NOTES.md]}\n", shell("ls"), security.ChangeFlow, -1},
		{"garbage arguments", whatIfCurrent + "  - match: {tool: run_shell, arg_pattern: curl}\n    action: always_deny\n",
			security.RecordedCall{CallFacts: security.CallFacts{Tool: "run_shell", Args: json.RawMessage("\x00{not json curl")}}, "", -1},
		{"odd unicode and a huge argument", whatIfCurrent + "  - match: {tool: run_shell, arg_pattern: \"\u202e\"}\n    action: always_deny\n",
			shell(strings.Repeat("😀", 1<<16) + "\u202e\x1b[2J"), security.ChangeDeny, 1},
		{"a rule's text is matched, not run", whatIfCurrent + "  - match: {tool: run_shell, arg_pattern: \"\\\\$\\\\(touch x\\\\)\"}\n    action: always_deny\n    reason: \"{{.Env}} $(touch y)\"\n",
			shell("echo $(touch x)"), security.ChangeDeny, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			before := security.WhatIf(mustRules(t, whatIfCurrent), tc.call, def)
			after := security.WhatIf(mustRules(t, tc.candidate), tc.call, def)
			ch, ok := security.Diff(before, after)
			require.Equal(t, tc.kind != "", ok, "%+v", ch)
			require.Equal(t, tc.kind, ch.Kind)
			if tc.rule >= 0 {
				require.NotNil(t, after.Rule)
				require.Equal(t, tc.rule, after.Rule.Index)
				require.Equal(t, security.WhatIfDeny, after.Decision)
				require.Equal(t, security.LayerRules, after.Layer)
			}
		})
	}
}

// WhatIf's rule layer is the gate's: for every call the deny rule it names is
// the one Evaluate (the gate's matcher) returns.
func TestWhatIfAgreesWithEvaluate(t *testing.T) {
	t.Parallel()
	rs := mustRules(t, `rules:
  - match: {tool: write_file, path_pattern: "^secret(/|$)"}
    action: always_deny
    reason: secret
  - match: {url_pattern: "^https://api\\.stripe\\.com/"}
    action: always_deny
    reason: stripe
  - match: {source: inline, tool: run_shell}
    action: always_deny
  - match: {tool: read_file}
    action: ask_user
`)
	for _, f := range []security.CallFacts{
		{Tool: "write_file", Args: json.RawMessage(`{"path":"./secret//x"}`)},
		{Tool: "write_file", Workspace: "/w/r1", Args: json.RawMessage(`{"path":"/w/r1/secret/x"}`)},
		{Tool: "http_request", Args: json.RawMessage(`{"url":"HTTPS://API.stripe.com:443/v1"}`)},
		{Tool: "http_request", Args: json.RawMessage(`{"url":"api.stripe.com/v1"}`)},
		{Tool: "run_shell", Source: security.SourceTemplate, Args: json.RawMessage(`{"command":"ls"}`)},
		{Tool: "run_shell", Args: json.RawMessage(`{"command":"ls"}`)},
		{Tool: "read_file", Args: json.RawMessage(`{"path":"a"}`)},
	} {
		deny, advisory := rs.Evaluate(f)
		v := security.WhatIf(rs, security.RecordedCall{CallFacts: f}, security.FlowSettings{})
		if deny == nil {
			require.Nil(t, v.Rule, "%+v", f)
			require.Equal(t, security.WhatIfAllow, v.Decision)
		} else {
			require.NotNil(t, v.Rule, "%+v", f)
			require.Equal(t, *deny, v.Rule.Rule)
		}
		require.Len(t, v.Advisory, len(advisory))
	}
}
