package fingerprint

import (
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"sort"
	"sync"
)

// The defaults of Config. docs in doc.go say why these values.
const (
	// DefaultK is the gram length in normalized characters: the shortest piece
	// of a secret that can be found at all.
	DefaultK = 8
	// DefaultMinRun is how many contiguous normalized characters of ordinary
	// private content an outbound text (with its history) must carry to count.
	DefaultMinRun = 64
	// DefaultSecretRun is the same for a secret-like token of the private text.
	DefaultSecretRun = 16
	// DefaultMinPiece is the shortest piece of ordinary content that counts
	// towards a run split over texts or fields; every piece this long is found
	// (the winnowing window is MinPiece-K+1).
	DefaultMinPiece = 24
	// DefaultMaxSources caps the source names a Set keeps.
	DefaultMaxSources = 4096
	// DefaultMaxBytes caps the private text a Set fingerprints.
	DefaultMaxBytes = 32 << 20
	// DefaultMaxPrior caps the bytes of prior outbound texts Carried reads (the
	// most recent ones).
	DefaultMaxPrior = 1 << 20
)

// maxSecretToken is the longest token that can be secret-like: a key, a token,
// a PEM line are shorter; a base64 blob (an image) would otherwise keep every
// gram.
const maxSecretToken = 1024

// Config tunes a Set. A zero field takes its default.
type Config struct {
	// K is the gram length, in normalized characters (bytes of the normalized
	// UTF-8: one per ASCII letter or digit).
	K int
	// MinRun, SecretRun and MinPiece: see the defaults.
	MinRun, SecretRun, MinPiece int
	// MaxSources caps the sources kept; text of later sources is
	// fingerprinted under the last one's name.
	MaxSources int
	// MaxBytes caps the private text fingerprinted; Add drops what is past it
	// and Dropped reports it.
	MaxBytes int
	// MaxPrior caps the prior outbound bytes Carried reads, newest first.
	MaxPrior int
}

// WithDefaults fills the zero fields.
func (c Config) WithDefaults() Config {
	or := func(v, d int) int {
		if v == 0 {
			return d
		}
		return v
	}
	c.K = or(c.K, DefaultK)
	c.MinRun = or(c.MinRun, DefaultMinRun)
	c.SecretRun = or(c.SecretRun, DefaultSecretRun)
	c.MinPiece = or(c.MinPiece, DefaultMinPiece)
	c.MaxSources = or(c.MaxSources, DefaultMaxSources)
	c.MaxBytes = or(c.MaxBytes, DefaultMaxBytes)
	c.MaxPrior = or(c.MaxPrior, DefaultMaxPrior)
	return c
}

// Validate reports a configuration (after WithDefaults) that cannot work.
func (c Config) Validate() error {
	var errs []error
	for _, f := range []struct {
		name string
		v    int
	}{{"K", c.K}, {"MinRun", c.MinRun}, {"SecretRun", c.SecretRun}, {"MinPiece", c.MinPiece},
		{"MaxSources", c.MaxSources}, {"MaxBytes", c.MaxBytes}, {"MaxPrior", c.MaxPrior}} {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("fingerprint.%s: must not be negative, got %d", f.name, f.v))
		}
	}
	if c.K < 4 || c.K > 64 {
		errs = append(errs, fmt.Errorf("fingerprint.K: must be 4 to 64, got %d", c.K))
	}
	if c.MinPiece < c.K || c.SecretRun < c.K || c.MinRun < c.MinPiece {
		errs = append(errs, fmt.Errorf("fingerprint: need K ≤ MinPiece ≤ MinRun and K ≤ SecretRun, got K %d, MinPiece %d, MinRun %d, SecretRun %d",
			c.K, c.MinPiece, c.MinRun, c.SecretRun))
	}
	// A slot holds a position in 31 bits, and the kept text is at most twice
	// the private text (a 0 byte ends each read).
	if c.MaxBytes > 1<<30 {
		errs = append(errs, fmt.Errorf("fingerprint.MaxBytes: must be at most 1 GiB, got %d", c.MaxBytes))
	}
	return errors.Join(errs...)
}

