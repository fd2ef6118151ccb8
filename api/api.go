// Package api is the Fiber HTTP API: run submission, run state, the live event
// stream (SSE), the tool catalog, health, metrics and asynqmon.
//
// Every route is a row of the route table (routes.go): New registers the rows,
// and the OpenAPI 3.1 document served at GET /api/openapi.json is built from the
// same rows, with JSON Schemas reflected (github.com/invopop/jsonschema) from the
// Go types the handlers decode and encode, so handlers answer with named types,
// never a fiber.Map. asynqmon under /monitoring is left out (NotInOpenAPI). The
// tests check that the registered routes are the documented operations, and
// fleettest checks every answer a test receives against the document with
// kin-openapi.
//
// Authentication is a bearer token on every /api route (auth.go), and nothing
// else: no /api route reads a cookie. asynqmon under /monitoring takes an
// admin's bearer token or the cookie POST /api/monitoring/session mints for
// one (monitoring.go): an HMAC-signed ticket naming the principal, valid for
// api.monitoring_session_ttl, re-checked on every request against the
// configured tokens (revoked, demoted or rotated tokens end their cookies);
// a change it carries must come from the API's own origin. The key is
// api.monitoring_session_key, else random per process (several API processes
// behind a balancer share one). docs/api-edge.md has the whole edge.
package api

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/hibiken/asynq"
	"github.com/hibiken/asynqmon"
	"github.com/redis/go-redis/v9"

	"github.com/aetherium-engine/aetherium/events"
	"github.com/aetherium-engine/aetherium/internal/defaults"
	"github.com/aetherium-engine/aetherium/lease"
	"github.com/aetherium-engine/aetherium/metrics"
	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/replay"
	"github.com/aetherium-engine/aetherium/schedules"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/studio"
	"github.com/aetherium-engine/aetherium/submit"
	"github.com/aetherium-engine/aetherium/templates"
	"github.com/aetherium-engine/aetherium/tools"
	"github.com/aetherium-engine/aetherium/webhook/inbound"
)

// Defaults of Config.
const (
	DefaultAddr      = "127.0.0.1:8080"
	DefaultBodyLimit = 1 << 20
	// DefaultSSEPoll is an event stream's safety re-read: a stream reads PostgreSQL
	// when the events hub announces its run, and otherwise only this often, so an
	// announcement lost (Redis away, a publish that failed) is still seen.
	DefaultSSEPoll = 30 * time.Second
	// DefaultSSEHeartbeat is the idle stream's keepalive comment: it keeps proxies
	// from timing an idle stream out and finds a peer that vanished without closing
	// (a client that closes is noticed at once by a read on its connection).
	DefaultSSEHeartbeat = 15 * time.Second
	// DefaultMaxRunsInFlight leaves a principal's runs in flight unlimited.
	DefaultMaxRunsInFlight = 0
	// DefaultMaxStreamsPerPrincipal caps one principal's open event streams on one
	// API process: each holds a connection and a goroutine, so one token must not
	// decide how many the process holds (drill 5 holds 200 of one principal).
	DefaultMaxStreamsPerPrincipal = 256
	// DefaultMaxStreams caps the open event streams of one API process, every
	// principal together.
	DefaultMaxStreams = 4096
	// DefaultMonitoringReadOnly: asynqmon at /monitoring/ cannot change the queues.
	DefaultMonitoringReadOnly = true
	// DefaultMonitoringSessionTTL is how long the cookie of POST
	// /api/monitoring/session opens asynqmon: long enough to look around, short
	// enough that a copied cookie soon stops working (monitoring.go).
	DefaultMonitoringSessionTTL = 10 * time.Minute
	// MaxMonitoringSessionTTL bounds api.monitoring_session_ttl: the cookie
	// cannot be withdrawn before it expires, only its token can.
	MaxMonitoringSessionTTL = 24 * time.Hour
	// MinMonitoringSessionKeyBytes is the shortest api.monitoring_session_key:
	// an HMAC-SHA256 key of fewer bytes is guessable sooner than the MAC.
	MinMonitoringSessionKeyBytes = 32
)

