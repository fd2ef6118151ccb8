package egress

import (
	"fmt"
	"math/bits"
	"regexp"
	"regexp/syntax"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/zricethezav/gitleaks/v8/config"
	"github.com/zricethezav/gitleaks/v8/detect"
	"github.com/zricethezav/gitleaks/v8/detect/codec"
	"github.com/zricethezav/gitleaks/v8/report"
)

// Why this file exists: gitleaks runs every rule whose keyword occurs anywhere in a
// text over the whole text, with Go's regexp (an NFA: hundreds of nanoseconds a byte
// for its generic-api-key rule, whose keywords "key", "token", "api", … are in most
// prose and code), and then runs its decoder's regexp over the whole text once or
// twice more (base64, hex, percent, \u escapes). A 64 KiB argument cost tens of
// milliseconds although nothing in it was a credential.
//
// The plan below decides, cheaply and before gitleaks runs, which rules can match a
// text at all, and gitleaks then runs over the whole text, unchanged, with only those
// rules (usually none, so it does not run). Nothing is approximated in the direction
// of missing a finding:
//
//   - a rule's "gate" is a necessary condition for its regexp to match: every match
//     passes through one of a few literal strings (the anchor, e.g. "ghp_", or the
//     generic rule's keyword alternation), followed by a bounded prefix of what the
//     regexp requires after it (e.g. an assignment and ten value characters). Both
//     are derived from the rule's own parsed regexp, not written by hand, and checked
//     at each occurrence of the anchor with a short anchored regexp;
//   - a rule whose regexp has no usable anchor keeps gitleaks' own condition: one of
//     its keywords occurs in the text;
//   - gitleaks also scans the text its decoder makes; that text is computed exactly
//     (only the stretches that can hold an encoded segment go through gitleaks'
//     decoder) and gated the same way;
//   - a rule that can match is run by gitleaks over the whole text, so its findings,
//     allowlists, entropy checks and the generic rule's deduplication are gitleaks'
//     own. Dropping a rule that cannot match changes none of them.

const (
	// maxAnchorStrings bounds the literal strings one anchor may stand for.
	maxAnchorStrings = 64
	// minAnchorLen: anchors are looked up by their first two bytes.
	minAnchorLen = 2
	// maxAnchorClass bounds the characters of a class expanded into anchor strings.
	maxAnchorClass = 8
	// maxGateRepeat: a bounded repetition up to this many copies stays in a gate as
	// written; a longer one is cut to its minimum (the gate still holds, and its
	// regexp stays small enough for Go's backtracking matcher).
	maxGateRepeat = 32
)

// rulePlan holds the gates of every rule of a gitleaks configuration.
type rulePlan struct {
	cfg   config.Config
	gated []gatedRule
	// ungated rules fall back to gitleaks' own keyword condition.
	ungated []ungatedRule
	// anchors[prefix[b0<<8|b1]] lists the anchor strings starting with bytes b0 b1
	// (lower case); index 0 is "none".
	prefix  *[1 << 16]uint16
	anchors [][]anchorRef
	// reach is the most bytes a gate reads from its anchor's start; maxAnchor the
	// longest anchor string or keyword.
	reach, maxAnchor int
	// lowerAlways: an ungated rule has a keyword that is no anchor (one byte, or not
	// ASCII), so every text is lowered as gitleaks lowers it to look for keywords.
	lowerAlways bool
	// foldRunes are the non-ASCII runes that (?i) folds onto an ASCII letter (the
	// Kelvin sign for k, the long s for s): an anchor is looked up in ASCII lower
	// case, so a text holding one of them lets every case-folded anchor through.
	foldRunes []rune
}

type gatedRule struct {
	id string
	// gate is \A, the anchor, then a bounded prefix of the rest of the rule's regexp.
	gate *regexp.Regexp
	// runes is how many characters from an anchor's occurrence the gate can read,
	// plus one of context for an assertion at its end.
	runes int
	// tests are quick necessary conditions checked before the gate.
	tests []runTest
	// folded: the anchor is case-insensitive and holds a letter with a non-ASCII fold.
	folded bool
	// exact: the anchor is case-sensitive; its strings are kept as written.
	exact bool
}

// byteSet is a set of bytes; a character outside ASCII is represented by all of
// 0x80-0xff.
type byteSet [4]uint64

