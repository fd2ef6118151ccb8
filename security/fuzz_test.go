package security_test

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/egress"
	"github.com/aetherium-engine/aetherium/security"
)

// FuzzParseRules feeds arbitrary permissions files to the parser. A file it accepts
// must evaluate any call without panicking, and only an always_deny rule may deny.
func FuzzParseRules(f *testing.F) {
	for _, s := range []string{
		"rules:\n  - match: {tool: run_shell, arg_pattern: \"rm -rf\"}\n    action: always_deny\n    reason: no\n",
		"rules:\n  - match: {tool: write_file, path_pattern: \"(^|/)\\\\.github/\"}\n    action: always_deny\n",
		"rules:\n  - match: {tool: \"*\", team: demo, agent: writer}\n    action: always_allow\n",
		"rules:\n  - match: {url_pattern: \"^https://api\\\\.stripe\\\\.com/\"}\n    action: ask_user\n",
		"rules:\n  - match: {arg_pattern: \"(\"}\n    action: always_deny\n",
		"rules:\n  - match: {}\n    action: always_deny\n",
		"rules:\n  - match: {tool: x}\n    action: sometimes\n",
		"rules: [{match: {tool: x}, action: always_deny, extra: 1}]",
		"rules: {}",
		"",
		"# only a comment\n",
		"rules:\n  - &a {match: {tool: x}, action: always_deny}\n  - *a\n",
		"\t- x",
	} {
		f.Add([]byte(s))
	}
	facts := []security.CallFacts{
		{Tool: "run_shell", Team: "ops", Agent: "deployer", Args: json.RawMessage(`{"command":"rm -rf /"}`)},
		{Tool: "write_file", Team: "demo", Agent: "writer", Args: json.RawMessage(`{"path":".github/workflows/ci.yml","content":"x"}`)},
		{Tool: "http_request", Args: json.RawMessage(`{"url":"https://api.stripe.com/v1","headers":{"x_url":"http://a"}}`)},
		{Tool: "todo", Args: json.RawMessage(`not json`)},
		{Tool: "todo", Args: json.RawMessage(`[1,{"path":["a",{"file":"b"}]}]`)},
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		rs, err := security.ParseRules(raw)
		if err != nil {
			require.Nil(t, rs)
			require.Contains(t, err.Error(), "permissions")
			return
		}
		again, err := security.ParseRules(raw)
		require.NoError(t, err, "parsing is deterministic")
		require.Equal(t, rs.Len(), again.Len())
		for _, fc := range facts {
			deny, advisory := rs.Evaluate(fc)
			if deny != nil {
				require.Equal(t, security.ActionAlwaysDeny, deny.Action)
			}
			for _, a := range advisory {
				require.NotEqual(t, security.ActionAlwaysDeny, a.Action)
			}
		}
	})
}

// FuzzRuleMatching checks the matching contract with arbitrary patterns and values:
// a deny rule with a pattern denies a call of its tool exactly when the pattern
// matches a string argument of the right kind (any value for arg_pattern, a path
// argument normalized for path_pattern, a URL argument normalized for url_pattern,
// and any URL argument that cannot be parsed), nested or not.
func FuzzRuleMatching(f *testing.F) {
	f.Add("rm -rf", "rm -rf /tmp", uint8(0))
	f.Add(`(^|/)\.github/`, ".github/workflows/x.yml", uint8(1))
	f.Add(`^https://api\.stripe\.com/`, "https://api.stripe.com/v1/charges", uint8(2))
	f.Add(`^$`, "", uint8(0))
	f.Add(`(?i)SECRET`, "my secret", uint8(1))
	f.Add(`a{2,}`, "baab", uint8(2))
	f.Add(`[`, "x", uint8(0))
	f.Fuzz(func(t *testing.T, pattern, value string, kind uint8) {
		if !utf8.ValidString(pattern) || !utf8.ValidString(value) {
			t.Skip("JSON carries text: invalid UTF-8 would not arrive as it is")
		}
		field, key := [...]string{"arg_pattern", "path_pattern", "url_pattern"}[kind%3], [...]string{"note", "path", "target_url"}[kind%3]
		doc := []byte("rules:\n  - match: {tool: probe, " + field + ": " + yamlQuote(pattern) + "}\n    action: always_deny\n    reason: fuzz\n")
		rs, err := security.ParseRules(doc)
		re, reErr := regexp.Compile(pattern)
		if reErr != nil || pattern == "" {
			if reErr != nil {
				require.Error(t, err, "an invalid pattern must be refused")
			}
			return
		}
		require.NoError(t, err)
		nested, err := json.Marshal(map[string]any{"outer": []any{map[string]any{key: value}}, "n": 1})
		require.NoError(t, err)
		want := re.MatchString(value)
		switch kind % 3 {
		case 1:
			want = re.MatchString(egress.NormalizePath(value, ""))
		case 2:
			norm, ok := egress.NormalizeURL(value)
			want = !ok || re.MatchString(norm)
		}
		for _, args := range []json.RawMessage{nested, mustJSON(t, map[string]any{key: value})} {
			deny, _ := rs.Evaluate(security.CallFacts{Tool: "probe", Args: args})
			require.Equal(t, want, deny != nil, "pattern %q on %s=%q (args %s)", pattern, key, value, args)
			other, _ := rs.Evaluate(security.CallFacts{Tool: "other", Args: args})
			require.Nil(t, other, "a rule for one tool must not deny another")
		}
	})
}

// yamlQuote writes s as a YAML double-quoted scalar with every non-printable
// character escaped (yaml.v3's own encoder does not round-trip every string: it
// writes "\n" as a block scalar that reads back empty).
func yamlQuote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r > 0xFFFF:
			fmt.Fprintf(&b, "\\U%08X", r)
		case r < 0x20 || r == 0x7f || !unicode.IsPrint(r):
			fmt.Fprintf(&b, "\\u%04X", r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

func mustJSON(t *testing.T, v any) json.RawMessage {
	raw, err := json.Marshal(v)
	require.NoError(t, err)
	return raw
}
