package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gofiber/fiber/v2"

	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/submit"
	"github.com/aetherium-engine/aetherium/templates"
	"github.com/aetherium-engine/aetherium/webhook/inbound"
)

// Inbound webhooks (issue 43, docs/hooks.md): a hook is created through the API
// (owner-scoped like projects) and receives deliveries at POST /hooks/:id, a
// route outside /api without a bearer token: the delivery's signature under
// the hook's secret is its authentication. A verified delivery starts one run
// as the hook's owner, with the owner's roles as the token table has them at
// delivery time, through the one submission path (package submit).

// hookIDPattern is a hook's id (store.NewHookID).
var hookIDPattern = regexp.MustCompile(`^hk_[0-9a-f]{32}$`)

// HooksPathPrefix is where deliveries are received: outside /api, no token.
const HooksPathPrefix = "/hooks/"

// Bounds of a hook's definition.
const (
	maxHookName      = 100
	maxHookVariables = 64
	maxHookPointer   = 512
)

// ReasonUnknownHook labels deliveries to a hook id that does not exist (404):
// counted, not recorded (there is no hook to record them with).
const ReasonUnknownHook = "unknown_hook"

// hookReplayWait is how long a replayed delivery waits for the first one's run
// id while the first is still submitting; hookTakeOver is how old a first
// delivery without a run must be before a replay submits in its place (its
// API process died between claiming and submitting; the submission's
// idempotency key keeps it to one run).
const (
	hookReplayWait = 5 * time.Second
	hookTakeOver   = time.Minute
)

// hookParam declares a hook route's :id.
func hookParam(r route) route {
	return r.pathParam("id", "The hook's id (hk_…).", map[string]any{"type": "string", "pattern": hookIDPattern.String()})
}

// with applies f to the row (a group of declarations kept beside its handler).
func (r route) with(f func(route) route) route { return f(r) }

// hookSignatureHeaders declares the delivery headers of the three schemes.
func hookSignatureHeaders(r route) route {
	return r.header(inbound.HeaderGitHubSignature, "github: sha256=<hex HMAC-SHA256 of the body>.", stringSchema).
		header(inbound.HeaderGitHubDelivery, "github: the delivery's id.", stringSchema).
		header(inbound.HeaderStripeSignature, "stripe: t=<unix>,v1=<hex HMAC-SHA256 of t.body>.", stringSchema).
		header(inbound.HeaderSignature, "hmac: sha256=<hex HMAC-SHA256 of timestamp.delivery.body>.", stringSchema).
		header(inbound.HeaderTimestamp, "hmac: Unix seconds.", stringSchema).
		header(inbound.HeaderDelivery, "hmac: the delivery's id.", stringSchema)
}

type hookRequest struct {
	// Name is a label for people (1-100 characters).
	Name string `json:"name"`
	// Scheme is how deliveries are signed: github, stripe or hmac (docs/hooks.md).
	Scheme string `json:"scheme" jsonschema:"enum=github,enum=stripe,enum=hmac"`
	// Secret keys the signatures (16-256 printable characters): the one the
	// sender gave you (a Stripe endpoint's whsec_…). Omitted: a random one is
	// made and answered once.
	Secret string `json:"secret,omitempty"`
	// Template names a shipped template; or Team is an inline team. Exactly one.
	Template string          `json:"template,omitempty"`
	Team     json.RawMessage `json:"team,omitempty"`
	// Prompt is the run's prompt; {{.name}} placeholders take the mapped variables.
	Prompt string `json:"prompt"`
	// Variables maps each of the template's variables to a JSON pointer (RFC
	// 6901) into the delivery's payload, e.g. {"topic": "/issue/title"}.
	Variables map[string]string `json:"variables,omitempty"`
	// Project is one of the owner's projects (its slug) the runs work in.
	Project string `json:"project,omitempty"`
	// Priority of the runs, 1-5 (default 3), at most the owner's roles allow.
	Priority int `json:"priority,omitempty" jsonschema:"minimum=0,maximum=5"`
	// Enabled: false keeps the hook but refuses its deliveries (default true).
	Enabled *bool `json:"enabled,omitempty"`
}

// JSONSchemaProperty documents team as the template it is parsed into.
func (hookRequest) JSONSchemaProperty(prop string) any {
	if prop == "team" {
		return templates.Template{}
	}
	return nil
}

