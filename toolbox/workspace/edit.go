package workspace

import (
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Sentinel errors of edit_file; each comes with a message that tells the agent
// how to correct the call without re-reading the file.
var (
	// ErrNoMatch is a search text found nowhere, not even ignoring whitespace.
	ErrNoMatch = errors.New("search text not found")
	// ErrAmbiguous is a whitespace-tolerant match that lands in several places.
	ErrAmbiguous = errors.New("search text is ambiguous")
	// ErrOutweigh refuses a multi-match replace whose insertions outweigh the file.
	ErrOutweigh = errors.New("multi-match replace refused")
	// ErrBadRange is a start_line/end_line outside the file or reversed.
	ErrBadRange = errors.New("bad line range")
	// ErrNeedSearch is an empty search on an existing file without a range.
	ErrNeedSearch = errors.New("search is empty")
	// ErrNoChange is a replace identical to the search.
	ErrNoChange = errors.New("nothing to change")
)

// edit is one edit_file request, already validated for its path.
type edit struct {
	Path      string
	Search    string
	Replace   string
	StartLine int
	EndLine   int
}

// applyEdit computes the new content of a file. exists tells a missing file from
// an empty one. The rules, in order:
//   - an empty search on a missing (or empty) file creates it with replace;
//   - a start_line/end_line range with an empty search replaces those lines; a
//     range from line 1 to the end (end_line past the end is clamped) is the
//     whole-file rewrite;
//   - otherwise search is looked up (within the range, when one is given): an
//     exact match first; several exact matches are all replaced unless the
//     insertions would outweigh the file's text; with no exact match, a
//     whitespace-tolerant match is used when it lands in exactly one place;
//   - a miss reports the nearest line, and names the whole-file form when the
//     search was most of the file.
func applyEdit(content string, exists bool, e edit) (string, string, error) {
	if e.StartLine < 0 || e.EndLine < 0 {
		return "", "", fmt.Errorf("%w: line numbers start at 1", ErrBadRange)
	}
	ranged := e.StartLine > 0 || e.EndLine > 0
	if !exists {
		if e.Search != "" {
			return "", "", fmt.Errorf("%s does not exist: %w (to create it, call edit_file with an empty search and the content as replace, or use write_file)", e.Path, fs.ErrNotExist)
		}
		if e.StartLine > 1 {
			return "", "", fmt.Errorf("%w: %s does not exist, so there is no line %d (omit the range to create it)", ErrBadRange, e.Path, e.StartLine)
		}
		return e.Replace, fmt.Sprintf("created %s (%s)", e.Path, size(e.Replace)), nil
	}
	ls := splitLines(content)
	if !ranged {
		if e.Search == "" {
			if content == "" {
				return e.Replace, fmt.Sprintf("wrote the empty file %s (%s)", e.Path, size(e.Replace)), nil
			}
			return "", "", fmt.Errorf("%w but %s exists (%d lines): give the text to replace as search, or a start_line/end_line range to replace lines (start_line 1 with end_line %d rewrites the whole file)",
				ErrNeedSearch, e.Path, ls.n(), ls.n())
		}
		return replaceIn(content, ls, 0, len(content), e)
	}

	n := ls.n()
	start, end := e.StartLine, e.EndLine
	switch {
	case start == 0:
		start = 1
	case end == 0:
		end = start
	}
	if end > n {
		end = n // past the end: clamped to the last line
	}
	if start > n+1 {
		return "", "", fmt.Errorf("%w: start_line %d is past the end of %s (%d lines)", ErrBadRange, start, e.Path, n)
	}
	if end < start && start <= n {
		return "", "", fmt.Errorf("%w: end_line %d is before start_line %d", ErrBadRange, e.EndLine, start)
	}
	from, to := ls.span(start, end)
	if e.Search != "" {
		if start > n {
			return "", "", fmt.Errorf("%w: start_line %d is past the end of %s (%d lines), there is nothing to search", ErrBadRange, start, e.Path, n)
		}
		return replaceIn(content, ls, from, to, e)
	}
	if start == 1 && end >= n {
		// The whole-file rewrite: no shrink guard, the agent said "all of it".
		return e.Replace, fmt.Sprintf("rewrote all of %s (%d lines → %d lines)", e.Path, n, splitLines(e.Replace).n()), nil
	}
	repl := matchNewlines(e.Replace, content)
	if start == n+1 {
		// Appending after the last line.
		if content != "" && !strings.HasSuffix(content, "\n") {
			repl = lineBreak(content) + repl
		} else if repl != "" && !strings.HasSuffix(repl, "\n") {
			repl += lineBreak(content)
		}
		return content + repl, fmt.Sprintf("appended %d lines after line %d of %s", splitLines(e.Replace).n(), n, e.Path), nil
	}
	if repl != "" && !strings.HasSuffix(repl, "\n") && strings.HasSuffix(content[from:to], "\n") {
		repl += lineBreak(content)
	}
	return content[:from] + repl + content[to:],
		fmt.Sprintf("replaced lines %d-%d of %s with %d lines", start, end, e.Path, splitLines(e.Replace).n()), nil
}

// replaceIn looks search up in content[from:to].
func replaceIn(content string, ls lines, from, to int, e edit) (string, string, error) {
	region := content[from:to]
	if e.Search == e.Replace {
		return "", "", fmt.Errorf("%w: search and replace are identical", ErrNoChange)
	}
	repl := matchNewlines(e.Replace, content)
	hits := indexAll(region, e.Search)
	switch {
	case len(hits) == 1:
		at := from + hits[0]
		return content[:at] + repl + content[at+len(e.Search):],
			fmt.Sprintf("replaced 1 exact match at line %d of %s", ls.lineOf(at), e.Path), nil
	case len(hits) > 1:
		lines := make([]int, len(hits))
		for i, h := range hits {
			lines[i] = ls.lineOf(from + h)
		}
		if inserted := len(hits) * len(repl); inserted > len(content) {
			return "", "", fmt.Errorf("%w: search matches %d times (lines %s); replacing every match would insert %d bytes into a %d-byte file, so it is refused rather than repeated: make search unique by including neighbouring lines, or confine it with start_line/end_line",
				ErrOutweigh, len(hits), joinInts(lines), inserted, len(content))
		}
		var b strings.Builder
		b.WriteString(content[:from])
		prev := 0
		for _, h := range hits {
			b.WriteString(region[prev:h])
			b.WriteString(repl)
			prev = h + len(e.Search)
		}
		b.WriteString(region[prev:])
		b.WriteString(content[to:])
		return b.String(), fmt.Sprintf("replaced %d exact matches (lines %s) of %s", len(hits), joinInts(lines), e.Path), nil
	}

	fuzzy := fuzzyFind(region, e.Search)
	switch len(fuzzy) {
	case 0:
		return "", "", miss(content, ls, from, to, e)
	case 1:
	default:
		lines := make([]int, len(fuzzy))
		for i, m := range fuzzy {
			lines[i] = ls.lineOf(from + m[0])
		}
		return "", "", fmt.Errorf("%w: search has no exact match in %s, and ignoring whitespace it matches %d places (lines %s): copy the text exactly, or add neighbouring lines to pick one",
			ErrAmbiguous, e.Path, len(fuzzy), joinInts(lines))
	}
	s, end := from+fuzzy[0][0], from+fuzzy[0][1]
	lineStart := strings.LastIndexByte(content[:s], '\n') + 1
	lineEnd := len(content)
	if i := strings.IndexByte(content[end:], '\n'); i >= 0 {
		lineEnd = end + i
	}
	if isBlank(content[lineStart:s]) && isBlank(content[end:lineEnd]) {
		// Whole lines: replace them whole, moving the replacement's indentation by
		// the difference between the search's and the file's.
		fileIndent := content[lineStart:s]
		repl = reindent(trimLineBreak(repl), leadingIndent(e.Search), fileIndent)
		if lineEnd > end && content[lineEnd-1] == '\r' {
			lineEnd-- // the line break stays the file's own (CRLF)
		}
		if repl == "" {
			// Deleting lines: take the line break along.
			if strings.HasPrefix(content[lineEnd:], "\r\n") {
				lineEnd += 2
			} else if lineEnd < len(content) {
				lineEnd++
			}
		}
		return content[:lineStart] + repl + content[lineEnd:],
			fmt.Sprintf("replaced 1 whitespace-tolerant match at line %d of %s (no exact match; indentation kept)", ls.lineOf(s), e.Path), nil
	}
	return content[:s] + repl + content[end:],
		fmt.Sprintf("replaced 1 whitespace-tolerant match at line %d of %s (no exact match)", ls.lineOf(s), e.Path), nil
}

// miss explains a search that matched nothing.
func miss(content string, ls lines, from, to int, e edit) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%v in %s", ErrNoMatch, e.Path)
	first, last := ls.lineOf(from), ls.lineOf(max(from, to-1))
	if from > 0 || to < len(content) {
		fmt.Fprintf(&b, " (lines %d-%d)", first, last)
	}
	if ln, text, ok := nearestLine(content, ls, first, last, e.Search); ok {
		fmt.Fprintf(&b, "; the nearest line is %d: %q", ln, clip(text, 200))
	}
	if s := strings.TrimSpace(e.Search); s != "" && 2*len(s) >= len(strings.TrimSpace(content)) {
		fmt.Fprintf(&b, "; the search is most of the file: to replace the whole file, call edit_file with an empty search, start_line 1, end_line %d and the new content as replace", ls.n())
	}
	return errWithText{ErrNoMatch, b.String()}
}

