// Package submit starts runs. Every way a run begins goes through it — the
// API's submit and retry, schedules, inbound webhooks — so each gets the same
// checks in the same order: the prompt, the team (a shipped template or an
// inline one), the priority its principal may ask for, the project, the GPU
// services, the free disk, the models, the daily budget, the runs in flight,
// fairness admission; then the run.queued event and the enqueue.
//
// An Idempotency-Key makes a submission at most once: the key is claimed in the
// same transaction that creates the run, so concurrent requests with one key
// create one run (the others wait on the claim's row and then answer with it).
package submit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/aetherium-engine/aetherium/events"
	"github.com/aetherium-engine/aetherium/lease"
	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/metrics"
	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/templates"
	"github.com/aetherium-engine/aetherium/tools"
	"github.com/aetherium-engine/aetherium/tracing"
	"github.com/aetherium-engine/aetherium/wsquota"
)

const (
	// MaxPromptBytes bounds a run's prompt.
	MaxPromptBytes = 64 << 10
	// MaxIdempotencyKey bounds an Idempotency-Key (the IETF draft sets no limit;
	// a UUID or a hash fits many times over).
	MaxIdempotencyKey = 255
	// DefaultIdempotencyTTL is how long a key returns its first run.
	DefaultIdempotencyTTL = 24 * time.Hour
	// DefaultMaxRunsInFlight leaves a principal's runs in flight unlimited.
	DefaultMaxRunsInFlight = 0
	// RunsInFlightRetryAfter is the Retry-After of a submit refused for too many
	// runs in flight: runs take minutes, an immediate retry would be refused again.
	RunsInFlightRetryAfter = 30 * time.Second
	// DiskFullRetryAfter is the Retry-After of a submit refused by the free-disk
	// guard: space comes back when someone frees it, not in a second.
	DiskFullRetryAfter = 5 * time.Minute
)

// Config are the submission limits.
type Config struct {
	// MaxRunsInFlight caps one principal's runs not yet terminal (0: none).
	MaxRunsInFlight int
	// PrincipalDailyBudget refuses a principal's new runs once its model calls
	// cost this much today (0: none).
	PrincipalDailyBudget llm.Money
	// IdempotencyTTL is how long an Idempotency-Key returns its first run.
	// Default DefaultIdempotencyTTL.
	IdempotencyTTL time.Duration
}

// WithDefaults fills the zero values.
func (c Config) WithDefaults() Config {
	if c.IdempotencyTTL == 0 {
		c.IdempotencyTTL = DefaultIdempotencyTTL
	}
	return c
}

// Validate reports a config that cannot work.
func (c Config) Validate() error {
	switch {
	case c.MaxRunsInFlight < 0:
		return fmt.Errorf("submit: max runs in flight %d is negative", c.MaxRunsInFlight)
	case c.PrincipalDailyBudget < 0:
		return errors.New("submit: the principal daily budget is negative")
	case c.IdempotencyTTL < 0:
		return fmt.Errorf("submit: idempotency ttl %s is negative", c.IdempotencyTTL)
	}
	return nil
}

// Deps are the submitter's collaborators.
type Deps struct {
	Store    *store.Store
	Queue    *queue.Enqueuer
	Fairness queue.Fairness
	Events   *events.Recorder
	Registry *tools.Registry
	// Templates are the shipped templates.
	Templates templates.Dir
	// Leases checks a team's gpu_services; nil: the deployment declares none.
	Leases *lease.Manager
	// Metrics, when set, counts accepted runs.
	Metrics *metrics.Metrics
	Log     *slog.Logger
	// CheckDisk, when set, is the free-disk guard (wsquota.ErrDiskFull refuses).
	CheckDisk func() error
	// CheckModels, when set, checks a team's models against the deployment.
	CheckModels func(team templates.Template) error
	// Tracing makes the submit span, the root of the run's trace (nil: off).
	Tracing *tracing.Provider
}

// Submitter starts runs.
type Submitter struct {
	cfg Config
	d   Deps
}

// New returns a submitter. cfg must be valid (Validate).
func New(cfg Config, d Deps) *Submitter {
	if d.Log == nil {
		d.Log = slog.Default()
	}
	return &Submitter{cfg: cfg.WithDefaults(), d: d}
}

// Config returns the submitter's config with its defaults.
func (s *Submitter) Config() Config { return s.cfg }

