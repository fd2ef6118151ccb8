package tokens

import (
	"crypto/sha256"
	"sync"
)

// memoMinBytes is the shortest text a Memo remembers: hashing and storing a
// short text costs about what counting it does.
const memoMinBytes = 512

// Memo is a Counter that remembers the counts of the texts it counted. A
// session's messages do not change once written, and a tokenizer runs at
// megabytes a second at best, so recounting the whole history every turn
// costs a long session seconds a turn; with a Memo only the new messages are
// counted. Texts are remembered by their SHA-256 (never the text itself, which
// would keep every session's history alive), at most size of them, the
// oldest forgotten first. It is safe for concurrent use.
type Memo struct {
	c    Counter
	size int

	mu     sync.Mutex
	counts map[[sha256.Size]byte]int
	// ring holds the remembered keys in the order they came, for eviction.
	ring [][sha256.Size]byte
	next int
}

// NewMemo remembers up to size counts of c (at least one).
func NewMemo(c Counter, size int) *Memo {
	size = max(size, 1)
	return &Memo{c: c, size: size, counts: make(map[[sha256.Size]byte]int, size)}
}

// Name is the counter's name: a memo counts the same.
func (m *Memo) Name() string { return m.c.Name() }

// Count is the counter's count of text, remembered.
func (m *Memo) Count(text string) int {
	if len(text) < memoMinBytes {
		return m.c.Count(text)
	}
	key := sha256.Sum256([]byte(text))
	m.mu.Lock()
	n, ok := m.counts[key]
	m.mu.Unlock()
	if ok {
		return n
	}
	// Counted outside the lock: two goroutines may count one text at once,
	// which costs time, never a wrong count.
	n = m.c.Count(text)
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.counts[key]; ok {
		return n
	}
	if len(m.ring) < m.size {
		m.ring = append(m.ring, key)
	} else {
		delete(m.counts, m.ring[m.next])
		m.ring[m.next] = key
		m.next = (m.next + 1) % m.size
	}
	m.counts[key] = n
	return n
}
