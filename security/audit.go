package security

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/aetherium-engine/aetherium/store"
)

// AuditConfig tunes the audit writer.
type AuditConfig struct {
	// Buffer is the number of rows held before a writer waits. Default 4096.
	Buffer int
	// Batch is the most rows written per statement. Default 500.
	Batch int
	// Interval is the longest a row waits before it is written. Default 100ms.
	Interval time.Duration
}

// Auditor writes audit rows in batches from a bounded buffer. A full buffer makes
// the caller wait (backpressure) rather than drop a row; a failed write is retried
// until it succeeds or Close gives up (and logs every row it could not write).
type Auditor struct {
	cfg    AuditConfig
	store  *store.Store
	log    *slog.Logger
	ch     chan store.AuditRow
	done   chan struct{}
	once   sync.Once
	depth  func(int)
	closed chan struct{}
	mu     sync.RWMutex
	flushc chan chan struct{}
	// held counts rows queued or in the batch being written: the depth reported,
	// so a crash's exposure (rows not yet in the database) is what the gauge shows.
	held atomic.Int64
}

// NewAuditor starts the writer goroutine. depth (optional) receives the buffer depth.
func NewAuditor(cfg AuditConfig, st *store.Store, log *slog.Logger, depth func(int)) *Auditor {
	if cfg.Buffer <= 0 {
		cfg.Buffer = 4096
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 500
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 100 * time.Millisecond
	}
	if log == nil {
		log = slog.Default()
	}
	if depth == nil {
		depth = func(int) {}
	}
	a := &Auditor{cfg: cfg, store: st, log: log, ch: make(chan store.AuditRow, cfg.Buffer), done: make(chan struct{}),
		depth: depth, closed: make(chan struct{}), flushc: make(chan chan struct{})}
	go a.loop()
	return a
}

// ErrAuditClosed is a write after Close.
var ErrAuditClosed = errors.New("audit writer closed")

// Write queues a row, waiting while the buffer is full.
func (a *Auditor) Write(ctx context.Context, r store.AuditRow) error {
	a.mu.RLock()
	defer a.mu.RUnlock()
	select {
	case <-a.closed:
		// After Close, write synchronously so nothing is lost at the very end.
		return a.store.InsertAudit(context.WithoutCancel(ctx), []store.AuditRow{r})
	default:
	}
	select {
	case a.ch <- r:
		a.depth(int(a.held.Add(1)))
		return nil
	case <-ctx.Done():
		// The caller is going away; the row still must land.
		return a.store.InsertAudit(context.WithoutCancel(ctx), []store.AuditRow{r})
	}
}

// Flush waits until every row queued before the call is written.
func (a *Auditor) Flush() {
	done := make(chan struct{})
	select {
	case a.flushc <- done:
		<-done
	case <-a.done:
	}
}

// Close flushes and stops the writer.
func (a *Auditor) Close() {
	a.once.Do(func() {
		a.mu.Lock()
		close(a.closed)
		a.mu.Unlock()
		close(a.ch)
		<-a.done
	})
}

func (a *Auditor) loop() {
	defer close(a.done)
	ticker := time.NewTicker(a.cfg.Interval)
	defer ticker.Stop()
	batch := make([]store.AuditRow, 0, a.cfg.Batch)
	write := func() {
		if len(batch) == 0 {
			return
		}
		backoff := 50 * time.Millisecond
		for attempt := 1; ; attempt++ {
			err := a.store.InsertAudit(context.Background(), batch)
			if err == nil {
				break
			}
			if permanent(err) {
				// One bad row must not hold back (or take down) the others: write
				// them one by one and log, with its identity, any row refused for good.
				for _, r := range batch {
					if err := a.store.InsertAudit(context.Background(), []store.AuditRow{r}); err != nil {
						a.log.Error("audit row NOT written (refused by the database)", "call_key", r.CallKey, "run_id", r.RunID, "tool", r.Tool, "decision", r.Decision, "err", err)
					}
				}
				break
			}
			a.log.Error("audit write failed; retrying", "rows", len(batch), "attempt", attempt, "err", err)
			if attempt >= 60 {
				for _, r := range batch {
					a.log.Error("audit row NOT written", "call_key", r.CallKey, "run_id", r.RunID, "tool", r.Tool, "decision", r.Decision)
				}
				break
			}
			time.Sleep(backoff)
			backoff = min(backoff*2, 2*time.Second)
		}
		a.depth(int(a.held.Add(-int64(len(batch)))))
		batch = batch[:0]
	}
	for {
		select {
		case r, ok := <-a.ch:
			if !ok {
				write()
				return
			}
			batch = append(batch, r)
			if len(batch) >= a.cfg.Batch {
				write()
			}
		case <-ticker.C:
			write()
		case done := <-a.flushc:
			// Drain what is queued now, then write.
			for n := len(a.ch); n > 0; n-- {
				batch = append(batch, <-a.ch)
				if len(batch) >= a.cfg.Batch {
					write()
				}
			}
			write()
			close(done)
		}
	}
}

// permanent reports database refusals a retry cannot fix: data exceptions (class 22)
// and integrity violations (class 23).
func permanent(err error) bool {
	var pg *pgconn.PgError
	if !errors.As(err, &pg) {
		return false
	}
	return strings.HasPrefix(pg.Code, "22") || strings.HasPrefix(pg.Code, "23")
}