// Config is the api role (the `api` section of aetherium.yaml but its webhooks,
// which package webhook owns). Zero fields take their defaults (WithDefaults).
type Config struct {
	// Addr is the listen address. Env AETHERIUM_API_ADDR. Default DefaultAddr.
	Addr string `yaml:"addr"`
	// BodyLimit caps request bodies in bytes. Env AETHERIUM_API_BODY_LIMIT.
	// Default DefaultBodyLimit (1 MiB).
	BodyLimit int `yaml:"body_limit"`
	// MonitoringReadOnly makes asynqmon at /monitoring/ read-only. Default
	// DefaultMonitoringReadOnly (nil reads as the default).
	MonitoringReadOnly *bool `yaml:"monitoring_read_only"`
	// MonitoringSessionTTL is how long the cookie of POST /api/monitoring/session
	// (an admin's browser session for asynqmon) is valid. Default
	// DefaultMonitoringSessionTTL; at most MaxMonitoringSessionTTL.
	MonitoringSessionTTL time.Duration `yaml:"monitoring_session_ttl"`
	// MonitoringSessionKey signs those cookies (HMAC-SHA256), at least
	// MinMonitoringSessionKeyBytes bytes. Env AETHERIUM_API_MONITORING_SESSION_KEY.
	// Default empty: a random key per process, so a cookie works only on the API
	// process that made it and none survives a restart; with several API
	// processes behind a balancer, set one shared key.
	MonitoringSessionKey string `yaml:"monitoring_session_key"`
	// PrometheusURL lets asynqmon chart queue metrics. Env AETHERIUM_PROMETHEUS_URL.
	// Default empty (charts off).
	PrometheusURL string `yaml:"prometheus_url"`
	// Tokens are the accepted bearer tokens (roles submit, read, read_all, approve,
	// admin; docs/ownership.md has the role table). None means no authentication,
	// allowed only on a loopback Addr unless InsecureNoAuth (CheckAuth).
	Tokens []Token `yaml:"tokens"`
	// InsecureNoAuth allows a non-loopback Addr without tokens (flag
	// --insecure-no-auth), for an API behind an authenticating proxy.
	InsecureNoAuth bool `yaml:"insecure_no_auth"`
	// AllowedHosts are the Host header names the API answers besides localhost,
	// IP literals and api.addr's host (any port): a name, or "*.domain" for its
	// subdomains; AnyHost ("*") turns the check off (a proxy checks Host). Any
	// other name is refused (403): a DNS-rebinding page sends its own. Env
	// AETHERIUM_API_ALLOWED_HOSTS (comma-separated). Default none.
	AllowedHosts []string `yaml:"allowed_hosts"`
	// AllowedOrigins are origins (scheme://host[:port]) whose pages may send the
	// API changes besides its own origin; any other browser origin is refused
	// (403). Default none.
	AllowedOrigins []string `yaml:"allowed_origins"`
	// MetricsAddr, when set, is a listener of its own serving only /metrics
	// without a token (for Prometheus); on Addr /metrics needs role metrics. Env
	// AETHERIUM_API_METRICS_ADDR. Default empty (off).
	MetricsAddr string `yaml:"metrics_addr"`
	// MaxRunsInFlight caps one principal's runs not yet terminal — running or
	// waiting in line for its fairness key's run limit (fairness.keys.<key>.runs)
	// alike: the length of its queue. A submit over it gets 429; a submit under
	// it is accepted, and waits in line when its key is at its limit. Default
	// DefaultMaxRunsInFlight (0, unlimited).
	MaxRunsInFlight int `yaml:"max_runs_in_flight"`
	// MaxStreamsPerPrincipal caps one principal's open event streams on this API
	// process; a stream past it is refused with 429. Default
	// DefaultMaxStreamsPerPrincipal.
	MaxStreamsPerPrincipal int `yaml:"max_streams_per_principal"`
	// MaxStreams caps this API process's open event streams, every principal
	// together; a stream past it is refused with 429. Default DefaultMaxStreams.
	MaxStreams int `yaml:"max_streams"`
	// SSEPoll is how often an open event stream re-reads its run's events when
	// the events hub announced nothing (the safety net of a lost announcement).
	// Default DefaultSSEPoll.
	SSEPoll time.Duration `yaml:"sse_poll"`
	// SSEHeartbeat is how often an idle event stream writes a keepalive comment.
	// Default DefaultSSEHeartbeat. Not a configuration key.
	SSEHeartbeat time.Duration `yaml:"-"`
	// Hooks is the inbound webhook endpoint POST /hooks/:id (docs/hooks.md):
	// its body limit, nesting bound, replay window and own listener.
	Hooks inbound.Config `yaml:"hooks"`
}

