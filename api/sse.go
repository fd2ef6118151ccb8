package api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/aetherium-engine/aetherium/events"
	"github.com/aetherium-engine/aetherium/store"
)

// streamEvents serves a run's events as SSE: replay from Last-Event-ID, then live
// until the terminal event. Redis pub/sub wakes it; a poll covers lost announcements.
func (s *Server) streamEvents(c *fiber.Ctx) error {
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
	c.Context().SetBodyStreamWriter(func(w *bufio.Writer) {
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

func writeEvent(w *bufio.Writer, e store.Event) error {
	payload, _ := json.Marshal(streamEvent{ID: e.ID, RunID: e.RunID, Type: e.Type, Agent: e.Agent, Data: e.Data, Time: e.CreatedAt})
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
