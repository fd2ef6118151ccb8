package security_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/egress"
	"github.com/aetherium-engine/aetherium/security"
)

// everyField is a rules file using every match field and every action.
const everyField = `
rules:
  - match:
      tool: run_shell
      team: ops
      agent: deployer
      arg_pattern: "rm -rf"
    action: always_deny
    reason: "no recursive deletes"
  - match:
      tool: write_file
      path_pattern: "(^|/)\\.github/workflows/"
    action: always_deny
    reason: "CI workflows are owned by the platform team"
  - match:
      tool: http_request
      url_pattern: "^https://api\\.stripe\\.com/"
    action: always_deny
    reason: "no payment API calls"
  - match:
      tool: "*"
      team: demo
      agent: writer
    action: always_allow
    reason: "advisory allow"
  - match:
      tool: web_fetch
      url_pattern: "\\.internal/"
    action: ask_user
    reason: "advisory ask"
`

func TestParseRulesShippedFile(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../config/permissions.yaml")
	require.NoError(t, err)
	rs, err := security.ParseRules(raw)
	require.NoError(t, err)
	require.Equal(t, 0, rs.Len(), "the shipped rules are all commented out")

	// The commented examples are documentation: uncommented, they must parse too.
	var b strings.Builder
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "  # "); ok {
			line = "  " + rest
		} else if strings.TrimSpace(line) == "#" {
			line = ""
		}
		b.WriteString(line + "\n")
	}
	rs, err = security.ParseRules([]byte(b.String()))
	require.NoError(t, err)
	require.Equal(t, 6, rs.Len())
}

func TestParseRulesEveryField(t *testing.T) {
	t.Parallel()
	rs, err := security.ParseRules([]byte(everyField))
	require.NoError(t, err)
	require.Equal(t, 5, rs.Len())
}

func TestParseRulesReportsEveryProblem(t *testing.T) {
	t.Parallel()
	raw := `
rules:
  - match: {tool: run_shell, arg_pattern: "([unclosed"}
    action: always_deny
  - match: {tool: write_file}
    action: sometimes_deny
  - match: {}
    action: always_deny
  - match: {path_pattern: "a**"}
    action: ask_user
  - match: {url_pattern: "(?P<x"}
    action: always_allow
`
	_, err := security.ParseRules([]byte(raw))
	require.Error(t, err)
	for _, want := range []string{
		"rules[0].match.arg_pattern",
		`rules[1].action: "sometimes_deny"`,
		"rules[2].match: empty",
		"rules[3].match.path_pattern",
		"rules[4].match.url_pattern",
	} {
		require.ErrorContains(t, err, want)
	}

	_, err = security.ParseRules([]byte("rules:\n  - match: {tool: x}\n    action: always_deny\n    colour: red\n"))
	require.ErrorContains(t, err, "colour", "unknown keys are typos, not silently ignored")
}

