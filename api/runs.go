package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/gofiber/fiber/v2"
	"github.com/google/uuid"
	"github.com/invopop/jsonschema"

	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/submit"
	"github.com/aetherium-engine/aetherium/templates"
	"github.com/aetherium-engine/aetherium/tracing"
	"github.com/aetherium-engine/aetherium/wsquota"
)

type inlineRequest struct {
	Prompt string `json:"prompt"`
	// Project is the project the run works in ("" for a private scratch project).
	Project   string          `json:"project"`
	Team      json.RawMessage `json:"team"`
	Variables map[string]any  `json:"variables"`
	// Priority is the run's priority, 1 (lowest) to 5 (default 3), at most the
	// caller's roles allow (fairness.max_priority).
	Priority int `json:"priority,omitempty" jsonschema:"minimum=1,maximum=5"`
	// Staging runs a project run in a staging workspace of its own (the Staging
	// tier) instead of the project's; POST /api/runs/:id/promote puts its files
	// into the project's afterwards. Needs project.
	Staging bool `json:"staging,omitempty"`
}

// JSONSchemaProperty documents team as the template it is parsed into
// (templates.ParseJSON), though the handler keeps it raw to name its errors.
func (inlineRequest) JSONSchemaProperty(prop string) any {
	if prop == "team" {
		return templates.Template{}
	}
	return nil
}

type templateRequest struct {
	Project   string         `json:"project"`
	Template  string         `json:"template"`
	Prompt    string         `json:"prompt"`
	Variables map[string]any `json:"variables"`
	// Priority is the run's priority, 1 (lowest) to 5 (default 3), at most the
	// caller's roles allow (fairness.max_priority).
	Priority int `json:"priority,omitempty" jsonschema:"minimum=1,maximum=5"`
	// Staging runs a project run in a staging workspace of its own (the Staging
	// tier) instead of the project's; POST /api/runs/:id/promote puts its files
	// into the project's afterwards. Needs project.
	Staging bool `json:"staging,omitempty"`
}

// decode parses a JSON body strictly and names the offending field on error.
func decode(body []byte, into any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return badRequest("", "request body is empty; send a JSON object")
	}
	if store.HasNUL(body) {
		return badRequest("", "the request holds a NUL character (\\u0000), which cannot be stored; remove it")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		var te *json.UnmarshalTypeError
		var se *json.SyntaxError
		switch {
		case errors.As(err, &te):
			return badRequest(te.Field, "field %q must be %s", te.Field, te.Type)
		case errors.As(err, &se):
			return badRequest("", "malformed JSON at byte %d: %v", se.Offset, err)
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			f := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
			return badRequest(f, "unknown field %q", f)
		default:
			return badRequest("", "malformed JSON: %v", err)
		}
	}
	if dec.More() {
		return badRequest("", "malformed JSON: trailing data after the object")
	}
	return nil
}

func (s *Server) submitInline(c *fiber.Ctx) error {
	var req inlineRequest
	if err := decode(c.Body(), &req); err != nil {
		return err
	}
	return s.start(c, submit.Request{Team: req.Team, Prompt: req.Prompt, Project: req.Project, Staging: req.Staging, Variables: req.Variables, Priority: req.Priority})
}

func (s *Server) submitTemplate(c *fiber.Ctx) error {
	var req templateRequest
	if err := decode(c.Body(), &req); err != nil {
		return err
	}
	if req.Template == "" {
		return badRequest("template", "template is required")
	}
	return s.start(c, submit.Request{Template: req.Template, Prompt: req.Prompt, Project: req.Project, Staging: req.Staging, Variables: req.Variables, Priority: req.Priority})
}

// start submits req as the caller (package submit holds every check), with the
// request's Idempotency-Key: 202 with the run, or with the key's first run
// (Idempotent-Replayed: true).
func (s *Server) start(c *fiber.Ctx, req submit.Request) error {
	req.By = submitter(c)
	req.IdempotencyKey = c.Get(IdempotencyKeyHeader)
	// The client's W3C trace context, when valid, parents the run's trace
	// (package submit checks it); its baggage header is never read.
	req.TraceParent = c.Get(TraceParentHeader)
	res, err := s.d.Submit.Submit(c.UserContext(), req)
	if err != nil {
		return submitError(c, err)
	}
	if res.Replayed {
		c.Set(IdempotentReplayedHeader, "true")
	}
	return c.Status(http.StatusAccepted).JSON(submitResponse{RunID: res.RunID, Status: res.Status, Priority: res.Priority, Position: res.Position})
}

