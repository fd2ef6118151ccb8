package egress

import (
	"encoding/base64"
	"encoding/hex"
	"math/rand/v2"
	"regexp/syntax"
	"sort"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	"github.com/zricethezav/gitleaks/v8/detect/codec"
)

// ScanAllRules is Scan as it was before the plan: gitleaks' detector with every rule
// (the one NewDLP configured) over each text. The tests that prove the plan loses
// nothing compare the two, and the benchmark measures both.
func ScanAllRules(d *DLP, s string) []Finding {
	return d.scan(s, dlpDet.DetectString)
}

func TestDLPPlanCoversEveryRule(t *testing.T) {
	t.Parallel()
	d, err := NewDLP()
	require.NoError(t, err)
	p := d.plan
	reports := 0
	for _, r := range p.cfg.Rules {
		if !neverReports(r) {
			reports++
		}
	}
	planned := map[string]bool{}
	for _, g := range p.gated {
		planned[g.id] = true
	}
	gated := len(planned)
	var ungated []string
	for _, u := range p.ungated {
		require.False(t, planned[u.id], "rule %s is gated and kept on its keywords", u.id)
		planned[u.id] = true
		ungated = append(ungated, u.id)
	}
	require.Equal(t, reports, len(planned), "every rule that can report is gated or kept on its keywords")
	require.Contains(t, planned, "generic-api-key")
	require.NotContains(t, ungated, "generic-api-key", "the rule whose keywords are in most text must be gated")
	t.Logf("%d of %d rules gated; on their keywords: %v", gated, len(planned), ungated)
}

// TestDLPGatesHoldWhereRulesMatch checks each gate against its rule: strings built
// from the rule's own regexp, in random surroundings; wherever the rule's regexp
// matches, the plan must let the rule run.
func TestDLPGatesHoldWhereRulesMatch(t *testing.T) {
	t.Parallel()
	d, err := NewDLP()
	require.NoError(t, err)
	p := d.plan
	r := rand.New(rand.NewPCG(3, 5))
	const perRule = 60
	for _, id := range ruleIDs(p) {
		rule := p.cfg.Rules[id]
		re, err := syntax.Parse(rule.Regex.String(), syntax.Perl)
		require.NoError(t, err)
		matched := 0
		for n := 0; n < perRule*20 && matched < perRule; n++ {
			var b strings.Builder
			b.WriteString(randomContext(r))
			generate(r, re, &b)
			b.WriteString(randomContext(r))
			text := b.String()
			if !rule.Regex.MatchString(text) {
				continue
			}
			matched++
			live := p.newLiveSet()
			p.mark(text, 0, len(text), live)
			require.True(t, p.isLive(live, id), "rule %s matches %q but its gate does not let it run", id, text)
		}
		require.Positive(t, matched, "no generated string matched rule %s", id)
	}
}

// TestDLPGatesAllowPlainText: the gates are worth something only if text without
// credentials passes few of them.
func TestDLPGatesAllowPlainText(t *testing.T) {
	t.Parallel()
	d, err := NewDLP()
	require.NoError(t, err)
	for _, text := range []string{argsOf64KiB(t), decodedValues(argsOf64KiB(t)), oneLineOf64KiB(t)} {
		live := d.plan.newLiveSet()
		d.plan.mark(text, 0, len(text), live)
		require.False(t, live.any(), "live: %v", d.plan.liveIDs(live))
	}
}

// TestDLPDecodeLevelIsGitleaks: the text gitleaks' decoder makes of an input, decoded
// stretch by stretch, is what the decoder makes of the whole input.
func TestDLPDecodeLevelIsGitleaks(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(11, 13))
	for _, x := range decodeSeeds() {
		requireDecodeLevel(t, x)
	}
	for range 3000 {
		requireDecodeLevel(t, randomText(r, decodeSeeds(), 3))
	}
}

// randomText joins a few pieces (one in oneIn of them) and random context.
func randomText(r *rand.Rand, pieces []string, oneIn int) string {
	var b strings.Builder
	for range 1 + r.IntN(6) {
		if r.IntN(oneIn) == 0 {
			b.WriteString(pieces[r.IntN(len(pieces))])
		} else {
			b.WriteString(randomContext(r))
		}
	}
	return b.String()
}