func (b *byteSet) add(c byte)      { b[c>>6] |= 1 << (c & 63) }
func (b *byteSet) has(c byte) bool { return b[c>>6]&(1<<(c&63)) != 0 }
func (b *byteSet) size() (n int) {
	for _, w := range b {
		n += bits.OnesCount64(w)
	}
	return n
}

// addRune adds r, every byte outside ASCII when r is.
func (b *byteSet) addRune(r rune) {
	if r < utf8.RuneSelf {
		b.add(byte(r))
		return
	}
	b[2], b[3] = ^uint64(0), ^uint64(0)
}

// runTest holds when min consecutive bytes of set start at an offset in [lo, hi]: a
// part of a gate's sequence that matches at least min characters, all from set, after
// lo to hi characters. E.g. the generic rule's "=" or ":" after its keyword, and the
// ten value characters after that.
type runTest struct {
	set         byteSet
	min, lo, hi int
}

// holds runs the test on s; ok is false when it met a byte outside ASCII, where
// offsets in bytes are not offsets in characters.
func (t *runTest) holds(s string) (holds, ok bool) {
	for k := 0; k < t.lo && k < len(s); k++ {
		if s[k] >= utf8.RuneSelf {
			return false, false
		}
	}
	run := 0
	for k := t.lo; k < len(s) && k < t.hi+t.min; k++ {
		c := s[k]
		if c >= utf8.RuneSelf {
			return false, false
		}
		if !t.set.has(c) {
			run = 0
			continue
		}
		if run++; run >= t.min {
			return true, true
		}
	}
	return false, true
}

// passes tells whether the gate matches at an anchor's occurrence text[i:], the
// quick tests first.
func (g *gatedRule) passes(text string, i int) bool {
	for k := range g.tests {
		if holds, ok := g.tests[k].holds(text[i:]); ok && !holds {
			return false
		}
	}
	end := i
	for n := 0; n < g.runes && end < len(text); n++ {
		if text[end] < utf8.RuneSelf {
			end++
			continue
		}
		_, size := utf8.DecodeRuneInString(text[end:])
		end += size
	}
	return g.gate.MatchString(text[i:end])
}

type ungatedRule struct {
	id       string
	keywords []string // lower case, as gitleaks' prefilter compares them
}

type anchorRef struct {
	lit   string // lower case
	exact string // as written when the anchor is case-sensitive, else ""
	rule  int    // index into gated, then into ungated
}

