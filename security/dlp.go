package security

import (
	"fmt"
	"net/url"
	"sort"
	"strings"
	"sync"

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
		dlpDet, dlpErr = detect.NewDetectorDefaultConfig()
		if dlpErr == nil {
			dlpDet.MaxDecodeDepth = 2 // look inside base64 / percent-encoded segments
		}
	})
	if dlpErr != nil {
		return nil, fmt.Errorf("dlp: gitleaks config: %w", dlpErr)
	}
	return &DLP{det: dlpDet}, nil
}

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
		if dec, err := url.QueryUnescape(s); err == nil && dec != s {
			add(dec)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Rule < out[j].Rule })
	return out
}

// Redact replaces every finding's secret in s by [REDACTED:rule].
func Redact(s string, fs []Finding) string {
	for _, f := range fs {
		if len(f.Secret) >= 4 {
			s = strings.ReplaceAll(s, f.Secret, "[REDACTED:"+f.Rule+"]")
		}
	}
	return s
}

// Rules lists the rule ids of findings, deduplicated, for messages and metrics.
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