// TestDLPLiveRulesOfDecodedText: gating only the stretches a decoding pass changed
// finds the rules gating each decoded text in full finds.
func TestDLPLiveRulesOfDecodedText(t *testing.T) {
	t.Parallel()
	d, err := NewDLP()
	require.NoError(t, err)
	r := rand.New(rand.NewPCG(17, 19))
	secrets := []string{"ghp_0123456789abcdefghijABCDEFGHIJ012345", "api_key = 'abcdefghij0123456789'",
		"sk_live_0123456789abcdefghijklmn", "xoxb-123456789012-1234567890123-abcdefghijABCDEFGHIJ0123", "token: ey"}
	pieces := decodeSeeds()
	for _, sec := range secrets {
		pieces = append(pieces, base64.StdEncoding.EncodeToString([]byte(sec)), hex.EncodeToString([]byte(sec)),
			pctAllBytes(sec), base64.StdEncoding.EncodeToString([]byte(base64.StdEncoding.EncodeToString([]byte(sec)))),
			sec[:len(sec)/2], sec[len(sec)/2:])
	}
	decodedOnly := 0 // texts where a rule may match only once decoded
	for range 2000 {
		text := randomText(r, pieces, 2)
		live, depth := d.plan.liveRules(text, d.decodeDepth)
		want := d.plan.newLiveSet()
		x, n := text, 0
		d.plan.mark(x, 0, len(x), want)
		if len(d.plan.liveIDs(want)) < len(d.plan.liveIDs(live)) {
			decodedOnly++
		}
		for ; n < d.decodeDepth; n++ {
			next, changed := nextDecodeLevel(x)
			if len(changed) == 0 {
				break
			}
			x = next
			d.plan.mark(x, 0, len(x), want)
		}
		require.Equal(t, n, depth, "decoding passes of %q", text)
		require.Equal(t, d.plan.liveIDs(want), d.plan.liveIDs(live), "live rules of %q", text)
	}
	require.Greater(t, decodedOnly, 100, "the texts exercise the decoding passes")
}

func pctAllBytes(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		b.WriteString("%" + strings.ToUpper(hex.EncodeToString([]byte{s[i]})))
	}
	return b.String()
}

func FuzzDLPDecodeLevel(f *testing.F) {
	for _, x := range decodeSeeds() {
		f.Add(x)
	}
	f.Fuzz(func(t *testing.T, x string) {
		if len(x) > 1<<12 {
			t.Skip("bounded sizes keep the fuzzer fast")
		}
		requireDecodeLevel(t, x)
	})
}

func requireDecodeLevel(t *testing.T, x string) {
	t.Helper()
	want, segs := codec.NewDecoder().Decode(x, nil)
	got, changed := nextDecodeLevel(x)
	require.Equal(t, len(segs) > 0, len(changed) > 0, "decoded anything, in %q", x)
	require.Equal(t, want, got, "decoded text of %q", x)
	// Outside the changed stretches, the text is the input's.
	rest, prev := "", 0
	for _, c := range changed {
		require.LessOrEqual(t, prev, c.from)
		rest += got[prev:c.from] + "\x00"
		prev = c.to
	}
	rest += got[prev:]
	for _, piece := range strings.Split(rest, "\x00") {
		require.Contains(t, x, piece)
	}
}

func decodeSeeds() []string {
	b64 := base64.StdEncoding.EncodeToString([]byte("export GITHUB_TOKEN=ghp_0123456789abcdefghijABCDEFGHIJ012345\n"))
	return []string{
		"", "plain words only", `{"url":"https://api.example.com/v1?a=b\u0026c=d"}`,
		"config blob: " + b64, b64 + "%41" + b64, "%41" + b64 + "x%42",
		"a%41b%zz%42c\nd%43 %44e", "100% sure %4", "%%41", "%4%41",
		hex.EncodeToString([]byte("the quick brown fox jumps over it")),
		hex.EncodeToString([]byte("the quick brown fox jumps over it")) + "ZZZZZZZZZZZZZZZZZZ",
		`\u0041\u0042`, `\\u0041x`, `\\\u0041`, `prefix\u00`, "U+0041 U+0042\nU+0043",
		"U+0041x", "abc U+004", "key=" + base64.RawURLEncoding.EncodeToString([]byte("secret: value, more")),
		"a/b/c/d/e/f/g/h/i/j/k/l", "com/v1/documents?x", "line\n%41%42\n" + b64 + "\n",
		"%41-----BEGIN" + b64 + "%42", strings.Repeat("QUJD", 5) + "%2", "=====" + b64 + "==",
	}
}