// WithDefaults returns c with every zero field filled in (a fresh
// MonitoringReadOnly each call: configurations never share it).
func (c Config) WithDefaults() Config {
	c.Addr = cmp.Or(c.Addr, DefaultAddr)
	c.BodyLimit = defaults.Positive(c.BodyLimit, DefaultBodyLimit)
	if c.MonitoringReadOnly == nil {
		ro := DefaultMonitoringReadOnly
		c.MonitoringReadOnly = &ro
	}
	c.SSEPoll = defaults.Positive(c.SSEPoll, DefaultSSEPoll)
	c.MonitoringSessionTTL = cmp.Or(c.MonitoringSessionTTL, DefaultMonitoringSessionTTL)
	c.SSEHeartbeat = defaults.Positive(c.SSEHeartbeat, DefaultSSEHeartbeat)
	c.MaxStreamsPerPrincipal = cmp.Or(c.MaxStreamsPerPrincipal, DefaultMaxStreamsPerPrincipal)
	c.MaxStreams = cmp.Or(c.MaxStreams, DefaultMaxStreams)
	c.Hooks = c.Hooks.WithDefaults()
	return c
}

// Validate reports every invalid field, naming its key.
func (c Config) Validate() error {
	var errs []error
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		errs = append(errs, fmt.Errorf("api.addr (AETHERIUM_API_ADDR): want host:port, got %q", c.Addr))
	}
	if c.MaxRunsInFlight < 0 {
		errs = append(errs, fmt.Errorf("api.max_runs_in_flight: must be 0 (unlimited) or positive, got %d", c.MaxRunsInFlight))
	}
	errs = append(errs,
		defaults.NotNegative("api.max_streams_per_principal", c.MaxStreamsPerPrincipal),
		defaults.NotNegative("api.max_streams", c.MaxStreams),
		defaults.NotNegative("api.sse_poll", c.SSEPoll))
	if c.BodyLimit <= 0 {
		errs = append(errs, fmt.Errorf("api.body_limit (AETHERIUM_API_BODY_LIMIT): must be positive, got %d", c.BodyLimit))
	}
	if c.MetricsAddr != "" {
		if _, _, err := net.SplitHostPort(c.MetricsAddr); err != nil {
			errs = append(errs, fmt.Errorf("api.metrics_addr (AETHERIUM_API_METRICS_ADDR): want host:port or empty, got %q", c.MetricsAddr))
		}
	}
	errs = append(errs, c.Hooks.Validate())
	if c.MonitoringSessionTTL < 0 || c.MonitoringSessionTTL > MaxMonitoringSessionTTL {
		errs = append(errs, fmt.Errorf("api.monitoring_session_ttl: want a duration up to %s, got %s", MaxMonitoringSessionTTL, c.MonitoringSessionTTL))
	}
	if k := c.MonitoringSessionKey; k != "" && len(k) < MinMonitoringSessionKeyBytes {
		errs = append(errs, fmt.Errorf("api.monitoring_session_key (AETHERIUM_API_MONITORING_SESSION_KEY): want at least %d bytes, got %d", MinMonitoringSessionKeyBytes, len(k)))
	}
	errs = append(errs, validateHosts(c.AllowedHosts))
	if _, err := newCSRF(c.AllowedOrigins); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// monitoringReadOnly is MonitoringReadOnly with nil read as the default.
func (c Config) monitoringReadOnly() bool {
	return c.MonitoringReadOnly == nil || *c.MonitoringReadOnly
}