// Principal is who submits: the run's owner.
type Principal struct {
	Name string
	// Roles set the priority the principal may ask for (fairness.max_priority).
	Roles []string
	// Admin may use any project; ReadAll may see any (another's project is then a
	// 403, not a 404).
	Admin, ReadAll bool
}

// Request is one submission.
type Request struct {
	By Principal
	// Template is a shipped template's name; "" when Team is given.
	Template string
	// Team is an inline team (templates.ParseJSON), when Template is "".
	Team json.RawMessage
	// Prompt is what the team is asked to do.
	Prompt string
	// Project is one of By's projects' slugs, "" for a scratch workspace.
	Project string
	// Staging runs the project run in a staging workspace of its own (the
	// Staging storage tier) instead of the project's (Production); POST
	// /api/runs/:id/promote later puts its files into the project's. Needs
	// Project.
	Staging   bool
	Variables map[string]any
	// Priority is 1 (lowest) to 5; 0 is queue.DefaultPriority.
	Priority int
	// IdempotencyKey, when set, makes the request at most once per (By.Name,
	// key) for Config.IdempotencyTTL: the same request again returns the first
	// run (Result.Replayed), another request with the key is ErrIdempotencyMismatch.
	IdempotencyKey string
	// Trigger says what started the run: "" (a person), "retry:<run id>",
	// "schedule:<id>", "hook:<id>". It is recorded in the run.queued event.
	Trigger string
	// Untrusted names the request's sources no person wrote (a webhook's
	// payload mapped into Prompt or Variables): every session of the run starts
	// labelled untrusted with them, so the flow rules hold its outbound calls
	// as they would after a web_fetch. At most MaxUntrustedSources, each a
	// printable line of at most MaxUntrustedSourceBytes.
	Untrusted []string
	// TraceParent is the client's W3C traceparent header: a valid one is the
	// parent of the run's submit span; an empty, malformed or oversized one is
	// ignored (the submit span is a new root). Baggage is never read.
	TraceParent string
	// Fork, when set, makes the run a fork of another (issue 44, docs/fork.md).
	Fork *Fork
}

// Fork is what makes a submission a fork: the new run's id (its workspace was
// restored under it before the submit), the team of a fork that keeps its
// template's (the original run's stored team, already rendered: a template
// run's fork runs the team the original ran, not the template as it is now),
// and the record it starts from, written with the run.
type Fork struct {
	ID   string
	Team json.RawMessage
	Seed store.ForkSeed
}

// Result is an accepted submission.
type Result struct {
	RunID  string
	Status string
	// Priority is the run's priority (1-5).
	Priority int
	// Position is the run's place in its fairness key's line when the key is at
	// its run limit; 0 when it was admitted at once.
	Position int
	// Replayed is true when the IdempotencyKey named an earlier submission:
	// RunID is that run's, and nothing new was started.
	Replayed bool
}

// Refusal kinds (the Kind of an *Error).
var (
	ErrInvalid       = errors.New("invalid request")
	ErrForbidden     = errors.New("forbidden")
	ErrNotFound      = errors.New("not found")
	ErrUnprocessable = errors.New("unprocessable")
	// ErrBusy: too many runs in flight, or the daily budget spent.
	ErrBusy     = errors.New("busy")
	ErrDiskFull = errors.New("disk full")
	// ErrIdempotencyMismatch: the key was used for another request.
	ErrIdempotencyMismatch = errors.New("idempotency key reused with another request")
)

// Error is a refusal its caller can explain: Field names the request's field
// at fault, RetryAfter when trying later can succeed.
type Error struct {
	Kind       error
	Field      string
	Message    string
	RetryAfter time.Duration
}

func (e *Error) Error() string { return e.Message }

// Unwrap makes errors.Is(err, ErrBusy) and the like work.
func (e *Error) Unwrap() error { return e.Kind }

// Status is the refusal's HTTP status.
func (e *Error) Status() int {
	switch e.Kind {
	case ErrForbidden:
		return http.StatusForbidden
	case ErrNotFound:
		return http.StatusNotFound
	case ErrUnprocessable, ErrIdempotencyMismatch:
		return http.StatusUnprocessableEntity
	case ErrBusy:
		return http.StatusTooManyRequests
	case ErrDiskFull:
		return http.StatusInsufficientStorage
	}
	return http.StatusBadRequest
}