// randomContext is text around a generated string: short, with the characters that
// bound a credential or an encoded segment.
func randomContext(r *rand.Rand) string {
	const chars = " \n\t=:\"'`;,.-_/\\+%{}[]()<>&?#abcXYZ012789fF\u00e9\u212a\u017f"
	runes := []rune(chars)
	n := r.IntN(12)
	var b strings.Builder
	for range n {
		b.WriteRune(runes[r.IntN(len(runes))])
	}
	return b.String()
}

// generate writes a random string matched by re, except where an assertion or a
// class decides otherwise (the caller checks).
func generate(r *rand.Rand, re *syntax.Regexp, b *strings.Builder) {
	switch re.Op {
	case syntax.OpLiteral:
		for _, c := range re.Rune {
			if re.Flags&syntax.FoldCase != 0 && r.IntN(3) == 0 {
				c = foldVariant(r, c)
			}
			b.WriteRune(c)
		}
	case syntax.OpCharClass:
		if len(re.Rune) == 0 {
			return
		}
		i := 2 * r.IntN(len(re.Rune)/2)
		lo, hi := re.Rune[i], re.Rune[i+1]
		if hi-lo > 200 {
			hi = lo + 200
		}
		c := lo + rune(r.IntN(int(hi-lo)+1))
		if !utf8.ValidRune(c) {
			c = lo
		}
		b.WriteRune(c)
	case syntax.OpAnyChar, syntax.OpAnyCharNotNL:
		b.WriteByte(" \nabcXYZ09=:-_"[r.IntN(14)])
	case syntax.OpCapture:
		generate(r, re.Sub[0], b)
	case syntax.OpConcat:
		for _, s := range re.Sub {
			generate(r, s, b)
		}
	case syntax.OpAlternate:
		generate(r, re.Sub[r.IntN(len(re.Sub))], b)
	case syntax.OpQuest:
		if r.IntN(2) == 0 {
			generate(r, re.Sub[0], b)
		}
	case syntax.OpStar, syntax.OpPlus, syntax.OpRepeat:
		lo, hi := 0, 3
		if re.Op == syntax.OpPlus {
			lo = 1
		}
		if re.Op == syntax.OpRepeat {
			lo, hi = re.Min, re.Max
			if hi < 0 || hi > lo+40 {
				hi = lo + 40
			}
		}
		for range lo + r.IntN(hi-lo+1) {
			generate(r, re.Sub[0], b)
		}
	}
}

func foldVariant(r *rand.Rand, c rune) rune {
	orbit := []rune{c}
	for f := unicode.SimpleFold(c); f != c; f = unicode.SimpleFold(f) {
		orbit = append(orbit, f)
	}
	return orbit[r.IntN(len(orbit))]
}

func ruleIDs(p *rulePlan) []string {
	seen := map[string]bool{}
	var ids []string
	for _, g := range p.gated {
		if !seen[g.id] {
			seen[g.id] = true
			ids = append(ids, g.id)
		}
	}
	sort.Strings(ids)
	return ids
}

func (p *rulePlan) isLive(live liveSet, id string) bool {
	for _, l := range p.liveIDs(live) {
		if l == id {
			return true
		}
	}
	return false
}

func (p *rulePlan) liveIDs(live liveSet) []string {
	var out []string
	for i, on := range live {
		switch {
		case !on:
		case i < len(p.gated):
			out = append(out, p.gated[i].id)
		default:
			out = append(out, p.ungated[i-len(p.gated)].id)
		}
	}
	return out
}