// IdempotencyKeyHeader makes a submission at most once per principal and key
// (a day); IdempotentReplayedHeader marks an answer that is the key's first run.
const (
	IdempotencyKeyHeader     = "Idempotency-Key"
	IdempotentReplayedHeader = "Idempotent-Replayed"
	// TraceParentHeader is the W3C trace context a client may send with a
	// submission: the run's trace joins the client's (docs/traces.md).
	TraceParentHeader = "traceparent"
)

// submitter is the caller as package submit knows principals.
func submitter(c *fiber.Ctx) submit.Principal {
	return submit.Principal{Name: principal(c), Roles: callerRoles(c), Admin: hasRole(c, RoleAdmin), ReadAll: seesAllRuns(c)}
}

// submitError answers a refusal of package submit with its status, field and
// Retry-After; other errors are the fleet's (500).
func submitError(c *fiber.Ctx, err error) error {
	var e *submit.Error
	if !errors.As(err, &e) {
		return err
	}
	if e.RetryAfter > 0 {
		c.Set("Retry-After", strconv.Itoa(int(math.Ceil(e.RetryAfter.Seconds()))))
	}
	return &Error{Status: e.Status(), Field: e.Field, Message: e.Message}
}

type submitResponse struct {
	RunID string `json:"run_id" jsonschema:"format=uuid"`
	// Status is queued for a new run; an Idempotency-Key's replay answers with
	// its first run's status now.
	Status string `json:"status" jsonschema:"enum=queued,enum=running,enum=waiting,enum=completed,enum=failed,enum=cancelled"`
	// Priority is the run's priority (1-5).
	Priority int `json:"priority"`
	// Position is the run's place in the line of its fairness key's waiting
	// runs (1: next) when the key is at its run limit (fairness.keys.<key>.runs);
	// absent when the run was admitted at once.
	Position int `json:"position,omitempty"`
}

type runView struct {
	ID          string `json:"id" jsonschema:"format=uuid"`
	Status      string `json:"status"`
	Prompt      string `json:"prompt"`
	Template    string `json:"template,omitempty"`
	Team        string `json:"team"`
	Result      string `json:"result"`
	Error       string `json:"error"`
	Reason      string `json:"reason,omitempty"`
	TokensUsed  int64  `json:"tokens_used"`
	TokenBudget int64  `json:"token_budget"`
	// CostUSD is what the run's model calls cost, in dollars (six decimals, by
	// the fleet's price table); CostBudgetUSD its money budget, "" for none.
	CostUSD       string  `json:"cost_usd"`
	CostBudgetUSD string  `json:"cost_budget_usd,omitempty"`
	CreatedAt     string  `json:"created_at" jsonschema:"format=date-time"`
	UpdatedAt     string  `json:"updated_at" jsonschema:"format=date-time"`
	FinishedAt    *string `json:"finished_at,omitempty" jsonschema:"format=date-time"`
	Owner         string  `json:"owner"`
	Project       string  `json:"project,omitempty"`
	// Priority is the run's priority, 1 (lowest) to 5.
	Priority int `json:"priority"`
	// Waiting is true while the run waits for its fairness key's run limit
	// (fairness.keys.<key>.runs) to admit it; Position is then its place in
	// that line (1: next), on GET /api/runs/:id only.
	Waiting  bool `json:"waiting,omitempty"`
	Position int  `json:"position,omitempty"`
	// Kind is "job" (a submitted run) or "mcp" (an MCP client's session: it runs
	// as long as the client calls, with no duration or tokens of its own).
	Kind string `json:"kind" jsonschema:"enum=job,enum=mcp"`
	// TraceURL links the run to its trace in the deployment's trace viewer
	// (tracing.trace_url with the run's trace id), on GET /api/runs/:id only;
	// absent without a template or when tracing was off at submission.
	TraceURL string `json:"trace_url,omitempty" jsonschema:"format=uri"`
	// WorkspaceTier is the storage tier of the run's workspace: production (its
	// project's), staging (a staging run's own) or temp (a plain run's own).
	WorkspaceTier string `json:"workspace_tier" jsonschema:"enum=production,enum=staging,enum=temp"`
}