func refuse(kind error, field, format string, args ...any) *Error {
	return &Error{Kind: kind, Field: field, Message: fmt.Sprintf(format, args...)}
}

// Submit checks a request and starts its run, or refuses it with an *Error.
// Other errors are the fleet's (the store, Redis). Its span (tracing on) is
// the root of the run's trace: the run stores its traceparent.
func (s *Submitter) Submit(ctx context.Context, req Request) (Result, error) {
	ctx, span := s.d.Tracing.StartRemote(ctx, req.TraceParent, "submit run", trace.WithSpanKind(trace.SpanKindServer))
	defer span.End()
	res, err := s.submit(ctx, req)
	if span.IsRecording() {
		span.SetAttributes(tracing.RunID.String(res.RunID), tracing.Template.String(req.Template))
		if req.Trigger != "" {
			span.SetAttributes(tracing.Trigger.String(req.Trigger))
		}
		if res.Replayed {
			span.SetAttributes(attribute.Bool("aetherium.replayed", true))
		}
		tracing.Fail(span, err)
	}
	return res, err
}

func (s *Submitter) submit(ctx context.Context, req Request) (Result, error) {
	if err := CheckPrompt(req.Prompt); err != nil {
		return Result{}, err
	}
	if len(req.IdempotencyKey) > MaxIdempotencyKey || strings.ContainsFunc(req.IdempotencyKey, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return Result{}, refuse(ErrInvalid, "Idempotency-Key", "the Idempotency-Key must be at most %d printable characters", MaxIdempotencyKey)
	}
	if err := checkUntrusted(req.Untrusted); err != nil {
		return Result{}, err
	}
	team, err := s.team(req)
	if err != nil {
		return Result{}, err
	}
	var fingerprint string
	if req.IdempotencyKey != "" {
		fingerprint = requestHash(req)
		// An earlier run of the key is the answer whatever has changed since (a
		// budget spent, a disk filled): the request was accepted then.
		if res, found, err := s.replay(ctx, req, fingerprint); err != nil || found {
			return res, err
		}
	}
	priority, err := s.priority(req)
	if err != nil {
		return Result{}, err
	}
	var projectID string
	if req.Staging && req.Project == "" {
		return Result{}, refuse(ErrInvalid, "staging", "staging needs a project: a staging run works beside a project's workspace until it is promoted into it")
	}
	if req.Project != "" {
		if projectID, err = s.project(ctx, req); err != nil {
			return Result{}, err
		}
	}
	vars := req.Variables
	if vars == nil {
		vars = map[string]any{}
	}
	rendered, err := team.Render(vars)
	if req.Fork != nil && req.Template != "" {
		rendered, err = team, nil // the original's team, rendered when it ran
	}
	if err != nil {
		return Result{}, refuse(ErrInvalid, "variables", "%v", err)
	}
	if err := s.checkDeployment(rendered); err != nil {
		return Result{}, err
	}
	if err := s.checkDailyBudget(ctx, req.By.Name); err != nil {
		return Result{}, err
	}
	teamJSON, err := json.Marshal(rendered)
	if err != nil {
		return Result{}, fmt.Errorf("submit: encode team: %w", err)
	}
	varsJSON, err := json.Marshal(vars)
	if err != nil {
		return Result{}, refuse(ErrInvalid, "variables", "variables cannot be encoded: %v", err)
	}
	key := FairKey(rendered, req.By.Name, req.Project, vars)
	if len(req.Untrusted) > 0 && strings.HasPrefix(rendered.FairnessKey, "var:") {
		// The variable's value is a sender's (a webhook's payload): it must not
		// choose whose run limit and share the run draws on, another tenant's
		// included. The owner's key, as for a team without fairness_key.
		key = queue.Key(req.By.Name)
	}
	_, runLimit, _ := s.d.Fairness.Policy(key)
	run := store.Run{ID: uuid.NewString(), Prompt: req.Prompt, Template: req.Template, Team: teamJSON, Variables: varsJSON,
		TokenBudget: rendered.TokenBudget(), CostBudget: int64(rendered.CostBudget()), Owner: req.By.Name, Project: req.Project, ProjectID: projectID,
		FairKey: key, Priority: priority, RunLimit: runLimit, Aging: s.d.Fairness.WithDefaults().Aging, TraceContext: tracing.Traceparent(ctx),
		Untrusted: req.Untrusted}
	if req.Fork != nil {
		run.ID, run.Fork = req.Fork.ID, &req.Fork.Seed
	}
	if req.Staging {
		run.Workspace = store.StagingWorkspace(run.ID)
	}
	var claim *store.IdempotencyClaim
	if req.IdempotencyKey != "" {
		claim = &store.IdempotencyClaim{Key: req.IdempotencyKey, RequestHash: fingerprint, TTL: s.cfg.IdempotencyTTL}
	}
	admitted, earlier, err := s.d.Store.CreateRunOnce(ctx, run, s.cfg.MaxRunsInFlight, claim)
	switch {
	case errors.Is(err, store.ErrNoProject):
		return Result{}, refuse(ErrNotFound, "project", "no project %q", req.Project)
	case errors.Is(err, store.ErrTooManyRuns):
		e := refuse(ErrBusy, "", "%s already has %d runs queued or running (api.max_runs_in_flight); retry when one finishes", run.Owner, s.cfg.MaxRunsInFlight)
		e.RetryAfter = RunsInFlightRetryAfter
		return Result{}, e
	case errors.Is(err, store.ErrIdempotencyMismatch):
		return Result{}, mismatch()
	case err != nil:
		return Result{}, err
	case earlier != "":
		// Another request with the key won the claim while this one was checked.
		return s.replayed(ctx, earlier)
	}
	res := Result{RunID: run.ID, Status: store.RunQueued, Priority: priority}
	data := events.RunQueuedData{Team: rendered.Name, Template: req.Template, Priority: priority, Trigger: req.Trigger}
	if !admitted {
		if res.Position, err = s.d.Store.QueuePosition(ctx, run.ID); err != nil {
			return Result{}, err
		}
		data.Position, data.RunLimit = res.Position, runLimit
	}
	if err := s.d.Events.Emit(ctx, run.ID, "queued", events.RunQueued, "", data); err != nil {
		return Result{}, err
	}
	// A failed enqueue leaves the run queued; the scheduler re-enqueues queued
	// runs, so the submission still succeeds durably (the TaskID makes the retry
	// a no-op). A run waiting for admission is started by the end of one of its
	// key's runs.
	if admitted {
		if err := s.d.Queue.Supervise(ctx, queue.Route{Key: run.FairKey, Priority: priority}, run.ID, "start"); err != nil {
			s.d.Log.Error("enqueue run", "run_id", run.ID, "err", err)
		}
	}
	if s.d.Metrics != nil {
		s.d.Metrics.RunsSubmitted.Inc()
	}
	return res, nil
}