// errWithText is a sentinel with a custom message.
type errWithText struct {
	err  error
	text string
}

func (e errWithText) Error() string { return e.text }
func (e errWithText) Unwrap() error { return e.err }

// nearestLine finds the line in [first, last] most like the search's first
// non-blank line (character-bigram similarity, whitespace ignored).
func nearestLine(content string, ls lines, first, last int, search string) (int, string, bool) {
	probe := ""
	for _, l := range strings.Split(search, "\n") {
		if strings.TrimSpace(l) != "" {
			probe = l
			break
		}
	}
	pb := bigrams(collapse(clip(probe, 1000)))
	if len(pb) == 0 {
		return 0, "", false
	}
	best, bestScore, bestText := 0, 0.0, ""
	for ln := first; ln <= last && ln <= ls.n(); ln++ {
		text := strings.TrimRight(ls.line(content, ln), "\r\n")
		score := dice(pb, bigrams(collapse(clip(text, 1000))))
		if score > bestScore {
			best, bestScore, bestText = ln, score, text
		}
	}
	return best, bestText, best > 0
}

func bigrams(s string) map[string]int {
	s = strings.ToLower(s)
	out := map[string]int{}
	r := []rune(s)
	if len(r) == 1 {
		out[s]++
	}
	for i := 0; i+1 < len(r); i++ {
		out[string(r[i:i+2])]++
	}
	return out
}

