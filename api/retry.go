package api

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/gofiber/fiber/v2"

	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/submit"
)

// Retry and clone (issue 41). A run keeps what its submission said: its
// template (or its team), prompt, variables, project and priority. From them
// GET /api/runs/:id/request rebuilds the body that submits the same run again
// (the Studio's "clone with edits" form posts it, edited), and
// POST /api/runs/:id/retry submits it at once as the caller: a new run, owned
// by the caller, through package submit like every run (validation, the
// priority cap, fairness, runs in flight, budgets, the free-disk guard). Each
// retry POST makes a new run, unless it carries an Idempotency-Key the caller
// used before (issue 43): then it answers with that key's first run.
//
// An inline team is kept rendered (its prompts with the variables in), so the
// rebuilt body carries the rendered team with the variables beside it: a
// submit renders again, which changes nothing unless a variable's value itself
// holds a {{.placeholder}}. A template run names its template, which is loaded
// as it is now.

// Submission endpoints a rebuilt request names.
const (
	templateEndpoint = "/api/orchestrator/run-from-template"
	inlineEndpoint   = "/api/orchestrator/run"
)

// RunRequest is the answer of GET /api/runs/:id/request: a run's submission as
// it can be posted again.
type RunRequest struct {
	// Endpoint is where Body is posted: run-from-template for a template run,
	// run for an inline team.
	Endpoint string `json:"endpoint" jsonschema:"enum=/api/orchestrator/run-from-template,enum=/api/orchestrator/run"`
	// Body is the request body of Endpoint: templateRequest's fields (template)
	// or inlineRequest's (team), never both.
	Body SubmitBody `json:"body"`
	// Untrusted names what in the request no person wrote (a webhook's payload
	// mapped into the prompt or variables). A retry keeps it, and the run
	// starts labelled untrusted; posting Body is the caller's own request, with
	// the caller's trust, so a client shows it before the caller sends.
	Untrusted []string `json:"untrusted,omitempty"`
}

// SubmitBody is the body of a submission, either kind: exactly the fields of
// POST /api/orchestrator/run-from-template (template) or of
// POST /api/orchestrator/run (team).
type SubmitBody struct {
	// Template is the template's name (run-from-template only).
	Template string `json:"template,omitempty"`
	// Team is the inline team, rendered (run only).
	Team    json.RawMessage `json:"team,omitempty"`
	Prompt  string          `json:"prompt"`
	Project string          `json:"project"`
	// Variables are the variables the run was submitted with.
	Variables map[string]any `json:"variables"`
	// Priority is the run's priority; absent when it was the default.
	Priority int `json:"priority,omitempty"`
	// Staging: the run worked in a staging workspace of its project.
	Staging bool `json:"staging,omitempty"`
}

// JSONSchemaProperty documents team as any JSON object: the rendered team.
func (SubmitBody) JSONSchemaProperty(prop string) any {
	if prop == "team" {
		return map[string]any{}
	}
	return nil
}

// requestOf rebuilds the submission of r; an MCP session run has none (409).
func requestOf(r store.Run) (RunRequest, error) {
	if store.KindOf(r.Template) == store.RunKindMCP {
		return RunRequest{}, &Error{Status: http.StatusConflict, Field: "id", Message: fmt.Sprintf(
			"run %s is an MCP client's session (%s): it was not submitted, so it has no request to post again", r.ID, r.Template)}
	}
	body := SubmitBody{Prompt: r.Prompt, Project: r.Project, Staging: r.Staging(), Variables: map[string]any{}}
	if len(r.Variables) > 0 && string(r.Variables) != "null" {
		if err := json.Unmarshal(r.Variables, &body.Variables); err != nil {
			return RunRequest{}, fmt.Errorf("run %s: stored variables: %w", r.ID, err)
		}
	}
	// The default was given or left out alike; left out, a capped submitter
	// gets it as it did (checkPriority does not cap the default).
	if r.Priority != queue.DefaultPriority {
		body.Priority = r.Priority
	}
	if r.Template != "" {
		body.Template = r.Template
		return RunRequest{Endpoint: templateEndpoint, Body: body, Untrusted: r.Untrusted}, nil
	}
	body.Team = r.Team
	return RunRequest{Endpoint: inlineEndpoint, Body: body, Untrusted: r.Untrusted}, nil
}

// getRunRequest serves GET /api/runs/:id/request. The request is the run's
// details (its whole team and variables), so only its owner or a reader of
// every run has it: not the on-call approver, who sees a run's summary to
// decide on its call.
func (s *Server) getRunRequest(c *fiber.Ctx) error {
	r, err := s.loadRunFor(c, accessRead)
	if err != nil {
		return err
	}
	req, err := requestOf(r)
	if err != nil {
		return err
	}
	return c.JSON(req)
}

// retryRun serves POST /api/runs/:id/retry: the run's request submitted again
// by the caller, through the submit's own path. It is the same text, so it
// starts as untrusted as the run did (a webhook's payload stays a webhook's).
func (s *Server) retryRun(c *fiber.Ctx) error {
	r, err := s.loadRunFor(c, accessRead)
	if err != nil {
		return err
	}
	req, err := requestOf(r)
	if err != nil {
		return err
	}
	b := req.Body
	// One way in for every run (package submit), the retry marked as such in
	// its run.queued event. An Idempotency-Key applies as on a submit.
	return s.start(c, submit.Request{Template: b.Template, Team: b.Team, Prompt: b.Prompt, Project: b.Project, Staging: b.Staging,
		Variables: b.Variables, Priority: b.Priority, Trigger: "retry:" + r.ID, Untrusted: r.Untrusted})
}