// Bounds of Request.Untrusted (the runs.untrusted column checks the count).
const (
	MaxUntrustedSources     = 8
	MaxUntrustedSourceBytes = 200
)

// checkUntrusted refuses sources the label could not show an approver whole.
// The list only ever tightens what the run may do, so it is bounded, not
// checked against anything.
func checkUntrusted(sources []string) error {
	if len(sources) > MaxUntrustedSources {
		return refuse(ErrInvalid, "untrusted", "at most %d untrusted sources", MaxUntrustedSources)
	}
	for _, src := range sources {
		if src == "" || len(src) > MaxUntrustedSourceBytes || !utf8.ValidString(src) || strings.ContainsFunc(src, unicode.IsControl) {
			return refuse(ErrInvalid, "untrusted", "an untrusted source must be 1-%d bytes of printable text", MaxUntrustedSourceBytes)
		}
	}
	return nil
}

// CheckPrompt refuses an empty or oversized prompt.
func CheckPrompt(p string) error {
	if strings.TrimSpace(p) == "" {
		return refuse(ErrInvalid, "prompt", "prompt is required")
	}
	if len(p) > MaxPromptBytes {
		return refuse(ErrInvalid, "prompt", "prompt is over %d bytes", MaxPromptBytes)
	}
	return nil
}

