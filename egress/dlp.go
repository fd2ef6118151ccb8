package egress

import (
	_ "embed" // the fleet's rules file
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"
	"unicode"

	"github.com/spf13/viper"
	"github.com/zricethezav/gitleaks/v8/config"
	"github.com/zricethezav/gitleaks/v8/detect"
	"github.com/zricethezav/gitleaks/v8/report"
)

// DLP scans outgoing arguments for credential shapes with gitleaks' default rules
// (provider API keys, cloud keys, VCS tokens, private keys, JWTs, …) and the fleet's
// own (dlp_rules.toml).
type DLP struct {
	// plan runs gitleaks with only the rules that can match a text (dlp_plan.go).
	plan *rulePlan
	// decodeDepth is how many decoding passes gitleaks makes over a text.
	decodeDepth int
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
		var fleet config.Config
		if fleet, dlpErr = loadFleetRules(); dlpErr != nil {
			return
		}
		for _, id := range fleet.OrderedRules {
			if _, dup := cfg.Rules[id]; dup {
				dlpErr = fmt.Errorf("dlp_rules.toml: rule %s is also one of gitleaks' defaults", id)
				return
			}
			r := fleet.Rules[id]
			cfg.Rules[id] = r
			cfg.OrderedRules = append(cfg.OrderedRules, id)
			for _, k := range r.Keywords {
				cfg.Keywords[strings.ToLower(k)] = struct{}{}
			}
		}
		// A new detector, so its keyword prefilter knows the added rules.
		dlpDet = detect.NewDetector(cfg)
		dlpDet.MaxDecodeDepth = 2 // look inside base64 / percent-encoded segments
		// The text is the sender's: a "gitleaks:allow" it writes next to a
		// credential must not wave the credential through.
		dlpDet.IgnoreGitleaksAllow = true
	})
	if dlpErr != nil {
		return nil, fmt.Errorf("dlp: rules: %w", dlpErr)
	}
	plan, err := newRulePlan(dlpDet.Config)
	if err != nil {
		return nil, err
	}
	return &DLP{plan: plan, decodeDepth: dlpDet.MaxDecodeDepth}, nil
}

// fleetRules are the fleet's own rules (dlp_rules.toml), in gitleaks' format.
//
//go:embed dlp_rules.toml
var fleetRules string

// loadFleetRules parses the fleet's rules with gitleaks' own translation (regexps,
// allowlists, keywords), through a viper instance of its own: gitleaks' loader
// goes through the global one.
func loadFleetRules() (cfg config.Config, err error) {
	// gitleaks compiles a rule's regexp with MustCompile.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("translate dlp_rules.toml: %v", r)
		}
	}()
	v := viper.New()
	v.SetConfigType("toml")
	if err := v.ReadConfig(strings.NewReader(fleetRules)); err != nil {
		return config.Config{}, fmt.Errorf("read dlp_rules.toml: %w", err)
	}
	var vc config.ViperConfig
	if err := v.Unmarshal(&vc); err != nil {
		return config.Config{}, fmt.Errorf("decode dlp_rules.toml: %w", err)
	}
	if cfg, err = vc.Translate(); err != nil {
		return config.Config{}, fmt.Errorf("translate dlp_rules.toml: %w", err)
	}
	return cfg, nil
}

// Finding is one detected secret: the rule and the secret itself (for redaction only;
// never echo it).
type Finding struct {
	Rule   string
	Secret string
}

// MaxScanBytes bounds the outbound arguments the gate scans: a scan of this much text
// stays well under a second, and a larger request is refused (ErrDLPTooLarge) rather
// than sent unread.
const MaxScanBytes = 1 << 20

// ErrDLPTooLarge refuses outbound arguments too large to be scanned.
var ErrDLPTooLarge = errors.New("dlp: outgoing arguments too large to scan")

// maxNestedJSON is how many times JSON held inside a JSON string is decoded again.
const maxNestedJSON = 1

// ScanArgs scans outbound tool arguments: Scan, after refusing what is too large to
// be read in time.
func (d *DLP) ScanArgs(args []byte) ([]Finding, error) {
	if len(args) > MaxScanBytes {
		return nil, fmt.Errorf("%w (%d bytes, limit %d)", ErrDLPTooLarge, len(args), MaxScanBytes)
	}
	return d.Scan(string(args)), nil
}

