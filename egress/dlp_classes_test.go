package egress_test

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math"
	"math/rand/v2"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/egress/egresstest"
)

// The class corpus (issue 47): a key of every class the fleet's rules cover,
// generated from the issuer's format (prefix, alphabet, length) with a fixed seed,
// never a real key, in every placement an agent can send it.

const classSeed = 47

// classCred is one generated credential. secret is what must not survive
// redaction; for a keyed value name is the name it is assigned to; multiline
// credentials (armoured private keys) have no URL and no reversed or spaced form.
type classCred struct {
	class, name string
	secret      string
	keyName     string
	// url: the credential is a URL (a webhook, a connection URI) and secret the
	// part of it that is the credential.
	url       string
	multiline bool
}

// text is the credential as it is written: the key, the URL, or "name: value".
func (c classCred) text() string {
	switch {
	case c.url != "":
		return c.url
	case c.keyName != "":
		return c.keyName + ": " + c.secret
	}
	return c.secret
}

func classCredentials(t testing.TB) []classCred {
	t.Helper()
	r := rand.New(rand.NewPCG(classSeed, 1))
	s := randString(r)
	const up = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	b64lines := func(n int) string {
		raw := make([]byte, n)
		for i := range raw {
			raw[i] = byte(r.IntN(256))
		}
		enc := base64.StdEncoding.EncodeToString(raw)
		var b strings.Builder
		for len(enc) > 64 {
			b.WriteString(enc[:64] + "\n")
			enc = enc[64:]
		}
		b.WriteString(enc)
		return b.String()
	}
	seed := []byte(s(alnum, ed25519.SeedSize))
	der, err := x509.MarshalPKCS8PrivateKey(ed25519.NewKeyFromSeed(seed))
	require.NoError(t, err)
	pemKey := strings.TrimSpace(string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})))
	discordID := s(digits[1:], 1) + s(digits, 17)
	// A random 32-hex key whose entropy is under gitleaks' generic floor of 3.5:
	// about a fifth of them are.
	lowHex := s(hexLower, 32)
	for shannon(lowHex) >= 3.5 {
		lowHex = s(hexLower, 32)
	}
	return []classCred{
		// AI and model providers
		{class: "ai", name: "openai sk-proj", secret: "sk-proj-" + s(urlsafe, 156)},
		{class: "ai", name: "anthropic", secret: "sk-ant-api03-" + s(urlsafe, 93) + "AA"},
		{class: "ai", name: "groq", secret: "gsk_" + s(alnum, 52)},
		{class: "ai", name: "xai", secret: "xai-" + s(alnum, 80)},
		{class: "ai", name: "openrouter", secret: "sk-or-v1-" + s(hexLower, 64)},
		{class: "ai", name: "nvidia", secret: "nvapi-" + s(urlsafe, 64)},
		{class: "ai", name: "langsmith", secret: "lsv2_pt_" + s(hexLower, 32) + "_" + s(hexLower, 10)},
		{class: "ai", name: "pinecone", secret: "pcsk_" + s(alnum, 6) + "_" + s(alnum, 63)},
		{class: "ai", name: "replicate", secret: "r8_" + s(alnum, 37)},
		{class: "ai", name: "deepseek", secret: "sk-" + s(hexLower, 32)},
		{class: "ai", name: "tavily", secret: "tvly-dev-" + s(alnum, 32)},
		{class: "ai", name: "elevenlabs", secret: "sk_" + s(hexLower, 48)},
		// cloud
		{class: "cloud", name: "google oauth ya29", secret: "ya29." + s(urlsafe, 150)},
		{class: "cloud", name: "supabase sbp_", secret: "sbp_" + s(hexLower, 40)},
		{class: "cloud", name: "tailscale", secret: "tskey-auth-k" + s(alnum, 10) + "CNTRL-" + s(alnum, 33)},
		{class: "cloud", name: "azure storage", secret: s(base64c, 86) + "=="},
		// source hosting and CI
		{class: "scm-ci", name: "github ghs_ with inner _", secret: "ghs_" + s(alnum, 16) + "_" + s(alnum, 19)},
		{class: "scm-ci", name: "gitlab deploy token", secret: "gldt-" + s(urlsafe, 20)},
		{class: "scm-ci", name: "buildkite", secret: "bkua_" + s(hexLower, 40)},
		{class: "scm-ci", name: "circleci", secret: "CCIPAT_" + s(alnum, 22) + "_" + s(hexLower, 40)},
		{class: "scm-ci", name: "test pypi", secret: "pypi-AgENdGVzdC5weXBpLm9yZw" + s(urlsafe, 120)},
		{class: "scm-ci", name: "artifactory", secret: "AKCp" + s(alnum, 69)},
		{class: "scm-ci", name: "bitbucket app password", secret: "ATBB" + s(alnum, 32)},
		// container registries
		{class: "registry", name: "docker hub pat", secret: "dckr_pat_" + s(urlsafe, 27)},
		{class: "registry", name: "docker hub oat", secret: "dckr_oat_" + s(urlsafe, 32)},
		// chat and webhook URLs
		{class: "chat", name: "discord bot token", secret: base64.RawURLEncoding.EncodeToString([]byte(discordID)) + "." + s(urlsafe, 6) + "." + s(urlsafe, 38)},
		{class: "chat", name: "telegram bot token", secret: s(digits, 10) + ":AA" + s(urlsafe, 33)},
		{class: "webhook", name: "discord webhook", secret: s(urlsafe, 68)},
		{class: "webhook", name: "slack webhook", secret: "services/T" + s(up, 8) + "/B" + s(up, 10) + "/" + s(alnum, 24)},
		{class: "webhook", name: "zapier webhook", secret: s(digits, 7) + "/" + s(hexLower, 6)},
		{class: "webhook", name: "generic webhook", secret: s(urlsafe, 40)},
		// payment
		{class: "payment", name: "stripe webhook secret", secret: "whsec_" + s(alnum, 32)},
		{class: "payment", name: "square secret", secret: "sq0csp-" + s(urlsafe, 43)},
		{class: "payment", name: "square token", secret: "EAAA" + s(urlsafe, 60)},
		// email and messaging
		{class: "email", name: "mailchimp bare", secret: s(hexLower, 32) + "-us14"},
		{class: "email", name: "mailgun", secret: "key-" + s(hexLower, 32)},
		{class: "email", name: "resend", secret: "re_" + s(alnum, 8) + "_" + s(alnum, 24)},
		{class: "email", name: "brevo", secret: "xkeysib-" + s(hexLower, 64) + "-" + s(alnum, 16)},
		// databases: connection URIs with a password
		{class: "uri", name: "mongodb+srv", secret: s(alnum, 20)},
		{class: "uri", name: "postgres", secret: s(alnum, 12) + "%21" + s(alnum, 6)},
		{class: "uri", name: "redis no user", secret: s(alnum, 24)},
		{class: "uri", name: "https userinfo", secret: s(alnum, 16)},
		// private keys
		{class: "private-key", name: "pem pkcs8", secret: pemKey, multiline: true},
		{class: "private-key", name: "pem cut short", secret: strings.Join(strings.Split(pemKey, "\n")[:2], "\n") + "\n" + b64lines(48), multiline: true},
		{class: "private-key", name: "openssh", secret: "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA" + b64lines(300) + "\n-----END OPENSSH PRIVATE KEY-----", multiline: true},
		{class: "private-key", name: "pgp", secret: "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlQOYBF" + b64lines(400) + "\n=" + s(alnum, 4) + "\n-----END PGP PRIVATE KEY BLOCK-----", multiline: true},
		{class: "private-key", name: "putty ppk", secret: "PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\nComment: deploy@ci\nPublic-Lines: 2\n" + b64lines(51) +
			"\nPrivate-Lines: 1\n" + b64lines(36) + "\nPrivate-MAC: " + s(hexLower, 64), multiline: true},
		// keyed values gitleaks' generic rule drops
		{class: "keyed", name: "under a monkey allowlist", keyName: "monkeylearn_api_key", secret: s(hexLower, 32)},
		{class: "keyed", name: "32 hex under entropy 3.5", keyName: "SERVICE_TOKEN", secret: lowHex},
		{class: "keyed", name: "characters outside [\\w.=-]", keyName: "client_secret", secret: s(alnum, 10) + "~!" + s(alnum, 10) + "+/" + s(alnum, 8)},
		{class: "keyed", name: "password with symbols", keyName: "DB_PASSWORD", secret: "Q" + s(alnum, 6) + "#!" + s(alnum, 5) + "@x"},
		{class: "keyed", name: "bearer header", keyName: "Authorization", secret: s(urlsafe, 40)},
	}
}

