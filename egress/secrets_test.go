package egress_test

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/rand/v2"
	"strings"
)

// Test secrets: shaped like real credentials (prefixes, lengths, alphabets, entropy)
// so gitleaks' default rules fire, but generated from a fixed seed so every run
// scans the same text. None of them is a live credential.

const (
	base62  = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	base32  = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
	base64c = base62 + "+/"
	digits  = "0123456789"
)

func randFrom(r *rand.Rand, alphabet string, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[r.IntN(len(alphabet))]
	}
	return string(b)
}

type secretKind struct {
	name string
	rule string // gitleaks rule id expected among the findings
	// secret is the credential itself; queryKey, header and bodyPrefix say how it is
	// embedded where a rule needs context (a generic key needs a key-like name).
	secret     string
	queryKey   string
	header     string
	headerPre  string
	bodyPrefix string
}

func testSecrets() []secretKind {
	r := rand.New(rand.NewPCG(20240611, 7))
	jwt := func() string {
		enc := base64.RawURLEncoding
		h := enc.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`))
		p := enc.EncodeToString([]byte(fmt.Sprintf(`{"sub":"%s","name":"Fleet Agent","iat":1718000000}`, randFrom(r, digits, 10))))
		mac := hmac.New(sha256.New, []byte(randFrom(r, base62, 32)))
		mac.Write([]byte(h + "." + p))
		return h + "." + p + "." + enc.EncodeToString(mac.Sum(nil))
	}
	privateKey := func() string {
		seed := []byte(randFrom(r, base62, ed25519.SeedSize))
		der, err := x509.MarshalPKCS8PrivateKey(ed25519.NewKeyFromSeed(seed))
		if err != nil {
			panic(err)
		}
		return strings.TrimSpace(string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})))
	}
	def := func(k secretKind) secretKind {
		if k.queryKey == "" {
			k.queryKey = "token"
		}
		if k.header == "" {
			k.header, k.headerPre = "Authorization", "Bearer "
		}
		if k.bodyPrefix == "" {
			k.bodyPrefix = "use this one: "
		}
		return k
	}
	return []secretKind{
		def(secretKind{name: "github pat", rule: "github-pat", secret: "ghp_" + randFrom(r, base62, 36)}),
		def(secretKind{name: "aws access key id", rule: "aws-access-token", secret: "AKIA" + randFrom(r, base32, 16)}),
		// Starts with "/": gitleaks' generic rule misses that shape; ours does not.
		def(secretKind{name: "aws secret access key", rule: "aws-secret-access-key", secret: "/" + randFrom(r, base64c, 39),
			queryKey: "aws_secret_access_key", header: "X-Aws-Secret-Access-Key", bodyPrefix: "aws_secret_access_key = "}),
		def(secretKind{name: "slack bot token", rule: "slack-bot-token",
			secret: "xoxb-" + randFrom(r, digits, 12) + "-" + randFrom(r, digits, 13) + "-" + randFrom(r, base62, 24)}),
		def(secretKind{name: "private key", rule: "private-key", secret: privateKey()}),
		def(secretKind{name: "jwt", rule: "jwt", secret: jwt()}),
		def(secretKind{name: "stripe key", rule: "stripe-access-token", secret: "sk_live_" + randFrom(r, base62, 32)}),
	}
}

// pctAll percent-encodes every byte, the way an evasive caller could.
func pctAll(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		fmt.Fprintf(&b, "%%%02X", s[i])
	}
	return b.String()
}
