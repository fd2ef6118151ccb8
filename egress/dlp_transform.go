package egress

import (
	"encoding/base64"
	"encoding/hex"
	"strings"
	"unicode/utf8"
)

// Why this file exists: a credential written backwards, spaced out ("g h p _ a b …",
// "s-k---p-r-o-j", groups of four), or inside a base64url run without padding or a
// hex run that gitleaks' decoder leaves alone (it decodes only text that is all
// printable ASCII: one accented letter in a .env hides every key in it) is still
// the credential. transformedText renders those forms back, one per line, and Scan
// runs the same rules over them. The cost is bounded by where a transform can
// matter: a line is reversed, regrouped or decoded only when it has a part that is
// no word (random text of 16 characters has one, prose and code mostly do not), and
// only runs of 16 or more characters are; a line spelt out one character at a time
// is found in one pass. Ordinary prose costs a pass or two over the text.

const (
	// minTransformRun: no credential shape the rules know is shorter.
	minTransformRun = 16
	// maxReversedLine: a longer line is reversed run by run (each run with the
	// text just after it, where a reversed name stands), not whole.
	maxReversedLine = 1024
	// nameContext is how much of a line around a joined or reversed run is kept,
	// so a keyed rule still sees the name the value is assigned to.
	nameContext = 64
)

// transformedText returns the reversed, joined and decoded forms of src's lines
// that can hold a credential, one per line; empty when there are none.
func transformedText(src string) string {
	var b strings.Builder
	for line := range strings.Lines(src) {
		line = strings.TrimRight(line, "\r\n")
		if len(line) < minTransformRun {
			continue
		}
		everyOther(&b, line)
		// A reversed, grouped or encoded credential has a part that is no word
		// (looksLikeWords): random text of 16 characters or more has one but for a
		// fraction of a percent. Prose and code mostly have none.
		if looksLikeWords(line) {
			continue
		}
		// Credential characters are visible ones: no run of the one, no run of the
		// other.
		if longestRun(line, &visibleChars) >= minTransformRun {
			reversed(&b, line)
			if longestRun(line, &credChars) >= minTransformRun {
				decodedRuns(&b, line, 0)
			}
		}
		joined(&b, line)
	}
	return b.String()
}

// Byte classes as tables: the transforms look at every byte of the arguments.
// visibleChars are those a password may hold (printable ASCII but space, quotes and
// the backslash).
var credChars, b64Chars, visibleChars [256]bool

func init() {
	for c := 0; c < 256; c++ {
		b := byte(c)
		b64Chars[c] = alnumChars[c] || b == '-' || b == '_' || b == '+' || b == '/'
		credChars[c] = isSegmentChar(b) || b == '.' || b == '~' || b == '$'
		visibleChars[c] = b > ' ' && b < 0x7f && b != '"' && b != '\'' && b != '\\'
	}
}

// reversed writes line backwards when it has a run of visible characters long
// enough to hold a credential and not spelt in words.
func reversed(b *strings.Builder, line string) {
	if len(line) <= maxReversedLine {
		found := false
		forRuns(line, &visibleChars, func(from, to int) { found = found || !looksLikeWords(line[from:to]) })
		if found {
			b.WriteString(reverse(line))
			b.WriteByte('\n')
		}
		return
	}
	// A long line (minified text, a blob): each such run with what follows it (a
	// name assigned to a reversed value stands after it).
	forRuns(line, &visibleChars, func(from, to int) {
		if !looksLikeWords(line[from:to]) {
			b.WriteString(reverse(line[from:min(len(line), to+nameContext)]))
			b.WriteByte('\n')
		}
	})
}

// reverse reverses s by characters, so text outside ASCII stays valid UTF-8.
func reverse(s string) string {
	out := make([]byte, 0, len(s))
	for i := len(s); i > 0; {
		_, size := utf8.DecodeLastRuneInString(s[:i])
		out = append(out, s[i-size:i]...)
		i -= size
	}
	return string(out)
}

func longestRun(s string, in *[256]bool) int {
	best, run := 0, 0
	for i := 0; i < len(s); i++ {
		if in[s[i]] {
			run++
			best = max(best, run)
		} else {
			run = 0
		}
	}
	return best
}

// forRuns calls fn on each run [from, to) of s of at least minTransformRun bytes in
// the set.
func forRuns(s string, in *[256]bool, fn func(from, to int)) {
	for i := 0; i < len(s); {
		if !in[s[i]] {
			i++
			continue
		}
		j := i + 1
		for j < len(s) && in[s[j]] {
			j++
		}
		if j-i >= minTransformRun {
			fn(i, j)
		}
		i = j
	}
}

