package egress

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// keyFormats are the common formats of a random key, the calibration set of
// plausibleSecretValue.
var keyFormats = []struct {
	name     string
	alphabet string
	n        int
}{
	{"hex 32", "0123456789abcdef", 32},
	{"hex 40", "0123456789abcdef", 40},
	{"HEX 32", "0123456789ABCDEF", 32},
	{"base62 24", "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789", 24},
	{"base62 32", "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789", 32},
	{"base64url 43", "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", 43},
	{"base64 40", "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", 40},
}

func randKey(r *rand.Rand, alphabet string, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[r.IntN(len(alphabet))]
	}
	return string(b)
}

// TestKeyedSecretCalibration measures the false-negative rate of the keyed
// value's judge on random keys of each format, beside that of gitleaks' generic
// entropy floor of 3.5, and requires it under 0.5%.
func TestKeyedSecretCalibration(t *testing.T) {
	t.Parallel()
	const samples = 20000
	for _, f := range keyFormats {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			r := rand.New(rand.NewPCG(47, uint64(f.n)))
			missed, underFloor := 0, 0
			for range samples {
				k := randKey(r, f.alphabet, f.n)
				if !plausibleSecretValue(k, 16) {
					missed++
				}
				if shannon(k) < 3.5 {
					underFloor++
				}
			}
			t.Logf("%s: judged no secret %.3f%%; under gitleaks' entropy 3.5 %.1f%%", f.name,
				100*float64(missed)/samples, 100*float64(underFloor)/samples)
			require.Less(t, float64(missed)/samples, 0.005)
		})
	}
}

// ordinaryConfig is configuration and prose in which names say key, token,
// secret or password but no value is a secret.
var ordinaryConfig = []string{
	"max_tokens: 4096",
	"max_tokens = 8192",
	`{"prompt_tokens": 1532, "completion_tokens": 201, "total_tokens": 1733}`,
	"token_url: https://oauth2.example.com/token",
	"token_endpoint: https://login.example.com/oauth2/v2.0/token",
	"secret_name: prod/db/credentials",
	"secretName: payments-service-credentials",
	"key_id: 3",
	"keyId: arn:aws:kms:eu-west-1:123456789012:alias/fleet-logs",
	"sort_key: created_at_desc",
	"partition_key: tenant_id",
	"primary_key: id",
	"cache_key: linux-node-modules-v2-lockfile",
	"idempotency_key: order-2024-06-11-retry",
	"public_key: ssh-ed25519",
	"token_type: Bearer",
	"tokenizer: cl100k_base",
	"keyboard_layout: us-international",
	"password_policy: min-length-12-with-symbols",
	"password: ${DB_PASSWORD}",
	"password: <your-password>",
	"api_key: YOUR_API_KEY_HERE",
	"API_KEY=your-api-key-here",
	"SECRET_KEY=changeme-in-production",
	"secret_key_base: {{ .Values.secretKeyBase }}",
	"client_secret: $CLIENT_SECRET",
	"auth_token: %AUTH_TOKEN%",
	"GITHUB_TOKEN: ${{ secrets.GITHUB_TOKEN }}",
	"credentials_file: /etc/fleet/credentials.json",
	"credentials: ~/.aws/credentials",
	"key_file: /var/run/secrets/tls/tls.key",
	"token_ttl: 3600s",
	"token_expiry: 2024-12-31T23:59:59Z",
	"api_version: 2024-10-01-preview",
	"access_token_lifetime: PT1H",
	"password_reset_url: https://example.com/account/reset",
	"monkey: banana-split-sundae",
	"secret: xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
	"token: 0000000000000000000000000000000000000000",
	"Authorization: Bearer <token>",
	"token := hex.EncodeToString(tokenBytes)",
	"Keys: []string{mb.streamKey(m.RunID), mb.agentsKey(runID)},",
	"apiKey = base64.RawURLEncoding.EncodeToString(secretKeyBytes)",
	"DATABASE_URL=postgres://fleet:${POSTGRES_PASSWORD:-fleet}@db:5432/fleet",
	"The key: rotate it every ninety days and never commit it to the repository.",
	"Password: must be at least twelve characters long.",
	"Remember the secret: tokens expire, credentials do not.",
}

// TestKeyedSecretOrdinaryConfigIsClean: the judge's false positives, over the whole
// DLP, in the text as written and as a JSON body.
func TestKeyedSecretOrdinaryConfigIsClean(t *testing.T) {
	t.Parallel()
	d, err := NewDLP()
	require.NoError(t, err)
	matched := 0
	for _, line := range ordinaryConfig {
		if d.plan.cfg.Rules[keyedSecretRule].Regex.MatchString(line) {
			matched++
		}
		body, err := json.Marshal(map[string]string{"body": line})
		require.NoError(t, err)
		for _, text := range []string{line, string(body)} {
			require.Empty(t, d.Scan(text), "false positive in %s", text)
		}
	}
	t.Logf("%d of %d lines match %s's regexp; none is judged a secret", matched, len(ordinaryConfig), keyedSecretRule)
}

// TestKeyedSecretUnderAnyServiceName: "<service>_api_key: <random>" in every
// assignment form, for service names that gitleaks' generic allowlist or
// stopwords drop (monkeylearn, …), and random keys of every format, including
// those under gitleaks' entropy floor.
func TestKeyedSecretUnderAnyServiceName(t *testing.T) {
	t.Parallel()
	d, err := NewDLP()
	require.NoError(t, err)
	r := rand.New(rand.NewPCG(47, 828))
	services := []string{"monkeylearn", "donkeycar", "turkeyhill", "academy", "abstract", "account",
		"action", "active", "about", "accessibility", "author", "example", "weather", "maps", "mailer"}
	forms := []string{"%s_api_key: %s", "%s_API_KEY=%s", `{"%s_api_key": "%s"}`, "X-%s-Api-Key: %s", "%s_secret = '%s'", "%sToken: %s"}
	missed, n := 0, 0
	for _, svc := range services {
		for _, f := range keyFormats {
			for _, form := range forms {
				key := randKey(r, f.alphabet, f.n)
				text := fmt.Sprintf(form, svc, key)
				n++
				if !hasSecret(d.Scan(text), key) {
					missed++
					t.Errorf("missed %s", text)
				}
			}
		}
	}
	t.Logf("%d of %d keyed values found", n-missed, n)
}

// TestPassphraseUnderAPasswordName: words are no key, but a password may be words;
// gitleaks' generic rule finds this one and the judgement of words must not drop it.
func TestPassphraseUnderAPasswordName(t *testing.T) {
	t.Parallel()
	d, err := NewDLP()
	require.NoError(t, err)
	require.True(t, hasSecret(d.Scan("DB_PASSWORD=Summer-Breeze-Quartz-42"), "Summer-Breeze-Quartz-42"))
	require.Empty(t, d.Scan("password_policy: min-length-12-with-symbols"))
}

func hasSecret(fs []Finding, key string) bool {
	for _, f := range fs {
		if strings.Contains(f.Secret, key) {
			return true
		}
	}
	return false
}