// JSONSchemaExtend lists the statuses a run can have, from the set listRuns accepts.
func (runView) JSONSchemaExtend(s *jsonschema.Schema) {
	if p, ok := s.Properties.Get("status"); ok {
		p.Enum = enumOf(statuses)["enum"].([]any)
	}
}

func view(r store.Run) runView {
	var team struct {
		Name string `json:"name"`
	}
	_ = json.Unmarshal(r.Team, &team)
	v := runView{ID: r.ID, Status: r.Status, Prompt: r.Prompt, Template: r.Template, Team: team.Name, Result: r.Result,
		Error: r.Error, Reason: r.Reason, TokensUsed: r.TokensUsed, TokenBudget: r.TokenBudget, Owner: r.Owner, Project: r.Project,
		Priority: r.Priority, Waiting: r.Status == store.RunQueued && r.AdmittedAt == nil, Kind: store.KindOf(r.Template),
		CostUSD: dollars(r.Cost), CostBudgetUSD: dollars(r.CostBudget), WorkspaceTier: string(wsquota.TierOf(r.WorkspaceID())),
		CreatedAt: r.CreatedAt.UTC().Format("2006-01-02T15:04:05.000Z07:00"), UpdatedAt: r.UpdatedAt.UTC().Format("2006-01-02T15:04:05.000Z07:00")}
	if r.FinishedAt != nil {
		f := r.FinishedAt.UTC().Format("2006-01-02T15:04:05.000Z07:00")
		v.FinishedAt = &f
	}
	return v
}

func runID(c *fiber.Ctx) (string, error) {
	id := c.Params("id")
	if _, err := uuid.Parse(id); err != nil {
		return "", badRequest("id", "run id %q is not a UUID", id)
	}
	return strings.ToLower(id), nil
}

// runAccess is what a handler is about to do with a run: each has its own scope.
type runAccess int

const (
	// accessRead: the run's details (events, audit, delegations, …): its owner,
	// read_all and admin.
	accessRead runAccess = iota
	// accessSummary: the run view of GET /api/runs/:id; also the on-call approver
	// for a run that asked for an approval (what it needs to decide one).
	accessSummary
	// accessCancel: its owner and admin only.
	accessCancel
)

// loadRun loads the run of the :id parameter for reading its details. Every
// per-run handler goes through it (or loadRunFor): a run outside the caller's
// scope answers exactly like a missing one, so its existence does not leak.
func (s *Server) loadRun(c *fiber.Ctx) (store.Run, error) {
	return s.loadRunFor(c, accessRead)
}

func (s *Server) loadRunFor(c *fiber.Ctx, access runAccess) (store.Run, error) {
	id, err := runID(c)
	if err != nil {
		return store.Run{}, err
	}
	notFound := &Error{Status: http.StatusNotFound, Field: "id", Message: fmt.Sprintf("run %s not found", id)}
	r, err := s.d.Store.GetRun(c.UserContext(), id)
	if errors.Is(err, store.ErrNotFound) {
		return r, notFound
	}
	if err != nil {
		return r, err
	}
	visible := r.Owner == principal(c) || seesAllRuns(c)
	if !visible && access == accessSummary && hasRole(c, RoleApprove) {
		if visible, err = s.d.Store.HasApprovals(c.UserContext(), r.ID); err != nil {
			return r, err
		}
	}
	if !visible {
		return store.Run{}, notFound
	}
	if access == accessCancel && r.Owner != principal(c) && !hasRole(c, RoleAdmin) {
		return store.Run{}, &Error{Status: http.StatusForbidden, Field: "id", Message: fmt.Sprintf("run %s belongs to %s: only its owner or an admin may cancel it", id, r.Owner)}
	}
	return r, nil
}

func (s *Server) getRun(c *fiber.Ctx) error {
	r, err := s.loadRunFor(c, accessSummary)
	if err != nil {
		return err
	}
	v := view(r)
	v.TraceURL = tracing.TraceLink(s.d.TraceURL, r.TraceContext)
	if v.Waiting {
		if v.Position, err = s.d.Store.QueuePosition(c.UserContext(), r.ID); err != nil {
			return err
		}
	}
	return c.JSON(v)
}