// team loads the request's shipped template or parses and checks its inline team.
func (s *Submitter) team(req Request) (templates.Template, error) {
	if req.Fork != nil && req.Template != "" {
		team, err := templates.ParseJSON(req.Fork.Team)
		if err != nil {
			return team, refuse(ErrUnprocessable, "team", "the forked run's team: %v", err)
		}
		if err := team.Validate(s.d.Registry); err != nil {
			return team, refuse(ErrUnprocessable, "team", "the forked run's team does not validate now: %v", err)
		}
		return team, nil
	}
	inline := len(strings.TrimSpace(string(req.Team))) > 0 && strings.TrimSpace(string(req.Team)) != "null"
	switch {
	case req.Template != "" && inline:
		return templates.Template{}, refuse(ErrInvalid, "team", "give a template or a team, not both")
	case req.Template != "":
		team, err := s.d.Templates.Load(req.Template, s.d.Registry)
		switch {
		case errors.Is(err, templates.ErrUnknownTemplate):
			return team, refuse(ErrNotFound, "template", "%v", err)
		case err != nil:
			return team, refuse(ErrUnprocessable, "template", "%v", err)
		}
		return team, nil
	case !inline:
		return templates.Template{}, refuse(ErrInvalid, "team", "team is required (a template object)")
	}
	team, err := templates.ParseJSON(req.Team)
	if err != nil {
		return team, refuse(ErrInvalid, "team", "%v", err)
	}
	if err := team.Validate(s.d.Registry); err != nil {
		return team, refuse(ErrInvalid, "team", "%v", err)
	}
	// Refused rather than renamed: a `team:` permission rule naming a shipped
	// template must never apply to (or be dodged by) a team its submitter named.
	if owner, taken, err := s.d.Templates.Owner(team.Name); err != nil {
		return team, fmt.Errorf("inline team name: %w", err)
	} else if taken {
		return team, refuse(ErrInvalid, "team", "name %q belongs to the shipped template %q: an inline team cannot use it (submit the template with POST /api/orchestrator/run-from-template, or rename the team)", team.Name, owner)
	}
	return team, nil
}

// priority resolves the request's priority: 0 is queue.DefaultPriority; out of
// 1-5, or over what the principal's roles allow, is refused.
func (s *Submitter) priority(req Request) (int, error) {
	p := req.Priority
	if p == 0 {
		return queue.DefaultPriority, nil
	}
	if p < queue.MinPriority || p > queue.MaxPriority {
		return 0, refuse(ErrInvalid, "priority", "priority %d is not %d (lowest) to %d (highest)", p, queue.MinPriority, queue.MaxPriority)
	}
	if top := s.d.Fairness.MaxPriorityOf(req.By.Roles); p > top {
		return 0, refuse(ErrInvalid, "priority", "priority %d is over %d, the highest your roles may submit with (fairness.max_priority)", p, top)
	}
	return p, nil
}

// project resolves the request's project to its id: one the principal may use.
// Another's project is a 404 like a missing one (slugs cannot be probed),
// unless the principal may see it: then a 403.
func (s *Submitter) project(ctx context.Context, req Request) (string, error) {
	if !store.SlugPattern.MatchString(req.Project) {
		return "", refuse(ErrInvalid, "project", "slug %.80q is not a project slug", req.Project)
	}
	access := store.ProjectAccess{Principal: req.By.Name, ReadAll: req.By.ReadAll, Admin: req.By.Admin}
	p, err := s.d.Store.GetProject(ctx, req.Project)
	if errors.Is(err, store.ErrNotFound) || (err == nil && !access.MaySee(p)) {
		return "", refuse(ErrNotFound, "project", "no project %q", req.Project)
	}
	if err != nil {
		return "", err
	}
	if !access.MayUse(p) {
		return "", refuse(ErrForbidden, "project", "project %q belongs to %s", req.Project, p.Owner)
	}
	return p.ID, nil
}

// checkDeployment refuses a team this deployment cannot run (GPU services,
// models) and any run while the workspaces' disk is full.
func (s *Submitter) checkDeployment(team templates.Template) error {
	for _, svc := range team.GPUServices {
		if s.d.Leases == nil {
			return refuse(ErrInvalid, "team", "gpu_services: this deployment declares no GPU services")
		}
		if _, ok := s.d.Leases.Service(svc); !ok {
			return refuse(ErrInvalid, "team", "gpu_services: %q is not a GPU service of this deployment (streams.leases.services)", svc)
		}
	}
	if s.d.CheckDisk != nil {
		if err := s.d.CheckDisk(); errors.Is(err, wsquota.ErrDiskFull) {
			e := refuse(ErrDiskFull, "", "%v", err)
			e.RetryAfter = DiskFullRetryAfter
			return e
		} else if err != nil {
			// The workers guard every new workspace too: a process that cannot
			// measure the disk (it does not see the workspaces) does not refuse
			// work for it.
			s.d.Log.Warn("free-disk guard: cannot measure the workspaces' disk", "err", err)
		}
	}
	if s.d.CheckModels != nil {
		if err := s.d.CheckModels(team); err != nil {
			return refuse(ErrInvalid, "team", "%v", err)
		}
	}
	return nil
}

