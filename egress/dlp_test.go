package egress_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/egress"
	"github.com/aetherium-engine/aetherium/egress/egresstest"
)

// requestArgs renders http_request arguments as the model would send them.
func requestArgs(t testing.TB, u string, headers map[string]string, body string) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"method": "POST", "url": u, "headers": headers, "body": body})
	require.NoError(t, err)
	return string(b)
}

func TestDLPFindsSecrets(t *testing.T) {
	t.Parallel()
	d := egresstest.NewDLP(t)
	plainHeaders := map[string]string{"Accept": "application/json"}
	for _, k := range egresstest.Credentials() {
		positions := map[string]string{
			"url path":                          requestArgs(t, "https://api.example.com/v1/"+url.PathEscape(k.Secret), plainHeaders, ""),
			"url query":                         requestArgs(t, "https://api.example.com/v1/items?page=2&"+k.QueryKey+"="+url.QueryEscape(k.Secret), plainHeaders, ""),
			"url query next to a stray %":       requestArgs(t, "https://api.example.com/v1/items?discount=100%&"+k.QueryKey+"="+url.QueryEscape(k.Secret), plainHeaders, ""),
			"query, every byte percent-encoded": requestArgs(t, "https://api.example.com/v1/items?page=2&"+k.QueryKey+"="+egresstest.PctAll(k.Secret), plainHeaders, ""),
			"query, percent-encoded next to a stray % and an encoded newline": requestArgs(t,
				"https://api.example.com/v1/items?discount=100%&note=a%0Ab&"+k.QueryKey+"="+egresstest.PctAll(k.Secret), plainHeaders, ""),
			"header": requestArgs(t, "https://api.example.com/v1/items", map[string]string{"Accept": "*/*", k.Header: k.HeaderPre + k.Secret}, ""),
			"body":   requestArgs(t, "https://api.example.com/v1/items", plainHeaders, "line one\n"+k.BodyPrefix+k.Secret+"\nline three"),
		}
		if k.Rule == "generic-api-key" || k.Rule == "aws-secret-access-key" || k.Rule == "private-key" {
			// A bare 40-character string in a path is no credential shape without a
			// key name next to it; a multi-line PEM block is no path.
			delete(positions, "url path")
		}
		for pos, args := range positions {
			t.Run(k.Name+"/"+pos, func(t *testing.T) {
				t.Parallel()
				fs := d.Scan(args)
				require.NotEmpty(t, fs, "no finding in %s", args)
				require.Contains(t, egress.RuleIDs(fs), k.Rule)

				red := egress.Redact(args, fs)
				require.NotContains(t, red, k.Secret)
				require.NotContains(t, red, egresstest.PctAll(k.Secret))
				require.NotContains(t, red, url.QueryEscape(k.Secret))
				require.NotContains(t, strings.ToUpper(red), strings.ToUpper(egresstest.PctAll(k.Secret)[:24]), "no encoded prefix of the secret survives")
				require.Contains(t, red, "[REDACTED:")
				require.Empty(t, d.Scan(red), "the redacted text scans clean")
			})
		}
	}
}