func dice(a, b map[string]int) float64 {
	na, nb, common := 0, 0, 0
	for k, v := range a {
		na += v
		common += min(v, b[k])
	}
	for _, v := range b {
		nb += v
	}
	if na+nb == 0 {
		return 0
	}
	return 2 * float64(common) / float64(na+nb)
}

// fuzzyFind returns the [start, end) byte ranges of region where search matches
// when every run of whitespace counts as one space and the search's own leading
// and trailing whitespace is ignored.
func fuzzyFind(region, search string) [][2]int {
	ns := collapse(strings.TrimSpace(search))
	if ns == "" {
		return nil
	}
	norm, idx := normalize(region)
	var out [][2]int
	for off := 0; ; {
		i := strings.Index(norm[off:], ns)
		if i < 0 {
			return out
		}
		p := off + i
		last := p + len(ns) - 1
		out = append(out, [2]int{idx[p], idx[last] + 1})
		off = p + len(ns)
	}
}

// normalize collapses each whitespace run of s to one space and maps every byte of
// the result back to its offset in s.
func normalize(s string) (string, []int) {
	var b strings.Builder
	idx := make([]int, 0, len(s))
	space := false
	for i := 0; i < len(s); i++ {
		if isSpace(s[i]) {
			if !space {
				b.WriteByte(' ')
				idx = append(idx, i)
				space = true
			}
			continue
		}
		space = false
		b.WriteByte(s[i])
		idx = append(idx, i)
	}
	return b.String(), idx
}

