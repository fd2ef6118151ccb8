package egress

import (
	"math"
	"regexp"
	"strings"
	"unicode"

	"github.com/zricethezav/gitleaks/v8/report"
)

// hostPortPath is a URL's authority and path as gitleaks' generic-api-key rule sees
// it: "api.example.test:35973/api/runs" reads as keyword "api", separator ":" and a
// value "35973/api/runs" whose entropy passes for some port numbers and not for
// others — a plain URL refused at random. The rule's match ends at a quote, a
// space, a semicolon or a line's end, which JSON escapes (a URL inside a shell
// command line: run_shell's arguments are scanned when its sandbox has a network).
var hostPortPath = regexp.MustCompile(`(?i)^[a-z0-9.-]*\.[a-z0-9-]+:[0-9]{1,5}(/[\w./%~+-]*)?(["'\x60\s;\\]|\\[nrt])*$`)

// ignoredFinding reports a finding that is a known false positive of a default rule.
func ignoredFinding(f report.Finding) bool {
	if f.RuleID == "generic-api-key" {
		// Beside its own allowlist of letters only ("^[a-zA-Z_.-]+$"): words with
		// short numbers ("min-length-12-with-symbols", "2024-10-01-preview"),
		// unless a password is assigned, which may be words ("Summer-Breeze-42").
		name := nameOf(f.Match)
		return hostPortPath.MatchString(f.Match) || secretFreeName.MatchString(snakeName(name)) ||
			looksLikeWords(f.Secret) && !keyedPasswordName.MatchString(name)
	}
	return ignoredFleetFinding(f)
}

// The fleet's rules whose value is judged here, beyond what a regexp and gitleaks'
// single entropy floor can say.
const (
	keyedSecretRule = "generic-keyed-secret"
	webhookRule     = "generic-webhook-url-token"
)

// ignoredFleetFinding reports a finding of a fleet rule whose value is no plausible
// secret.
func ignoredFleetFinding(f report.Finding) bool {
	switch f.RuleID {
	case keyedSecretRule:
		return !plausibleKeyedSecret(nameOf(f.Match), f.Secret)
	case webhookRule:
		// A token has a digit but for a fraction of a percent of 24 characters or
		// more; a path of words ("hooks/useAuthStateHandler") has none.
		return looksLikeWords(f.Secret) || strings.IndexFunc(f.Secret, unicode.IsDigit) < 0
	}
	return false
}

// nameOf returns the name a keyed rule's match starts with.
func nameOf(match string) string {
	if i := strings.IndexFunc(match, func(r rune) bool { return !isNameChar(r) }); i >= 0 {
		return match[:i]
	}
	return match
}

func isNameChar(r rune) bool {
	return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '_' || r == '.' || r == '-'
}

// secretFreeName matches the names (in snake case, see snakeName) under which a
// key or token is no secret: a public half, a database or cache key, a count of
// model tokens, a pagination cursor. English words that end in "key" are here too;
// no service name is.
var secretFreeName = regexp.MustCompile(`(?:^|[_.-])(?:(?:public|publishable|pub|primary|foreign|sort|partition|range|hash|row|idempotency|cache|dedup|page|next|continuation|cursor|sync|max|min|num|total|count|input|output|prompt|completion|cached|reasoning)[_.-]?(?:key|tokens?)|(?:mon|tur|hoc|don|whis|joc)key)s?$|^authors?$`)

// snakeName lowers a name, with an underscore where camel case starts a word
// ("nextPageToken" is "next_page_token"), so secretFreeName reads words.
func snakeName(name string) string {
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		c := name[i]
		if 'A' <= c && c <= 'Z' {
			if i > 0 && 'a' <= name[i-1] && name[i-1] <= 'z' {
				b.WriteByte('_')
			}
			c += 'a' - 'A'
		}
		b.WriteByte(c)
	}
	return b.String()
}

// callExpr is a value that is code, a call at its start or after ".", "{" or "[":
// "hex.EncodeToString(b)", "[]string{mb.streamKey(id)" (the value may end before
// the call does, at a quote or a comma). A key's alphabet has no "(".
var callExpr = regexp.MustCompile(`(?:^|[.{\[])[A-Za-z_][A-Za-z0-9_]*\(`)

// keyedPasswordName: a password may be short; a key or token is not.
var keyedPasswordName = regexp.MustCompile(`(?i)(?:passw(?:or)?d|pwd|passphrase)s?$`)

// plausibleKeyedSecret tells whether value, assigned to name, can be a secret. It
// was calibrated on random keys of the common formats (hex, base62, base64url; the
// false-negative rate is measured by TestKeyedSecretCalibration) and on ordinary
// configuration and prose (its false positives).
func plausibleKeyedSecret(name, value string) bool {
	if secretFreeName.MatchString(snakeName(name)) {
		return false
	}
	minLen := 16
	if keyedPasswordName.MatchString(name) {
		minLen = 8 // a password may be short
	}
	return plausibleSecretValue(value, minLen)
}