// randString returns a generator of strings of n characters from an alphabet,
// drawn from r.
func randString(r *rand.Rand) func(alphabet string, n int) string {
	return func(alphabet string, n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		return string(b)
	}
}

func shannon(s string) float64 {
	counts := map[rune]float64{}
	for _, r := range s {
		counts[r]++
	}
	h := 0.0
	for _, c := range counts {
		p := c / float64(len(s))
		h -= p * math.Log2(p)
	}
	return h
}

// finishClassCreds fills the URLs of the URL-shaped credentials around their
// secret.
func finishClassCreds(cs []classCred) []classCred {
	for i := range cs {
		c := &cs[i]
		switch c.name {
		case "discord webhook":
			c.url = "https://discord.com/api/webhooks/1234567890123456789/" + c.secret
		case "slack webhook":
			c.url = "https://hooks.slack.com/" + c.secret
		case "zapier webhook":
			c.url = "https://hooks.zapier.com/hooks/catch/" + c.secret + "/"
		case "generic webhook":
			c.url = "https://notify.example.org/v2/webhooks/" + c.secret
		case "mongodb+srv":
			c.url = "mongodb+srv://app_user:" + c.secret + "@cluster0.ab1cd.mongodb.net/prod?retryWrites=true"
		case "postgres":
			c.url = "postgres://billing:" + c.secret + "@db.internal.example:5432/billing"
		case "redis no user":
			c.url = "redis://:" + c.secret + "@cache.internal.example:6379/0"
		case "https userinfo":
			c.url = "https://deploy:" + c.secret + "@git.example.org/team/repo.git"
		case "azure storage":
			c.url = "DefaultEndpointsProtocol=https;AccountName=fleetlogs;AccountKey=" + c.secret + ";EndpointSuffix=core.windows.net"
		}
	}
	return cs
}

