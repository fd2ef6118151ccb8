package security_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

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
			want = re.MatchString(security.NormalizePath(value, ""))
		case 2:
			norm, ok := security.NormalizeURL(value)
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

// fuzzSecrets are credential-shaped strings built from a fixed seed (nothing here is
// a live credential), the DLP fuzz target's seeds.
func fuzzSecrets() []string {
	r := rand.New(rand.NewPCG(7, 11))
	pick := func(alphabet string, n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		return string(b)
	}
	const b62 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	gh := "ghp_" + pick(b62, 36)
	aws := "AKIA" + pick("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16)
	return []string{
		`{"url":"https://api.example.com/v1/items?token=` + gh + `","method":"GET"}`,
		`{"headers":{"Authorization":"Bearer ` + gh + `"},"body":"x"}`,
		`{"url":"https://h/?k=` + url.QueryEscape(aws) + `%"}`,
		"aws_access_key_id = " + aws + "\nand again " + aws,
		strings.Repeat("%", 3) + url.PathEscape(gh) + "%4",
		"nothing secret here",
		"",
	}
}

// FuzzDLPScan scans arbitrary text. Every finding names its rule and secret, and
// redaction removes every found secret from the text, whatever surrounds it.
func FuzzDLPScan(f *testing.F) {
	for _, s := range fuzzSecrets() {
		f.Add(s)
	}
	d, err := security.NewDLP()
	require.NoError(f, err)
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 1<<14 {
			t.Skip("bounded sizes keep the fuzzer fast")
		}
		fs := d.Scan(s)
		for _, x := range fs {
			require.NotEmpty(t, x.Rule)
			require.NotEmpty(t, x.Secret)
		}
		red := security.Redact(s, fs)
		for _, x := range fs {
			if len(x.Secret) >= 4 {
				require.NotContains(t, red, x.Secret, "rule %s: the secret survived redaction", x.Rule)
			}
		}
		if len(fs) == 0 {
			require.Equal(t, s, red, "nothing found, nothing changed")
		}
	})
}

// FuzzCheckURL checks the egress decision on arbitrary URLs: an allowed URL is http(s)
// with a host, carries no credentials, and names either the allowlisted domain,
// localhost, or an IP that is loopback/private — never a link-local or metadata
// address, in any spelling.
func FuzzCheckURL(f *testing.F) {
	for _, s := range []string{
		"https://example.com/x", "http://api.example.com:8080/", "https://evil.com/", "http://169.254.169.254/latest",
		"http://[fd00:ec2::254]/", "http://[::ffff:169.254.169.254]/", "http://127.0.0.1:9/", "http://10.0.0.1/",
		"http://user:pass@example.com/", "ftp://example.com/", "http://example.com@169.254.169.254/",
		"http://0xa9fea9fe/", "http://2852039166/", "http://[fe80::1%25eth0]/", "//example.com", "http://EXAMPLE.com./",
		"http://localhost/", "http://[::1]/", "https://a.b.example.com/",
	} {
		f.Add(s)
	}
	allow := []string{"example.com", "*.b.example.com"}
	f.Fuzz(func(t *testing.T, raw string) {
		err := security.CheckURL(raw, allow)
		if err != nil {
			require.ErrorIs(t, err, security.ErrEgressDenied)
			return
		}
		u, perr := url.Parse(raw)
		require.NoError(t, perr)
		require.Contains(t, []string{"http", "https"}, u.Scheme)
		require.Nil(t, u.User)
		host := u.Hostname()
		require.NotEmpty(t, host)
		if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
			a = a.Unmap().WithZone("")
			require.False(t, a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast(), "allowed a link-local address: %s", raw)
			require.NotEqual(t, netip.MustParseAddr("fd00:ec2::254"), a, "allowed the metadata address: %s", raw)
			return
		}
		h := strings.ToLower(strings.TrimSuffix(host, "."))
		require.True(t, h == "localhost" || h == "example.com" || strings.HasSuffix(h, ".b.example.com"), "allowed host %q of %q", host, raw)
	})
}

// FuzzNormalize checks the rule normalizations never panic and are idempotent: a
// normalized value is already in the form rules match, so a second pass changes
// nothing (otherwise a pattern written against the documented form could miss).
func FuzzNormalize(f *testing.F) {
	for _, s := range []string{
		"./secret/x", "/workspace/secret/x", "a/../secret/x", "secret//x", "../etc/passwd", "/ws/run/secret", "",
		"HTTP://Example.COM:80/a/./b//c", "http://example.com.:/%61/x/%2e%2E/b/%63", "https://[::1]:443/?q=%41%2f#f",
		"http://u:p@h/", "mailto:x@y", "http://[fe80::1%25en0]/", "http://h/a%zz", "//h/p",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p := security.NormalizePath(s, "/ws/run")
		require.Equal(t, p, security.NormalizePath(p, "/ws/run"), "path %q", s)
		u, ok := security.NormalizeURL(s)
		if !ok {
			require.Equal(t, s, u, "an unparseable URL is matched raw")
			return
		}
		again, ok := security.NormalizeURL(u)
		require.True(t, ok, "normalized %q to %q, which does not parse", s, u)
		require.Equal(t, u, again, "normalizing %q twice", s)
	})
}