// hookView is a hook as the API shows it: never its secret.
type hookView struct {
	store.Hook
	// URL is the path deliveries are POSTed to, on the API's address (or api.hooks.addr).
	URL string `json:"url"`
}

// hookWithSecret answers creation and rotation: the only answers that hold
// the secret. Store it in the sender now; it is never shown again.
type hookWithSecret struct {
	hookView
	Secret string `json:"secret"`
}

type hookList struct {
	Hooks []hookView `json:"hooks"`
}

type hookDeliveryList struct {
	Deliveries []store.HookDelivery `json:"deliveries"`
	// NextBefore pages on (?before=), absent on the last page.
	NextBefore int64 `json:"next_before,omitempty"`
}

type rotateRequest struct {
	// Secret is the new secret (16-256 printable characters); omitted: a random one.
	Secret string `json:"secret,omitempty"`
}

// hookDeliveryResponse answers a delivery: 202 with the run it started, or
// 200 with the first delivery's run when it is a replay (nothing started).
type hookDeliveryResponse struct {
	RunID      string `json:"run_id" jsonschema:"format=uuid"`
	DeliveryID string `json:"delivery_id,omitempty"`
	Replayed   bool   `json:"replayed,omitempty"`
}

func viewHook(h store.Hook) hookView { return hookView{Hook: h, URL: HooksPathPrefix + h.ID} }

// newHookSecret is 32 random bytes, base64url (as the dev token).
func newHookSecret() (string, error) {
	secret, _, err := NewDevToken()
	return "whsec_" + secret, err
}

func checkHookSecret(s string) error {
	if len(s) < inbound.MinSecretLen || len(s) > inbound.MaxSecretLen {
		return badRequest("secret", "secret must be %d to %d characters", inbound.MinSecretLen, inbound.MaxSecretLen)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return badRequest("secret", "secret must be printable ASCII without spaces")
		}
	}
	return nil
}

var placeholder = regexp.MustCompile(`\{\{\s*\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}`)