// checkDailyBudget refuses a principal's new run once its model calls cost its
// daily budget today, until midnight UTC.
func (s *Submitter) checkDailyBudget(ctx context.Context, who string) error {
	budget := s.cfg.PrincipalDailyBudget
	if budget <= 0 {
		return nil
	}
	spent, err := s.d.Store.SpentToday(ctx, who)
	if err != nil {
		return err
	}
	if llm.Money(spent) < budget {
		return nil
	}
	now := time.Now().UTC()
	midnight := now.Truncate(24 * time.Hour).Add(24 * time.Hour)
	e := refuse(ErrBusy, "", "%s spent %s on model calls today, its daily budget is %s (llm.budgets.principal_daily); it renews at midnight UTC", who, llm.Money(spent), budget)
	e.RetryAfter = midnight.Sub(now) + time.Second
	return e
}

// replay answers a request whose key already started a run.
func (s *Submitter) replay(ctx context.Context, req Request, fingerprint string) (Result, bool, error) {
	prior, err := s.d.Store.IdempotentRun(ctx, req.By.Name, req.IdempotencyKey, s.cfg.IdempotencyTTL)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return Result{}, false, nil
	case err != nil:
		return Result{}, false, err
	case prior.RequestHash != fingerprint:
		return Result{}, true, mismatch()
	}
	res, err := s.replayed(ctx, prior.RunID)
	return res, true, err
}

func (s *Submitter) replayed(ctx context.Context, runID string) (Result, error) {
	r, err := s.d.Store.GetRun(ctx, runID)
	if err != nil {
		return Result{}, fmt.Errorf("the run of an idempotency key: %w", err)
	}
	return Result{RunID: r.ID, Status: r.Status, Priority: r.Priority, Replayed: true}, nil
}

func mismatch() *Error {
	return refuse(ErrIdempotencyMismatch, "Idempotency-Key", "this Idempotency-Key was used with another request in the last %s: use a new key for a new request", DefaultIdempotencyTTL)
}

// requestHash fingerprints what a request asks for (not who or what triggered
// it): the same key with another request is refused, not replayed.
func requestHash(req Request) string {
	vars := req.Variables
	if vars == nil {
		vars = map[string]any{}
	}
	var team any
	if len(strings.TrimSpace(string(req.Team))) > 0 {
		// Decoded and re-encoded: key order and spacing do not make two
		// requests differ.
		if err := json.Unmarshal(req.Team, &team); err != nil {
			team = string(req.Team)
		}
	}
	fields := map[string]any{"template": req.Template, "team": team, "prompt": req.Prompt, "project": req.Project,
		"variables": vars, "priority": req.Priority}
	if req.Staging {
		fields["staging"] = true // only when set, like untrusted
	}
	if len(req.Untrusted) > 0 {
		// Only when set: the keys' hashes stored before it existed still match.
		fields["untrusted"] = req.Untrusted
	}
	raw, _ := json.Marshal(fields)
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:])
}

// FairKey is the fairness key of a run of team (templates.Template.FairnessKey).
// A run without the project or variable its team keys on falls back to its
// owner: a key is always someone's.
func FairKey(team templates.Template, owner, project string, vars map[string]any) string {
	switch k := team.FairnessKey; {
	case k == "project" && project != "":
		return queue.Key("project:" + project)
	case k == "team":
		return queue.Key("team:" + team.Name)
	case strings.HasPrefix(k, "var:"):
		name := strings.TrimPrefix(k, "var:")
		if v, ok := vars[name]; ok && v != nil {
			var val string
			if str, isStr := v.(string); isStr {
				val = str
			} else {
				raw, _ := json.Marshal(v)
				val = string(raw)
			}
			return queue.Key("var:" + name + "=" + val)
		}
	}
	return queue.Key(owner)
}