// Scan returns the findings in s as written and in every value it carries once
// decoded: each string of a JSON document and each key (escapes decoded), JSON held
// in a string decoded once more, form and URL query values percent-decoded, and any
// percent-encoded text. The decoded values are scanned as lines "name: value", so a
// value keeps the name that gives a generic rule its context and ends where the
// value ends, whatever escaping surrounded it in s.
func (d *DLP) Scan(s string) []Finding {
	return d.scan(s, func(text string) []report.Finding { return d.plan.detect(text, d.decodeDepth) })
}

// scan is Scan with gitleaks' detection over one text given: the plan's in
// production, a detector with every rule in the tests that compare the two.
func (d *DLP) scan(s string, detect func(string) []report.Finding) []Finding {
	seen := map[string]bool{}
	var out []Finding
	add := func(text string) {
		if text == "" {
			return
		}
		for _, f := range detect(text) {
			if ignoredFinding(f) {
				continue
			}
			secret := f.Secret
			if secret == "" {
				secret = f.Match
			}
			secret = unescapeJSON(secret)
			k := f.RuleID + "\x00" + secret
			if seen[k] || secret == "" {
				continue
			}
			seen[k] = true
			out = append(out, Finding{Rule: f.RuleID, Secret: secret})
		}
	}
	add(s)
	values := decodedValues(s)
	add(values)
	// The values one per line when s carried any, s itself when it is plain text.
	if values == "" {
		values = s
	}
	add(transformedText(values))
	out = withoutSecretRefs(s, out)
	sort.Slice(out, func(i, j int) bool { return out[i].Rule < out[j].Rule })
	return out
}