func (s *Server) getDelegations(c *fiber.Ctx) error {
	r, err := s.loadRun(c)
	if err != nil {
		return err
	}
	ds, err := s.d.Store.RunDelegations(c.UserContext(), r.ID)
	if err != nil {
		return err
	}
	if ds == nil {
		ds = []store.Delegation{}
	}
	return c.JSON(delegationList{Delegations: ds})
}

type delegationList struct {
	Delegations []store.Delegation `json:"delegations"`
}

var statuses = map[string]bool{"queued": true, "running": true, "waiting": true, "completed": true, "failed": true, "cancelled": true}

func (s *Server) listRuns(c *fiber.Ctx) error {
	status := c.Query("status")
	if status != "" && !statuses[status] {
		return badRequest("status", "status %q is not one of queued, running, waiting, completed, failed, cancelled", status)
	}
	limit, err := queryLimit(c, 50, 500)
	if err != nil {
		return err
	}
	cursor := c.Query("cursor")
	if cursor != "" {
		if _, err := uuid.Parse(cursor); err != nil {
			return badRequest("cursor", "cursor %q is not a run id", cursor)
		}
	}
	search := c.Query("q")
	if len(search) > maxRunSearch || !utf8.ValidString(search) || strings.ContainsRune(search, 0) {
		return badRequest("q", "q must be UTF-8 text of at most %d bytes without NUL", maxRunSearch)
	}
	f := store.RunFilter{Owner: ownerScope(c), Status: status, Search: search, Team: c.Query("team"), Project: c.Query("project"), Kind: c.Query("kind")}
	switch f.Kind {
	case "", store.RunKindJob, store.RunKindMCP:
	default:
		return badRequest("kind", "kind %q is not job or mcp", f.Kind)
	}
	for _, v := range []struct{ field, value string }{{"team", f.Team}, {"project", f.Project}, {"owner", c.Query("owner")}} {
		if len(v.value) > maxRunSearch || !utf8.ValidString(v.value) || strings.ContainsRune(v.value, 0) {
			return badRequest(v.field, "%s must be UTF-8 text of at most %d bytes without NUL", v.field, maxRunSearch)
		}
	}
	if owner := c.Query("owner"); owner != "" {
		if f.Owner != "" && owner != f.Owner {
			// A principal without read_all lists its own runs only: asking for
			// another's is refused, not answered with an empty page that reads as
			// "they have none".
			return &Error{Status: http.StatusForbidden, Field: "owner", Message: fmt.Sprintf("%s may list only its own runs (read_all lists everyone's)", f.Owner)}
		}
		f.Owner = owner
	}
	runs, err := s.d.Store.FindRuns(c.UserContext(), f, limit, cursor)
	if err != nil {
		return err
	}
	out := make([]runView, len(runs))
	for i, r := range runs {
		out[i] = view(r)
	}
	next := ""
	if len(runs) == limit {
		next = runs[len(runs)-1].ID
	}
	return c.JSON(runList{Runs: out, NextCursor: next})
}

// maxRunSearch bounds GET /api/runs?q: a search is a substring of a run's id,
// prompt, template, project, owner or team name, not a document.
const maxRunSearch = 200

type runList struct {
	Runs []runView `json:"runs"`
	// NextCursor is the cursor of the next page; empty on the last one.
	NextCursor string `json:"next_cursor"`
}

func (s *Server) cancelRun(c *fiber.Ctx) error {
	r, err := s.loadRunFor(c, accessCancel)
	if err != nil {
		return err
	}
	r, changed, err := s.d.Submit.Cancel(c.UserContext(), r.ID, "cancelled by request")
	if err != nil {
		return err
	}
	if !changed {
		return &Error{Status: http.StatusConflict, Field: "id", Message: fmt.Sprintf("run %s is already %s", r.ID, r.Status)}
	}
	return c.JSON(view(r))
}

// Promotion is the answer of POST /api/runs/:id/promote.
type Promotion struct {
	// RunID is the staging run whose workspace was promoted.
	RunID string `json:"run_id" jsonschema:"format=uuid"`
	// Project is the project's slug; ProjectID its id.
	Project   string `json:"project"`
	ProjectID string `json:"project_id" jsonschema:"format=uuid"`
	// From is the staging workspace (Staging tier), To the project's
	// (Production tier), whose files are now a copy of From's.
	From string `json:"from"`
	To   string `json:"to"`
}