func TestEvaluate(t *testing.T) {
	t.Parallel()
	rs, err := security.ParseRules([]byte(everyField))
	require.NoError(t, err)
	cases := []struct {
		name       string
		facts      security.CallFacts
		denyReason string   // "" when no deny rule matches
		advisory   []string // reasons of the advisory rules matched
	}{
		{"every field matches", security.CallFacts{Tool: "run_shell", Team: "ops", Agent: "deployer", Args: json.RawMessage(`{"command":"rm -rf build"}`)}, "no recursive deletes", nil},
		{"other team", security.CallFacts{Tool: "run_shell", Team: "dev", Agent: "deployer", Args: json.RawMessage(`{"command":"rm -rf build"}`)}, "", nil},
		{"other agent", security.CallFacts{Tool: "run_shell", Team: "ops", Agent: "builder", Args: json.RawMessage(`{"command":"rm -rf build"}`)}, "", nil},
		{"other tool", security.CallFacts{Tool: "read_logs", Team: "ops", Agent: "deployer", Args: json.RawMessage(`{"command":"rm -rf build"}`)}, "", nil},
		{"arg does not match", security.CallFacts{Tool: "run_shell", Team: "ops", Agent: "deployer", Args: json.RawMessage(`{"command":"ls"}`)}, "", nil},
		{"nested arg matches", security.CallFacts{Tool: "run_shell", Team: "ops", Agent: "deployer", Args: json.RawMessage(`{"steps":[{"env":{"X":"1"},"cmd":["echo", "rm -rf /"]}]}`)}, "no recursive deletes", nil},
		{"no args", security.CallFacts{Tool: "run_shell", Team: "ops", Agent: "deployer"}, "", nil},
		{"path arg", security.CallFacts{Tool: "write_file", Args: json.RawMessage(`{"path":"repo/.github/workflows/ci.yml","content":"x"}`)}, "CI workflows are owned by the platform team", nil},
		{"*_path arg", security.CallFacts{Tool: "write_file", Args: json.RawMessage(`{"target_path":".github/workflows/ci.yml"}`)}, "CI workflows are owned by the platform team", nil},
		{"path only in content is not a path", security.CallFacts{Tool: "write_file", Args: json.RawMessage(`{"path":"notes.md","content":".github/workflows/ci.yml"}`)}, "", nil},
		{"url arg", security.CallFacts{Tool: "http_request", Args: json.RawMessage(`{"method":"POST","url":"https://api.stripe.com/v1/charges"}`)}, "no payment API calls", nil},
		{"*_url arg", security.CallFacts{Tool: "http_request", Args: json.RawMessage(`{"callback_url":"https://api.stripe.com/v1/x"}`)}, "no payment API calls", nil},
		{"url only in body is not a url", security.CallFacts{Tool: "http_request", Args: json.RawMessage(`{"url":"https://example.com/","body":"https://api.stripe.com/"}`)}, "", nil},
		{"tool * with team and agent is advisory", security.CallFacts{Tool: "read_file", Team: "demo", Agent: "writer"}, "", []string{"advisory allow"}},
		{"ask_user is advisory", security.CallFacts{Tool: "web_fetch", Args: json.RawMessage(`{"url":"http://wiki.internal/x"}`)}, "", []string{"advisory ask"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			deny, advisory := rs.Evaluate(tc.facts)
			if tc.denyReason == "" {
				require.Nil(t, deny)
			} else {
				require.NotNil(t, deny)
				require.Equal(t, security.ActionAlwaysDeny, deny.Action)
				require.Equal(t, tc.denyReason, deny.Reason)
			}
			var got []string
			for _, r := range advisory {
				got = append(got, r.Reason)
			}
			require.Equal(t, tc.advisory, got)
		})
	}
}

func TestEvaluateDenyWinsOverAdvisory(t *testing.T) {
	t.Parallel()
	rs, err := security.ParseRules([]byte(`
rules:
  - match: {tool: run_shell}
    action: always_allow
    reason: allow first
  - match: {tool: run_shell}
    action: ask_user
    reason: ask second
  - match: {tool: run_shell}
    action: always_deny
    reason: deny third
  - match: {tool: run_shell}
    action: always_deny
    reason: deny fourth
`))
	require.NoError(t, err)
	deny, advisory := rs.Evaluate(security.CallFacts{Tool: "run_shell"})
	require.NotNil(t, deny)
	require.Equal(t, "deny third", deny.Reason, "the first matching deny rule is reported")
	require.Len(t, advisory, 2, "advisory rules are still returned for logging")

	var empty *security.RuleSet
	deny, advisory = empty.Evaluate(security.CallFacts{Tool: "run_shell"})
	require.Nil(t, deny)
	require.Nil(t, advisory)
}

// reloads records OnReload calls.
type reloads struct {
	mu   sync.Mutex
	errs []error
	ch   chan error
}