// newRulePlan derives the gates of cfg's rules. A rule that cannot report anything
// when a bare string is scanned (a rule bound to a file path) is left out.
func newRulePlan(cfg config.Config) (*rulePlan, error) {
	p := &rulePlan{cfg: cfg, prefix: new([1 << 16]uint16), anchors: [][]anchorRef{nil}, foldRunes: nonASCIIFolds()}
	ids := make([]string, 0, len(cfg.Rules))
	for id := range cfg.Rules {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var ungated []ungatedRule
	for _, id := range ids {
		r := cfg.Rules[id]
		if neverReports(r) {
			continue
		}
		var gates []gatedRule
		var anchors [][]string
		if r.Regex != nil && len(r.RequiredRules) == 0 && !r.SkipReport {
			var err error
			if gates, anchors, err = gatesOf(r); err != nil {
				return nil, fmt.Errorf("dlp: gate of rule %s: %w", id, err)
			}
		}
		if gates == nil {
			u := ungatedRule{id: id}
			for _, k := range r.Keywords {
				u.keywords = append(u.keywords, strings.ToLower(k))
			}
			ungated = append(ungated, u)
			continue
		}
		for i, g := range gates {
			p.reach = max(p.reach, g.runes*utf8.UTFMax)
			p.gated = append(p.gated, g)
			for _, lit := range anchors[i] {
				p.addAnchor(lit, len(p.gated)-1, g.exact)
			}
		}
	}
	// An ungated rule is live where one of its keywords occurs: in ASCII text, an
	// anchor that needs no gate; elsewhere, see mark.
	p.ungated = ungated
	for i, u := range ungated {
		for _, k := range u.keywords {
			if len(k) < minAnchorLen || !isASCII(k) {
				p.lowerAlways = true
				continue
			}
			p.addAnchor(k, len(p.gated)+i, false)
		}
	}
	// A keyword reaching into a decoded stretch is found from as far before it.
	p.reach = max(p.reach, p.maxAnchor*utf8.UTFMax)
	return p, nil
}

// addAnchor files lit (ASCII, two bytes or more, so fewer than 1<<14
// prefixes) under its first two bytes; rule indexes gated, then ungated rules.
func (p *rulePlan) addAnchor(lit string, rule int, exact bool) {
	ref := anchorRef{lit: asciiLower(lit), rule: rule}
	if exact {
		ref.exact = lit
	}
	lit = ref.lit
	p.maxAnchor = max(p.maxAnchor, len(lit))
	k := uint16(lit[0])<<8 | uint16(lit[1])
	if p.prefix[k] == 0 {
		p.prefix[k] = uint16(len(p.anchors))
		p.anchors = append(p.anchors, nil)
	}
	refs := append(p.anchors[p.prefix[k]], ref)
	// The same literal's rules next to each other, so mark compares it once.
	sort.SliceStable(refs, func(i, j int) bool { return refs[i].lit < refs[j].lit })
	p.anchors[p.prefix[k]] = refs
}

// neverReports tells whether gitleaks can never report the rule on a fragment
// without a file path: it is bound to paths the empty path does not match, or has
// neither a regexp nor a path.
func neverReports(r config.Rule) bool {
	if r.Path != nil {
		return !r.Path.MatchString("")
	}
	return r.Regex == nil
}

// liveSet marks the rules of a plan that may match.
type liveSet []bool

func (p *rulePlan) newLiveSet() liveSet {
	live := make(liveSet, len(p.gated)+len(p.ungated))
	for i, u := range p.ungated {
		live[len(p.gated)+i] = len(u.keywords) == 0 // gitleaks runs such a rule on every text
	}
	return live
}

func (l liveSet) any() bool {
	for _, b := range l {
		if b {
			return true
		}
	}
	return false
}

// mark adds to live the rules that may match text, looking at the anchors that
// start at or after lo and before hi (and at what follows them). A decoding pass
// changes only some stretches of a text, and the rest was gated before.
func (p *rulePlan) mark(text string, lo, hi int, live liveSet) {
	lo, hi = runeStart(text, max(lo, 0)), min(hi, len(text))
	if lo >= hi {
		return
	}
	seg := text[lo:min(len(text), hi+p.maxAnchor)]
	for i, n := 0, min(hi-lo, len(seg)-1); i < n; i++ {
		a := p.prefix[uint16(lowerASCII(seg[i]))<<8|uint16(lowerASCII(seg[i+1]))]
		if a == 0 {
			continue
		}
		lit, at := "", false // a literal shared by several rules is compared once
		for _, ref := range p.anchors[a] {
			if live[ref.rule] {
				continue
			}
			if ref.lit != lit {
				lit, at = ref.lit, hasPrefixFold(seg[i:], ref.lit)
			}
			if !at || ref.exact != "" && !strings.HasPrefix(seg[i:], ref.exact) {
				continue
			}
			if ref.rule >= len(p.gated) || p.gated[ref.rule].passes(text, lo+i) {
				live[ref.rule] = true
			}
		}
	}
	ascii := isASCII(seg)
	if !ascii && containsAnyRune(seg, p.foldRunes) {
		for i, g := range p.gated {
			if g.folded {
				live[i] = true
			}
		}
	}
	if ascii && !p.lowerAlways {
		return
	}
	// gitleaks lowers the text with strings.ToLower before it looks for keywords:
	// outside ASCII, a rune may lower into a letter (the Kelvin sign into k).
	lower := strings.ToLower(seg)
	for i, u := range p.ungated {
		for _, k := range u.keywords {
			if strings.Contains(lower, k) {
				live[len(p.gated)+i] = true
				break
			}
		}
	}
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// hasPrefixFold tells whether s starts with lit (lower case ASCII), ignoring the
// case of ASCII letters.
func hasPrefixFold(s, lit string) bool {
	if len(s) < len(lit) {
		return false
	}
	for i := 0; i < len(lit); i++ {
		if lowerASCII(s[i]) != lit[i] {
			return false
		}
	}
	return true
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// detector returns a gitleaks detector with the live rules (and the rules they
// require) and the given decoding depth.
func (p *rulePlan) detector(live liveSet, decodeDepth int) *detect.Detector {
	cfg := p.cfg
	cfg.Rules = map[string]config.Rule{}
	cfg.Keywords = map[string]struct{}{}
	cfg.OrderedRules = nil
	var add func(id string)
	add = func(id string) {
		r, ok := p.cfg.Rules[id]
		if _, dup := cfg.Rules[id]; !ok || dup {
			return
		}
		cfg.Rules[id] = r
		cfg.OrderedRules = append(cfg.OrderedRules, id)
		for _, k := range r.Keywords {
			cfg.Keywords[strings.ToLower(k)] = struct{}{}
		}
		for _, req := range r.RequiredRules {
			add(req.RuleID)
		}
	}
	for i, on := range live {
		switch {
		case !on:
		case i < len(p.gated):
			add(p.gated[i].id)
		default:
			add(p.ungated[i-len(p.gated)].id)
		}
	}
	det := detect.NewDetector(cfg)
	det.MaxDecodeDepth = decodeDepth
	det.IgnoreGitleaksAllow = true // as NewDLP's detector: the sender writes the text
	return det
}

// detect returns what gitleaks' detector with every rule of the plan and
// maxDecodeDepth would find in text: it computes the texts gitleaks' decoding passes
// would scan, finds the rules that may match one of them, and runs gitleaks with
// those rules only, or not at all.
func (p *rulePlan) detect(text string, maxDecodeDepth int) []report.Finding {
	live, depth := p.liveRules(text, maxDecodeDepth)
	if !live.any() {
		return nil
	}
	return p.detector(live, depth).DetectString(text)
}

// liveRules returns the rules that may match text or a text gitleaks' decoding
// passes make of it, and how many of those passes decode anything.
func (p *rulePlan) liveRules(text string, maxDecodeDepth int) (liveSet, int) {
	live := p.newLiveSet()
	p.mark(text, 0, len(text), live)
	depth := 0
	for x := text; depth < maxDecodeDepth; depth++ {
		next, changed := nextDecodeLevel(x)
		if len(changed) == 0 {
			break
		}
		// Only anchors whose gate reads into a decoded stretch can see anything the
		// previous pass did not.
		for _, c := range changed {
			p.mark(next, c.from-p.reach, c.to, live)
		}
		x = next
	}
	return live, depth
}

// gatesOf derives a rule's gates, one per top-level alternative of its regexp, each
// with the lower-case anchor strings it is looked up by; nil when an alternative has
// no usable anchor.
func gatesOf(r config.Rule) ([]gatedRule, [][]string, error) {
	re, err := syntax.Parse(r.Regex.String(), syntax.Perl)
	if err != nil {
		return nil, nil, fmt.Errorf("parse: %w", err)
	}
	alts := []*syntax.Regexp{re}
	top := re
	for top.Op == syntax.OpCapture {
		top = top.Sub[0]
	}
	if top.Op == syntax.OpAlternate {
		alts = top.Sub
	}
	var gates []gatedRule
	var anchors [][]string
	for _, alt := range alts {
		g, lits, err := gateOf(r.RuleID, alt)
		if g == nil || err != nil {
			return nil, nil, err
		}
		gates = append(gates, *g)
		anchors = append(anchors, lits)
	}
	return gates, anchors, nil
}

// gateOf derives the gate of one regexp and the anchor strings it is looked up by;
// nil when it has no usable anchor.
func gateOf(id string, re *syntax.Regexp) (*gatedRule, []string, error) {
	elems := flatten(re)
	from, lits := -1, []string(nil)
	for i := range elems {
		// The anchor: the strings every match of the regexp from element i on starts
		// with. The longer the shortest one, the rarer its occurrences.
		ps, _ := prefixes(concat(elems[i:]))
		if m := shortest(ps); m >= minAnchorLen && (from < 0 || m > shortest(lits)) {
			from, lits = i, ps
		}
	}
	if from < 0 {
		return nil, nil, nil
	}
	rest, _ := boundedPrefix(concat(elems[from:]))
	whole := concat([]*syntax.Regexp{{Op: syntax.OpBeginText}, rest})
	n, bounded := maxRunes(whole)
	if !bounded {
		return nil, nil, nil
	}
	gate, err := regexp.Compile(whole.String())
	if err != nil {
		return nil, nil, fmt.Errorf("compile %q: %w", whole.String(), err)
	}
	g := &gatedRule{
		id:     id,
		gate:   gate,
		runes:  n + 1,
		tests:  runTests(flatten(rest)),
		folded: foldsOutsideASCII(elems[from:]),
	}
	// An anchor of a case-sensitive part is compared as written: "Nj" of a
	// Discord token must not stop at every "nj" of prose. Only when the strings
	// are the same as the lower-case ones but for their case.
	if !foldsCase(elems[from:]) {
		if exact, _ := prefixesIn(concat(elems[from:]), exactCase); sameLowered(exact, lits) {
			g.exact, lits = true, exact
		}
	}
	return g, lits, nil
}

func exactCase(s string) string { return s }

// foldsCase tells whether a part of parts is case-insensitive.
func foldsCase(parts []*syntax.Regexp) bool {
	for _, p := range parts {
		if p.Flags&syntax.FoldCase != 0 || foldsCase(p.Sub) {
			return true
		}
	}
	return false
}

// sameLowered tells whether exact, lowered, are the strings of lower.
func sameLowered(exact, lower []string) bool {
	set := map[string]bool{}
	for _, e := range exact {
		set[asciiLower(e)] = true
	}
	if len(set) != len(lower) {
		return false
	}
	for _, l := range lower {
		if !set[l] {
			return false
		}
	}
	return true
}

// runTests derives a gate's quick tests from the parts of its sequence past the
// anchor that match at least one character from a known set, rarest set first.
func runTests(parts []*syntax.Regexp) []runTest {
	covered := 0 // parts spelled out by the anchor strings: they always hold
	for covered < len(parts) {
		if _, whole := prefixes(concat(parts[:covered+1])); !whole {
			break
		}
		covered++
	}
	var tests []runTest
	lo, hi := 0, 0
	for j, part := range parts {
		if m := minRunes(part); j >= covered && m > 0 {
			t := runTest{min: m, lo: lo, hi: hi}
			if alphabet(part, &t.set) {
				tests = append(tests, t)
			}
		}
		n, bounded := maxRunes(part)
		if !bounded {
			break
		}
		lo, hi = lo+minRunes(part), hi+n
	}
	sort.SliceStable(tests, func(a, b int) bool { return tests[a].set.size() < tests[b].set.size() })
	return tests
}

// alphabet adds to set every byte re can match (false when it can match any).
func alphabet(re *syntax.Regexp, set *byteSet) bool {
	switch re.Op {
	case syntax.OpLiteral:
		for _, r := range re.Rune {
			set.addRune(r)
			if re.Flags&syntax.FoldCase != 0 {
				for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
					set.addRune(f)
				}
			}
		}
	case syntax.OpCharClass:
		for i := 0; i+1 < len(re.Rune); i += 2 {
			for r := re.Rune[i]; r <= re.Rune[i+1] && r < utf8.RuneSelf; r++ {
				set.addRune(r)
			}
			if re.Rune[i+1] >= utf8.RuneSelf {
				set.addRune(utf8.RuneSelf)
			}
		}
	case syntax.OpAnyChar, syntax.OpAnyCharNotNL:
		return false
	default:
		for _, s := range re.Sub {
			if !alphabet(s, set) {
				return false
			}
		}
	}
	return true
}

// minRunes returns the fewest characters re can match.
func minRunes(re *syntax.Regexp) int {
	switch re.Op {
	case syntax.OpLiteral:
		return len(re.Rune)
	case syntax.OpCharClass, syntax.OpAnyChar, syntax.OpAnyCharNotNL:
		return 1
	case syntax.OpCapture, syntax.OpPlus:
		return minRunes(re.Sub[0])
	case syntax.OpRepeat:
		return re.Min * minRunes(re.Sub[0])
	case syntax.OpConcat:
		n := 0
		for _, s := range re.Sub {
			n += minRunes(s)
		}
		return n
	case syntax.OpAlternate:
		n := -1
		for _, s := range re.Sub {
			if m := minRunes(s); n < 0 || m < n {
				n = m
			}
		}
		return max(n, 0)
	}
	return 0
}

// flatten lists the top-level sequence of re, captures removed (they change no
// match) and nested sequences spliced in.
func flatten(re *syntax.Regexp) []*syntax.Regexp {
	switch re.Op {
	case syntax.OpCapture:
		return flatten(re.Sub[0])
	case syntax.OpConcat:
		var out []*syntax.Regexp
		for _, s := range re.Sub {
			out = append(out, flatten(s)...)
		}
		return out
	}
	return []*syntax.Regexp{re}
}

// prefixes lists, lower-cased, strings one of which starts every match of re (at
// most maxAnchorStrings, ASCII), and whether they are its whole matches. {""} when
// nothing better is known. An assertion ends the prefix: checked at the start of a
// gate, it would lack the character before.
func prefixes(re *syntax.Regexp) ([]string, bool) { return prefixesIn(re, asciiLower) }

// prefixesIn is prefixes with the strings passed through norm: asciiLower, or
// keeping their case (exactCase) for an anchor compared as written.
func prefixesIn(re *syntax.Regexp, norm func(string) string) ([]string, bool) {
	none := []string{""}
	switch re.Op {
	case syntax.OpEmptyMatch:
		return none, true
	case syntax.OpLiteral:
		for _, r := range re.Rune {
			if r >= utf8.RuneSelf {
				return none, false
			}
		}
		return []string{norm(string(re.Rune))}, true
	case syntax.OpCharClass:
		var out []string
		for i := 0; i+1 < len(re.Rune); i += 2 {
			lo, hi := re.Rune[i], re.Rune[i+1]
			if hi >= utf8.RuneSelf || int(hi-lo)+1+len(out) > maxAnchorClass {
				return none, false
			}
			for r := lo; r <= hi; r++ {
				out = append(out, norm(string(r)))
			}
		}
		return dedup(out), true
	case syntax.OpCapture:
		return prefixesIn(re.Sub[0], norm)
	case syntax.OpConcat:
		out := none
		for _, s := range re.Sub {
			next, whole := prefixesIn(s, norm)
			p, ok := product(out, next)
			if !ok {
				return out, false
			}
			out = p
			if !whole {
				return out, false
			}
		}
		return out, true
	case syntax.OpAlternate:
		var out []string
		whole := true
		for _, s := range re.Sub {
			next, w := prefixesIn(s, norm)
			out = dedup(append(out, next...))
			whole = whole && w
			if len(out) > maxAnchorStrings {
				return none, false
			}
		}
		return out, whole
	case syntax.OpQuest:
		sub, whole := prefixesIn(re.Sub[0], norm)
		return dedup(append(sub, "")), whole
	case syntax.OpRepeat:
		if re.Min == 0 {
			return none, false
		}
		sub, whole := prefixesIn(re.Sub[0], norm)
		if !whole {
			return sub, false // every match starts with its first copy
		}
		out := none
		for range min(re.Min, 4) {
			p, ok := product(out, sub)
			if !ok {
				return out, false
			}
			out = p
		}
		return out, re.Min == re.Max && re.Min <= 4
	case syntax.OpPlus:
		sub, _ := prefixesIn(re.Sub[0], norm)
		return sub, false
	}
	return none, false
}

func product(a, b []string) ([]string, bool) {
	if len(a)*len(b) > maxAnchorStrings {
		return nil, false
	}
	out := make([]string, 0, len(a)*len(b))
	for _, x := range a {
		for _, y := range b {
			out = append(out, x+y)
		}
	}
	return dedup(out), true
}

func dedup(s []string) []string {
	sort.Strings(s)
	out := s[:0]
	for i, x := range s {
		if i == 0 || x != s[i-1] {
			out = append(out, x)
		}
	}
	return out
}

func shortest(s []string) int {
	m := -1
	for _, x := range s {
		if m < 0 || len(x) < m {
			m = len(x)
		}
	}
	return m
}

// boundedPrefix returns a regexp of bounded length that matches a prefix of every
// string re matches, and whether it is re itself: unbounded or long repetitions are
// cut to their minimum, and what follows a cut is dropped.
func boundedPrefix(re *syntax.Regexp) (*syntax.Regexp, bool) {
	switch re.Op {
	case syntax.OpCapture:
		return boundedPrefix(re.Sub[0])
	case syntax.OpConcat:
		var out []*syntax.Regexp
		for _, s := range re.Sub {
			b, whole := boundedPrefix(s)
			out = append(out, b)
			if !whole {
				return concat(out), false
			}
		}
		return concat(out), true
	case syntax.OpAlternate:
		out := &syntax.Regexp{Op: syntax.OpAlternate, Flags: re.Flags}
		whole := true
		for _, s := range re.Sub {
			b, w := boundedPrefix(s)
			out.Sub = append(out.Sub, b)
			whole = whole && w
		}
		return out, whole
	case syntax.OpQuest:
		b, whole := boundedPrefix(re.Sub[0])
		return &syntax.Regexp{Op: syntax.OpQuest, Flags: re.Flags, Sub: []*syntax.Regexp{b}}, whole
	case syntax.OpStar:
		return &syntax.Regexp{Op: syntax.OpEmptyMatch}, false
	case syntax.OpPlus:
		b, _ := boundedPrefix(re.Sub[0])
		return b, false
	case syntax.OpRepeat:
		b, whole := boundedPrefix(re.Sub[0])
		switch {
		case !whole && re.Min == 0:
			return &syntax.Regexp{Op: syntax.OpEmptyMatch}, false
		case !whole:
			return b, false
		case re.Max >= 0 && re.Max <= maxGateRepeat:
			return re, true
		case re.Min == 0:
			return &syntax.Regexp{Op: syntax.OpEmptyMatch}, false
		}
		return &syntax.Regexp{Op: syntax.OpRepeat, Flags: re.Flags, Min: re.Min, Max: re.Min, Sub: []*syntax.Regexp{b}}, false
	}
	return re, true
}

func concat(parts []*syntax.Regexp) *syntax.Regexp {
	switch len(parts) {
	case 0:
		return &syntax.Regexp{Op: syntax.OpEmptyMatch}
	case 1:
		return parts[0]
	}
	return &syntax.Regexp{Op: syntax.OpConcat, Sub: parts}
}

// maxRunes returns the most characters re can match, and false when unbounded.
func maxRunes(re *syntax.Regexp) (int, bool) {
	switch re.Op {
	case syntax.OpLiteral:
		return len(re.Rune), true
	case syntax.OpCharClass, syntax.OpAnyChar, syntax.OpAnyCharNotNL:
		return 1, true
	case syntax.OpEmptyMatch, syntax.OpBeginLine, syntax.OpEndLine, syntax.OpBeginText,
		syntax.OpEndText, syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return 0, true
	case syntax.OpCapture, syntax.OpQuest:
		return maxRunes(re.Sub[0])
	case syntax.OpConcat, syntax.OpAlternate:
		n := 0
		for _, s := range re.Sub {
			m, ok := maxRunes(s)
			if !ok {
				return 0, false
			}
			if re.Op == syntax.OpConcat {
				n += m
			} else {
				n = max(n, m)
			}
		}
		return n, true
	case syntax.OpRepeat:
		m, ok := maxRunes(re.Sub[0])
		if !ok || re.Max < 0 {
			return 0, false
		}
		return m * re.Max, true
	}
	return 0, false
}

// nonASCIIFolds lists the runes outside ASCII that case folding maps onto an ASCII
// letter.
func nonASCIIFolds() []rune {
	var out []rune
	for c := 'a'; c <= 'z'; c++ {
		for f := unicode.SimpleFold(c); f != c; f = unicode.SimpleFold(f) {
			if f >= utf8.RuneSelf {
				out = append(out, f)
			}
		}
	}
	return out
}

// foldsOutsideASCII tells whether a case-insensitive part of an anchor holds a letter
// that a non-ASCII rune folds onto.
func foldsOutsideASCII(parts []*syntax.Regexp) bool {
	found := false
	var walk func(re *syntax.Regexp)
	walk = func(re *syntax.Regexp) {
		if re.Op == syntax.OpLiteral && re.Flags&syntax.FoldCase != 0 {
			for _, r := range re.Rune {
				for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
					found = found || f >= utf8.RuneSelf
				}
			}
		}
		for _, s := range re.Sub {
			walk(s)
		}
	}
	for _, p := range parts {
		walk(p)
	}
	return found
}

func containsAnyRune(s string, runes []rune) bool {
	for _, r := range runes {
		if strings.ContainsRune(s, r) {
			return true
		}
	}
	return false
}

// asciiLower lowers A-Z only, so every byte keeps its offset.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		b[i] = lowerASCII(c)
	}
	return string(b)
}

