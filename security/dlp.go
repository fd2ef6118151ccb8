package security

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/zricethezav/gitleaks/v8/config"
	"github.com/zricethezav/gitleaks/v8/detect"
)

// DLP scans outgoing arguments for credential shapes with gitleaks' default rules
// (provider API keys, cloud keys, VCS tokens, private keys, JWTs, …).
type DLP struct {
	det *detect.Detector
}

var (
	dlpOnce sync.Once
	dlpDet  *detect.Detector
	dlpErr  error
)

// NewDLP loads gitleaks' default configuration once per process (it goes through a
// global viper instance, so it must not run concurrently).
func NewDLP() (*DLP, error) {
	dlpOnce.Do(func() {
		var def *detect.Detector
		def, dlpErr = detect.NewDetectorDefaultConfig()
		if dlpErr != nil {
			return
		}
		cfg := def.Config
		for _, r := range extraRules {
			cfg.Rules[r.RuleID] = r
			cfg.OrderedRules = append(cfg.OrderedRules, r.RuleID)
			for _, k := range r.Keywords {
				cfg.Keywords[strings.ToLower(k)] = struct{}{}
			}
		}
		// A new detector, so its keyword prefilter knows the added rules.
		dlpDet = detect.NewDetector(cfg)
		dlpDet.MaxDecodeDepth = 2 // look inside base64 / percent-encoded segments
	})
	if dlpErr != nil {
		return nil, fmt.Errorf("dlp: gitleaks config: %w", dlpErr)
	}
	return &DLP{det: dlpDet}, nil
}

// extraRules close gaps in gitleaks' defaults. An AWS secret access key is 40
// characters of base64 with no prefix of its own: gitleaks only finds the key id
// (AKIA…), and its generic rule misses secrets that start with "/" or "+". Matched
// here by the names it travels under.
var extraRules = []config.Rule{{
	RuleID:      "aws-secret-access-key",
	Description: "AWS secret access key, by the name it is assigned to",
	Regex: regexp.MustCompile(`(?i)(?:aws[_-]?secret[_-]?(?:access[_-]?)?key|secret[_-]?access[_-]?key|aws[_-]?secret)(?:["'\s]*[:=]+[>\s]*|["'\s]+)["']?` +
		`([A-Za-z0-9/+]{40})(?:[^A-Za-z0-9/+=]|$)`),
	SecretGroup: 1,
	Entropy:     3.5,
	Keywords:    []string{"aws_secret", "awssecret", "aws-secret", "secretaccesskey", "secret_access_key", "secret-access-key"},
}}

// Finding is one detected secret: the rule and the secret itself (for redaction only;
// never echo it).
type Finding struct {
	Rule   string
	Secret string
}

// Scan returns the findings in s (also its URL-decoded form).
func (d *DLP) Scan(s string) []Finding {
	seen := map[string]bool{}
	var out []Finding
	add := func(text string) {
		for _, f := range d.det.DetectString(text) {
			secret := f.Secret
			if secret == "" {
				secret = f.Match
			}
			k := f.RuleID + "\x00" + secret
			if seen[k] || secret == "" {
				continue
			}
			seen[k] = true
			out = append(out, Finding{Rule: f.RuleID, Secret: secret})
		}
	}
	add(s)
	if strings.Contains(s, "%") {
		if dec := queryUnescapeLenient(s); dec != s {
			add(dec)
		}
	}
	out = withoutSecretRefs(s, out)
	sort.Slice(out, func(i, j int) bool { return out[i].Rule < out[j].Rule })
	return out
}

// queryUnescapeLenient is url.QueryUnescape that keeps a malformed escape as it is
// instead of failing: one stray "%" must not hide every encoded secret after it.
func queryUnescapeLenient(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '+':
			b.WriteByte(' ')
		case c == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]):
			b.WriteByte(unhex(s[i+1])<<4 | unhex(s[i+2]))
			i += 2
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}

// Redact replaces every finding's secret in s by [REDACTED:rule]: the secret as it
// stands, or percent-encoded in whole or in part (the forms Scan and gitleaks
// decode). A secret found only inside another encoding (base64, hex, \u escapes)
// cannot be located in s, so then all of s is withheld rather than kept.
func Redact(s string, fs []Finding) string {
	for _, f := range fs {
		if len(f.Secret) < 4 {
			continue
		}
		mark := "[REDACTED:" + f.Rule + "]"
		if strings.Contains(s, f.Secret) {
			s = strings.ReplaceAll(s, f.Secret, mark)
			continue
		}
		if re := percentEncodedForm(f.Secret); re.MatchString(s) {
			s = re.ReplaceAllLiteralString(s, mark)
			continue
		}
		return "[REDACTED:" + strings.Join(RuleIDs(fs), ",") + "] (withheld: an encoded credential)"
	}
	return s
}

// percentEncodedForm matches secret with any of its characters percent-encoded
// (and a space also written as +).
func percentEncodedForm(secret string) *regexp.Regexp {
	var b strings.Builder
	for _, r := range secret {
		lit := string(r)
		b.WriteString("(?:")
		b.WriteString(regexp.QuoteMeta(lit))
		if r == ' ' {
			b.WriteString(`|\+`)
		}
		b.WriteString("|")
		for i := 0; i < len(lit); i++ {
			fmt.Fprintf(&b, "%%(?i:%02x)", lit[i])
		}
		b.WriteString(")")
	}
	return regexp.MustCompile(b.String())
}

// RuleIDs lists the rule ids of findings, deduplicated, for messages and metrics.
func RuleIDs(fs []Finding) []string {
	seen := map[string]bool{}
	var out []string
	for _, f := range fs {
		if !seen[f.Rule] {
			seen[f.Rule] = true
			out = append(out, f.Rule)
		}
	}
	return out
}
