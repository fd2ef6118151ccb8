package events

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultAnnounceTimeout bounds one round of an Announcer's publishes.
const DefaultAnnounceTimeout = 5 * time.Second

// Announcer publishes a Recorder's announcements off the caller's path. An
// announcement only says "re-read" (Hub), so the step that stored events need
// not wait for Redis to hear it: measured in bench section 4 at 1-second model
// turns, the PUBLISH after each save cost a turn 0.9 ms on average at 1 × 100
// and 2–5 ms at 4 × 25 (p99 14–80 ms, the two cores busy), every turn. Calls
// only record the channel's latest message and wake one goroutine, which
// publishes everything pending in one pipeline: announcements of one channel
// made meanwhile are one PUBLISH (a watcher re-reads once either way).
//
// A failed round is logged and dropped, as a failed synchronous publish was:
// watchers re-read on their own safety tick. Close publishes what is pending
// and stops; announcements after Close are published at once, on the
// caller's path.
type Announcer struct {
	rdb redis.UniversalClient
	log *slog.Logger

	mu      sync.Mutex
	pending map[string]any
	closed  bool
	kick    chan struct{}
	stop    chan struct{}
	done    chan struct{}
}

// NewAnnouncer starts an Announcer publishing on rdb.
func NewAnnouncer(rdb redis.UniversalClient, log *slog.Logger) *Announcer {
	if log == nil {
		log = slog.Default()
	}
	a := &Announcer{rdb: rdb, log: log, pending: map[string]any{}, kick: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{})}
	go a.loop()
	return a
}

// Publish announces msg on channel without waiting for Redis.
func (a *Announcer) Publish(ctx context.Context, channel string, msg any) {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		if err := a.rdb.Publish(ctx, channel, msg).Err(); err != nil {
			a.log.Warn("event announce failed", "channel", channel, "err", err)
		}
		return
	}
	a.pending[channel] = msg
	a.mu.Unlock()
	select {
	case a.kick <- struct{}{}:
	default: // a round is due already and will take this one
	}
}

// Close publishes what is pending and stops the Announcer's goroutine.
func (a *Announcer) Close() {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		<-a.done
		return
	}
	a.closed = true
	a.mu.Unlock()
	close(a.stop)
	<-a.done
}

func (a *Announcer) loop() {
	defer close(a.done)
	for {
		select {
		case <-a.kick:
			a.flush()
		case <-a.stop:
			a.flush()
			return
		}
	}
}

// flush publishes everything pending in one pipeline.
func (a *Announcer) flush() {
	a.mu.Lock()
	pending := a.pending
	if len(pending) == 0 {
		a.mu.Unlock()
		return
	}
	a.pending = make(map[string]any, len(pending))
	a.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), DefaultAnnounceTimeout)
	defer cancel()
	pipe := a.rdb.Pipeline()
	for channel, msg := range pending {
		pipe.Publish(ctx, channel, msg)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		a.log.Warn("event announce failed", "channels", len(pending), "err", err)
	}
}