func collapse(s string) string {
	n, _ := normalize(s)
	return n
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

func isBlank(s string) bool {
	return strings.TrimFunc(s, unicode.IsSpace) == ""
}

// leadingIndent is the indentation of the first non-blank line of s.
func leadingIndent(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) == "" {
			continue
		}
		return l[:len(l)-len(strings.TrimLeft(l, " \t"))]
	}
	return ""
}

// reindent moves every non-blank line of s that starts with from to start with to.
func reindent(s, from, to string) string {
	if from == to {
		return s
	}
	parts := strings.Split(s, "\n")
	for i, l := range parts {
		if strings.TrimSpace(l) == "" || !strings.HasPrefix(l, from) {
			continue
		}
		parts[i] = to + l[len(from):]
	}
	return strings.Join(parts, "\n")
}

func trimLineBreak(s string) string {
	if strings.HasSuffix(s, "\r\n") {
		return s[:len(s)-2]
	}
	return strings.TrimSuffix(s, "\n")
}

// matchNewlines writes the replacement's line breaks the way the file does (CRLF
// files stay CRLF).
func matchNewlines(repl, content string) string {
	if lineBreak(content) != "\r\n" {
		return repl
	}
	return strings.ReplaceAll(strings.ReplaceAll(repl, "\r\n", "\n"), "\n", "\r\n")
}

// lineBreak is the file's dominant line break.
func lineBreak(content string) string {
	crlf := strings.Count(content, "\r\n")
	if crlf > 0 && crlf*2 >= strings.Count(content, "\n") {
		return "\r\n"
	}
	return "\n"
}

func indexAll(s, sub string) []int {
	var out []int
	for off := 0; ; {
		i := strings.Index(s[off:], sub)
		if i < 0 {
			return out
		}
		out = append(out, off+i)
		off += i + len(sub)
	}
}

// lines indexes the line starts of a text.
type lines struct {
	starts []int
	size   int
}

func splitLines(s string) lines {
	l := lines{size: len(s)}
	if s == "" {
		return l
	}
	l.starts = append(l.starts, 0)
	for i := 0; i < len(s)-1; i++ {
		if s[i] == '\n' {
			l.starts = append(l.starts, i+1)
		}
	}
	return l
}

// n is the number of lines (a final line break does not start another line).
func (l lines) n() int { return len(l.starts) }

// lineOf is the 1-based line holding byte offset off.
func (l lines) lineOf(off int) int {
	return max(sort.Search(len(l.starts), func(i int) bool { return l.starts[i] > off }), 1)
}

// span is the byte range of lines a..b (1-based, inclusive, with b's line break);
// a == n+1 is the empty range at the end.
func (l lines) span(a, b int) (int, int) {
	if a > l.n() {
		return l.size, l.size
	}
	from := l.starts[a-1]
	to := l.size
	if b < l.n() {
		to = l.starts[b]
	}
	return from, to
}

// line returns line ln with its line break.
func (l lines) line(s string, ln int) string {
	from, to := l.span(ln, ln)
	return s[from:to]
}

func joinInts(xs []int) string {
	parts := make([]string, 0, len(xs))
	for i, x := range xs {
		if i == 10 {
			parts = append(parts, fmt.Sprintf("… %d more", len(xs)-10))
			break
		}
		parts = append(parts, fmt.Sprint(x))
	}
	return strings.Join(parts, ", ")
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func size(s string) string {
	return fmt.Sprintf("%d lines, %d bytes", splitLines(s).n(), len(s))
}