// joined writes each spaced-out run of line with its separators removed: groups of
// equal length (the last one possibly shorter) each followed by one space, dash or
// dot, joining to minTransformRun characters or more. Groups must be mostly random
// (not words), or every sentence of equal-length words would join. Single
// characters are everyOther's.
func joined(b *strings.Builder, line string) {
	for _, sep := range [...]byte{' ', '-', '.'} {
		if strings.Count(line, string(sep)) < 3 {
			continue
		}
		// A run: fields line[from:off) of the same width. Only a run long enough is
		// checked further, so a line of prose costs its separators' offsets.
		from, width, count := 0, 0, 0
		flush := func(end, lastWidth int) {
			n := width*count + lastWidth
			run := line[from:end]
			if width > 1 && count+min(lastWidth, 1) >= 4 && n >= minTransformRun &&
				allCredOrSep(run, sep) && mostlyRandom(run, sep) {
				b.WriteString(line[max(0, from-nameContext):from])
				for i := 0; i < len(run); i++ {
					if run[i] != sep {
						b.WriteByte(run[i])
					}
				}
				b.WriteByte('\n')
			}
		}
		for off := 0; off <= len(line); {
			end := strings.IndexByte(line[off:], sep)
			if end < 0 {
				end = len(line)
			} else {
				end += off
			}
			w := end - off
			ok := w > 1 && w <= 8
			switch {
			case ok && count > 0 && w == width:
				count++
			case w > 0 && count > 0 && w < width:
				// A shorter last group ends the run.
				flush(end, w)
				count = 0
			default:
				if count > 0 {
					flush(off-1, 0)
				}
				count = 0
				if ok {
					from, width, count = off, w, 1
				}
			}
			off = end + 1
		}
		if count > 0 {
			flush(len(line), 0)
		}
	}
}

func allCredOrSep(s string, sep byte) bool {
	for i := 0; i < len(s); i++ {
		if s[i] != sep && !credChars[s[i]] {
			return false
		}
	}
	return true
}

// mostlyRandom tells whether at least half of the groups of a spaced run are no
// word.
func mostlyRandom(run string, sep byte) bool {
	random := 0
	for g := range strings.SplitSeq(run, string(sep)) {
		if looksLikeWords(g) {
			random--
		} else {
			random++
		}
	}
	return random >= 0
}

// maxDecodeNesting bounds base64 inside base64 (inside hex).
const maxDecodeNesting = 2

// decodedRuns writes what each base64 (standard or URL alphabet, padded or not) or
// hex run of line decodes to, when that is text: valid UTF-8 with no control
// characters but tab and line ends.
func decodedRuns(b *strings.Builder, line string, depth int) {
	forRuns(line, &b64Chars, func(from, to int) {
		run := line[from:to] // padding, if any, follows the run: it is optional
		var dec []byte
		var err error
		switch {
		case len(run)%2 == 0 && len(run) >= 32 && isAllHex(run):
			dec, err = hex.DecodeString(run)
		case strings.ContainsAny(run, "+/"):
			dec, err = base64.RawStdEncoding.DecodeString(run)
		default:
			dec, err = base64.RawURLEncoding.DecodeString(run)
		}
		if err != nil || !isText(dec) {
			return
		}
		b.Write(dec)
		b.WriteByte('\n')
		if depth+1 < maxDecodeNesting {
			for l := range strings.Lines(string(dec)) {
				decodedRuns(b, strings.TrimRight(l, "\r\n"), depth+1)
			}
		}
	})
}

func isAllHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isHex(s[i]) {
			return false
		}
	}
	return true
}

// isText tells decoded bytes that are text from binary (an image, a hash).
func isText(p []byte) bool {
	if !utf8.Valid(p) {
		return false
	}
	for _, c := range p {
		if c < 0x20 && c != '\t' && c != '\n' && c != '\r' || c == 0x7f {
			return false
		}
	}
	return true
}

// everyOther writes each run of line in which every other byte is one separator
// (space, dash or dot) with the separators removed: a credential spelt out one
// character at a time. The characters between may be anything printable, the
// separator itself included ("s-k---p-r-o-j" is "sk-proj").
func everyOther(b *strings.Builder, line string) {
	for i := 0; i+5 < len(line); i++ {
		// Three separators at every other byte start a run; most lines have none.
		sep := line[i+1]
		if sep != ' ' && sep != '-' && sep != '.' || line[i+3] != sep || line[i+5] != sep || !isPrintable(line[i]) {
			continue
		}
		j := i
		for j+1 < len(line) && line[j+1] == sep && isPrintable(line[j]) {
			j += 2
		}
		// line[i], line[i+2], …, line[j-2] are followed by sep; line[j] ends it.
		n := (j - i) / 2
		if j < len(line) && isPrintable(line[j]) {
			n++
		}
		if n < minTransformRun {
			continue
		}
		b.WriteString(line[max(0, i-nameContext):i])
		for k := i; k < i+2*n-1; k += 2 {
			b.WriteByte(line[k])
		}
		b.WriteByte('\n')
		i += 2*n - 1
	}
}

func isPrintable(c byte) bool { return c > ' ' && c < 0x7f }