// Set holds the fingerprints of one session's private reads. Add and Carried
// may be called concurrently (a read-write lock: Carried calls run in
// parallel, Add excludes them).
type Set struct {
	cfg     Config
	window  int    // winnowing window, in grams
	outPow  uint64 // hashBase^K
	outPow1 uint64 // hashBase^(K-1)

	mu      sync.RWMutex
	text    []byte // every source's normalized text, one after the other, each ended by a 0 byte
	sources []source
	secrets []span // secret-like tokens of text, in order, disjoint
	win     table  // the grams winnowing selects
	sec     table  // every gram of the secret-like tokens
	raw     int    // private bytes folded in
	dropped int    // private bytes past MaxBytes

	// The runs of the texts Carried has read, by their hash (see remember).
	seed maphash.Seed
	memo sync.Mutex
	runs map[uint64][]interval
}

type source struct {
	name       string
	start, end int // in text
}

type span struct{ start, end int }

// New returns an empty Set.
func New(cfg Config) (*Set, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Set{seed: maphash.MakeSeed(), cfg: cfg, window: cfg.MinPiece - cfg.K + 1, outPow: pow(cfg.K), outPow1: pow(cfg.K - 1)}
	s.win.init()
	s.sec.init()
	return s, nil
}

// Add fingerprints one private read: text as the tool returned it, name
// what the match will name (e.g. "read_file .env (turn 3)"). Grams never span
// two Adds. Text past MaxBytes is dropped (Dropped reports how much): a caller
// that must not miss anything treats a Set with drops as "may carry anything".
func (s *Set) Add(name, text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if room := s.cfg.MaxBytes - s.raw; len(text) > room {
		s.dropped += len(text) - max(room, 0)
		text = text[:max(room, 0)]
	}
	if text == "" {
		return
	}
	s.raw += len(text)
	s.memo.Lock()
	s.runs = nil
	s.memo.Unlock()
	start := len(s.text)
	secrets := s.appendText(text)
	end := len(s.text)
	if end == start {
		return
	}
	if n := len(s.sources); n > 0 && n >= s.cfg.MaxSources {
		s.sources[n-1].end = end // the last source takes the rest
	} else {
		s.sources = append(s.sources, source{name: name, start: start, end: end})
	}
	s.index(start, end, secrets)
	// A 0 byte, which no normalized text holds, ends every read: a run
	// found in the text stops at it without looking the source up.
	s.text = append(s.text, 0)
}

// appendText appends text's normalized form to s.text and returns the
// secret-like tokens in it (positions in s.text), also appended to s.secrets.
func (s *Set) appendText(text string) []span {
	first := len(s.secrets)
	tokStart := -1
	flush := func(i int) {
		if tokStart < 0 {
			return
		}
		n0 := len(s.text)
		s.text = appendNorm(s.text, text[tokStart:i])
		if n := len(s.text) - n0; n >= s.cfg.SecretRun && n <= maxSecretToken && secretLike(text[tokStart:i]) {
			s.secrets = append(s.secrets, span{n0, len(s.text)})
		}
		tokStart = -1
	}
	last := 0 // text before last is in s.text
	for i := 0; i < len(text); i++ {
		if tokenByte(text[i]) {
			if tokStart < 0 {
				s.text = appendNorm(s.text, text[last:i])
				tokStart = i
			}
			continue
		}
		if tokStart >= 0 {
			flush(i)
			last = i
		}
	}
	if tokStart >= 0 {
		flush(len(text))
	} else {
		s.text = appendNorm(s.text, text[last:])
	}
	return s.secrets[first:]
}

// tokenByte reports whether c may be part of a secret token: the base64 and
// base64url alphabets.
func tokenByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '+' || c == '/' || c == '_' || c == '-'
}

