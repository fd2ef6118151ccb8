// Package egresstest holds the fixtures that the tests of the egress checks and
// of the gate (security) share: credential-shaped test secrets and the DLP with
// the default rules. Only tests import it (internal/archtest).
package egresstest

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
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/egress"
)

// NewDLP is the DLP with the default rules (the gate's).
func NewDLP(t testing.TB) *egress.DLP {
	t.Helper()
	d, err := egress.NewDLP()
	require.NoError(t, err)
	return d
}

// Alphabets of credentials.
const (
	Base62 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	base32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
	Base64 = Base62 + "+/"
	Digits = "0123456789"
)

func randFrom(r *rand.Rand, alphabet string, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[r.IntN(len(alphabet))]
	}
	return string(b)
}

// Credential is one test secret of a kind of credential.
type Credential struct {
	Name string
	Rule string // gitleaks rule id expected among the findings
	// Secret is the credential itself; QueryKey, Header and BodyPrefix say how it is
	// embedded where a rule needs context (a generic key needs a key-like name).
	Secret     string
	QueryKey   string
	Header     string
	HeaderPre  string
	BodyPrefix string
}

// Credentials returns the test secrets: shaped like real credentials (prefixes,
// lengths, alphabets, entropy) so gitleaks' default rules fire, but generated
// from a fixed seed so every run scans the same text. None of them is a live
// credential.
func Credentials() []Credential {
	r := rand.New(rand.NewPCG(20240611, 7))
	jwt := func() string {
		enc := base64.RawURLEncoding
		h := enc.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`))
		p := enc.EncodeToString([]byte(fmt.Sprintf(`{"sub":"%s","name":"Fleet Agent","iat":1718000000}`, randFrom(r, Digits, 10))))
		mac := hmac.New(sha256.New, []byte(randFrom(r, Base62, 32)))
		mac.Write([]byte(h + "." + p))
		return h + "." + p + "." + enc.EncodeToString(mac.Sum(nil))
	}
	privateKey := func() string {
		seed := []byte(randFrom(r, Base62, ed25519.SeedSize))
		der, err := x509.MarshalPKCS8PrivateKey(ed25519.NewKeyFromSeed(seed))
		if err != nil {
			panic(err)
		}
		return strings.TrimSpace(string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})))
	}
	def := func(k Credential) Credential {
		if k.QueryKey == "" {
			k.QueryKey = "token"
		}
		if k.Header == "" {
			k.Header, k.HeaderPre = "Authorization", "Bearer "
		}
		if k.BodyPrefix == "" {
			k.BodyPrefix = "use this one: "
		}
		return k
	}
	return []Credential{
		def(Credential{Name: "github pat", Rule: "github-pat", Secret: "ghp_" + randFrom(r, Base62, 36)}),
		def(Credential{Name: "aws access key id", Rule: "aws-access-token", Secret: "AKIA" + randFrom(r, base32, 16)}),
		// Starts with "/": gitleaks' generic rule misses that shape; ours does not.
		def(Credential{Name: "aws secret access key", Rule: "aws-secret-access-key", Secret: "/" + randFrom(r, Base64, 39),
			QueryKey: "aws_secret_access_key", Header: "X-Aws-Secret-Access-Key", BodyPrefix: "aws_secret_access_key = "}),
		def(Credential{Name: "slack bot token", Rule: "slack-bot-token",
			Secret: "xoxb-" + randFrom(r, Digits, 12) + "-" + randFrom(r, Digits, 13) + "-" + randFrom(r, Base62, 24)}),
		def(Credential{Name: "private key", Rule: "private-key", Secret: privateKey()}),
		def(Credential{Name: "jwt", Rule: "jwt", Secret: jwt()}),
		def(Credential{Name: "stripe key", Rule: "stripe-access-token", Secret: "sk_live_" + randFrom(r, Base62, 32)}),
	}
}

// PctAll percent-encodes every byte, the way an evasive caller could.
func PctAll(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		fmt.Fprintf(&b, "%%%02X", s[i])
	}
	return b.String()
}
