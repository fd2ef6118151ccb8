package sandbox

import (
	"fmt"
	"strings"
	"sync"
)

// Capture is an io.Writer that keeps at most max bytes of a stream: the first half
// and the last half, so both how a command started and how it ended (where errors
// usually are) survive. It counts everything written and is safe for concurrent
// writers (stdout and stderr of one process).
type Capture struct {
	mu    sync.Mutex
	max   int
	head  []byte
	tail  []byte
	total int64
}

// NewCapture returns a Capture keeping at most max bytes (max >= 2).
func NewCapture(limit int) *Capture {
	return &Capture{max: max(limit, 2)}
}

// Write never fails: output past the cap is counted and dropped.
func (c *Capture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	written := len(p)
	c.total += int64(written)
	headCap := c.max / 2
	if n := headCap - len(c.head); n > 0 {
		k := min(n, len(p))
		c.head = append(c.head, p[:k]...)
		p = p[k:]
	}
	if len(p) == 0 {
		return written, nil
	}
	tailCap := c.max - headCap
	if len(p) >= tailCap {
		c.tail = append(c.tail[:0], p[len(p)-tailCap:]...)
		return written, nil
	}
	c.tail = append(c.tail, p...)
	// Compact only when the buffer has doubled, so a stream of small writes costs
	// amortized O(1) per byte.
	if len(c.tail) > 2*tailCap {
		c.tail = append(c.tail[:0], c.tail[len(c.tail)-tailCap:]...)
	}
	return written, nil
}

// Total is the number of bytes written.
func (c *Capture) Total() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}

// Truncated reports whether bytes were dropped.
func (c *Capture) Truncated() bool { return c.Total() > int64(c.max) }

// String returns the kept output, with a marker where bytes were dropped. It is
// valid UTF-8 even when the cut fell inside a character.
func (c *Capture) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	tailCap := c.max - c.max/2
	tail := c.tail
	if len(tail) > tailCap {
		tail = tail[len(tail)-tailCap:]
	}
	if c.total <= int64(c.max) {
		return strings.ToValidUTF8(string(c.head)+string(tail), "\uFFFD")
	}
	dropped := c.total - int64(len(c.head)) - int64(len(tail))
	return strings.ToValidUTF8(string(c.head), "\uFFFD") +
		fmt.Sprintf("\n[... output truncated: %d of %d bytes omitted ...]\n", dropped, c.total) +
		strings.ToValidUTF8(string(tail), "\uFFFD")
}

// TruncationMarker is the text every truncated output contains.
const TruncationMarker = "[... output truncated:"