// secretLike reports whether a token looks generated rather than written:
// at least two of lower case, upper case and digits, the classes changing
// often (at least 3 times in 10 characters: "handleRequestTimeout" changes once
// a word), an entropy of at least 3 bits a character, and then either few
// vowels (under a quarter of the characters: written words and camelCase
// identifiers like "StatusNotFound" have about 35 %, random base62 16 %, hex
// 12 %) or letters and digits mixed (3 changes between them). Hex digests,
// UUIDs and identifiers like "utf8ToUtf16Converter" are secret-like too.
func secretLike(tok string) bool {
	var counts [256]int
	var seen [4]bool
	classes, changes, digitChanges, vowels, n, prev := 0, 0, 0, 0, 0, -1
	for i := 0; i < len(tok); i++ {
		c := tok[i]
		cl := 0
		switch {
		case c >= 'a' && c <= 'z':
			cl = 1
		case c >= 'A' && c <= 'Z':
			cl = 2
		case c >= '0' && c <= '9':
			cl = 3
		default:
			continue
		}
		switch c | 0x20 {
		case 'a', 'e', 'i', 'o', 'u':
			vowels++
		}
		if !seen[cl] {
			seen[cl] = true
			classes++
		}
		if prev >= 0 && cl != prev {
			changes++
			if cl == 3 || prev == 3 {
				digitChanges++
			}
		}
		prev = cl
		counts[c]++
		n++
	}
	if classes < 2 || changes*10 < (n-1)*3 || (vowels*4 >= n && digitChanges < 3) {
		return false
	}
	e := 0.0
	for _, k := range counts {
		if k > 0 {
			p := float64(k) / float64(n)
			e -= p * math.Log2(p)
		}
	}
	return e >= 3
}

// index adds the fingerprints of s.text[start:end]: the grams winnowing
// selects (the minimum hash of each window of s.window grams, so that every
// common piece of MinPiece characters holds one), and every gram that starts
// in a secret-like token.
func (s *Set) index(start, end int, secrets []span) {
	k := s.cfg.K
	if end-start < k {
		return
	}
	t := s.text
	add := func(tab *table, at int, h uint64) {
		tab.insert(uint32(h), at, func(pos int) bool { return string(t[pos:pos+k]) == string(t[at:at+k]) })
	}
	// Winnowing with a monotonic queue (rightmost minimum of each window).
	w := min(s.window, end-start-k+1)
	buf := make([]gram, 2*w+1)
	q := buf[:0]
	lastSel := -1
	var h uint64
	for i := start; i < end; i++ {
		h = h*hashBase + uint64(t[i])
		if i >= start+k {
			h -= uint64(t[i-k]) * s.outPow
		}
		at := i - k + 1
		if at < start {
			continue
		}
		m := mix(h)
		for len(q) > 0 && q[len(q)-1].h >= m {
			q = q[:len(q)-1]
		}
		if len(q) == cap(q) { // slide the queue back to the front of buf
			q = buf[:copy(buf, q)]
		}
		q = append(q, gram{at, m})
		if q[0].at <= at-w {
			q = q[1:]
		}
		if at-start >= w-1 && q[0].at != lastSel {
			lastSel = q[0].at
			add(&s.win, q[0].at, q[0].h)
		}
	}
	for _, sp := range secrets {
		forGrams(t[sp.start:sp.end], k, s.outPow, func(i int, h uint64) bool {
			add(&s.sec, sp.start+i, h)
			return true
		})
	}
}

// forGrams calls f with the start and mixed hash of each k-gram of b, until f
// returns false.
func forGrams(b []byte, k int, outPow uint64, f func(i int, h uint64) bool) {
	var h uint64
	for i := range b {
		h = h*hashBase + uint64(b[i])
		if i >= k {
			h -= uint64(b[i-k]) * outPow
		}
		if i >= k-1 && !f(i-k+1, mix(h)) {
			return
		}
	}
}

// Size is the number of fingerprints held.
func (s *Set) Size() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.win.n + s.sec.n
}

// Bytes is the private text folded in (dropped bytes excluded).
func (s *Set) Bytes() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.raw
}

// Dropped is the private text Add dropped past MaxBytes.
func (s *Set) Dropped() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.dropped
}

// sourceAt returns the index of the source holding text position p.
func (s *Set) sourceAt(p int) int {
	return sort.Search(len(s.sources), func(i int) bool { return s.sources[i].end > p })
}

// gram is a gram's start and mixed hash, in a winnowing queue.
type gram struct {
	at int
	h  uint64
}