// classPlacements renders the arguments of an http_request carrying c in each
// placement: the text as it is written and every way it can be wrapped.
func classPlacements(t testing.TB, c classCred) map[string]string {
	t.Helper()
	plain := map[string]string{"Accept": "application/json"}
	text := c.text()
	name, value := "value", text
	if c.keyName != "" {
		name, value = c.keyName, c.secret
	}
	if c.keyName == "Authorization" {
		value = "Bearer " + c.secret
	}
	line := text
	if c.keyName != "" {
		line = c.keyName + "=" + c.secret
	}
	env := "# service configuration (café)\nLOG_LEVEL=info\n" + line + "\n"
	p := map[string]string{
		"bare":             requestArgs(t, "https://api.example.com/v1/items", plain, "here it is\n"+text+"\nthanks"),
		"json body":        requestArgs(t, "https://api.example.com/v1/items", plain, mustMarshal(t, map[string]string{name: value})),
		"form body":        requestArgs(t, "https://api.example.com/v1/token", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, "grant_type=client_credentials&"+url.QueryEscape(name)+"="+url.QueryEscape(value)+"&scope=read"),
		"query":            requestArgs(t, "https://api.example.com/v1/items?page=2&"+url.QueryEscape(name)+"="+url.QueryEscape(value)+"&sort=asc", plain, ""),
		"header":           requestArgs(t, "https://api.example.com/v1/items", map[string]string{"Accept": "*/*", headerName(name): value}, ""),
		"nested json":      requestArgs(t, "https://api.example.com/v1/items", plain, mustMarshal(t, map[string]string{"payload": mustMarshal(t, map[string]any{"config": map[string]string{name: value}})})),
		"base64-wrapped":   requestArgs(t, "https://api.example.com/v1/upload", plain, "config blob: "+base64.StdEncoding.EncodeToString([]byte(env))),
		"base64url .env":   requestArgs(t, "https://api.example.com/v1/upload", plain, "env="+base64.RawURLEncoding.EncodeToString([]byte(env))),
		"hex-encoded .env": requestArgs(t, "https://api.example.com/v1/upload", plain, "dump "+hex.EncodeToString([]byte(env))),
	}
	if c.keyName == "" && !c.multiline && c.url == "" {
		p["url path"] = requestArgs(t, "https://api.example.com/v1/"+url.PathEscape(text)+"/items", plain, "")
	}
	if !c.multiline {
		p["reversed"] = requestArgs(t, "https://api.example.com/v1/items", plain, "note\n"+reverseString(text)+"\n")
	}
	if !c.multiline && c.url == "" {
		p["spaced out"] = requestArgs(t, "https://api.example.com/v1/items", plain, "note\n"+spaced(c, " ")+"\n")
		p["dashed out"] = requestArgs(t, "https://api.example.com/v1/items", plain, "note\n"+spaced(c, "-")+"\n")
	}
	return p
}