func (r *reloads) record(_ int, err error) {
	r.mu.Lock()
	r.errs = append(r.errs, err)
	r.mu.Unlock()
	select {
	case r.ch <- err:
	default:
	}
}

func denyRule(tool, reason string) string {
	return "rules:\n  - match: {tool: " + tool + "}\n    action: always_deny\n    reason: " + reason + "\n"
}

func denied(rs *security.RuleSet, tool string) string {
	d, _ := rs.Evaluate(security.CallFacts{Tool: tool})
	if d == nil {
		return ""
	}
	return d.Reason
}

func TestRulesWatch(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "permissions.yaml")
	require.NoError(t, os.WriteFile(path, []byte(denyRule("run_shell", "v1")), 0o644))
	rules, err := security.LoadRules(path, nil)
	require.NoError(t, err)
	require.Equal(t, "v1", denied(rules.Current(), "run_shell"))
	rec := &reloads{ch: make(chan error, 16)}
	rules.OnReload = rec.record

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	require.NoError(t, rules.Watch(ctx, 30*time.Millisecond))

	// A valid change takes effect.
	require.NoError(t, os.WriteFile(path, []byte(denyRule("run_shell", "v2")), 0o644))
	require.Eventually(t, func() bool { return denied(rules.Current(), "run_shell") == "v2" }, 10*time.Second, 10*time.Millisecond)
	require.Empty(t, rules.LastError())

	// A broken file keeps the last good rules, sets LastError and reports the error.
	drain(rec.ch)
	require.NoError(t, os.WriteFile(path, []byte("rules:\n  - match: {tool: run_shell, arg_pattern: \"(\"}\n    action: always_deny\n"), 0o644))
	waitReloadError(t, rec.ch)
	require.Equal(t, "v2", denied(rules.Current(), "run_shell"), "last good rules stay in force")
	require.Contains(t, rules.LastError(), "arg_pattern")

	// A file replaced by rename (as editors and config management do) is picked up,
	// and a good file clears LastError.
	tmp := filepath.Join(dir, ".permissions.yaml.tmp")
	require.NoError(t, os.WriteFile(tmp, []byte(denyRule("write_file", "v3")), 0o644))
	require.NoError(t, os.Rename(tmp, path))
	require.Eventually(t, func() bool {
		rs := rules.Current()
		return denied(rs, "write_file") == "v3" && denied(rs, "run_shell") == ""
	}, 10*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { return rules.LastError() == "" }, 10*time.Second, 10*time.Millisecond)

	// Other files in the directory are not the rules file.
	drain(rec.ch)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "other.yaml"), []byte("garbage: ["), 0o644))
	require.NoError(t, os.WriteFile(path, []byte(denyRule("read_file", "v4")), 0o644))
	require.Eventually(t, func() bool { return denied(rules.Current(), "read_file") == "v4" }, 10*time.Second, 10*time.Millisecond)
	require.Empty(t, rules.LastError())
}

func TestLoadRules(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()

	missing, err := security.LoadRules(filepath.Join(dir, "absent.yaml"), nil)
	require.NoError(t, err, "a missing file means no rules")
	require.Equal(t, 0, missing.Current().Len())

	none, err := security.LoadRules("", nil)
	require.NoError(t, err)
	require.Equal(t, 0, none.Current().Len())

	bad := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("rules:\n  - match: {}\n    action: nope\n"), 0o644))
	_, err = security.LoadRules(bad, nil)
	require.ErrorContains(t, err, "bad.yaml", "a broken file at boot is an error naming the file")
}

func drain(ch chan error) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

func waitReloadError(t *testing.T, ch chan error) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case err := <-ch:
			if err != nil {
				return
			}
		case <-deadline:
			t.Fatal("no failed reload reported")
		}
	}
}

