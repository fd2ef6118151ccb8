package api

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/gofiber/fiber/v2"

	"github.com/aetherium-engine/aetherium/store"
)

// sessionList is a run's sessions: one per agent per delegation, the
// supervisor's first.
type sessionList struct {
	Sessions []store.SessionSummary `json:"sessions"`
}

// sessionHistory is one page of a session's full stored history. Messages a
// compaction summarized are marked compacted: the model's context holds the
// summary of its compaction in their place, never the rows themselves.
type sessionHistory struct {
	Messages    []store.HistoryMessage `json:"messages"`
	Compactions []store.Compaction     `json:"compactions"`
	// NextAfter is the after= of the next page; absent on the last page.
	NextAfter *int `json:"next_after,omitempty"`
}

func (s *Server) runSessions(c *fiber.Ctx) error {
	r, err := s.loadRun(c)
	if err != nil {
		return err
	}
	list, err := s.d.Store.RunSessions(c.UserContext(), r.ID)
	if err != nil {
		return err
	}
	if list == nil {
		list = []store.SessionSummary{}
	}
	return c.JSON(sessionList{Sessions: list})
}

func (s *Server) sessionHistory(c *fiber.Ctx) error {
	r, err := s.loadRun(c)
	if err != nil {
		return err
	}
	id := c.Params("session")
	notFound := &Error{Status: http.StatusNotFound, Field: "session", Message: fmt.Sprintf("run %s has no session %q", r.ID, printableParam(id))}
	// A session of another run answers as a missing one: the run's visibility
	// is what was checked.
	run, err := s.d.Store.SessionRun(c.UserContext(), id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && run != r.ID) {
		return notFound
	}
	if err != nil {
		return err
	}
	after := -1
	if v := c.Query("after"); v != "" {
		if after, err = strconv.Atoi(v); err != nil || after < -1 {
			return badRequest("after", "after must be a message seq (an integer from -1)")
		}
	}
	limit, err := queryLimit(c, 200, 1000)
	if err != nil {
		return err
	}
	msgs, comps, err := s.d.Store.SessionHistory(c.UserContext(), id, after, limit)
	if errors.Is(err, store.ErrNotFound) {
		return notFound
	}
	if err != nil {
		return err
	}
	out := sessionHistory{Messages: msgs, Compactions: comps}
	if out.Messages == nil {
		out.Messages = []store.HistoryMessage{}
	}
	if out.Compactions == nil {
		out.Compactions = []store.Compaction{}
	}
	if len(msgs) == limit {
		next := msgs[len(msgs)-1].Seq
		out.NextAfter = &next
	}
	return c.JSON(out)
}

// printableParam clips a path parameter for an error message.
func printableParam(s string) string {
	const most = 120
	q := strconv.Quote(s)
	if len(q) > most {
		return q[:most] + "…"
	}
	return q[1 : len(q)-1]
}
