package events

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Hub fans Redis announcements out to every local watcher of a channel: a run's
// new events (Channel), a run's end (EndChannel), an MCP call's change of state
// (MCPCallChannel). One Hub per process holds one pub/sub connection however
// many streams and waits are open: a connection per SSE client would let the
// clients decide how many Redis connections the fleet holds. An announcement
// only says "re-read": the store stays the source of truth, and a watcher that
// missed one (Redis away) re-reads on its own slow safety tick.
type Hub struct {
	log *slog.Logger

	mu       sync.Mutex
	ps       *redis.PubSub
	watchers map[string]map[*watcher]struct{}
	closed   bool
	done     chan struct{}
}

type watcher struct{ wake chan struct{} }

// NewHub subscribes to nothing until the first Watch; Close releases the connection.
func NewHub(rdb redis.UniversalClient, log *slog.Logger) *Hub {
	if log == nil {
		log = slog.Default()
	}
	h := &Hub{log: log, watchers: map[string]map[*watcher]struct{}{}, done: make(chan struct{})}
	// Subscribe with no channels opens nothing yet; the connection is made by the
	// first channel subscribed and kept (and re-made by go-redis after a failure).
	h.ps = rdb.Subscribe(context.Background())
	go h.loop()
	return h
}

// Watch returns a channel that receives a value (coalesced) whenever an event of run
// is announced, and when the hub's subscription is re-established (announcements may
// have been lost meanwhile: the watcher should re-read). stop releases the watcher at
// once; it is safe to call more than once.
func (h *Hub) Watch(ctx context.Context, runID string) (wake <-chan struct{}, stop func(), err error) {
	return h.WatchChannel(ctx, Channel(runID))
}

// WatchChannel is Watch of any announcement channel (EndChannel,
// MCPCallChannel): the wake-ups of channel, on the process's one subscription.
func (h *Hub) WatchChannel(ctx context.Context, channel string) (wake <-chan struct{}, stop func(), err error) {
	w := &watcher{wake: make(chan struct{}, 1)}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, func() {}, redis.ErrClosed
	}
	set := h.watchers[channel]
	first := set == nil
	if first {
		set = map[*watcher]struct{}{}
		h.watchers[channel] = set
	}
	set[w] = struct{}{}
	h.mu.Unlock()
	if first {
		if err := h.ps.Subscribe(ctx, channel); err != nil {
			h.release(channel, w)
			return nil, func() {}, err
		}
	}
	var once sync.Once
	return w.wake, func() { once.Do(func() { h.release(channel, w) }) }, nil
}

func (h *Hub) release(channel string, w *watcher) {
	h.mu.Lock()
	set := h.watchers[channel]
	delete(set, w)
	last := set != nil && len(set) == 0
	if last {
		delete(h.watchers, channel)
	}
	closed := h.closed
	h.mu.Unlock()
	if last && !closed {
		// A Watch racing this unsubscribe re-subscribes after it: the per-channel
		// commands go out on one connection in the order they were issued.
		if err := h.ps.Unsubscribe(context.Background(), channel); err != nil {
			h.log.Debug("events hub: unsubscribe", "channel", channel, "err", err)
		}
	}
}

// Watchers is the number of open watchers (a gauge for tests and metrics).
func (h *Hub) Watchers() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, set := range h.watchers {
		n += len(set)
	}
	return n
}

func (h *Hub) loop() {
	defer close(h.done)
	backoff := time.Duration(0)
	for {
		msg, err := h.ps.Receive(context.Background())
		if err != nil {
			if h.isClosed() {
				return
			}
			// go-redis reconnects and re-subscribes on the next Receive; tell every
			// watcher to re-read, since announcements may have been lost. The
			// watchers' own poll covers the time Redis is away.
			h.wakeAll()
			backoff = min(max(2*backoff, 50*time.Millisecond), time.Second)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		switch m := msg.(type) {
		case *redis.Message:
			h.wake(m.Channel)
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				h.wake(m.Channel)
			}
		}
	}
}

func (h *Hub) wake(channel string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.watchers[channel] {
		select {
		case w.wake <- struct{}{}:
		default: // already woken: the watcher reads everything new at once
		}
	}
}

func (h *Hub) wakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, set := range h.watchers {
		for w := range set {
			select {
			case w.wake <- struct{}{}:
			default:
			}
		}
	}
}

func (h *Hub) isClosed() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.closed
}

// Close drops the subscription; open watchers stop receiving wake-ups.
func (h *Hub) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	h.mu.Unlock()
	err := h.ps.Close()
	<-h.done
	return err
}
