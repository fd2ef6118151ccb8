package fingerprint

import (
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"
)

// Match is private content an outbound text carries.
type Match struct {
	// Source names the private read it came from (the source given to Add).
	Source string
	// Chars is the length of the carried run of private content, in normalized
	// characters (letters and digits), the pieces of earlier texts included.
	Chars int
	// Form is how the current text carries it: "plain" (which includes
	// changed case, punctuation and JSON or source escaping: normalization
	// removes them), "spaced" (plain with a separator between most
	// characters: "s p a c e d", "s-p-a-c-e-d"), "reversed", or the decodings
	// applied, outermost first, joined by "+": "base64" (standard or URL
	// alphabet, padded or not), "hex", "url" (percent-encoding), "url+url",
	// "url+base64", "base64+reversed" ….
	Form string
	// Boilerplate is set for ordinary content every sampled gram of which
	// the private reads hold more than once: an import block, a license
	// header, a signature or a doc comment repeated across files. A caller
	// may ask rather than refuse for it. A file read twice is boilerplate
	// too, so it is a hint, never a reason to let the call go unasked.
	Boilerplate bool
}

// maxDepth caps the chain of decodings tried on one text.
const maxDepth = 2

// Carried reports whether text, an outbound call's arguments (raw JSON is
// fine), carries private content of the Set: a run of at least MinRun
// normalized characters of ordinary content, or SecretRun of a secret-like
// token. prior are the session's earlier outbound texts, oldest first: pieces
// they carried (each of MinPiece characters, or K inside a secret-like token)
// join the current text's into one run, so content split over calls or fields is
// found once the pieces together reach the run length. A run counts only when
// the current text adds to it: an earlier text's leak alone, already judged
// when it was sent, does not make every later call match.
//
// The cost is linear in the bytes read: text whole (plain and reversed) and its
// decoded runs (at most 4 bytes decoded for each byte of text, decodings at
// most two deep), and the newest MaxPrior bytes of prior. The runs of a text
// Carried has read (as text or as a prior) are remembered by its hash until
// the next Add, so passing the whole history with every call costs the new
// text only.
func (s *Set) Carried(text string, prior ...string) (Match, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.win.n+s.sec.n == 0 {
		return Match{}, false
	}
	sc := scanners.Get().(*scanner)
	defer func() {
		*sc = scanner{norm: sc.norm, rev: sc.rev[:0], dec: sc.dec[:0], ivs: sc.ivs[:0]}
		scanners.Put(sc)
	}()
	sc.s = s
	sc.scan(text, true)
	s.remember(text, sc.ivs)
	if len(sc.ivs) == 0 {
		return Match{}, false
	}
	budget := s.cfg.MaxPrior
	for i := len(prior) - 1; i >= 0 && budget > 0; i-- {
		p := prior[i]
		if len(p) > budget {
			p = p[len(p)-budget:]
		}
		budget -= len(p)
		if ivs, ok := s.recall(p); ok {
			sc.ivs = append(sc.ivs, ivs...)
			continue
		}
		from := len(sc.ivs)
		sc.scan(p, false)
		s.remember(p, sc.ivs[from:])
	}
	return s.decide(text, sc.ivs)
}

// scanners keep Carried's buffers between calls.
var scanners = sync.Pool{New: func() any { return new(scanner) }}

// maxRemembered caps the texts whose runs a Set remembers.
const maxRemembered = 1024

// remember keeps the runs a text carries, so that it costs nothing when it
// comes back as a prior text of later calls (a session's history is passed
// again with every call). Add forgets them all: a text may carry what was
// read after it.
func (s *Set) remember(text string, ivs []interval) {
	key := maphash.String(s.seed, text)
	kept := make([]interval, len(ivs))
	for i, iv := range ivs {
		iv.cur = false
		kept[i] = iv
	}
	s.memo.Lock()
	defer s.memo.Unlock()
	if s.runs == nil || len(s.runs) >= maxRemembered {
		s.runs = make(map[uint64][]interval)
	}
	s.runs[key] = kept
}

func (s *Set) recall(text string) ([]interval, bool) {
	key := maphash.String(s.seed, text)
	s.memo.Lock()
	defer s.memo.Unlock()
	ivs, ok := s.runs[key]
	return ivs, ok
}

