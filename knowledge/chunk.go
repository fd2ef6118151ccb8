package knowledge

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Chunk is one retrievable piece of a document: the text under one heading path,
// at most the chunk size.
type Chunk struct {
	// Heading is the heading path, "Setup > Database" (empty before the first
	// heading).
	Heading string
	Body    string
}

// SplitMarkdown cuts a Markdown body into chunks of at most size characters
// (runes): a new chunk at every heading (outside fenced code), paragraphs packed
// together while they fit, a paragraph over size cut at sentence ends, then at
// spaces, then anywhere. Headings are not repeated in the body; they ride in
// Chunk.Heading, which the index weighs like the title.
func SplitMarkdown(text string, size int) []Chunk {
	if size < 1 {
		size = DefaultChunkSize
	}
	text = strings.ReplaceAll(strings.ReplaceAll(text, "\r\n", "\n"), "\r", "\n")
	var (
		out     []Chunk
		stack   [6]string
		heading string
		blocks  []string
		cur     []string // lines of the block being read
		fence   string   // the open fence marker, "" outside code
	)
	endBlock := func() {
		if b := strings.TrimSpace(strings.Join(cur, "\n")); b != "" {
			blocks = append(blocks, b)
		}
		cur = cur[:0]
	}
	endSection := func() {
		endBlock()
		out = append(out, pack(heading, blocks, size)...)
		blocks = blocks[:0]
	}
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimLeft(line, " ")
		if fence != "" {
			cur = append(cur, line)
			if strings.HasPrefix(trimmed, fence) && strings.TrimSpace(strings.TrimLeft(trimmed, fence[:1])) == "" {
				fence = ""
				endBlock()
			}
			continue
		}
		if f := fenceOf(trimmed); f != "" {
			endBlock()
			fence = f
			cur = append(cur, line)
			continue
		}
		if level, title, ok := headingOf(trimmed); ok {
			endSection()
			stack[level-1] = title
			for i := level; i < len(stack); i++ {
				stack[i] = ""
			}
			var parts []string
			for _, h := range stack {
				if h != "" {
					parts = append(parts, h)
				}
			}
			heading = strings.Join(parts, " > ")
			continue
		}
		if strings.TrimSpace(line) == "" {
			endBlock()
			continue
		}
		cur = append(cur, line)
	}
	endSection()
	return out
}

// fenceOf returns the fence marker a line opens (``` or ~~~, 3 or more).
func fenceOf(trimmed string) string {
	for _, c := range []string{"```", "~~~"} {
		if strings.HasPrefix(trimmed, c) {
			n := len(trimmed) - len(strings.TrimLeft(trimmed, c[:1]))
			return strings.Repeat(c[:1], n)
		}
	}
	return ""
}

// headingOf parses an ATX heading ("## Title ##").
func headingOf(trimmed string) (int, string, bool) {
	n := len(trimmed) - len(strings.TrimLeft(trimmed, "#"))
	if n < 1 || n > 6 || (len(trimmed) > n && trimmed[n] != ' ' && trimmed[n] != '\t') {
		return 0, "", false
	}
	title := strings.TrimSpace(strings.TrimRight(strings.TrimSpace(trimmed[n:]), "#"))
	if title == "" {
		return 0, "", false
	}
	return n, clip(title, 200), true
}

// pack joins blocks into chunks of at most size runes.
func pack(heading string, blocks []string, size int) []Chunk {
	var (
		out []Chunk
		buf strings.Builder
		n   int
	)
	flush := func() {
		if buf.Len() > 0 {
			out = append(out, Chunk{Heading: heading, Body: buf.String()})
			buf.Reset()
			n = 0
		}
	}
	for _, b := range blocks {
		for _, piece := range cut(b, size) {
			pn := utf8.RuneCountInString(piece)
			if n > 0 && n+2+pn > size {
				flush()
			}
			if n > 0 {
				buf.WriteString("\n\n")
				n += 2
			}
			buf.WriteString(piece)
			n += pn
		}
	}
	flush()
	return out
}

// cut splits one block into pieces of at most size runes, preferring sentence
// ends, then spaces.
func cut(b string, size int) []string {
	var out []string
	for utf8.RuneCountInString(b) > size {
		limit := runeOffset(b, size)
		at := -1
		for _, sep := range []string{". ", ".\n", "? ", "! ", "\n", " "} {
			if i := strings.LastIndex(b[:limit], sep); i > limit/3 {
				at = i + len(sep)
				break
			}
		}
		if at <= 0 || at > limit {
			at = limit
		}
		if p := strings.TrimSpace(b[:at]); p != "" {
			out = append(out, p)
		}
		b = strings.TrimSpace(b[at:])
	}
	if b != "" {
		out = append(out, b)
	}
	return out
}

// runeOffset is the byte offset of rune n of s (len(s) when s is shorter).
func runeOffset(s string, n int) int {
	for i := range s {
		if n == 0 {
			return i
		}
		n--
	}
	return len(s)
}

// clip shortens s to at most n runes.
func clip(s string, n int) string { return s[:runeOffset(s, n)] }

// MaxQueryTerms caps the words of a query that are searched for.
const MaxQueryTerms = 24

// Terms returns a query's distinct words, lower-cased, in order: runs of
// letters and digits (up to 64 runes each), at most MaxQueryTerms. They are
// what is looked up in the vocabulary and parsed in each language.
func Terms(text string) []string {
	seen := map[string]bool{}
	var out []string
	for _, f := range strings.FieldsFunc(strings.ToLower(text), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	}) {
		f = clip(f, 64)
		if seen[f] {
			continue
		}
		seen[f] = true
		out = append(out, f)
		if len(out) == MaxQueryTerms {
			break
		}
	}
	return out
}

// foldLetters spells the Latin letters that do not decompose into a base letter
// and a mark.
var foldLetters = strings.NewReplacer("ß", "ss", "ẞ", "SS", "æ", "ae", "Æ", "AE", "œ", "oe", "Œ", "OE",
	"ø", "o", "Ø", "O", "đ", "d", "Đ", "D", "ł", "l", "Ł", "L", "þ", "th", "Þ", "TH", "ı", "i")

// MaxSlugLen bounds a slug in bytes.
const MaxSlugLen = 60

// Slug makes a file name stem from a title: accents folded (Über → uber), ASCII
// letters and digits kept, everything else one hyphen, at most MaxSlugLen bytes,
// cut at a hyphen where possible; "note" when nothing is left. It never starts
// with a dot or a hyphen, so it can never name a dot file or climb.
func Slug(title string) string {
	var b strings.Builder
	dash := false
	for _, r := range norm.NFKD.String(foldLetters.Replace(title)) {
		switch {
		case unicode.Is(unicode.Mn, r):
			continue
		case r < utf8.RuneSelf && (unicode.IsLetter(r) || unicode.IsDigit(r)):
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			dash = false
			b.WriteRune(unicode.ToLower(r))
		default:
			dash = true
		}
	}
	s := b.String()
	if len(s) > MaxSlugLen {
		s = s[:MaxSlugLen]
		if i := strings.LastIndexByte(s, '-'); i > MaxSlugLen/2 {
			s = s[:i]
		}
		s = strings.TrimRight(s, "-")
	}
	if s == "" {
		return "note"
	}
	return s
}