// promoteRun promotes a completed staging run's workspace into its project's:
// the project's workspace becomes a copy of the run's (storage tiers, Staging
// -> Production), audited in the project's audit.
func (s *Server) promoteRun(c *fiber.Ctx) error {
	r, err := s.loadRunFor(c, accessCancel)
	if err != nil {
		return err
	}
	conflict := func(format string, a ...any) error {
		return &Error{Status: http.StatusConflict, Field: "id", Message: fmt.Sprintf(format, a...)}
	}
	if !r.Staging() {
		return conflict("run %s did not work in a staging workspace (submit it into a project with staging: true)", r.ID)
	}
	if r.Status != store.RunCompleted {
		return conflict("run %s is %s: only a completed staging run is promoted", r.ID, r.Status)
	}
	if s.d.PromoteWorkspace == nil {
		return &Error{Status: http.StatusNotImplemented, Message: "this API process does not manage the workspaces"}
	}
	access := projectAccess(c)
	p, err := s.d.Store.PromoteWorkspace(c.UserContext(), r, principal(c), func(ctx context.Context, p store.Project, from, to string) error {
		if !access.MayUse(p) {
			return &Error{Status: http.StatusForbidden, Field: "id", Message: fmt.Sprintf("project %s belongs to %s: only its owner or an admin may promote into it", p.Slug, p.Owner)}
		}
		return s.d.PromoteWorkspace(ctx, from, to)
	})
	switch {
	case errors.Is(err, store.ErrNoProject):
		return conflict("the project of run %s no longer exists", r.ID)
	case errors.Is(err, store.ErrProjectBusy):
		return conflict("%v: promote once they have ended", err)
	case errors.Is(err, wsquota.ErrNoWorkspace):
		return conflict("run %s made no workspace to promote", r.ID)
	case errors.Is(err, wsquota.ErrExceeded):
		return &Error{Status: http.StatusUnprocessableEntity, Field: "id", Message: err.Error()}
	case errors.Is(err, wsquota.ErrDiskFull):
		return &Error{Status: http.StatusInsufficientStorage, Message: err.Error()}
	case err != nil:
		return err
	}
	return c.JSON(Promotion{RunID: r.ID, Project: p.Slug, ProjectID: p.ID, From: r.Workspace, To: p.Workspace})
}

func (s *Server) listTemplates(c *fiber.Ctx) error {
	names, err := s.d.Templates.List()
	if err != nil {
		return err
	}
	return c.JSON(templateList{Templates: names})
}

type templateList struct {
	Templates []string `json:"templates"`
}

// TemplateInfo is the answer of GET /api/templates/:name: what a form needs to
// submit the template.
type TemplateInfo struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Variables are the variables its prompts use; each must be given.
	Variables []string `json:"variables"`
}

func (s *Server) getTemplate(c *fiber.Ctx) error {
	name := c.Params("name")
	team, err := s.d.Templates.Load(name, s.d.Registry)
	switch {
	case errors.Is(err, templates.ErrUnknownTemplate):
		return &Error{Status: http.StatusNotFound, Field: "name", Message: err.Error()}
	case err != nil:
		return &Error{Status: http.StatusUnprocessableEntity, Field: "name", Message: err.Error()}
	}
	return c.JSON(TemplateInfo{Name: name, Description: team.Description, Variables: team.Variables()})
}

// PlanResponse is the answer of GET /api/runs/:id/plan: the run's active plan,
// null before its supervisor made one.
type PlanResponse struct {
	// Plan is the run's active plan; null before its supervisor made one.
	Plan *store.Plan `json:"plan" jsonschema:"nullable"`
}

func (s *Server) getPlan(c *fiber.Ctx) error {
	r, err := s.loadRun(c)
	if err != nil {
		return err
	}
	p, err := s.d.Store.ActivePlan(c.UserContext(), r.ID)
	if errors.Is(err, store.ErrNotFound) {
		return c.JSON(PlanResponse{})
	}
	if err != nil {
		return err
	}
	if p.Steps == nil {
		p.Steps = []store.PlanStep{}
	}
	return c.JSON(PlanResponse{Plan: &p})
}
