package api

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/gofiber/fiber/v2"

	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/replay"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/templates"
)

// ForkRequest is the body of POST /api/runs/:id/fork (docs/fork.md).
type ForkRequest struct {
	// At is the step (the replay report's numbering, a step of the
	// supervisor's session) the fork runs live from: steps 1 .. at-1 are the
	// record's.
	At int `json:"at" jsonschema:"minimum=1"`
	// Team replaces the team from the fork on (checked as an inline team).
	Team json.RawMessage `json:"team,omitempty"`
	// Model replaces the team's model; Prompt the supervisor's prompt. Either
	// makes the fork an inline team, named <template>-fork for a template run.
	Model  *llm.ModelConfig `json:"model,omitempty"`
	Prompt string           `json:"prompt,omitempty"`
}

// JSONSchemaProperty documents team as the template it is parsed into.
func (ForkRequest) JSONSchemaProperty(prop string) any {
	if prop == "team" {
		return templates.Template{}
	}
	return nil
}

// ForkResponse is the answer of POST /api/runs/:id/fork.
type ForkResponse = replay.ForkResult

// forkRun serves POST /api/runs/:id/fork. A fork copies the run's whole
// record (its sessions' histories) into a run of the caller, so the caller
// must be able to read the run, as for a replay or a retry: its owner or a
// reader of every run; another's run is the missing-run 404.
func (s *Server) forkRun(c *fiber.Ctx) error {
	r, err := s.loadRunFor(c, accessRead)
	if err != nil {
		return err
	}
	var req ForkRequest
	if err := decode(c.Body(), &req); err != nil {
		return err
	}
	if req.At < 1 {
		return badRequest("at", "at is the step to fork at, 1 or more (the replay report numbers the steps)")
	}
	if store.KindOf(r.Template) == store.RunKindMCP {
		return &Error{Status: http.StatusConflict, Field: "id", Message: "run " + r.ID + " is an MCP client's session: it has no team to fork"}
	}
	if s.d.Fork == nil {
		return &Error{Status: http.StatusNotImplemented, Message: "fork needs the worker's engine in this process or a queue to hand it to a worker; this one has neither"}
	}
	res, err := s.d.Fork(c.UserContext(), r.ID, submitter(c), req)
	switch {
	case errors.Is(err, replay.ErrNotFinished), errors.Is(err, replay.ErrForkDiverged):
		return &Error{Status: http.StatusConflict, Field: "id", Message: err.Error()}
	case errors.Is(err, replay.ErrBadForkPoint):
		return &Error{Status: http.StatusBadRequest, Field: "at", Message: err.Error()}
	case errors.Is(err, replay.ErrCorruptRecord), errors.Is(err, replay.ErrTooLarge):
		return &Error{Status: http.StatusUnprocessableEntity, Field: "id", Message: err.Error()}
	case errors.Is(err, replay.ErrPending):
		return pendingReplay(c, err)
	case err != nil:
		return submitError(c, err)
	}
	return c.Status(http.StatusAccepted).JSON(res)
}