// normRules deny what a policy author means by "secret/", "example.com/a/b/c" and
// "inline teams may not", whatever spelling the call uses.
const normRules = `
rules:
  - match: {tool: write_file, path_pattern: "^secret/"}
    action: always_deny
    reason: "secret/ is off limits"
  - match: {tool: write_file, path_pattern: "^/etc/"}
    action: always_deny
    reason: "host /etc"
  - match: {tool: http_request, url_pattern: "^http://example\\.com/a/b/c$"}
    action: always_deny
    reason: "a/b/c is off limits"
  - match: {tool: run_shell, source: inline}
    action: always_deny
    reason: "no shell for inline teams"
  - match: {tool: read_logs, team: demo, source: template}
    action: always_deny
    reason: "the demo template reads no logs"
  - match: {tool: http_health_check, url_pattern: "^https://api\\.stripe\\.com/"}
    action: ask_user
    reason: "advisory stripe"
`

func setupNorm(t *testing.T) *security.RuleSet {
	t.Helper()
	rs, err := security.ParseRules([]byte(normRules))
	require.NoError(t, err)
	return rs
}

func TestEvaluateMatchesNormalizedValues(t *testing.T) {
	t.Parallel()
	rs := setupNorm(t)
	const ws = "/var/lib/aetherium/workspaces/run-1"
	path := func(p string) json.RawMessage { return mustJSON(t, map[string]any{"path": p, "content": "x"}) }
	url := func(u string) json.RawMessage { return mustJSON(t, map[string]any{"method": "GET", "url": u}) }
	cases := []struct {
		name       string
		facts      security.CallFacts
		denyReason string
	}{
		{"plain", security.CallFacts{Tool: "write_file", Workspace: ws, Args: path("secret/x")}, "secret/ is off limits"},
		{"dot slash", security.CallFacts{Tool: "write_file", Workspace: ws, Args: path("./secret/x")}, "secret/ is off limits"},
		{"sandbox view", security.CallFacts{Tool: "write_file", Workspace: ws, Args: path("/workspace/secret/x")}, "secret/ is off limits"},
		{"dot dot inside", security.CallFacts{Tool: "write_file", Workspace: ws, Args: path("a/../secret/x")}, "secret/ is off limits"},
		{"double slash", security.CallFacts{Tool: "write_file", Workspace: ws, Args: path("secret//x")}, "secret/ is off limits"},
		{"host workspace path", security.CallFacts{Tool: "write_file", Workspace: ws, Args: path(ws + "/secret/x")}, "secret/ is off limits"},
		{"host workspace path, trailing slash config", security.CallFacts{Tool: "write_file", Workspace: ws + "/", Args: path(ws + "/./secret/x")}, "secret/ is off limits"},
		{"nested paths list", security.CallFacts{Tool: "write_file", Workspace: ws, Args: mustJSON(t, map[string]any{"paths": []string{"ok.txt", "./secret/y"}})}, "secret/ is off limits"},
		{"other dir", security.CallFacts{Tool: "write_file", Workspace: ws, Args: path("./public/secret/x")}, ""},
		{"other workspace is not this one", security.CallFacts{Tool: "write_file", Workspace: ws, Args: path("/var/lib/aetherium/workspaces/run-2/secret/x")}, ""},
		{"outside stays absolute", security.CallFacts{Tool: "write_file", Workspace: ws, Args: path("/etc//passwd")}, "host /etc"},
		{"climbing out resolves from /workspace", security.CallFacts{Tool: "write_file", Workspace: ws, Args: path("../etc/passwd")}, "host /etc"},
		{"climbing out of the sandbox view", security.CallFacts{Tool: "write_file", Workspace: ws, Args: path("/workspace/../etc/passwd")}, "host /etc"},
		{"url as written", security.CallFacts{Tool: "http_request", Args: url("http://example.com/a/b/c")}, "a/b/c is off limits"},
		{"url case, port, dots, slashes", security.CallFacts{Tool: "http_request", Args: url("HTTP://Example.COM:80/a/./b//c")}, "a/b/c is off limits"},
		{"url trailing dot, escapes, dot dot", security.CallFacts{Tool: "http_request", Args: url("http://example.com.:/%61/x/%2e%2E/b/%63")}, "a/b/c is off limits"},
		{"url fragment and credentials", security.CallFacts{Tool: "http_request", Args: url("http://u:p@example.com/a/b/c#top")}, "a/b/c is off limits"},
		{"url other port", security.CallFacts{Tool: "http_request", Args: url("http://example.com:8080/a/b/c")}, ""},
		{"url reserved escape stays", security.CallFacts{Tool: "http_request", Args: url("http://example.com/a%2Fb/c")}, ""},
		{"unparseable url fails closed", security.CallFacts{Tool: "http_request", Args: url("http://example.com:port/a/b/c")}, "a/b/c is off limits (a URL argument could not be parsed, so this rule cannot rule it out)"},
		{"url without a scheme fails closed", security.CallFacts{Tool: "http_request", Args: url("example.com/a/b/c")}, "a/b/c is off limits (a URL argument could not be parsed, so this rule cannot rule it out)"},
		{"inline team, any name", security.CallFacts{Tool: "run_shell", Team: "anything-else", Source: security.SourceInline, Args: mustJSON(t, map[string]any{"command": "ls"})}, "no shell for inline teams"},
		{"unknown source counts as inline", security.CallFacts{Tool: "run_shell", Team: "demo"}, "no shell for inline teams"},
		{"template team may run_shell", security.CallFacts{Tool: "run_shell", Team: "demo", Source: security.SourceTemplate}, ""},
		{"template team rule", security.CallFacts{Tool: "read_logs", Team: "demo", Source: security.SourceTemplate}, "the demo template reads no logs"},
		{"inline team named like the template", security.CallFacts{Tool: "read_logs", Team: "demo", Source: security.SourceInline}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			deny, _ := rs.Evaluate(tc.facts)
			if tc.denyReason == "" {
				require.Nil(t, deny, "denied: %+v", deny)
				return
			}
			require.NotNil(t, deny, "args %s", tc.facts.Args)
			require.Equal(t, tc.denyReason, deny.Reason)
		})
	}
}

