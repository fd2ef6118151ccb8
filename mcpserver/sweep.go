package mcpserver

import (
	"context"
	"sync"
	"time"
)

// sweeper is the safety net of every wait of this process: an announcement on
// the events hub can be lost (a worker's publish failed), so each waiting call
// must be re-read now and then. Instead of a query per waiting call per
// mcp.poll, the sweeper reads the states of all of them in one statement
// (store.MCPCallStates) and wakes only those whose row changed or whose run
// ended: 200 calls waiting for a human cost one query per mcp.poll.
type sweeper struct {
	mu      sync.Mutex
	running bool
	calls   map[string]*swept
}

type swept struct {
	wakes []chan struct{}
	seen  time.Time
}

// watch registers a wait on call id; the channel receives (coalesced) when the
// sweep finds the call changed. ok is false when no sweep runs in this process
// (the server is not serving: a test of Handler alone), and the caller polls on
// its own.
func (w *sweeper) watch(id string) (<-chan struct{}, func(), bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.running {
		return nil, func() {}, false
	}
	if w.calls == nil {
		w.calls = map[string]*swept{}
	}
	e := w.calls[id]
	if e == nil {
		e = &swept{}
		w.calls[id] = e
	}
	ch := make(chan struct{}, 1)
	e.wakes = append(e.wakes, ch)
	return ch, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		cur := w.calls[id]
		if cur == nil {
			return
		}
		for i, c := range cur.wakes {
			if c == ch {
				cur.wakes = append(cur.wakes[:i], cur.wakes[i+1:]...)
				break
			}
		}
		if len(cur.wakes) == 0 {
			delete(w.calls, id)
		}
	}, true
}

// run sweeps every poll until ctx ends.
func (s *Server) sweep(ctx context.Context) {
	w := &s.sweeper
	w.mu.Lock()
	w.running = true
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.running = false
		w.mu.Unlock()
	}()
	t := time.NewTicker(s.cfg.Poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		w.mu.Lock()
		ids := make([]string, 0, len(w.calls))
		for id := range w.calls {
			ids = append(ids, id)
		}
		w.mu.Unlock()
		if len(ids) == 0 {
			continue
		}
		states, err := s.d.Store.MCPCallStates(ctx, ids)
		if err != nil {
			s.d.Log.Warn("mcp sweep", "calls", len(ids), "err", err)
			continue
		}
		w.mu.Lock()
		for _, id := range ids {
			e, ok := w.calls[id]
			if !ok {
				continue
			}
			st, found := states[id]
			// A call gone, changed since the last sweep (or never swept), or of an
			// ended run wakes its waiters: they re-read it.
			if found && !st.RunTerminal && st.UpdatedAt.Equal(e.seen) {
				continue
			}
			if found {
				e.seen = st.UpdatedAt
			}
			for _, ch := range e.wakes {
				select {
				case ch <- struct{}{}:
				default:
				}
			}
		}
		w.mu.Unlock()
	}
}

// note records the version of a call's row its waiter just read, so the next
// sweep wakes it only for a newer one.
func (w *sweeper) note(id string, updated time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if e := w.calls[id]; e != nil && updated.After(e.seen) {
		e.seen = updated
	}
}