// interval is a run of the Set's text that a text carries, in s.text positions.
type interval struct {
	start, end int
	cur        bool // carried by the current text
	common     bool // found by a gram the private text holds more than once
	form       string
	qa, qb     int // where in the normalized form it was found
}

type scanner struct {
	s      *Set
	ivs    []interval
	cur    bool
	budget int      // bytes the decodings of the text may still produce
	chains [8]chain // match's chains of common grams, by diagonal mod 8
	// Normalized forms, one a decoding depth, and the reversed one: reused.
	norm [maxDepth + 1][]byte
	rev  []byte
	dec  []byte // a decoding, before it is known to be text
}

func (sc *scanner) scan(text string, cur bool) {
	sc.cur = cur
	sc.budget = 4*len(text) + 4096
	sc.forms(text, nil, 0)
}

// forms matches text normalized and reversed, and the decodings of its
// encoded runs. chain is the decodings that produced text.
func (sc *scanner) forms(text string, chain []string, depth int) {
	norm := appendNorm(sc.norm[depth][:0], text)
	sc.norm[depth] = norm
	sc.match(norm, formName(chain, false))
	sc.rev = reverseRunes(sc.rev, norm)
	sc.match(sc.rev, formName(chain, true))
	if depth == maxDepth || sc.budget <= 0 {
		return
	}
	raw := text
	if strings.IndexByte(text, '\\') >= 0 {
		raw = jsonUnescape(text)
	}
	// One pass over the runs of the base64 alphabets; the hex runs lie in them.
	minB64, minHex := (sc.s.cfg.K*4+2)/3, 2*sc.s.cfg.K
	eachRun(raw, &isB64, min(minB64, minHex), func(run string) bool {
		if len(run) >= minB64 {
			if !sc.base64Run(run, chain, depth) {
				return false
			}
			// A URL path's segments are runs of their own: "/" is in the
			// standard alphabet, so "/c/<base64url>" would misalign the value.
			if strings.IndexByte(run, '/') >= 0 {
				for _, seg := range strings.Split(run, "/") {
					if len(seg) >= minB64 && len(seg) < len(run) && !sc.base64Run(seg, chain, depth) {
						return false
					}
				}
			}
		}
		ok := true
		eachRun(run, &isHex, minHex, func(run string) bool {
			ok = sc.decoded(hexPairs(sc.dec[:0], run), chain, "hex", depth) &&
				(len(run)%2 == 0 || sc.decoded(hexPairs(sc.dec[:0], run[1:]), chain, "hex", depth))
			return ok
		})
		return ok
	})
	if d, ok := decodePercent(raw); ok {
		sc.decoded([]byte(d), chain, "url", depth)
	}
}

// base64Run decodes a run aligned at its start and, when its length is not a
// multiple of 4, at its end too; false when the budget is spent.
func (sc *scanner) base64Run(run string, chain []string, depth int) bool {
	if !sc.decoded(b64(sc.dec[:0], run), chain, "base64", depth) {
		return false
	}
	r := len(run) % 4
	return r == 0 || sc.decoded(b64(sc.dec[:0], run[r:]), chain, "base64", depth)
}

// decoded spends the budget on d and matches it, when it is text; false when
// the budget is spent. d may be sc.dec: it is copied before it is read further.
func (sc *scanner) decoded(d []byte, chain []string, name string, depth int) bool {
	if cap(d) > cap(sc.dec) {
		sc.dec = d[:0] // keep the grown buffer
	}
	if sc.budget <= 0 {
		return false
	}
	if !looksText(d) {
		return true
	}
	sc.budget -= len(d)
	sc.forms(string(d), append(chain[:len(chain):len(chain)], name), depth+1)
	return true
}

func formName(chain []string, reversed bool) string {
	if reversed {
		chain = append(chain[:len(chain):len(chain)], "reversed")
	}
	if len(chain) == 0 {
		return "plain"
	}
	return strings.Join(chain, "+")
}