func TestAdvisoryRuleDoesNotFailClosedOnAnUnparseableURL(t *testing.T) {
	t.Parallel()
	rs := setupNorm(t)
	_, advisory := rs.Evaluate(security.CallFacts{Tool: "http_health_check", Args: json.RawMessage(`{"url":"HTTPS://API.Stripe.com:443/v1"}`)})
	require.Len(t, advisory, 1, "the normalized URL matches")
	_, advisory = rs.Evaluate(security.CallFacts{Tool: "http_health_check", Args: json.RawMessage(`{"url":"::not a url"}`)})
	require.Empty(t, advisory, "an advisory rule only matches what it can read")
}

func TestNormalizePath(t *testing.T) {
	t.Parallel()
	cases := []struct{ in, ws, want string }{
		{"", "/ws", ""},
		{".", "/ws", "."},
		{"/workspace", "/ws", "."},
		{"/workspace/", "/ws", "."},
		{"/ws", "/ws", "."},
		{"/wsx/a", "/ws", "/wsx/a"},
		{"/workspacex/a", "/ws", "/workspacex/a"},
		{"a/b/", "/ws", "a/b"},
		{"..", "/ws", "/"},
		{"/a/b", "/", "/a/b"},
		{"/a/b", "relative", "/a/b"},
	}
	for _, tc := range cases {
		t.Run(tc.in+" in "+tc.ws, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, egress.NormalizePath(tc.in, tc.ws))
		})
	}
}