// renderHookPrompt replaces {{.name}} by the mapped variable (a string as it
// is, anything else as JSON). Any other {{ is an error (checked at creation).
func renderHookPrompt(prompt string, vars map[string]any) (string, error) {
	var missing []string
	out := placeholder.ReplaceAllStringFunc(prompt, func(m string) string {
		name := placeholder.FindStringSubmatch(m)[1]
		v, ok := vars[name]
		if !ok {
			missing = append(missing, name)
			return ""
		}
		if s, ok := v.(string); ok {
			return s
		}
		raw, _ := json.Marshal(v)
		return string(raw)
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("prompt names %s, which variables does not map", strings.Join(missing, ", "))
	}
	if strings.Contains(placeholder.ReplaceAllString(prompt, ""), "{{") {
		return "", errors.New("prompt may hold only {{.name}} placeholders of mapped variables")
	}
	if len(out) > submit.MaxPromptBytes {
		return "", fmt.Errorf("the rendered prompt is over %d bytes", submit.MaxPromptBytes)
	}
	return out, nil
}

// hookTeam loads the hook's template or parses its inline team.
func (s *Server) hookTeam(tmpl string, team json.RawMessage) (templates.Template, error) {
	if tmpl != "" {
		t, err := s.d.Templates.Load(tmpl, s.d.Registry)
		switch {
		case errors.Is(err, templates.ErrUnknownTemplate):
			return t, &Error{Status: http.StatusNotFound, Field: "template", Message: err.Error()}
		case err != nil:
			return t, &Error{Status: http.StatusUnprocessableEntity, Field: "template", Message: err.Error()}
		}
		return t, nil
	}
	t, err := templates.ParseJSON(team)
	if err != nil {
		return t, badRequest("team", "%v", err)
	}
	if err := t.Validate(s.d.Registry); err != nil {
		return t, badRequest("team", "%v", err)
	}
	if owner, taken, err := s.d.Templates.Owner(t.Name); err != nil {
		return t, fmt.Errorf("inline team name: %w", err)
	} else if taken {
		return t, badRequest("team", "name %q belongs to the shipped template %q: an inline team cannot use it", t.Name, owner)
	}
	return t, nil
}

func (s *Server) createHook(c *fiber.Ctx) error {
	var req hookRequest
	if err := decode(c.Body(), &req); err != nil {
		return err
	}
	req.Name = strings.TrimSpace(req.Name)
	if req.Name == "" || utf8.RuneCountInString(req.Name) > maxHookName || store.HasNUL([]byte(req.Name)) {
		return badRequest("name", "name is required, at most %d characters", maxHookName)
	}
	if !slices.Contains(inbound.Schemes, req.Scheme) {
		return badRequest("scheme", "scheme must be one of %s", strings.Join(inbound.Schemes, ", "))
	}
	if req.Secret == "" {
		var err error
		if req.Secret, err = newHookSecret(); err != nil {
			return err
		}
	} else if err := checkHookSecret(req.Secret); err != nil {
		return err
	}
	hasTeam := len(req.Team) > 0 && string(req.Team) != "null"
	if (req.Template == "") == !hasTeam {
		return badRequest("template", "name a template or give a team (exactly one)")
	}
	if err := submit.CheckPrompt(req.Prompt); err != nil {
		return submitError(c, err)
	}
	team, err := s.hookTeam(req.Template, req.Team)
	if err != nil {
		return err
	}
	if err := s.checkHookVariables(team, req.Variables, req.Prompt); err != nil {
		return err
	}
	if req.Project != "" {
		if _, err := s.ownProject(c, req.Project); err != nil {
			return err
		}
	}
	if p := req.Priority; p != 0 {
		// As package submit checks it at each delivery, against the owner's roles then.
		if p < queue.MinPriority || p > queue.MaxPriority {
			return badRequest("priority", "priority %d is not %d (lowest) to %d (highest)", p, queue.MinPriority, queue.MaxPriority)
		}
		if top := s.d.Fairness.MaxPriorityOf(callerRoles(c)); p > top {
			return badRequest("priority", "priority %d is over %d, the highest your roles may submit with (fairness.max_priority)", p, top)
		}
	}
	h := store.Hook{Owner: principal(c), Name: req.Name, Scheme: req.Scheme, Secret: req.Secret, Template: req.Template,
		Prompt: req.Prompt, Variables: req.Variables, Project: req.Project, Priority: req.Priority, Enabled: req.Enabled == nil || *req.Enabled}
	if hasTeam {
		// Stored as the parsed team (canonical JSON), as a run stores its team.
		if h.Team, err = json.Marshal(team); err != nil {
			return fmt.Errorf("hook team: %w", err)
		}
	}
	h, err = s.d.Store.CreateHook(c.UserContext(), h)
	if err != nil {
		return err
	}
	s.d.Log.Info("hook created", "hook", h.ID, "owner", h.Owner, "scheme", h.Scheme)
	return c.Status(http.StatusCreated).JSON(hookWithSecret{hookView: viewHook(h), Secret: h.Secret})
}

// checkHookVariables checks a mapping against the team: every variable the
// team declares is mapped (else every delivery would fail to render), no other
// name is, every pointer is an RFC 6901 pointer, and the prompt's placeholders
// name mapped variables only. The team renders with the mapping's names.
func (s *Server) checkHookVariables(team templates.Template, vars map[string]string, prompt string) error {
	if len(vars) > maxHookVariables {
		return badRequest("variables", "at most %d variables", maxHookVariables)
	}
	declared := team.Variables()
	inPrompt := map[string]bool{}
	for _, m := range placeholder.FindAllStringSubmatch(prompt, -1) {
		inPrompt[m[1]] = true
	}
	sample := map[string]any{}
	for name, p := range vars {
		if !slices.Contains(declared, name) && !inPrompt[name] {
			return &Error{Status: http.StatusUnprocessableEntity, Field: "variables", Message: fmt.Sprintf(
				"variable %q is used neither by the team (it declares %s) nor by the prompt", name, listOrNone(declared))}
		}
		if len(p) > maxHookPointer {
			return badRequest("variables", "variable %q: pointer over %d bytes", name, maxHookPointer)
		}
		if err := inbound.CheckPointer(p); err != nil {
			return badRequest("variables", "variable %q: %v", name, err)
		}
		sample[name] = "x"
	}
	for _, name := range declared {
		if _, ok := vars[name]; !ok {
			return &Error{Status: http.StatusUnprocessableEntity, Field: "variables", Message: fmt.Sprintf(
				"the team uses variable %q: map it to a JSON pointer into the payload", name)}
		}
	}
	if _, err := team.Render(sample); err != nil {
		return &Error{Status: http.StatusUnprocessableEntity, Field: "variables", Message: err.Error()}
	}
	if _, err := renderHookPrompt(prompt, sample); err != nil {
		return badRequest("prompt", "%v", err)
	}
	return nil
}

func listOrNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// hookFor loads the route's hook for the caller: its owner or a reader of
// everything; another principal's hook is a 404 like a missing one.
func (s *Server) hookFor(c *fiber.Ctx) (store.Hook, error) {
	id := c.Params("id")
	notFound := &Error{Status: http.StatusNotFound, Field: "id", Message: fmt.Sprintf("no hook %.80q", id)}
	if !hookIDPattern.MatchString(id) {
		return store.Hook{}, notFound
	}
	h, err := s.d.Store.GetHook(c.UserContext(), id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && h.Owner != principal(c) && !seesAllRuns(c)) {
		return store.Hook{}, notFound
	}
	return h, err
}

// ownHook is hookFor for changes: the owner or an admin (a reader of
// everything gets 403).
func (s *Server) ownHook(c *fiber.Ctx) (store.Hook, error) {
	h, err := s.hookFor(c)
	if err != nil {
		return h, err
	}
	if h.Owner != principal(c) && !hasRole(c, RoleAdmin) {
		return h, &Error{Status: http.StatusForbidden, Message: fmt.Sprintf("hook %s belongs to %s", h.ID, h.Owner)}
	}
	return h, nil
}

func (s *Server) listHooks(c *fiber.Ctx) error {
	hs, err := s.d.Store.ListHooks(c.UserContext(), ownerScope(c), 500)
	if err != nil {
		return err
	}
	out := hookList{Hooks: make([]hookView, 0, len(hs))}
	for _, h := range hs {
		out.Hooks = append(out.Hooks, viewHook(h))
	}
	return c.JSON(out)
}

func (s *Server) getHook(c *fiber.Ctx) error {
	h, err := s.hookFor(c)
	if err != nil {
		return err
	}
	return c.JSON(viewHook(h))
}

func (s *Server) deleteHook(c *fiber.Ctx) error {
	h, err := s.ownHook(c)
	if err != nil {
		return err
	}
	if err := s.d.Store.DeleteHook(c.UserContext(), h.ID); errors.Is(err, store.ErrNotFound) {
		return &Error{Status: http.StatusNotFound, Field: "id", Message: fmt.Sprintf("no hook %q", h.ID)}
	} else if err != nil {
		return err
	}
	s.d.Log.Info("hook deleted", "hook", h.ID, "by", principal(c))
	return c.SendStatus(http.StatusNoContent)
}

func (s *Server) rotateHook(c *fiber.Ctx) error {
	var req rotateRequest
	if len(strings.TrimSpace(string(c.Body()))) > 0 {
		if err := decode(c.Body(), &req); err != nil {
			return err
		}
	}
	h, err := s.ownHook(c)
	if err != nil {
		return err
	}
	if req.Secret == "" {
		if req.Secret, err = newHookSecret(); err != nil {
			return err
		}
	} else if err := checkHookSecret(req.Secret); err != nil {
		return err
	}
	h, err = s.d.Store.RotateHookSecret(c.UserContext(), h.ID, req.Secret)
	if errors.Is(err, store.ErrNotFound) {
		return &Error{Status: http.StatusNotFound, Field: "id", Message: fmt.Sprintf("no hook %q", c.Params("id"))}
	}
	if err != nil {
		return err
	}
	s.d.Log.Info("hook secret rotated", "hook", h.ID, "by", principal(c))
	return c.JSON(hookWithSecret{hookView: viewHook(h), Secret: h.Secret})
}

func (s *Server) listHookDeliveries(c *fiber.Ctx) error {
	h, err := s.hookFor(c)
	if err != nil {
		return err
	}
	limit, err := queryLimit(c, 100, 1000)
	if err != nil {
		return err
	}
	var before int64
	if b := c.Query("before"); b != "" {
		if before, err = strconv.ParseInt(b, 10, 64); err != nil || before < 1 {
			return badRequest("before", "before must be a positive integer (next_before)")
		}
	}
	ds, err := s.d.Store.ListHookDeliveries(c.UserContext(), h.ID, before, limit)
	if err != nil {
		return err
	}
	out := hookDeliveryList{Deliveries: ds}
	if len(ds) == limit {
		out.NextBefore = ds[len(ds)-1].ID
	}
	return c.JSON(out)
}

// hookOwner is the hook owner's principal as the token table has it now: the
// roles a run it starts gets. ok is false when the owner's token is gone or no
// longer holds role submit (then the delivery is refused: owner_gone).
func (s *Server) hookOwner(owner string) (submit.Principal, string, bool) {
	if len(s.cfg.Tokens) == 0 {
		// Without tokens the one principal is local, holding every role.
		if owner == store.LocalOwner {
			return submit.Principal{Name: owner, Admin: true, ReadAll: true}, "", true
		}
		return submit.Principal{}, fmt.Sprintf("this API has no tokens: only %s's hooks take deliveries", store.LocalOwner), false
	}
	for _, t := range s.cfg.Tokens {
		if t.Name != owner {
			continue
		}
		held := map[string]bool{}
		for _, r := range t.Roles {
			held[r] = true
		}
		if !holdsAny(held, []string{RoleSubmit}) {
			return submit.Principal{}, fmt.Sprintf("the owner's token %q no longer holds role submit", owner), false
		}
		return submit.Principal{Name: owner, Roles: slices.Clone(t.Roles), Admin: held[RoleAdmin], ReadAll: held[RoleAdmin] || held[RoleReadAll]}, "", true
	}
	return submit.Principal{}, fmt.Sprintf("the owner's token %q is no longer configured (api.tokens)", owner), false
}

// hookRefusal is a delivery refused: recorded with its reason, counted, answered.
type hookRefusal struct {
	status int
	reason string
	detail string
	// runID is the first delivery's run (a replay answered 200).
	runID string
}

// deliverHook is POST /hooks/:id. Cheap checks come first (size, signature:
// nothing is parsed before the sender proved the secret), then the hook's
// state and owner, the payload's nesting and JSON, the mapping, the dedupe
// claim, and the submission. Every outcome is recorded and counted.
func (s *Server) deliverHook(c *fiber.Ctx) error {
	ctx := c.UserContext()
	id := c.Params("id")
	var h store.Hook
	var err error
	if hookIDPattern.MatchString(id) {
		h, err = s.d.Store.GetHook(ctx, id)
	} else {
		err = store.ErrNotFound
	}
	if errors.Is(err, store.ErrNotFound) {
		s.countHook(store.HookRefused, ReasonUnknownHook)
		return &Error{Status: http.StatusNotFound, Message: fmt.Sprintf("no hook %.80q", id)}
	}
	if err != nil {
		return err
	}
	header := func(name string) string { return c.Get(name) }
	deliveryID := inbound.DeliveryID(h.Scheme, header, "")
	refuse := func(r hookRefusal) error {
		s.recordHookRefusal(ctx, h.ID, deliveryID, r)
		if r.status == http.StatusOK {
			return c.Status(http.StatusOK).JSON(hookDeliveryResponse{RunID: r.runID, DeliveryID: deliveryID, Replayed: true})
		}
		return &Error{Status: r.status, Message: fmt.Sprintf("delivery refused (%s): %s", r.reason, r.detail)}
	}
	cfg := s.cfg.Hooks
	body := c.Body()
	if len(body) > cfg.BodyLimit {
		return refuse(hookRefusal{status: http.StatusRequestEntityTooLarge, reason: inbound.ReasonTooLarge, detail: fmt.Sprintf("body over %d bytes", cfg.BodyLimit)})
	}
	if err := inbound.Verify(h.Scheme, h.Secret, header, body, time.Now(), cfg.Tolerance); err != nil {
		reason := inbound.ReasonBadSignature
		if errors.Is(err, inbound.ErrStale) {
			reason = inbound.ReasonStale
		}
		return refuse(hookRefusal{status: http.StatusUnauthorized, reason: reason, detail: err.Error()})
	}
	if !h.Enabled {
		return refuse(hookRefusal{status: http.StatusForbidden, reason: inbound.ReasonDisabled, detail: "the hook is disabled"})
	}
	by, why, ok := s.hookOwner(h.Owner)
	if !ok {
		return refuse(hookRefusal{status: http.StatusForbidden, reason: inbound.ReasonOwnerGone, detail: why})
	}
	doc, err := inbound.Payload(c.Get(fiber.HeaderContentType), body)
	if err != nil {
		return refuse(hookRefusal{status: http.StatusBadRequest, reason: inbound.ReasonBadJSON, detail: err.Error()})
	}
	payload, err := inbound.Parse(doc, cfg.MaxDepth)
	if err != nil {
		reason := inbound.ReasonBadJSON
		if errors.Is(err, inbound.ErrTooDeep) {
			reason = inbound.ReasonTooDeep
		}
		return refuse(hookRefusal{status: http.StatusBadRequest, reason: reason, detail: err.Error()})
	}
	eventID := inbound.EventID(payload)
	deliveryID = inbound.DeliveryID(h.Scheme, header, eventID)
	key := inbound.DedupeKey(h.Scheme, header, body, eventID)
	vars, err := inbound.Map(payload, h.Variables)
	var prompt string
	if err == nil {
		prompt, err = renderHookPrompt(h.Prompt, vars)
	}
	if err != nil {
		return refuse(hookRefusal{status: http.StatusUnprocessableEntity, reason: inbound.ReasonUnmapped, detail: err.Error()})
	}
	claim, claimed, err := s.d.Store.ClaimHookDelivery(ctx, h.ID, deliveryID, key)
	if err != nil {
		return err
	}
	req := submit.Request{By: by, Template: h.Template, Team: h.Team, Prompt: prompt, Project: h.Project, Variables: vars,
		Priority: h.Priority, IdempotencyKey: "hook:" + h.ID + ":" + key, Trigger: "hook:" + h.ID}
	if len(vars) > 0 {
		// The sender chose what the mapped values say (an issue's title, a
		// commit message): the run starts as a session that read a web page
		// does, so the flow rules hold what it sends out. A hook that maps
		// nothing runs the owner's own text.
		req.Untrusted = []string{"hook:" + h.ID + " payload"}
	}
	if !claimed {
		runID, err := s.awaitFirstDelivery(ctx, claim, req)
		if err != nil {
			return err
		}
		if runID == "" {
			c.Set("Retry-After", "1")
			return refuse(hookRefusal{status: http.StatusConflict, reason: inbound.ReasonReplayed, detail: "the first delivery of this id is still being submitted; retry"})
		}
		return refuse(hookRefusal{status: http.StatusOK, reason: inbound.ReasonReplayed, detail: fmt.Sprintf("delivery %d started run %s", claim.ID, runID), runID: runID})
	}
	res, err := s.d.Submit.Submit(ctx, req)
	if err != nil {
		return s.hookSubmitRefused(c, claim, err)
	}
	if err := s.d.Store.SetHookDeliveryRun(ctx, claim.ID, res.RunID); err != nil {
		return err
	}
	s.countHook(store.HookAccepted, "")
	s.d.Log.Info("hook delivery accepted", "hook", h.ID, "delivery", deliveryID, "run_id", res.RunID, "replayed_submit", res.Replayed)
	return c.Status(http.StatusAccepted).JSON(hookDeliveryResponse{RunID: res.RunID, DeliveryID: deliveryID})
}

// awaitFirstDelivery returns the run of the delivery that holds the key: at
// once when it has one, after its claimant's submission otherwise (polled
// up to hookReplayWait), or, when the claim is older than hookTakeOver and
// still without a run (its claimant died), by submitting in its place with
// the same idempotency key. "" when the first is still submitting.
func (s *Server) awaitFirstDelivery(ctx context.Context, first store.HookDelivery, req submit.Request) (string, error) {
	deadline := time.Now().Add(hookReplayWait)
	for first.RunID == "" {
		if time.Since(first.ReceivedAt) > hookTakeOver {
			res, err := s.d.Submit.Submit(ctx, req)
			if err != nil {
				return "", fmt.Errorf("hook delivery %d: take over: %w", first.ID, err)
			}
			if err := s.d.Store.SetHookDeliveryRun(ctx, first.ID, res.RunID); err != nil {
				return "", err
			}
			return res.RunID, nil
		}
		if time.Now().After(deadline) {
			return "", nil
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		var err error
		if first, err = s.d.Store.HookDeliveryByID(ctx, first.ID); errors.Is(err, store.ErrNotFound) {
			return "", nil
		} else if err != nil {
			return "", err
		}
		if first.Outcome != store.HookAccepted {
			return "", nil // refused meanwhile: its key is free, the sender's retry claims it
		}
	}
	return first.RunID, nil
}

// hookSubmitRefused records a claimed delivery the submission refused (its
// key freed, so the sender's retry is judged again) and answers the refusal's
// status.
func (s *Server) hookSubmitRefused(c *fiber.Ctx, claim store.HookDelivery, err error) error {
	var se *submit.Error
	status := http.StatusInternalServerError
	if errors.As(err, &se) {
		status = se.Status()
		if se.RetryAfter > 0 {
			c.Set("Retry-After", strconv.Itoa(int(math.Ceil(se.RetryAfter.Seconds()))))
		}
	}
	ctx := context.WithoutCancel(c.UserContext())
	if rerr := s.d.Store.RefuseHookDelivery(ctx, claim.ID, inbound.ReasonSubmitRefused, err.Error()); rerr != nil {
		s.d.Log.Error("record hook refusal", "hook", claim.HookID, "err", rerr)
	}
	s.countHook(store.HookRefused, inbound.ReasonSubmitRefused)
	if se == nil {
		return err
	}
	return &Error{Status: status, Field: se.Field, Message: "delivery refused (submit_refused): " + se.Message}
}

func (s *Server) recordHookRefusal(ctx context.Context, hookID, deliveryID string, r hookRefusal) {
	s.countHook(store.HookRefused, r.reason)
	d := store.HookDelivery{HookID: hookID, DeliveryID: deliveryID, Reason: r.reason, Detail: r.detail, RunID: r.runID}
	if err := s.d.Store.RecordHookRefusal(context.WithoutCancel(ctx), d, s.cfg.Hooks.KeepRefused); err != nil {
		s.d.Log.Error("record hook refusal", "hook", hookID, "reason", r.reason, "err", err)
	}
	s.d.Log.Warn("hook delivery refused", "hook", hookID, "delivery", deliveryID, "reason", r.reason, "detail", r.detail)
}

func (s *Server) countHook(outcome, reason string) {
	if s.d.Metrics != nil {
		s.d.Metrics.HookDeliveries.WithLabelValues(outcome, reason).Inc()
	}
}

// hookTooLarge records a delivery Fiber refused before any handler, for a
// body over the app's limit (the errorHandler's 413 on /hooks/:id).
func (s *Server) hookTooLarge(c *fiber.Ctx) {
	id := strings.TrimPrefix(c.Path(), HooksPathPrefix)
	if !hookIDPattern.MatchString(id) {
		return
	}
	ctx := context.Background()
	h, err := s.d.Store.GetHook(ctx, id)
	if err != nil {
		return
	}
	s.recordHookRefusal(ctx, h.ID, inbound.DeliveryID(h.Scheme, func(n string) string { return c.Get(n) }, ""),
		hookRefusal{reason: inbound.ReasonTooLarge, detail: fmt.Sprintf("body over %d bytes", s.cfg.Hooks.BodyLimit)})
}

// HooksApp is the app of api.hooks.addr, a listener of its own that serves
// only POST /hooks/:id (as the API's listener does): a deployment exposes it
// to the senders without exposing the API. No Host check: it serves nothing a
// rebinding page could read, and every delivery must carry a signature. The
// caller serves it (fleet.RunAPI registers it as a control-plane endpoint).
func (s *Server) HooksApp() *fiber.App {
	app := fiber.New(fiber.Config{
		BodyLimit:             s.cfg.Hooks.BodyLimit,
		DisableStartupMessage: true,
		ErrorHandler:          s.errorHandler,
		ReadTimeout:           30 * time.Second,
		IdleTimeout:           60 * time.Second,
	})
	if s.d.Metrics != nil {
		app.Use(s.observe)
	}
	app.Post("/hooks/:id", s.deliverHook)
	app.Use(func(c *fiber.Ctx) error {
		return &Error{Status: http.StatusNotFound, Message: fmt.Sprintf("no route %s %s: this listener serves only POST /hooks/:id", c.Method(), c.Path())}
	})
	return app
}