// match finds the runs of the Set's text that q (a normalized text) holds.
// It asks both tables' filters for every gram of q (cheaper than winnowing q
// too: the probes mostly hit the cache, a winnowing queue's branches do not
// predict), so every piece of MinPiece characters q shares with the private
// text is found by the gram Add selected in it. A gram found seeds an exact
// comparison, extended both ways as far as q and the source agree; grams
// inside a run found are not asked again. Runs too short to count, outside
// secret-like tokens, are not kept.
func (sc *scanner) match(q []byte, form string) {
	s := sc.s
	k := s.cfg.K
	if len(q) < k {
		return
	}
	sc.chains = [len(sc.chains)]chain{}
	reach := 0 // the end in q of the runs found so far
	secrets := s.sec.n > 0
	outPow := s.outPow1
	var h uint64
	for _, c := range q[:k-1] {
		h = h*hashBase + uint64(c)
	}
	for i := k - 1; i < len(q); i++ {
		h = h*hashBase + uint64(q[i])
		at, m := i-k+1, mix(h)
		h -= uint64(q[at]) * outPow
		if i < reach {
			continue
		}
		if s.win.mayHold(uint32(m)) {
			reach = max(reach, sc.seed(&s.win, q, at, m, form, true))
		}
		if secrets && i >= reach && s.sec.mayHold(uint32(m)) {
			reach = max(reach, sc.seed(&s.sec, q, at, m, form, false))
		}
	}
}

// chain is hits of common grams along one diagonal (the same offset between
// q and the private text), not yet verified.
type chain struct {
	diag, startQ, startP, lastQ int
	used                        bool
}

// seed looks the gram of q at qs up in tab and keeps the runs it starts; it
// returns how far in q they reach.
//
// A gram the private text repeats (common: in prose and code most hits are
// such grams, "ofthe", "iferrnil") counts only in a run of MinRun, and most
// hits of them are chance, each mapped to the gram's first place in the
// private text. When lazy is set, such a hit waits for a second on its
// diagonal (the same offset between q and the private text) within MinRun
// before the text is read (a cache miss each): a run of MinRun holds a
// selected gram in every window of MinPiece-K+1 grams, so at least two, and
// in a file read twice (every gram common) they share the diagonal.
func (sc *scanner) seed(tab *table, q []byte, qs int, m uint64, form string, lazy bool) int {
	s := sc.s
	k, t := s.cfg.K, s.text
	tag := uint32(m)
	reach := 0
	mask := len(tab.slots) - 1
	for i := int(tag >> tab.shift); ; i = (i + 1) & mask {
		slot := tab.slots[i]
		if slot == 0 {
			return reach
		}
		if uint32(slot>>32) != tag {
			continue
		}
		sq, p := qs, slotPos(slot)
		common := slot&commonBit != 0
		if lazy && common {
			var ok bool
			if sq, p, ok = sc.chain(qs, p); !ok {
				continue
			}
		}
		if string(t[p:p+k]) != string(q[sq:sq+k]) {
			continue
		}
		a, b, pa, pb := sq, sq+k, p, p+k
		for a > 0 && pa > 0 && q[a-1] == t[pa-1] {
			a--
			pa--
		}
		for b < len(q) && pb < len(t) && q[b] == t[pb] {
			b++
			pb++
		}
		reach = max(reach, b)
		if pb-pa >= s.cfg.MinPiece || len(s.secrets) > 0 && s.inSecret(pa, pb) {
			sc.ivs = append(sc.ivs, interval{pa, pb, sc.cur, common, form, a, b})
		}
	}
}

// chain adds a hit of a common gram (q position qs, private position p) to
// the chain of its diagonal; ok when the chain now has two hits, with the
// positions of its first. The chains are kept by diagonal mod 8: a chain
// another diagonal overwrote waits for two hits again.
func (sc *scanner) chain(qs, p int) (int, int, bool) {
	d := qs - p
	c := &sc.chains[d&(len(sc.chains)-1)]
	// Hits of a run lie within MinRun of each other.
	if c.used && c.diag == d && qs-c.lastQ < sc.s.cfg.MinRun {
		c.used = false
		return c.startQ, c.startP, true
	}
	*c = chain{diag: d, startQ: qs, startP: p, lastQ: qs, used: true}
	return 0, 0, false
}

// firstSecret is the index of the first secret-like token ending after p.
func (s *Set) firstSecret(p int) int {
	lo, hi := 0, len(s.secrets)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if s.secrets[m].end > p {
			hi = m
		} else {
			lo = m + 1
		}
	}
	return lo
}

// inSecret reports whether [a, b) overlaps a secret-like token by K characters.
func (s *Set) inSecret(a, b int) bool {
	for i := s.firstSecret(a); i < len(s.secrets) && s.secrets[i].start < b; i++ {
		if min(b, s.secrets[i].end)-max(a, s.secrets[i].start) >= s.cfg.K {
			return true
		}
	}
	return false
}