func TestDLPOrdinaryTextIsClean(t *testing.T) {
	t.Parallel()
	d := egresstest.NewDLP(t)
	for _, s := range []string{
		requestArgs(t, "https://api.example.com/v1/items?page=2&sort=name", map[string]string{"Accept": "application/json", "User-Agent": "aetherium/1.0"}, `{"name":"widget","count":3}`),
		`{"query":"how do I rotate a GitHub token safely?"}`,
		`{"path":"src/main.go","content":"package main\n\nfunc main() { println(\"hello\") }\n"}`,
		`{"url":"https://docs.example.com/guide#section-2","timeout_seconds":10}`,
		`{"body":"Your password reset link has expired. Tokens used: 1234. See the access log."}`,
		`{"id":"3f1c9a2e-7b4d-4c1e-9f00-2a6b8c0d1e2f","sha":"deadbeef"}`,
		"",
	} {
		require.Empty(t, d.Scan(s), "false positive in %s", s)
	}
	// URLs with a port: generic-api-key read "35973/api/runs" after "api.test:" as a
	// key for some port numbers (the value's entropy), a refusal at random.
	for port := 1000; port < 65536; port += 997 {
		for _, u := range []string{"http://api.test:%d/api/runs", "https://api.example.com:%d/api/v1/items?page=2", "http://auth.internal.test:%d/token/refresh"} {
			s := fmt.Sprintf(u, port)
			require.Empty(t, d.Scan(s+"\nUser-Agent: Wget\n"), "false positive in %s", s)
			require.Empty(t, d.Scan(requestArgs(t, s, nil, "")), "false positive in %s", s)
			// Inside a shell command line (run_shell's arguments, JSON-escaped):
			// the match ends at an escaped line end, a quote or a space.
			for _, cmd := range []string{"probe api " + s + "\nprobe other", "wget -q -O- '" + s + "'; echo done", "curl " + s + "\tx"} {
				raw, err := json.Marshal(map[string]any{"command": cmd})
				require.NoError(t, err)
				require.Empty(t, d.Scan(string(raw)), "false positive in %s", raw)
			}
		}
	}
	// The exception is that shape only: a key after a port-like prefix is still found.
	require.NotEmpty(t, d.Scan(`{"url":"http://x.test/","headers":{"X-Api-Key":"8f3kQ9zR2mX7vB4nL6pT1wY5"}}`))
}

// gitleaks skips a line marked "gitleaks:allow"; the arguments are the sender's
// text, so the marker must not let a credential through.
func TestDLPIgnoresTheGitleaksAllowMarker(t *testing.T) {
	t.Parallel()
	d := egresstest.NewDLP(t)
	pat := egresstest.Credentials()[0].Secret
	for _, args := range []string{
		requestArgs(t, "https://api.example.com/v1/items", nil, "gitleaks:allow "+pat),
		requestArgs(t, "https://api.example.com/v1/items?token="+pat+"&note=gitleaks:allow", nil, ""),
	} {
		fs, err := d.ScanArgs([]byte(args))
		require.NoError(t, err)
		require.Contains(t, egress.RuleIDs(fs), "github-pat", "in %s", args)
	}
}

func TestRedactWithholdsWhatItCannotLocate(t *testing.T) {
	t.Parallel()
	d := egresstest.NewDLP(t)
	pat := egresstest.Credentials()[0].Secret
	blob := base64.StdEncoding.EncodeToString([]byte("export GITHUB_TOKEN=" + pat + "\n"))
	args := requestArgs(t, "https://api.example.com/upload", nil, "config blob: "+blob)
	fs := d.Scan(args)
	require.Contains(t, egress.RuleIDs(fs), "github-pat", "gitleaks decodes base64")
	red := egress.Redact(args, fs)
	require.NotContains(t, red, blob)
	require.NotContains(t, red, pat)
	require.Contains(t, red, "withheld")
}

func TestRedact(t *testing.T) {
	t.Parallel()
	fs := []egress.Finding{{Rule: "github-pat", Secret: "ghp_secretvalue"}, {Rule: "short", Secret: "ab"}}
	require.Equal(t, `{"a":"[REDACTED:github-pat]","b":"x [REDACTED:github-pat] y","c":"ab"}`,
		egress.Redact(`{"a":"ghp_secretvalue","b":"x ghp_secretvalue y","c":"ab"}`, fs))
	require.Equal(t, "nothing", egress.Redact("nothing", nil))
	require.Equal(t, `u=[REDACTED:github-pat]&v=1`, egress.Redact(`u=ghp%5fsecret%76alue&v=1`, fs), "partly percent-encoded")
	require.Equal(t, `k=[REDACTED:private-key]`, egress.Redact(`k=BEGIN+KEY%0Aabc`, []egress.Finding{{Rule: "private-key", Secret: "BEGIN KEY\nabc"}}))
	require.Equal(t, []string{"a", "b"}, egress.RuleIDs([]egress.Finding{{Rule: "a"}, {Rule: "b"}, {Rule: "a"}}))
}
