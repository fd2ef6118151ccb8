package egress_test

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/egress"
	"github.com/aetherium-engine/aetherium/egress/egresstest"
)

// Credentials for the corpus are generated on every run from crypto/rand: the right
// prefix, length and alphabet for each provider, never a real key, never the same
// key twice.

const (
	alnum    = egresstest.Base62
	urlsafe  = alnum + "_-"
	digits   = egresstest.Digits
	base64c  = egresstest.Base64
	hexLower = "0123456789abcdef"
	upper32  = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
)

func cryptoRand(t testing.TB, alphabet string, n int) string {
	t.Helper()
	b := make([]byte, n)
	for i := range b {
		x, err := rand.Int(rand.Reader, big.NewInt(int64(len(alphabet))))
		require.NoError(t, err)
		b[i] = alphabet[x.Int64()]
	}
	return string(b)
}

type credShape struct {
	name   string
	secret string
	// field is the name the credential travels under; a rule that recognises a
	// credential only by its name (an AWS secret key) needs the right one.
	field string
}

func generatedCredentials(t testing.TB) []credShape {
	t.Helper()
	r := func(alphabet string, n int) string { return cryptoRand(t, alphabet, n) }
	jwt := func() string {
		enc := base64.RawURLEncoding
		h := enc.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`))
		p := enc.EncodeToString([]byte(`{"sub":"` + r(digits, 12) + `","scope":"admin","iat":1718000000}`))
		return h + "." + p + "." + r(urlsafe, 43)
	}
	pemKey := func() string {
		k, err := rsa.GenerateKey(rand.Reader, 1024)
		require.NoError(t, err)
		der, err := x509.MarshalPKCS8PrivateKey(k)
		require.NoError(t, err)
		return strings.TrimSpace(string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})))
	}
	return []credShape{
		{name: "stripe sk_live", secret: "sk_live_" + r(alnum, 99)},
		{name: "stripe rk_live", secret: "rk_live_" + r(alnum, 99)},
		{name: "openai sk-proj", secret: "sk-proj-" + r(urlsafe, 74) + "T3BlbkFJ" + r(urlsafe, 74)},
		{name: "openai sk-proj without marker", secret: "sk-proj-" + r(urlsafe, 156)},
		{name: "openai sk-svcacct", secret: "sk-svcacct-" + r(urlsafe, 156)},
		{name: "openai legacy sk-", secret: "sk-" + r(alnum, 48)},
		{name: "anthropic", secret: "sk-ant-api03-" + r(urlsafe, 93) + "AA"},
		{name: "google api key", secret: "AIza" + r(urlsafe, 35)},
		{name: "github ghp_", secret: "ghp_" + r(alnum, 36)},
		{name: "github gho_", secret: "gho_" + r(alnum, 36)},
		{name: "github fine-grained", secret: "github_pat_" + r(alnum, 22) + "_" + r(alnum, 59)},
		{name: "gitlab", secret: "glpat-" + r(urlsafe, 20)},
		{name: "slack bot", secret: "xoxb-" + r(digits, 12) + "-" + r(digits, 13) + "-" + r(alnum, 24)},
		{name: "slack user", secret: "xoxp-" + r(digits, 12) + "-" + r(digits, 12) + "-" + r(digits, 13) + "-" + r(hexLower, 32)},
		{name: "aws access key id", secret: "AKIA" + r(upper32, 16)},
		{name: "aws secret access key", secret: r(base64c, 40), field: "aws_secret_access_key"},
		{name: "private key", secret: pemKey()},
		{name: "jwt", secret: jwt()},
		{name: "npm", secret: "npm_" + r(alnum, 36)},
		{name: "huggingface", secret: "hf_" + r(alnum, 34)},
		{name: "sendgrid", secret: "SG." + r(urlsafe, 22) + "." + r(urlsafe, 43)},
		{name: "twilio", secret: "SK" + r(hexLower, 32)},
	}
}

// uEscapeAll writes every character of s as a \u escape.
func uEscapeAll(s string) string {
	var b strings.Builder
	for _, c := range s {
		fmt.Fprintf(&b, `\u%04x`, c)
	}
	return b.String()
}

func mustMarshal(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

// placements render http_request arguments carrying value under field in each way
// an agent can send it.
func placements(t testing.TB, field, value string) map[string]string {
	t.Helper()
	if field == "" {
		field = "value"
	}
	plain := map[string]string{"Accept": "application/json"}
	pretty, err := json.MarshalIndent(map[string]any{"data": map[string]string{field: "PLACEHOLDER"}}, "", "  ")
	require.NoError(t, err)
	escaped := strings.Replace(string(pretty), "PLACEHOLDER", uEscapeAll(value), 1)
	return map[string]string{
		"raw body":            requestArgs(t, "https://api.example.com/v1/items", plain, "here it is\n"+field+" "+value+"\nthanks"),
		"json string value":   requestArgs(t, "https://api.example.com/v1/items", plain, mustMarshal(t, map[string]string{field: value})),
		"pretty \\u-escaped":  requestArgs(t, "https://api.example.com/v1/items", plain, escaped),
		"form value":          requestArgs(t, "https://api.example.com/v1/token", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, "grant_type=client_credentials&"+field+"="+url.QueryEscape(value)+"&scope=read"),
		"query value":         requestArgs(t, "https://api.example.com/v1/items?page=2&"+field+"="+url.QueryEscape(value)+"&sort=asc", plain, ""),
		"header value":        requestArgs(t, "https://api.example.com/v1/items", map[string]string{"Accept": "*/*", "X-" + field: value}, ""),
		"query, every byte %": requestArgs(t, "https://api.example.com/v1/items?page=2&"+field+"="+egresstest.PctAll(value), plain, ""),
	}
}

// encodings are the forms a secret may take in the arguments; none may survive
// redaction.
func encodings(t testing.TB, secret string) []string {
	j := mustMarshal(t, secret)
	j = j[1 : len(j)-1]
	jj := mustMarshal(t, j)
	return []string{secret, j, jj[1 : len(jj)-1], url.QueryEscape(secret), egresstest.PctAll(secret), uEscapeAll(secret)}
}

func TestDLPCorpusRefusesEveryPlacement(t *testing.T) {
	t.Parallel()
	d := egresstest.NewDLP(t)
	for _, c := range generatedCredentials(t) {
		for pos, args := range placements(t, c.field, c.secret) {
			t.Run(c.name+"/"+pos, func(t *testing.T) {
				t.Parallel()
				requireRefusedAndMasked(t, d, args, c.secret, true)
			})
		}
	}
}

// requireRefusedAndMasked: the gate refuses args, and Redact leaves no form of
// secret in them (located: masked where it stands rather than the whole text
// withheld).
func requireRefusedAndMasked(t *testing.T, d *egress.DLP, args, secret string, located bool) {
	t.Helper()
	fs, err := d.ScanArgs([]byte(args))
	require.NoError(t, err)
	require.NotEmpty(t, fs, "the gate would send %s", args)

	red := egress.Redact(args, fs)
	require.Contains(t, red, "[REDACTED:")
	if located {
		require.NotContains(t, red, "withheld", "every placement can be located and masked")
		require.True(t, json.Valid([]byte(red)), "redaction keeps the arguments JSON")
	}
	for _, enc := range encodings(t, secret) {
		require.NotContains(t, red, enc[:min(len(enc), 60)], "an encoded form survived redaction")
	}
	require.Empty(t, d.Scan(red), "the redacted text scans clean")
}

// requireClean: the gate lets args through.
func requireClean(t *testing.T, d *egress.DLP, args string) {
	t.Helper()
	fs, err := d.ScanArgs([]byte(args))
	require.NoError(t, err)
	require.Empty(t, fs, "false positive %v in %s", egress.RuleIDs(fs), args)
}

func TestDLPCorpusAllowsBenignValues(t *testing.T) {
	t.Parallel()
	d := egresstest.NewDLP(t)
	sum := sha256.Sum256([]byte(cryptoRand(t, alnum, 32)))
	sha := sha1.Sum([]byte(cryptoRand(t, alnum, 32)))
	for name, v := range map[string]string{
		"sha256":         hex.EncodeToString(sum[:]),
		"git sha":        hex.EncodeToString(sha[:]),
		"uuid":           newUUID(t),
		"base64 prose":   base64.StdEncoding.EncodeToString([]byte("The quarterly report is attached; the fleet finished every job on time.")),
		"prose sk-":      "OpenAI keys start with sk- or sk-proj- and Stripe's with sk_live_; never paste one here.",
		"prose AKIA":     "AWS access key ids begin with AKIA, GitHub tokens with ghp_ and Slack's with xoxb-.",
		"url":            "https://docs.example.com/guide/keys?section=rotation&lang=en#step-2",
		"placeholder":    "sk-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
		"semver and ids": "release v1.24.3 build 20240611.7 id 3f1c9a2e",
	} {
		for pos, args := range placements(t, "note", v) {
			t.Run(name+"/"+pos, func(t *testing.T) {
				t.Parallel()
				requireClean(t, d, args)
			})
		}
	}
}

func TestDLPRefusesWhatIsTooLargeToScan(t *testing.T) {
	t.Parallel()
	d := egresstest.NewDLP(t)
	args := requestArgs(t, "https://api.example.com/upload", nil, strings.Repeat("a", egress.MaxScanBytes))
	_, err := d.ScanArgs([]byte(args))
	require.ErrorIs(t, err, egress.ErrDLPTooLarge)
}

func newUUID(t testing.TB) string {
	h := cryptoRand(t, hexLower, 32)
	return h[:8] + "-" + h[8:12] + "-4" + h[13:16] + "-a" + h[17:20] + "-" + h[20:]
}