// Deps are the API's collaborators.
type Deps struct {
	Store    *store.Store
	Redis    redis.UniversalClient
	RedisOpt asynq.RedisConnOpt
	Queue    *queue.Enqueuer
	// Fairness is the fleet's sharing policy: fairness keys' run limits and
	// the priorities roles may submit with.
	Fairness queue.Fairness
	Events   *events.Recorder
	// Hub is the process's one events hub (one Redis subscription shared with the
	// MCP server); nil makes one of the server's own on Redis.
	Hub       *events.Hub
	Registry  *tools.Registry
	Templates templates.Dir
	Metrics   *metrics.Metrics
	// Approvals decides approvals (security.Approvals); nil without a permission gate.
	Approvals ApprovalDecider
	// Leases serves GET /api/leases and checks a team's gpu_services.
	Leases *lease.Manager
	Log    *slog.Logger
	// Submit starts runs (package submit): every check of a submission.
	Submit *submit.Submitter
	// RemoveProject, when set, removes a deleted project's workspace and knowledge
	// (its rows and memory are deleted by the store first).
	RemoveProject func(ctx context.Context, p store.Project) error
	// PromoteWorkspace, when set, replaces workspace to's files with a copy of
	// from's (wsquota.Manager.Promote): POST /api/runs/:id/promote.
	PromoteWorkspace func(ctx context.Context, from, to string) error
	// WorkspaceDir, when set, is the directory of a workspace by id: the Studio's
	// read-only workspace browser (GET /api/runs/:id/files). Nil answers 501.
	WorkspaceDir func(id string) string
	// Limits are the deployment's operative limits beyond the API's own, as GET
	// /api/fleet shows them (the fleet fills them from the configuration).
	Limits []Limit
	// Schedules bounds the schedules people create (schedules.min_interval,
	// max_jitter, max_catch_up).
	Schedules schedules.Config
	// Replay, when set, replays a finished run from its record (POST
	// /api/runs/:id/replay): the fleet sets it in a process that holds the
	// worker's engine, and in an API process alone to hand the replay to a
	// worker (replay.ErrPending: 503). Nil answers 501.
	Replay func(ctx context.Context, runID string) (replay.Report, error)
	// Fork, when set, forks a finished run at a step (POST
	// /api/runs/:id/fork, docs/fork.md): set with Replay. Nil answers 501.
	Fork func(ctx context.Context, runID string, by submit.Principal, req ForkRequest) (replay.ForkResult, error)
	// TraceURL is the template of a trace's URL (tracing.trace_url): a run's
	// view links to its trace. Empty: no link.
	TraceURL string
}

// Server is the API.
type Server struct {
	cfg Config
	d   Deps
	App *fiber.App
	mon *asynqmon.HTTPHandler
	hub *events.Hub
	// ownHub: the hub was made here (no Deps.Hub) and Close closes it.
	ownHub  bool
	streams *streamSlots
	// hosts and csrf are the edge checks (edge.go).
	hosts hostSet
	csrf  *http.CrossOriginProtection
	// inspector reads asynq's servers and queues (GET /api/fleet).
	inspector *asynq.Inspector
	// tickets signs and checks asynqmon's browser sessions (monitoring.go).
	tickets *ticketer
}

// New builds the Fiber app: the route table (routes.go) and asynqmon at /monitoring.
func New(cfg Config, d Deps) *Server {
	cfg = cfg.WithDefaults()
	if d.Log == nil {
		d.Log = slog.Default()
	}
	s := &Server{cfg: cfg, d: d, hub: d.Hub, streams: newStreamSlots(cfg.MaxStreamsPerPrincipal, cfg.MaxStreams), hosts: newHostSet(cfg)}
	if s.hub == nil {
		s.hub, s.ownHub = events.NewHub(d.Redis, d.Log), true
	}
	csrf, err := newCSRF(cfg.AllowedOrigins)
	if err != nil {
		// Validate reports it at load; here it fails closed: only the API's own origin.
		d.Log.Error("api.allowed_origins ignored", "err", err)
		csrf, _ = newCSRF(nil)
	}
	s.csrf = csrf
	s.inspector = asynq.NewInspectorFromRedisClient(d.Redis)
	if s.tickets, err = newTicketer(cfg); err != nil {
		// Validate reports a bad key at load; here it fails closed: no cookie opens asynqmon.
		d.Log.Error("monitoring sessions off", "err", err)
	}
	app := fiber.New(fiber.Config{
		// The larger of the API's and the hooks' limits: guard holds the API's
		// routes to theirs, deliverHook the hooks to theirs.
		BodyLimit:             max(cfg.BodyLimit, cfg.Hooks.BodyLimit),
		DisableStartupMessage: true,
		ErrorHandler:          s.errorHandler,
		ReadTimeout:           30 * time.Second,
		IdleTimeout:           60 * time.Second,
	})
	s.App = app
	if d.Metrics != nil {
		app.Use(s.observe)
	}
	// Before every route, asynqmon and the Studio included (edge.go).
	app.Use(s.guard)
	s.mon = asynqmon.New(asynqmon.Options{
		RootPath: MonitoringPath, RedisConnOpt: d.RedisOpt, ReadOnly: cfg.monitoringReadOnly(),
		PrometheusAddress: cfg.PrometheusURL,
	})
	mon := adaptor.HTTPHandler(s.mon)
	app.Use(MonitoringPath, s.monitoringAuth(), mon)
	s.register(app)
	// The Studio's pages are HTML shells outside the OpenAPI document (NotInOpenAPI).
	studio.Mount(app)
	app.Use(func(c *fiber.Ctx) error {
		return &Error{Status: http.StatusNotFound, Message: fmt.Sprintf("no route %s %s", c.Method(), c.Path())}
	})
	return s
}