// unescapeJSON turns a secret found in JSON-escaped text into its value, so Redact
// can locate every form of it and one secret is one finding: a rule whose alphabet
// holds the backslash may also have taken the one that escapes the closing quote.
func unescapeJSON(secret string) string {
	secret = strings.TrimRight(secret, `\`)
	for range 2 { // JSON inside a JSON string is escaped twice
		if !strings.Contains(secret, `\`) {
			break
		}
		var u string
		if json.Unmarshal([]byte(`"`+secret+`"`), &u) != nil {
			break
		}
		secret = u
	}
	return secret
}

// decodedValues renders the values s carries, one "name: value" per line; empty when
// s is plain text with nothing to decode (its raw scan already covers it).
func decodedValues(s string) string {
	var w valueWriter
	var v any
	if t := strings.TrimSpace(s); (strings.HasPrefix(t, "{") || strings.HasPrefix(t, "[")) && json.Unmarshal([]byte(t), &v) == nil {
		w.value("", v, 0)
	} else {
		w.decodeString("", s, 0)
	}
	return w.b.String()
}

type valueWriter struct{ b strings.Builder }

func (w *valueWriter) line(name, value string) {
	if name != "" {
		w.b.WriteString(name)
		w.b.WriteString(": ")
	}
	w.b.WriteString(value)
	w.b.WriteByte('\n')
}

func (w *valueWriter) value(name string, v any, nested int) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if str, ok := x.(string); ok {
				w.line(k, str)
				w.decodeString(k, str, nested)
				continue
			}
			w.line("", k)
			w.value(k, x, nested)
		}
	case []any:
		for _, x := range v {
			if str, ok := x.(string); ok {
				w.line(name, str)
				w.decodeString(name, str, nested)
				continue
			}
			w.value(name, x, nested)
		}
	case string:
		w.line(name, v)
		w.decodeString(name, v, nested)
	}
}

// decodeString writes what a string value carries in an encoding: JSON, a URL's
// query, a form body, percent-encoding.
func (w *valueWriter) decodeString(name, s string, nested int) {
	t := strings.TrimSpace(s)
	if nested < maxNestedJSON && (strings.HasPrefix(t, "{") || strings.HasPrefix(t, "[")) {
		var v any
		if json.Unmarshal([]byte(t), &v) == nil {
			w.value(name, v, nested+1)
			return
		}
	}
	if strings.ContainsRune(s, '=') {
		if q, ok := queryOf(t); ok {
			w.pairs(q)
		}
	}
	if strings.ContainsRune(s, '%') {
		if dec := queryUnescapeLenient(s); dec != s {
			w.line(name, dec)
		}
	}
}

// queryOf returns the name=value pairs of s: a URL's query, or s itself when it
// reads as a form body (no whitespace, which a form encodes).
func queryOf(s string) (string, bool) {
	if i := strings.IndexByte(s, '?'); i >= 0 && strings.Contains(s[:i], "://") {
		q := s[i+1:]
		if j := strings.IndexByte(q, '#'); j >= 0 {
			q = q[:j]
		}
		return q, true
	}
	if strings.IndexFunc(s, unicode.IsSpace) >= 0 {
		return "", false
	}
	return s, true
}

func (w *valueWriter) pairs(q string) {
	for _, kv := range strings.FieldsFunc(q, func(r rune) bool { return r == '&' || r == ';' }) {
		k, v, _ := strings.Cut(kv, "=")
		w.line(queryUnescapeLenient(k), queryUnescapeLenient(v))
	}
}

// queryUnescapeLenient is url.QueryUnescape that keeps a malformed escape as it is
// instead of failing: one stray "%" must not hide every encoded secret after it.
func queryUnescapeLenient(s string) string {
	if !strings.ContainsAny(s, "%+") {
		return s
	}
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

// Redact replaces every finding's secret in s by [REDACTED:rule] wherever it can be
// located: as it stands, JSON-escaped (also twice, as JSON inside a JSON string),
// \u-escaped, percent-encoded, or any mix of these, character by character. A
// secret found only inside another encoding (base64, hex) cannot be located in s, so
// then all of s is withheld rather than kept.
func Redact(s string, fs []Finding) string {
	// Longest first: two rules often find the same key, one of them a part of it, and
	// a part masked with the whole counts as located.
	order := append([]Finding(nil), fs...)
	sort.SliceStable(order, func(i, j int) bool { return len(order[i].Secret) > len(order[j].Secret) })
	var masked []string
	for _, f := range order {
		if len(f.Secret) < 4 || maskedWith(f.Secret, masked) {
			continue
		}
		mark := "[REDACTED:" + f.Rule + "]"
		located := false
		if strings.Contains(s, f.Secret) {
			s = strings.ReplaceAll(s, f.Secret, mark)
			located = true
		}
		if strings.ContainsAny(s, `\%+`) {
			if re := encodedForm(f.Secret); re.MatchString(s) {
				s = re.ReplaceAllLiteralString(s, mark)
				located = true
			}
		}
		if !located {
			return "[REDACTED:" + strings.Join(RuleIDs(fs), ",") + "] (withheld: an encoded credential)"
		}
		masked = append(masked, f.Secret)
	}
	return s
}

// maskedWith tells whether secret is (part of) one already masked, also when the
// two are forms of one value: a rule finds a secret as written ("p%23w", "a\\nb")
// and again decoded ("p#w", "a\nb"), and masking the one took the other.
func maskedWith(secret string, masked []string) bool {
	plain := plainForm(secret)
	for _, m := range masked {
		if strings.Contains(m, secret) || strings.Contains(plainForm(m), secret) || strings.Contains(plainForm(m), plain) {
			return true
		}
	}
	return false
}

// plainForm is a secret with its JSON escapes and percent-encoding decoded.
func plainForm(s string) string {
	return queryUnescapeLenient(unescapeJSON(s))
}

// encodedForm matches secret with any of its characters written as itself, a JSON
// escape (with the backslash itself escaped any number of times), a \u escape, or
// percent-encoded (and a space also written as +).
func encodedForm(secret string) *regexp.Regexp {
	var b strings.Builder
	for _, r := range secret {
		lit := string(r)
		b.WriteString("(?:")
		b.WriteString(regexp.QuoteMeta(lit))
		switch r {
		case ' ':
			b.WriteString(`|\+`)
		case '\n':
			b.WriteString(`|\\+n`)
		case '\r':
			b.WriteString(`|\\+r`)
		case '\t':
			b.WriteString(`|\\+t`)
		case '"', '\\', '/':
			b.WriteString(`|\\+`)
			b.WriteString(regexp.QuoteMeta(lit))
		}
		if r < 0x10000 {
			fmt.Fprintf(&b, `|\\+u(?i:%04x)`, r)
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