// runeStart moves i back to the start of the character it is in.
func runeStart(s string, i int) int {
	for i > 0 && i < len(s) && !utf8.RuneStart(s[i]) {
		i--
	}
	return i
}

// nextDecodeLevel returns the text gitleaks' decoder makes of x in one decoding pass
// (codec.Decoder.Decode) and whether it decoded any segment, running the decoder only
// over the stretches of x that can hold a segment. Its encodings (percent escapes,
// \u escapes, "U+" code points, hex, base64) match only characters of a small
// alphabet, except that a percent segment runs from the first escape on a line to the
// last, and a run of "U+" code points may span lines.
func nextDecodeLevel(x string) (string, []span) {
	if hasCodePoint(x) {
		out, segs := codec.NewDecoder().Decode(x, nil)
		if len(segs) == 0 {
			return x, nil
		}
		return out, []span{{0, len(out)}}
	}
	var b strings.Builder
	var changed []span
	done := 0 // x[:done] is written to b, once anything was decoded
	decode := func(from, to int) {
		out, segs := codec.NewDecoder().Decode(x[from:to], nil)
		if len(segs) == 0 {
			return
		}
		if changed == nil {
			b.Grow(len(x))
		}
		b.WriteString(x[done:from])
		changed = append(changed, span{b.Len(), b.Len() + len(out)})
		b.WriteString(out)
		done = to
	}
	for start := 0; start < len(x); {
		end := len(x)
		if i := strings.IndexByte(x[start:], '\n'); i >= 0 {
			end = start + i + 1
		}
		line := x[start:end]
		pFrom, pTo := percentSpan(line)
		chunkFrom := -1
		if pFrom >= 0 {
			chunkFrom = segmentRunStart(line, pFrom)
		}
		for i := 0; i < len(line); {
			if i == chunkFrom {
				// The percent segment and the runs touching it, decoded together:
				// the decoder drops a segment that touches one it ranks higher.
				to := segmentRunEnd(line, pTo)
				decode(start+i, start+to)
				i = to
				continue
			}
			if !isSegmentChar(line[i]) {
				i++
				continue
			}
			j := segmentRunEnd(line, i)
			// A base64 segment is 16 characters or more, a hex one 32; a \u
			// escape is shorter.
			if j-i >= 16 || hasUnicodeEscape(line[i:j]) {
				decode(start+i, start+j)
			}
			i = j
		}
		start = end
	}
	if changed == nil {
		return x, nil
	}
	b.WriteString(x[done:])
	return b.String(), changed
}