func headerName(name string) string {
	if name == "value" {
		return "X-Value"
	}
	return name
}

func reverseString(s string) string {
	r := []rune(s)
	for i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {
		r[i], r[j] = r[j], r[i]
	}
	return string(r)
}

// spaced writes the credential's secret with sep between every character (a
// keyed value keeps its name).
func spaced(c classCred, sep string) string {
	out := strings.Join(strings.Split(c.secret, ""), sep)
	if c.keyName != "" {
		return c.keyName + ": " + out
	}
	return out
}

// encodedPlacement: the secret is inside an encoding or a transform, so Redact
// can only withhold the whole text.
func encodedPlacement(pos string) bool {
	switch pos {
	case "base64-wrapped", "base64url .env", "hex-encoded .env", "reversed", "spaced out", "dashed out":
		return true
	}
	return false
}

func TestDLPClassCorpusRefusesEveryPlacement(t *testing.T) {
	t.Parallel()
	d := egresstest.NewDLP(t)
	for _, c := range finishClassCreds(classCredentials(t)) {
		for pos, args := range classPlacements(t, c) {
			t.Run(c.class+"/"+c.name+"/"+pos, func(t *testing.T) {
				t.Parallel()
				// A multi-line key is found again in the decoded copy of the
				// arguments, where gitleaks' private-key rule may run from one
				// BEGIN line to the next; such a finding cannot be located, and
				// the whole text is withheld rather than partly masked.
				requireRefusedAndMasked(t, d, args, c.secret, !encodedPlacement(pos) && !c.multiline)
			})
		}
	}
}

