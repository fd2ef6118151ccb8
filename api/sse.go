package api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/aetherium-engine/aetherium/events"
	"github.com/aetherium-engine/aetherium/store"
)

// streamEvents serves a run's events as SSE: replay from Last-Event-ID, then live
// until the terminal event. The events hub (Redis pub/sub) wakes it; an idle
// stream reads PostgreSQL only on its slow safety tick (api.sse_poll), which
// covers lost announcements. Open streams are capped per principal and per
// process (429 past either).
func (s *Server) streamEvents(c *fiber.Ctx) error {
	switch c.Query("format") {
	case "json":
		return s.listEvents(c)
	case "":
	default:
		return badRequest("format", "format %q: only json (or none, for the stream)", c.Query("format"))
	}
	r, err := s.loadRun(c)
	if err != nil {
		return err
	}
	var after int64
	last := c.Get("Last-Event-ID")
	if last == "" {
		last = c.Query("last_event_id")
	}
	if last != "" {
		n, err := strconv.ParseInt(last, 10, 64)
		if err != nil || n < 0 {
			return badRequest("Last-Event-ID", "Last-Event-ID %q is not an event id", last)
		}
		after = n
	}
	// A client resuming past a finished run's terminal event has nothing more to
	// receive: 204 tells an EventSource to stop reconnecting, where an open stream
	// would idle forever (the terminal event it waits for lies behind it). The
	// terminal event, not the run's status, decides: the status changes first.
	finished := false
	if store.Terminal(r.Status) {
		id, ok, err := s.d.Store.TerminalEventID(c.UserContext(), r.ID)
		if err != nil {
			return err
		}
		finished = ok && id <= after
	}
	if finished {
		evs, err := s.d.Store.EventsAfter(c.UserContext(), r.ID, after, 1)
		if err != nil {
			return fmt.Errorf("events of run %s: %w", r.ID, err)
		}
		if len(evs) == 0 {
			return c.SendStatus(fiber.StatusNoContent)
		}
	}
	release, err := s.streams.acquire(principal(c))
	if err != nil {
		c.Set("Retry-After", strconv.Itoa(int(StreamsRetryAfter.Seconds())))
		return err
	}
	c.Set("Content-Type", "text/event-stream")
	c.Set("Cache-Control", "no-cache")
	c.Set("Connection", "keep-alive")
	c.Set("X-Accel-Buffering", "no")
	runID := r.ID
	st, hub, poll, beat, log := s.d.Store, s.hub, s.cfg.SSEPoll, s.cfg.SSEHeartbeat, s.d.Log
	// The stream owns its connection to the end (Connection: close), so nothing else
	// reads from it: a read that returns means the client left, and the stream ends
	// at once instead of at its next failed write.
	conn := c.Context().Conn()
	c.Context().SetConnectionClose()
	// fasthttp runs the writer at once in a goroutine of its own, and to its end
	// whatever happens to the connection: the slot is released there.
	c.Context().SetBodyStreamWriter(func(w *bufio.Writer) {
		defer release()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go watchClose(ctx, conn, cancel)
		// One pub/sub connection per API process, shared by every stream.
		wake, stop, err := hub.Watch(ctx, runID)
		if err != nil {
			log.Warn("sse: watch events", "run_id", runID, "err", err)
		}
		defer stop()
		ticker := time.NewTicker(poll)
		defer ticker.Stop()
		// A keepalive comment (ignored by clients) every SSEHeartbeat.
		heartbeat := time.NewTicker(beat)
		defer heartbeat.Stop()
		for {
			evs, err := st.EventsAfter(ctx, runID, after, 500)
			if err != nil {
				log.Warn("sse: read events", "run_id", runID, "err", err)
			}
			for _, e := range evs {
				if err := writeEvent(w, e); err != nil {
					return // client went away
				}
				after = e.ID
				if events.Terminal(e.Type) {
					_ = w.Flush()
					return
				}
			}
			if len(evs) > 0 {
				if err := w.Flush(); err != nil {
					return
				}
				if len(evs) == 500 {
					continue
				}
			}
			if finished {
				return // the rest of a finished run's events, past its terminal one
			}
		wait:
			select {
			case <-ctx.Done():
				return
			case <-wake:
			case <-ticker.C:
			case <-heartbeat.C:
				if _, err := w.WriteString(": keepalive\n\n"); err != nil || w.Flush() != nil {
					return
				}
				goto wait
			}
		}
	})
	return nil
}

// StreamsRetryAfter is the Retry-After of a stream refused past a cap: streams
// are long-lived, so an immediate retry would only be refused again.
const StreamsRetryAfter = 30 * time.Second

// streamSlots counts the open event streams of one API process, per principal
// and in all, against api.max_streams_per_principal and api.max_streams.
type streamSlots struct {
	perPrincipal, total int

	mu    sync.Mutex
	open  map[string]int
	count int
}

func newStreamSlots(perPrincipal, total int) *streamSlots {
	return &streamSlots{perPrincipal: perPrincipal, total: total, open: map[string]int{}}
}

// acquire takes a slot for one stream of who, or answers 429 naming the cap it
// hit; release gives the slot back (once, however often it is called).
func (s *streamSlots) acquire(who string) (release func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := s.open[who]; n >= s.perPrincipal {
		return nil, &Error{Status: http.StatusTooManyRequests, Message: fmt.Sprintf(
			"%s already has %d event streams open (api.max_streams_per_principal); close one or retry later", who, n)}
	}
	if s.count >= s.total {
		return nil, &Error{Status: http.StatusTooManyRequests, Message: fmt.Sprintf(
			"this API process already holds %d event streams (api.max_streams); retry later", s.count)}
	}
	s.open[who]++
	s.count++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.count--
			if s.open[who]--; s.open[who] <= 0 {
				delete(s.open, who)
			}
		})
	}, nil
}

func writeEvent(w *bufio.Writer, e store.Event) error {
	payload, _ := json.Marshal(toStreamEvent(e))
	_, err := fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", e.ID, e.Type, payload)
	return err
}

// streamEvent is the data of one event of a run's stream.
type streamEvent struct {
	ID    int64  `json:"id"`
	RunID string `json:"run_id" jsonschema:"format=uuid"`
	// Type is the event type (run.queued, tool.call, …, run.completed).
	Type string `json:"type"`
	// Agent is the agent the event is about; empty for the run's own events.
	Agent string `json:"agent"`
	// Data is the type's payload.
	Data json.RawMessage `json:"data"`
	Time time.Time       `json:"time"`
	// TraceID is the trace of the span that wrote the event (docs/traces.md);
	// absent when tracing was off or no span of the run wrote it.
	TraceID string `json:"trace_id,omitempty"`
}

// watchClose cancels the stream when its client closes the connection (a client of
// an event stream sends nothing after its request). The server's read timeout
// would end the read early, so the deadline is lifted first.
func watchClose(ctx context.Context, conn net.Conn, cancel context.CancelFunc) {
	if conn == nil {
		return
	}
	_ = conn.SetReadDeadline(time.Time{})
	var b [1]byte
	for ctx.Err() == nil {
		if _, err := conn.Read(b[:]); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && ctx.Err() == nil {
				_ = conn.SetReadDeadline(time.Time{})
				continue
			}
			cancel()
			return
		}
	}
}