// plausibleSecretValue judges a value by its shape alone. gitleaks' generic rule
// wants an entropy of 3.5, which about a fifth of random 32-hex keys miss (16
// symbols: a random 32-hex key scores 3.3 to 3.9); the floor here depends on the
// length and alphabet instead, and the shapes that carry no secret are told apart by
// their form: words and numbers, URLs and paths, placeholders.
func plausibleSecretValue(v string, minLen int) bool {
	if len(v) < minLen || len(v) > 256 {
		return false
	}
	if strings.Contains(v, "://") || strings.HasPrefix(v, "$") || strings.HasPrefix(v, "%") ||
		strings.HasPrefix(v, "{{") || strings.HasPrefix(v, "@") || strings.HasPrefix(v, "[REDACTED:") {
		return false // a URL (uri-credentials reads its password), a reference, a mask
	}
	if looksLikeWords(v) || callExpr.MatchString(v) {
		return false
	}
	distinct := map[rune]bool{}
	for _, r := range v {
		distinct[r] = true
	}
	if len(distinct) < min(8, len(v)/2) {
		return false // "xxxxxxxx", "abababab", "0000-0000"
	}
	// A random string of n characters over an alphabet of k symbols has an entropy
	// close to log2(min(n, k)); the floor is that less a margin, so a random key
	// passes and a run of a few repeated symbols does not.
	return shannon(v) >= entropyFloor(len(v))
}

// entropyFloor is the Shannon entropy (bits per character) a random value of n
// characters of a 16-symbol alphabet (hex, the poorest common one) exceeds but for
// a fraction of a percent (TestKeyedSecretCalibration).
func entropyFloor(n int) float64 {
	switch {
	case n < 12:
		return 2.2
	case n < 24:
		return 2.6
	case n < 48:
		return 2.9
	}
	return 3.1
}

func shannon(s string) float64 {
	counts := map[rune]int{}
	n := 0
	for _, r := range s {
		counts[r]++
		n++
	}
	h := 0.0
	for _, c := range counts {
		p := float64(c) / float64(n)
		h -= p * math.Log2(p)
	}
	return h
}

// looksLikeWords tells a value made of words, numbers and separators
// ("prod-db-credentials", "2024-01-01-preview", "application/json",
// "credentials_endpoint") from a random one: every part between separators is a
// lower- or upper-case word, a capitalised one, or a number of at most 4 digits.
// A random key of 16 characters or more has a part that mixes letters and digits
// or cases, but for a fraction of a percent.
func looksLikeWords(v string) bool {
	for i := 0; i < len(v); {
		if !isAlnum(v[i]) {
			i++
			continue
		}
		j := i
		for j < len(v) && isAlnum(v[j]) {
			j++
		}
		if !isWordPart(v[i:j]) {
			return false
		}
		i = j
	}
	return true
}

func isAlnum(c byte) bool { return alnumChars[c] }

// alnumChars: looksLikeWords reads every line of the arguments.
var alnumChars = func() (t [256]bool) {
	for c := range t {
		t[c] = 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
	}
	return t
}()

func isWordPart(p string) bool {
	lower, upper, digit := 0, 0, 0
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case 'a' <= c && c <= 'z':
			lower++
		case 'A' <= c && c <= 'Z':
			upper++
		default:
			digit++
		}
	}
	switch {
	case digit == len(p):
		return len(p) <= 4
	case digit > 0:
		// "v2", "sha256", "utf8", "x86": a word with a short number after it.
		return len(p) <= 8 && lower+upper >= 2 && strings.IndexFunc(p, unicode.IsDigit) >= len(p)-digit
	case upper == 0 || lower == 0:
		return len(p) <= 20
	}
	// Capitalised ("Bearer") or camel case ("useAuthStateHandler"): every capital
	// starts a hump of three letters or more, no longer than a word. Random letters
	// rarely are (a random key of 16 or more characters has a digit, two capitals
	// side by side or a short hump but for a fraction of a percent:
	// TestKeyedSecretCalibration).
	return camelWords(p)
}

// camelWords tells whether p is words in camel case: an optional lower-case word,
// then capitalised words of 3 to 20 letters.
func camelWords(p string) bool {
	hump := 0
	for i := 0; i < len(p); i++ {
		c := p[i]
		if 'A' <= c && c <= 'Z' {
			if i > 0 && hump < 3 {
				return false
			}
			hump = 0
		}
		if hump++; hump > 20 {
			return false
		}
	}
	return hump >= 3 || len(p) == hump
}