// benignValues must pass in every placement: values that look random or name a
// key but are none.
func benignValues(t testing.TB) map[string]string {
	r := rand.New(rand.NewPCG(classSeed, 2))
	s := randString(r)
	raw := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		return b
	}
	uuid := func() string {
		h := s(hexLower, 32)
		return h[:8] + "-" + h[8:12] + "-4" + h[13:16] + "-a" + h[17:20] + "-" + h[20:]
	}
	pub := ed25519.NewKeyFromSeed([]byte(s(alnum, 32))).Public().(ed25519.PublicKey)
	return map[string]string{
		"uuid":              uuid(),
		"uuid request id":   "request_id: " + uuid(),
		"git sha":           s(hexLower, 40),
		"sha256 checksum":   "sha256:" + s(hexLower, 64),
		"package-lock line": `"integrity": "sha512-` + base64.StdEncoding.EncodeToString(raw(64)) + `"`,
		"go.sum line":       "golang.org/x/text v0.14.0 h1:" + base64.StdEncoding.EncodeToString(raw(32)),
		"yarn.lock line":    "resolved \"https://registry.yarnpkg.com/left-pad/-/left-pad-1.3.0.tgz#" + s(hexLower, 40) + "\"",
		"base64 png":        "data:image/png;base64," + base64.StdEncoding.EncodeToString(append([]byte("\x89PNG\r\n\x1a\n"), raw(600)...)),
		"prose about keys":  "Rotate the API key every 90 days; the token expires after an hour and the secret lives in Vault. Never paste a password here.",
		"prose prefixes":    "OpenAI keys start with sk-proj-, Groq's with gsk_, Docker Hub's with dckr_pat_ and Tailscale's with tskey-auth-.",
		"placeholder sk":    "sk-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
		"placeholder gsk":   "gsk_XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX",
		"placeholder ghp":   "ghp_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
		"placeholder env":   "API_KEY=your-api-key-here",
		"placeholder var":   "Authorization: Bearer ${API_TOKEN}",
		"placeholder uri":   "postgres://user:password@localhost:5432/app",
		"templated uri":     "mongodb://admin:${MONGO_PASSWORD}@mongo:27017",
		"stripe pk_live":    "pk_live_" + s(alnum, 99),
		"public key":        "public_key: " + base64.StdEncoding.EncodeToString(pub),
		"config names":      "max_tokens: 4096\ntoken_url: https://oauth2.example.com/token\nsecret_name: prod/db/credentials\nkey_id: 3\nsort_key: created_at_desc_2024",
		"pagination token":  "next_page_token: " + s(urlsafe, 40),
		"model usage":       `{"prompt_tokens": 1532, "completion_tokens": 201, "total_tokens": 1733}`,
		"key with words":    "cache_key: linux-node-modules-lockfile-hash",
		"api version":       "api_version: 2024-10-01-preview",
		"webhook docs url":  "https://docs.example.com/webhooks/order-created-notification-handler",
		"react hooks path":  "see src/hooks/useAuthenticationStateHandler.ts and https://example.com/hooks/useAuthenticationStateHandler",
		"camel case value":  "secret_provider_key: getSecretFromVaultStorage",
		"url with port":     "https://api.example.com:8443/v1/items",
		"semver and ids":    "release v1.24.3 build 20240611.7 id 3f1c9a2e",
		"license key words": "ABCD EFGH IJKL MNOP: the groups of a license key in prose",
		"sentence":          "the cat sat and ran off the mat with its pal",
	}
}

func TestDLPClassCorpusAllowsBenignValues(t *testing.T) {
	t.Parallel()
	d := egresstest.NewDLP(t)
	for name, v := range benignValues(t) {
		for pos, args := range placements(t, "note", v) {
			t.Run(name+"/"+pos, func(t *testing.T) {
				t.Parallel()
				requireClean(t, d, args)
			})
		}
		t.Run(name+"/base64", func(t *testing.T) {
			t.Parallel()
			args := requestArgs(t, "https://api.example.com/v1/upload", nil, "blob "+base64.RawURLEncoding.EncodeToString([]byte(v)))
			requireClean(t, d, args)
		})
	}
}

// TestDLPClassCorpusSize documents the corpus for the report.
func TestDLPClassCorpusSize(t *testing.T) {
	t.Parallel()
	n := 0
	cs := finishClassCreds(classCredentials(t))
	for _, c := range cs {
		n += len(classPlacements(t, c))
	}
	t.Log(fmt.Sprintf("%d credentials, %d placements; %d benign values", len(cs), n, len(benignValues(t))))
}
