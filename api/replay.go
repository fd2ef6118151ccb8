package api

import (
	"errors"
	"net/http"

	"github.com/gofiber/fiber/v2"

	"github.com/aetherium-engine/aetherium/replay"
)

// ReplayReport is the answer of POST /api/runs/:id/replay: package replay's
// report (docs/replay.md).
type ReplayReport = replay.Report

// replayRun serves POST /api/runs/:id/replay. A replay reads the run's whole
// record (its sessions' histories), so only its owner or a reader of every run
// may ask for it, as for the run's request.
func (s *Server) replayRun(c *fiber.Ctx) error {
	r, err := s.loadRunFor(c, accessRead)
	if err != nil {
		return err
	}
	if s.d.Replay == nil {
		return &Error{Status: http.StatusNotImplemented, Message: "replay needs the worker's engine in this process or a queue to hand it to a worker; this one has neither"}
	}
	rep, err := s.d.Replay(c.UserContext(), r.ID)
	switch {
	case errors.Is(err, replay.ErrNotFinished):
		return &Error{Status: http.StatusConflict, Field: "id", Message: err.Error()}
	case errors.Is(err, replay.ErrCorruptRecord), errors.Is(err, replay.ErrTooLarge):
		return &Error{Status: http.StatusUnprocessableEntity, Field: "id", Message: err.Error()}
	case errors.Is(err, replay.ErrPending):
		return pendingReplay(c, err)
	case err != nil:
		return err
	}
	return c.JSON(rep)
}

// replayRetryAfter is the Retry-After of a replay or fork still running on a
// worker (503): asking again collects its result, or waits replay.wait again
// (the wait is the server's, so the client may ask again at once).
const replayRetryAfter = "1"

// pendingReplay answers a replay or a fork the worker has not finished within
// replay.wait: 503, to be asked again (the same request finds the same task).
func pendingReplay(c *fiber.Ctx, err error) error {
	c.Set("Retry-After", replayRetryAfter)
	return &Error{Status: http.StatusServiceUnavailable, Field: "id", Message: err.Error()}
}
