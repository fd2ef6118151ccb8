package egress_test

import (
	"encoding/base64"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/egress"
	"github.com/aetherium-engine/aetherium/egress/egresstest"
)

// The plan (dlp_plan.go) must find exactly what gitleaks finds with every rule over
// each text: these tests compare the two on the credential corpus in every placement,
// encoded in the ways gitleaks decodes itself, on the benign corpus, and on what
// redaction leaves.

func requireSameFindings(t *testing.T, d *egress.DLP, s string) {
	t.Helper()
	want := egress.ScanAllRules(d, s)
	got := d.Scan(s)
	require.ElementsMatch(t, want, got, "findings differ from every rule's in %q", s)
}

func TestDLPScanEqualsAllRules(t *testing.T) {
	t.Parallel()
	d := egresstest.NewDLP(t)
	var texts []string
	for _, c := range generatedCredentials(t) {
		for _, args := range placements(t, c.field, c.secret) {
			texts = append(texts, args, egress.Redact(args, d.Scan(args)))
		}
		blob := base64.StdEncoding.EncodeToString([]byte(c.field + "=" + c.secret + "\n"))
		texts = append(texts,
			requestArgs(t, "https://api.example.com/upload", nil, "blob: "+blob),
			requestArgs(t, "https://api.example.com/upload?b="+url.QueryEscape(blob), nil, ""),
			"token: "+c.secret, c.secret, strings.ToUpper(c.secret), "%"+egresstest.PctAll(c.secret))
	}
	for _, k := range egresstest.Credentials() {
		texts = append(texts,
			requestArgs(t, "https://api.example.com/v1/items?page=2&"+k.QueryKey+"="+url.QueryEscape(k.Secret), nil, ""),
			requestArgs(t, "https://api.example.com/v1/items", map[string]string{k.Header: k.HeaderPre + k.Secret}, ""),
			requestArgs(t, "https://api.example.com/v1/items", nil, "line one\n"+k.BodyPrefix+k.Secret+"\nline three"))
	}
	for _, v := range []string{
		"OpenAI keys start with sk- or sk-proj- and Stripe's with sk_live_; never paste one here.",
		"AWS access key ids begin with AKIA, GitHub tokens with ghp_ and Slack's with xoxb-.",
		"sk-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
		"api_version: 2024-01-01-preview\ntoken_endpoint = https://auth.example.com/oauth/token",
		"password: hunter2hunter2hunter2", "secret_key = 'abcdefghijklmnopqrstuvwxyz012345'",
		"kind: Secret\ndata:\n  password: cGFzc3dvcmQxMjM0NTY3OA==\n",
		"U+0041 U+0042 key=U+0043", `\u0074oken=\u0061bcdefghijklmnop0123`,
	} {
		for _, args := range placements(t, "note", v) {
			texts = append(texts, args)
		}
		texts = append(texts, v)
	}
	texts = append(texts, fuzzSecrets()...)
	for _, s := range texts {
		requireSameFindings(t, d, s)
	}
}

// FuzzDLPScanEqualsAllRules compares Scan with every rule's scan on arbitrary text.
func FuzzDLPScanEqualsAllRules(f *testing.F) {
	for _, s := range fuzzSecrets() {
		f.Add(s)
	}
	f.Add("api_key: abcdefghij0123456789\npassword = \"Tr0ub4dor&3xyzzy\"")
	f.Add("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U")
	d, err := egress.NewDLP()
	require.NoError(f, err)
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 1<<12 {
			t.Skip("bounded sizes keep the fuzzer fast")
		}
		requireSameFindings(t, d, s)
	})
}