// decide joins the intervals into runs and returns the longest run that
// counts and that the current text adds to.
func (s *Set) decide(text string, ivs []interval) (Match, bool) {
	var best Match
	found := false
	// rank orders the candidates: a secret-like token first, then
	// ordinary content that is not boilerplate, then the longest.
	rank := func(m Match, secret bool) int {
		switch {
		case secret:
			return 2
		case !m.Boilerplate:
			return 1
		}
		return 0
	}
	bestRank, bestQ := -1, [2]int{}
	consider := func(pieces []interval, need int, secret bool) {
		slices.SortFunc(pieces, func(a, b interval) int { return a.start - b.start })
		for i := 0; i < len(pieces); {
			start, end := pieces[i].start, pieces[i].end
			cur, curLen, form, qa, qb := false, 0, "", 0, 0
			j := i
			for ; j < len(pieces) && pieces[j].start <= end; j++ {
				end = max(end, pieces[j].end)
				if p := pieces[j]; p.cur && p.end-p.start > curLen {
					cur, curLen, form, qa, qb = true, p.end-p.start, p.form, p.qa, p.qb
				}
			}
			if cur && end-start >= need {
				m := Match{Source: s.sources[s.sourceAt(start)].name, Chars: utf8.RuneCount(s.text[start:end]), Form: form,
					Boilerplate: !secret && s.allCommon(start, end)}
				if r := rank(m, secret); r > bestRank || r == bestRank && m.Chars > best.Chars {
					best, bestRank, found, bestQ = m, r, true, [2]int{qa, qb}
				}
			}
			i = j
		}
	}
	// Ordinary content: pieces of MinPiece, a run of MinRun. A piece found
	// by a gram the private text repeats joins no other: it is most likely
	// boilerplate, and every copy of it maps to the first, so that pieces
	// of boilerplate in many texts would join into runs the private text
	// never held.
	var plain []interval
	for _, iv := range ivs {
		if n := iv.end - iv.start; n >= s.cfg.MinRun || n >= s.cfg.MinPiece && !iv.common {
			plain = append(plain, iv)
		}
	}
	consider(plain, s.cfg.MinRun, false)
	// Secret-like tokens: pieces of K inside the token, a run of SecretRun.
	var secret []interval
	for _, iv := range ivs {
		for i := s.firstSecret(iv.start); i < len(s.secrets) && s.secrets[i].start < iv.end; i++ {
			sp := s.secrets[i]
			c := interval{max(iv.start, sp.start), min(iv.end, sp.end), iv.cur, false, iv.form, 0, 0}
			c.qa = iv.qa + c.start - iv.start
			c.qb = c.qa + c.end - c.start
			if c.end-c.start >= s.cfg.K {
				secret = append(secret, c)
			}
		}
	}
	consider(secret, s.cfg.SecretRun, true)
	if found && best.Form == "plain" {
		if from, to := rawSpan(text, bestQ[0], bestQ[1]); spaced(text[from:to], bestQ[1]-bestQ[0]) {
			best.Form = "spaced"
		}
	}
	return best, found
}

// looksText reports whether decoded bytes are text: valid UTF-8 with few
// control characters. Private reads are text, so their encodings decode to
// text; an identifier or a word read as base64 decodes to bytes that are not
// (an 8-byte decoding passes by chance about once in 2,000), and is dropped
// before it costs a normalization and a lookup.
func looksText(d []byte) bool {
	if !utf8.Valid(d) {
		return false
	}
	ctl := 0
	for i := 0; i < len(d); i++ {
		if c := d[i]; c < 0x20 && c != '\n' && c != '\r' && c != '\t' || c == 0x7f {
			ctl++
		}
	}
	return ctl*20 <= len(d)
}

// allCommon reports whether every gram of s.text[start:end] that the
// winnowed table holds is common (held more than once: boilerplate), reading
// until it finds one that is not.
func (s *Set) allCommon(start, end int) bool {
	k, t, seen := s.cfg.K, s.text, false
	all := true
	forGrams(t[start:end], k, s.outPow, func(i int, h uint64) bool {
		if !s.win.mayHold(uint32(h)) {
			return true
		}
		at := start + i
		s.win.lookup(uint32(h), func(p int, common bool) bool {
			if string(t[p:p+k]) != string(t[at:at+k]) {
				return true
			}
			seen = true
			all = all && common
			return false
		})
		return all
	})
	return seen && all
}
