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
		return &Error{Status: http.StatusNotImplemented, Message: "replay runs in a process that holds the worker's engine (aetherium dev, or an api process opened with the worker role); this one does not"}
	}
	rep, err := s.d.Replay(c.UserContext(), r.ID)
	switch {
	case errors.Is(err, replay.ErrNotFinished):
		return &Error{Status: http.StatusConflict, Field: "id", Message: err.Error()}
	case errors.Is(err, replay.ErrCorruptRecord):
		return &Error{Status: http.StatusUnprocessableEntity, Field: "id", Message: err.Error()}
	case err != nil:
		return err
	}
	return c.JSON(rep)
}