func TestNormalizeURL(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in, want string
		ok       bool
	}{
		{"HTTP://Example.COM:80/a/./b//c", "http://example.com/a/b/c", true},
		{"https://example.com:443", "https://example.com/", true},
		{"https://example.com:80/", "https://example.com:80/", true},
		{"http://example.com/a/b/", "http://example.com/a/b/", true},
		{"http://example.com/a/b/..", "http://example.com/a/", true},
		{"http://example.com/%7euser?q=%41%2f", "http://example.com/~user?q=A%2F", true},
		{"http://[::1]:80/x", "http://[::1]/x", true},
		{"http://[::1]:8080/x", "http://[::1]:8080/x", true},
		{"http://example.com/../../x", "http://example.com/x", true},
		{"mailto:a@example.com", "mailto:a@example.com", false},
		{"file:///etc/passwd", "file:///etc/passwd", false},
		{"/relative", "/relative", false},
		{"http://%zz/", "http://%zz/", false},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			got, ok := egress.NormalizeURL(tc.in)
			require.Equal(t, tc.ok, ok)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestParseRulesValidatesSource(t *testing.T) {
	t.Parallel()
	for _, src := range []string{"template", "inline"} {
		_, err := security.ParseRules([]byte("rules:\n  - match: {source: " + src + "}\n    action: always_deny\n"))
		require.NoError(t, err, src)
	}
	_, err := security.ParseRules([]byte("rules:\n  - match: {tool: x, source: inlined}\n    action: always_deny\n"))
	require.ErrorContains(t, err, `rules[0].match.source: "inlined" is not template or inline`)
}

func TestRulesReloadWithBadSourceKeepsLastGood(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "permissions.yaml")
	good := "rules:\n  - match: {tool: run_shell, source: inline}\n    action: always_deny\n    reason: v1\n"
	require.NoError(t, os.WriteFile(path, []byte(good), 0o644))
	rules, err := security.LoadRules(path, nil)
	require.NoError(t, err)
	rec := &reloads{ch: make(chan error, 16)}
	rules.OnReload = rec.record
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	require.NoError(t, rules.Watch(ctx, 30*time.Millisecond))

	require.NoError(t, os.WriteFile(path, []byte("rules:\n  - match: {tool: run_shell, source: Inline}\n    action: always_deny\n    reason: v2\n"), 0o644))
	waitReloadError(t, rec.ch)
	require.Contains(t, rules.LastError(), "match.source")
	deny, _ := rules.Current().Evaluate(security.CallFacts{Tool: "run_shell", Source: security.SourceInline})
	require.NotNil(t, deny)
	require.Equal(t, "v1", deny.Reason, "the last good rules stay in force")
}

// A non-file tool's output path is a path: a rule that keeps a folder from
// write_file keeps it from capture_api_schema's out too (issue 49, item 4).
func TestEvaluateJudgesOutputPaths(t *testing.T) {
	t.Parallel()
	rs, err := security.ParseRules([]byte(`
rules:
  - match: {tool: "*", path_pattern: "^config/"}
    action: always_deny
    reason: "config/ is the platform team's"
`))
	require.NoError(t, err)
	const ws = "/var/lib/aetherium/workspaces/run-1"
	for _, tc := range []struct {
		tool, args, deny string
	}{
		{"capture_api_schema", `{"url":"http://127.0.0.1:8080/","out":"./config/../config/app.json"}`, "config/ is the platform team's"},
		{"record_style", `{"out":"/workspace/config/STYLE.md"}`, "config/ is the platform team's"},
		{"write_file", `{"path":"config/app.json","content":"x"}`, "config/ is the platform team's"},
		{"capture_api_schema", `{"url":"http://127.0.0.1:8080/","out":"docs/api.json"}`, ""},
	} {
		deny, _ := rs.Evaluate(security.CallFacts{Tool: tc.tool, Workspace: ws, Args: json.RawMessage(tc.args)})
		if tc.deny == "" {
			require.Nil(t, deny, tc.args)
			continue
		}
		require.NotNil(t, deny, tc.args)
		require.Equal(t, tc.deny, deny.Reason)
	}
}
