package fingerprint

import (
	"math/bits"
	"slices"
	"strings"
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
	// changed case, spacing, punctuation between the characters and JSON or
	// source escaping: normalization removes them), "reversed", or the decodings
	// applied, outermost first, joined by "+": "base64" (standard or URL
	// alphabet, padded or not), "hex", "url" (percent-encoding), "url+url",
	// "url+base64", "base64+reversed" ….
	Form string
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
// most two deep), and the newest MaxPrior bytes of prior.
func (s *Set) Carried(text string, prior ...string) (Match, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.win.n+s.sec.n == 0 {
		return Match{}, false
	}
	sc := scanner{s: s}
	sc.scan(text, true)
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
		sc.scan(p, false)
	}
	return s.decide(sc.ivs)
}

// interval is a run of the Set's text that a text carries, in s.text positions.
type interval struct {
	start, end int
	cur        bool // carried by the current text
	common     bool // found by a gram the private text holds more than once
	form       string
}

type scanner struct {
	s      *Set
	ivs    []interval
	cur    bool
	budget int    // bytes the decodings of the text may still produce
	ring   []gram // match's winnowing queue
}

func (sc *scanner) scan(text string, cur bool) {
	sc.cur = cur
	sc.budget = 4*len(text) + 4096
	sc.forms(text, nil, 0)
}

// forms matches text normalized and reversed, and the decodings of its
// encoded runs. chain is the decodings that produced text.
func (sc *scanner) forms(text string, chain []string, depth int) {
	norm := appendNorm(nil, text)
	sc.match(norm, formName(chain, false))
	sc.match(reverseRunes(nil, norm), formName(chain, true))
	if depth == maxDepth || sc.budget <= 0 {
		return
	}
	raw := text
	if strings.IndexByte(text, '\\') >= 0 {
		raw = jsonUnescape(text)
	}
	minB64, minHex := (sc.s.cfg.K*4+2)/3, 2*sc.s.cfg.K
	eachRun(raw, isB64, minB64, func(run string) bool {
		for _, d := range decodeBase64(run) {
			if !sc.decoded(d, chain, "base64", depth) {
				return false
			}
		}
		return true
	})
	eachRun(raw, isHex, minHex, func(run string) bool {
		for _, d := range decodeHex(run) {
			if !sc.decoded(d, chain, "hex", depth) {
				return false
			}
		}
		return true
	})
	if d, ok := decodePercent(raw); ok {
		sc.decoded(d, chain, "url", depth)
	}
}

// decoded spends the budget on d and matches it; false when the budget is spent.
func (sc *scanner) decoded(d string, chain []string, name string, depth int) bool {
	if sc.budget <= 0 {
		return false
	}
	sc.budget -= len(d)
	sc.forms(d, append(chain[:len(chain):len(chain)], name), depth+1)
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
// It winnows q as Add winnows the private text, so that every piece of
// MinPiece characters they share has a gram both select, and asks the
// winnowed table for those; it asks the secret table (small, so its filter
// stays in cache) for every gram. A gram found seeds an exact comparison,
// extended both ways as far as q and the source agree. Runs too short to
// count, outside secret-like tokens, are not kept.
func (sc *scanner) match(q []byte, form string) {
	s := sc.s
	k, w := s.cfg.K, s.window
	if len(q) < k {
		return
	}
	if len(sc.ring) < w+1 {
		sc.ring = make([]gram, 1<<bits.Len(uint(w)))
	}
	ring, mask := sc.ring, len(sc.ring)-1
	head, tail := 0, 0      // the winnowing queue is ring[head&mask : tail&mask]
	reach, lastSel := 0, -1 // reach: the end in q of the runs found so far
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
		if secrets && i >= reach && s.sec.mayHold(uint32(m)) {
			reach = max(reach, sc.seed(&s.sec, q, at, m, form))
		}
		for tail > head && ring[(tail-1)&mask].h >= m {
			tail--
		}
		ring[tail&mask] = gram{at, m}
		tail++
		if ring[head&mask].at <= at-w {
			head++
		}
		if at >= w-1 {
			if g := ring[head&mask]; g.at != lastSel {
				lastSel = g.at
				if g.at+k > reach && s.win.mayHold(uint32(g.h)) {
					reach = max(reach, sc.seed(&s.win, q, g.at, g.h, form))
				}
			}
		}
	}
}

// gram is a gram's start and mixed hash, in a winnowing queue.
type gram struct {
	at int
	h  uint64
}

// seed looks the gram of q at qs up in tab and keeps the runs it starts; it
// returns how far in q they reach.
func (sc *scanner) seed(tab *table, q []byte, qs int, m uint64, form string) int {
	s := sc.s
	k, t := s.cfg.K, s.text
	reach := 0
	tab.lookup(uint32(m), func(p int, common bool) bool {
		if string(t[p:p+k]) != string(q[qs:qs+k]) {
			return true
		}
		a, b, pa, pb := qs, qs+k, p, p+k
		for a > 0 && pa > 0 && q[a-1] == t[pa-1] {
			a--
			pa--
		}
		for b < len(q) && pb < len(t) && q[b] == t[pb] {
			b++
			pb++
		}
		reach = max(reach, b)
		if pb-pa >= s.cfg.MinPiece || s.inSecret(pa, pb) {
			sc.ivs = append(sc.ivs, interval{pa, pb, sc.cur, common, form})
		}
		return true
	})
	return reach
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
func (s *Set) decide(ivs []interval) (Match, bool) {
	var best Match
	found := false
	consider := func(pieces []interval, need int) {
		slices.SortFunc(pieces, func(a, b interval) int { return a.start - b.start })
		for i := 0; i < len(pieces); {
			start, end := pieces[i].start, pieces[i].end
			cur, curLen, form := false, 0, ""
			j := i
			for ; j < len(pieces) && pieces[j].start <= end; j++ {
				end = max(end, pieces[j].end)
				if p := pieces[j]; p.cur && p.end-p.start > curLen {
					cur, curLen, form = true, p.end-p.start, p.form
				}
			}
			if cur && end-start >= need {
				if n := utf8.RuneCount(s.text[start:end]); !found || n > best.Chars {
					best = Match{Source: s.sources[s.sourceAt(start)].name, Chars: n, Form: form}
					found = true
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
	consider(plain, s.cfg.MinRun)
	// Secret-like tokens: pieces of K inside the token, a run of SecretRun.
	var secret []interval
	for _, iv := range ivs {
		for i := s.firstSecret(iv.start); i < len(s.secrets) && s.secrets[i].start < iv.end; i++ {
			sp := s.secrets[i]
			if c := (interval{max(iv.start, sp.start), min(iv.end, sp.end), iv.cur, false, iv.form}); c.end-c.start >= s.cfg.K {
				secret = append(secret, c)
			}
		}
	}
	consider(secret, s.cfg.SecretRun)
	return best, found
}
