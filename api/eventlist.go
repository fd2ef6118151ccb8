package api

import (
	"fmt"
	"strconv"

	"github.com/gofiber/fiber/v2"

	"github.com/aetherium-engine/aetherium/store"
)

// Page sizes of GET /api/runs/:id/events?format=json.
const (
	DefaultEventPage = 500
	MaxEventPage     = 5000
)

// eventPage is the answer of GET /api/runs/:id/events?format=json: a page of
// a run's stored events, as the stream sends them.
type eventPage struct {
	// Events are the run's events after after=, oldest first, at most limit=.
	Events []streamEvent `json:"events"`
	// NextAfter is the after= of the next page: the last event's id (after= itself when the page is empty). A page shorter than limit= was the last stored so far.
	NextAfter int64 `json:"next_after"`
	// Terminal is true when the run's terminal event (run.completed, run.failed, run.cancelled) is stored at or before next_after: what follows it is post-run events only.
	Terminal bool `json:"terminal"`
}

// listEvents serves a run's stored events as JSON, paged by event id (the
// events route with format=json): the history a client exports, without
// holding an event stream (and one of the principal's stream slots) open
// until it goes quiet. Same access as the stream: the run's owner, or
// read_all. A query parameter on the stream's own route rather than a path of
// its own: the same resource in another representation, which a browser's
// download or curl asks for without setting a header (the Studio's export and
// the CLI's runs export use it).
func (s *Server) listEvents(c *fiber.Ctx) error {
	r, err := s.loadRun(c)
	if err != nil {
		return err
	}
	var after int64
	if v := c.Query("after"); v != "" {
		if after, err = strconv.ParseInt(v, 10, 64); err != nil || after < 0 {
			return badRequest("after", "after must be an event id (an integer from 0)")
		}
	}
	limit, err := queryLimit(c, DefaultEventPage, MaxEventPage)
	if err != nil {
		return err
	}
	ctx := c.UserContext()
	evs, err := s.d.Store.EventsAfter(ctx, r.ID, after, limit)
	if err != nil {
		return fmt.Errorf("events of run %s: %w", r.ID, err)
	}
	page := eventPage{Events: make([]streamEvent, len(evs)), NextAfter: after}
	for i, e := range evs {
		page.Events[i] = toStreamEvent(e)
		page.NextAfter = e.ID
	}
	// Read after the events: a terminal event stored meanwhile has a larger id
	// than any of them, so it is not reported as read.
	id, ok, err := s.d.Store.TerminalEventID(ctx, r.ID)
	if err != nil {
		return err
	}
	page.Terminal = ok && id <= page.NextAfter
	return c.JSON(page)
}

// toStreamEvent is a stored event as the API sends it.
func toStreamEvent(e store.Event) streamEvent {
	return streamEvent{ID: e.ID, RunID: e.RunID, Type: e.Type, Agent: e.Agent, Data: e.Data, Time: e.CreatedAt, TraceID: e.TraceID}
}