// Close releases the asynqmon connection and the event hub's subscription (when
// the hub is the server's own, not Deps.Hub).
func (s *Server) Close() error {
	err := s.mon.Close()
	if s.ownHub {
		err = errors.Join(err, s.hub.Close())
	}
	return err
}

// StreamWatchers is the number of event streams open on this server.
func (s *Server) StreamWatchers() int {
	s.streams.mu.Lock()
	defer s.streams.mu.Unlock()
	return s.streams.count
}

// Error is an API error answered as {"error": ..., "field": ...} (errorResponse).
type Error struct {
	Status  int
	Message string
	Field   string
}

func (e *Error) Error() string { return e.Message }

// errorResponse is the body of every error answer.
type errorResponse struct {
	Error string `json:"error"`
	// Field names the offending input (a body field, a parameter) when there is one.
	Field string `json:"field,omitempty"`
}

type healthStatus struct {
	Status string `json:"status" jsonschema:"enum=ok"`
}

// readiness is the answer of /readyz: checks holds "ok" or the error per dependency.
type readiness struct {
	Status string            `json:"status" jsonschema:"enum=ready,enum=unavailable"`
	Checks map[string]string `json:"checks"`
}

func badRequest(field, format string, a ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Field: field, Message: fmt.Sprintf(format, a...)}
}

// queryLimit is the request's ?limit=, from 1 to most; def when it names none.
func queryLimit(c *fiber.Ctx, def, most int) (int, error) {
	l := c.Query("limit")
	if l == "" {
		return def, nil
	}
	n, err := strconv.Atoi(l)
	if err != nil || n < 1 || n > most {
		return 0, badRequest("limit", "limit must be an integer from 1 to %d", most)
	}
	return n, nil
}

func (s *Server) errorHandler(c *fiber.Ctx, err error) error {
	status, body := http.StatusInternalServerError, errorResponse{Error: "internal error"}
	var ae *Error
	var fe *fiber.Error
	switch {
	case errors.As(err, &ae):
		status, body = ae.Status, errorResponse{Error: ae.Message, Field: ae.Field}
	case errors.As(err, &fe):
		status, body = fe.Code, errorResponse{Error: fe.Message}
		if fe.Code == http.StatusRequestEntityTooLarge {
			limit := s.cfg.BodyLimit
			if strings.HasPrefix(c.Path(), HooksPathPrefix) {
				// Refused by Fiber before any handler: recorded here.
				limit = s.cfg.Hooks.BodyLimit
				s.hookTooLarge(c)
			}
			body.Error = fmt.Sprintf("request body is over the %d byte limit", limit)
		}
	default:
		s.d.Log.Error("api error", "method", c.Method(), "path", c.Path(), "err", err)
	}
	return c.Status(status).JSON(body)
}

func (s *Server) observe(c *fiber.Ctx) error {
	start := time.Now()
	err := c.Next()
	status := c.Response().StatusCode()
	if err != nil {
		var ae *Error
		var fe *fiber.Error
		switch {
		case errors.As(err, &ae):
			status = ae.Status
		case errors.As(err, &fe):
			status = fe.Code
		default:
			status = 500
		}
	}
	route := c.Route().Path
	if route == "/" && c.Path() != "/" {
		route = "unmatched"
	}
	// Fiber's Method() aliases fasthttp's reused request buffer: a label value kept
	// by the registry must be a copy, or the next request rewrites it mid-scrape.
	method := strings.Clone(c.Method())
	s.d.Metrics.HTTPRequests.WithLabelValues(route, method, strconv.Itoa(status)).Inc()
	s.d.Metrics.HTTPDuration.WithLabelValues(route, method).Observe(time.Since(start).Seconds())
	return err
}

func (s *Server) readyz(c *fiber.Ctx) error {
	ctx, cancel := context.WithTimeout(c.UserContext(), 2*time.Second)
	defer cancel()
	checks := map[string]string{}
	ok := true
	if err := s.d.Store.Ping(ctx); err != nil {
		checks["postgres"], ok = err.Error(), false
	} else {
		checks["postgres"] = "ok"
	}
	if err := s.d.Redis.Ping(ctx).Err(); err != nil {
		checks["redis"], ok = err.Error(), false
	} else {
		checks["redis"] = "ok"
	}
	if !ok {
		return c.Status(http.StatusServiceUnavailable).JSON(readiness{Status: "unavailable", Checks: checks})
	}
	return c.JSON(readiness{Status: "ready", Checks: checks})
}