// span is a stretch [from, to) of a text.
type span struct{ from, to int }

// hasUnicodeEscape tells whether s holds a \u escape the decoder reads: one or two
// backslashes, u or U, four hex digits.
func hasUnicodeEscape(s string) bool {
	for i := 0; i+5 < len(s); i++ {
		if s[i] == '\\' && (s[i+1] == 'u' || s[i+1] == 'U') &&
			isHex(s[i+2]) && isHex(s[i+3]) && isHex(s[i+4]) && isHex(s[i+5]) {
			return true
		}
	}
	return false
}

// isSegmentChar tells the characters a hex, base64 or \u segment consists of.
func isSegmentChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return c == '_' || c == '/' || c == '+' || c == '=' || c == '\\' || c == '-'
}

func segmentRunStart(s string, i int) int {
	for i > 0 && isSegmentChar(s[i-1]) {
		i--
	}
	return i
}

func segmentRunEnd(s string, i int) int {
	for i < len(s) && isSegmentChar(s[i]) {
		i++
	}
	return i
}

// percentSpan returns where the decoder's percent segment lies in a line: from its
// first escape to the end of its last (-1 when it has none).
func percentSpan(line string) (int, int) {
	from, to := -1, -1
	for i := strings.IndexByte(line, '%'); i >= 0 && i+2 < len(line); {
		if isHex(line[i+1]) && isHex(line[i+2]) {
			if from < 0 {
				from, to = i, i+3
			} else if i >= from+3 {
				to = i + 3
			}
		}
		next := strings.IndexByte(line[i+1:], '%')
		if next < 0 {
			break
		}
		i += 1 + next
	}
	return from, to
}

// hasCodePoint tells whether s holds "U+" and four hex digits.
func hasCodePoint(s string) bool {
	for i := 0; ; {
		j := strings.Index(s[i:], "U+")
		if j < 0 {
			return false
		}
		i += j + 2
		if i+4 <= len(s) && isHex(s[i]) && isHex(s[i+1]) && isHex(s[i+2]) && isHex(s[i+3]) {
			return true
		}
	}
}
