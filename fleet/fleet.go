// Package fleet is the composition root: it builds a core every role shares
// (Postgres, Redis, the asynq client and queue.Enqueuer, events, metrics) and, per
// role, only what that role uses (OpenAPI, OpenWorker, OpenScheduler; Open builds
// all three for the dev role and the tests), then runs the roles on them. The
// behaviour lives in the role packages: api, worker, scheduler (maintenance and
// run cleanup), security, tools.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/aetherium-engine/aetherium/api"
	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/device"
	"github.com/aetherium-engine/aetherium/egress"
	"github.com/aetherium-engine/aetherium/egressproxy"
	"github.com/aetherium-engine/aetherium/events"
	"github.com/aetherium-engine/aetherium/finishimage"
	"github.com/aetherium-engine/aetherium/gpu"
	"github.com/aetherium-engine/aetherium/internal/redisconn"
	"github.com/aetherium-engine/aetherium/knowledge"
	"github.com/aetherium-engine/aetherium/lease"
	"github.com/aetherium-engine/aetherium/logctx"
	"github.com/aetherium-engine/aetherium/mailbox"
	"github.com/aetherium-engine/aetherium/metrics"
	"github.com/aetherium-engine/aetherium/qa"
	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/queue/fair"
	"github.com/aetherium-engine/aetherium/replay"
	"github.com/aetherium-engine/aetherium/requiredoutput"
	"github.com/aetherium-engine/aetherium/retention"
	"github.com/aetherium-engine/aetherium/sandbox"
	"github.com/aetherium-engine/aetherium/scheduler"
	"github.com/aetherium-engine/aetherium/schedules"
	"github.com/aetherium-engine/aetherium/security"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/submit"
	"github.com/aetherium-engine/aetherium/templates"
	"github.com/aetherium-engine/aetherium/toolbox"
	comfyuitools "github.com/aetherium-engine/aetherium/toolbox/comfyui"
	"github.com/aetherium-engine/aetherium/tools"
	"github.com/aetherium-engine/aetherium/tracing"
	"github.com/aetherium-engine/aetherium/webhook"
	"github.com/aetherium-engine/aetherium/worker"
	"github.com/aetherium-engine/aetherium/worker/hook"
	"github.com/aetherium-engine/aetherium/wsquota"
)

// Fleet is one process's wiring.
type Fleet struct {
	Cfg      config.Config
	Log      *slog.Logger
	Store    *store.Store
	Redis    redis.UniversalClient
	RedisOpt asynq.RedisConnOpt
	// serverClients are the worker servers' own Redis clients (WorkerServer);
	// redisConn is the parsed redis_url that they and Redis are built from, so
	// every client of the process has the same shape (node, Sentinel, Cluster).
	serverClients []redis.UniversalClient
	redisConn     *redisconn.Conn
	Client        *asynq.Client
	Queue         *queue.Enqueuer
	Events        *events.Recorder
	// hub is the process's one events hub (one Redis subscription), shared by
	// the API's event streams and the MCP server's waits (EventsHub).
	hub      *events.Hub
	hubOnce  sync.Once
	Registry *tools.Registry
	Router   *tools.Router
	Metrics  *metrics.Metrics
	Worker   *worker.Worker
	// MemoryIndex is the worker's in-process index of recall candidates
	// (memory.cache_entries; nil when negative or without the worker).
	MemoryIndex *store.MemoryIndex
	// Traffic is the model-traffic plane: the governor and the price table.
	Traffic *Traffic
	// The permission gate's parts (nil with Options.NoGate).
	Rules     *security.Rules
	Approvals *security.Approvals
	// gate is the worker's permission gate (nil without the worker role or
	// with Options.NoGate): replay judges with its recorded copy.
	gate   *security.Gate
	Audit  *security.Auditor
	Egress *egress.Egress
	// Secrets are the team secrets of security.secrets (nil when none).
	Secrets *egress.Secrets
	// Policy is the egress policy (the fleet's own endpoints, kept current).
	Policy     *egress.EgressPolicy
	stopPolicy func()
	// Webhooks delivers signed run events (nil when none are configured).
	Webhooks *webhook.Deliverer
	Mailbox  *mailbox.Mailbox
	Leases   *lease.Manager
	// GPU starts and stops leased services' containers (nil without images).
	GPU *gpu.Controller
	// Device drives the Steam Frame (nil unless devices.steam_frame.enabled).
	Device *device.Driver
	// Executor runs shell commands (nil when no sandbox could start).
	Executor    sandbox.Executor
	ownExecutor bool
	// EgressProxy is the Docker sandboxes' only way out (nil: sandboxes get no network).
	EgressProxy *egressproxy.Proxy
	// Workspaces makes and mounts the runs' workspaces: quota, free-disk guard.
	Workspaces *wsquota.Manager
	// Tracing makes the spans of the runs' traces (nil: tracing is off).
	Tracing *tracing.Provider
	// contracts reports the process in fleet_processes and agrees on the
	// payload contract version the Enqueuer writes (docs/how-to/upgrade.md).
	contracts *contracts
}

// Options adjust Open (tests and benchmarks).
type Options struct {
	// Migrate brings the database schema up to date right after connecting, before
	// anything reads it (the dev role on a fresh database).
	Migrate bool
	// Models overrides the model factory.
	Models worker.Models
	// Middleware wraps tool dispatch (outermost first), outside the gate.
	Middleware []tools.Middleware
	// NoGate dispatches tools without the permission gate (unit benchmarks only).
	NoGate bool
	// ExtraTools registers tools after the shipped catalog (tests standing in for a
	// tool of the design this build does not ship yet).
	ExtraTools func(*tools.Registry)
	// Executor runs run_shell commands; nil builds one from config.Sandbox.
	Executor sandbox.Executor
	// NoSandbox skips building an executor (tests that run no shell commands).
	NoSandbox bool
	// Device, when set, drives the headset with this configuration (a test's
	// simulator) whatever devices.steam_frame says.
	Device *device.Config
	// EgressResolver resolves names for outbound tools and the sandbox egress
	// proxy (a test's DNS server); nil uses the system resolver.
	EgressResolver *net.Resolver
	// SpanExporter, when set, turns tracing on whatever tracing.enabled says
	// and receives every span synchronously as it ends, instead of the OTLP
	// exporter (tests: tracetest.NewInMemoryExporter()).
	SpanExporter sdktrace.SpanExporter
}

// role is a set of the roles one process runs.
type role uint8

const (
	roleAPI role = 1 << iota
	roleWorker
	roleScheduler
	roleAll = roleAPI | roleWorker | roleScheduler
)

// String is the role's name in fleet_processes.
func (r role) String() string {
	switch r {
	case roleAPI:
		return "api"
	case roleWorker:
		return "worker"
	case roleScheduler:
		return "scheduler"
	case roleAll:
		return "dev"
	}
	return fmt.Sprintf("roles-%d", uint8(r))
}

// Open builds every role's parts in one process: the dev role, and the tests and
// benchmarks that run a whole fleet in-process.
func Open(ctx context.Context, cfg config.Config, log *slog.Logger, opts Options) (*Fleet, error) {
	return open(ctx, cfg, log, opts, roleAll)
}

// OpenAPI builds what the api role uses: the core, the tool catalog (no tool
// can run: no sandbox, no headset, no GPU controller), the approvals and the
// GPU leases it lists. RunAPI serves it.
func OpenAPI(ctx context.Context, cfg config.Config, log *slog.Logger, opts Options) (*Fleet, error) {
	return open(ctx, cfg, log, opts, roleAPI)
}

// OpenWorker builds what the worker role uses: the core, the tools with their
// sandbox, headset and GPU controller, the permission gate and the agent loop.
// RunWorker serves it.
func OpenWorker(ctx context.Context, cfg config.Config, log *slog.Logger, opts Options) (*Fleet, error) {
	return open(ctx, cfg, log, opts, roleWorker)
}

// OpenScheduler builds what the scheduler role uses: the core only (it enqueues
// the maintenance ticks; the workers run them). RunScheduler serves it.
func OpenScheduler(ctx context.Context, cfg config.Config, log *slog.Logger, opts Options) (*Fleet, error) {
	return open(ctx, cfg, log, opts, roleScheduler)
}

func open(ctx context.Context, cfg config.Config, log *slog.Logger, opts Options, roles role) (*Fleet, error) {
	if log == nil {
		log = slog.Default()
	}
	var topts []tracing.Option
	if opts.SpanExporter != nil {
		topts = append(topts, tracing.WithSpanExporter(opts.SpanExporter))
	}
	tp, err := tracing.New(ctx, cfg.Tracing, topts...)
	if err != nil {
		return nil, err
	}
	if tp.Enabled() {
		log = slog.New(tracing.LogHandler(log.Handler())) // trace_id and span_id on every line of a span
	}
	f := &Fleet{Cfg: cfg, Log: log, Metrics: metrics.New(), Tracing: tp}
	err = f.openCore(ctx, opts)
	if err == nil {
		f.contracts.start(ctx, roles.String())
	}
	if err == nil && roles&roleWorker != 0 {
		err = f.openWorker(ctx, opts)
	}
	if err == nil && roles&roleAPI != 0 {
		err = f.openAPI(opts)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// openCore builds what every role uses: the store, Redis, the asynq client and
// Enqueuer, the event recorder (with its webhook and cleanup fan-out), the metrics,
// the workspaces' manager and the egress policy that every listener registers in.
func (f *Fleet) openCore(ctx context.Context, opts Options) error {
	cfg := f.Cfg
	var err error
	if f.Workspaces, err = wsquota.New(cfg.Workspaces, cfg.WorkspaceLimits); err != nil {
		return fmt.Errorf("workspaces (AETHERIUM_WORKSPACES): %w", err)
	}
	if f.Store, err = store.OpenPool(ctx, cfg.DatabaseURL, store.PoolConnsFor(cfg.Worker.WithDefaults().Concurrency)); err != nil {
		return fmt.Errorf("postgres (AETHERIUM_DATABASE_URL): %w", err)
	}
	if opts.Migrate {
		if err := f.Store.MigrateUp(ctx); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
	}
	if f.redisConn, err = redisconn.Parse(cfg.RedisURL); err != nil {
		return fmt.Errorf("redis (AETHERIUM_REDIS_URL): %w", err)
	}
	f.Redis = f.redisConn.Client()
	if err := f.Redis.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis (AETHERIUM_REDIS_URL) %s %s: %w", f.redisConn.Shape, strings.Join(f.redisConn.Addrs(), ","), err)
	}
	f.RedisOpt = f.redisConn.Asynq()
	f.Client = asynq.NewClient(f.RedisOpt)
	qcfg := queue.Config{MaxRetry: cfg.Worker.MaxRetry, Wake: f.Redis, Fairness: cfg.Fairness.WithDefaults()}
	if qcfg.Fairness.Dispatch == queue.DispatchFair {
		if qcfg.Fair, err = fair.New(f.Redis, fair.Config{Aging: qcfg.Fairness.Aging}); err != nil {
			return fmt.Errorf("fairness: %w", err)
		}
	}
	f.contracts = newContracts(f.Store, asynq.NewInspectorFromRedisClient(f.Redis), f.Log)
	qcfg.Contract = f.contracts.Version
	if f.Queue, err = queue.NewEnqueuer(f.Client, qcfg); err != nil {
		return fmt.Errorf("worker.max_retry: %w", err)
	}
	f.Events = &events.Recorder{Store: f.Store, Redis: f.Redis, Log: f.Log, Announcer: events.NewAnnouncer(f.Redis, f.Log)}
	hooks := []func(context.Context, events.Stored) error{}
	if len(cfg.API.Webhooks) > 0 {
		f.Webhooks = &webhook.Deliverer{Hooks: cfg.API.Webhooks, Store: f.Store, Queue: f.Queue}
		hooks = append(hooks, f.Webhooks.OnEvent)
	}
	f.Events.OnEvent = events.Fanout(append(hooks, scheduler.OnEvent(f.Queue))...)
	if f.Traffic, err = newTraffic(cfg, f.Redis, f.Log); err != nil {
		return err
	}
	return f.openPolicy(cfg, opts)
}

// openStreams builds the Redis-stream parts (mailboxes, GPU leases) once.
func (f *Fleet) openStreams() error {
	if f.Leases != nil {
		return nil
	}
	cfg, reg := f.Cfg, f.Metrics.Registry
	mbm, err := mailbox.NewMetrics(reg)
	if err != nil {
		return fmt.Errorf("mailbox metrics: %w", err)
	}
	f.Mailbox = mailbox.New(f.Redis, cfg.Streams.Mailbox, mailbox.Options{Metrics: mbm, Log: f.Log,
		OnDeadLetter: func(ctx context.Context, d mailbox.DeadLetter) {
			if err := f.Events.Emit(ctx, d.RunID, "dead-letter:"+d.ID, events.MailboxDeadLetter, d.To, events.MailboxDeadLetterData{
				MessageID: d.ID, From: d.From, To: d.To, Reason: d.Reason,
			}); err != nil {
				f.Log.Error("dead-letter event", "run_id", d.RunID, "err", err)
			}
		}})
	lm, err := lease.NewMetrics(reg)
	if err != nil {
		return fmt.Errorf("lease metrics: %w", err)
	}
	lopts := lease.Options{Metrics: lm}
	if f.Store != nil {
		// Fencing epochs from PostgreSQL keep tokens increasing across a Redis
		// failover (lease/doc.go, "Fencing across a Redis failover").
		lopts.Epoch = lease.PostgresEpoch(f.Store.Pool)
	}
	if f.Leases, err = lease.New(f.Redis, cfg.Streams.Leases, lopts); err != nil {
		return fmt.Errorf("streams.leases: %w", err)
	}
	return nil
}

// openApprovals builds the approvals once (nil with Options.NoGate).
func (f *Fleet) openApprovals(opts Options) {
	if f.Approvals != nil || opts.NoGate {
		return
	}
	sec := f.Cfg.Security
	f.Approvals = security.NewApprovals(security.ApprovalsConfig{Window: sec.ApprovalWindow, FallbackTools: sec.SupervisorFallback,
		GrantMaxTTL: sec.GrantMaxTTL, AllowSelfApproval: sec.AllowSelfApproval},
		f.Store, f.Events, f.Queue, f.Metrics, f.Log)
	if f.Rules != nil {
		f.Approvals.UseRules(f.Rules)
	}
}

// loadRules loads the permissions file once (watched by WatchRules).
func (f *Fleet) loadRules(sec security.Config) (*security.Rules, error) {
	if f.Rules != nil {
		return f.Rules, nil
	}
	rules, err := security.LoadRules(sec.PermissionsFile, f.Log)
	if err != nil {
		// At boot there is no last good file to keep: refuse to start.
		return nil, fmt.Errorf("security.permissions_file (AETHERIUM_PERMISSIONS): %w", err)
	}
	rules.OnReload = func(n int, err error) {
		if err != nil {
			f.Metrics.RulesReloads.WithLabelValues("error").Inc()
			f.Metrics.RulesValid.Set(0)
			return
		}
		f.Metrics.RulesReloads.WithLabelValues("ok").Inc()
		f.Metrics.RulesValid.Set(1)
	}
	f.Rules = rules
	if f.Approvals != nil {
		f.Approvals.UseRules(rules)
	}
	return rules, nil
}

// openAPI builds the api role's parts beyond the core; in a process that runs a
// worker too, it shares the worker's registry.
func (f *Fleet) openAPI(opts Options) error {
	if err := f.openStreams(); err != nil {
		return err
	}
	if !opts.NoGate {
		// Grants are listed and confirmed under the permissions in force.
		if _, err := f.loadRules(f.Cfg.Security); err != nil {
			return err
		}
	}
	f.openApprovals(opts)
	if f.Registry != nil {
		return nil
	}
	// The catalog only: the API lists and checks tools, it never dispatches one.
	reg, err := toolbox.New(toolbox.Deps{Research: f.Cfg.Research})
	if err != nil {
		return err
	}
	if opts.ExtraTools != nil {
		opts.ExtraTools(reg)
	}
	f.Registry = reg
	return nil
}

// openWorker builds the worker role's parts beyond the core.
func (f *Fleet) openWorker(ctx context.Context, opts Options) error {
	cfg := f.Cfg
	if err := f.openStreams(); err != nil {
		return err
	}
	// A worker of another key layout than its peers must not start
	// (docs/how-to/upgrade.md): it would grant and deliver from other keys.
	if err := f.Leases.CheckLayout(ctx); err != nil {
		return fmt.Errorf("streams.leases: %w", err)
	}
	if err := f.Mailbox.CheckLayout(ctx); err != nil {
		return fmt.Errorf("streams.mailbox: %w", err)
	}
	if err := f.openParts(ctx, cfg, opts); err != nil {
		return err
	}
	sec := cfg.Security
	var err error
	if f.Secrets, err = loadSecrets(sec.Secrets); err != nil {
		return err
	}
	f.Egress = egress.NewEgress(egress.EgressConfig{MaxRedirects: sec.MaxRedirects, Timeout: sec.EgressTimeout,
		Resolver: opts.EgressResolver, Secrets: f.Secrets, Policy: f.Policy})
	roster := func(_ context.Context, s *tools.Session) ([]string, error) {
		if s != nil {
			return s.Peers, nil
		}
		return nil, errors.New("no session")
	}
	kb := f.knowledgeBase()
	if f.Registry, err = toolbox.New(toolbox.Deps{Store: f.Store, Egress: f.Egress, Executor: f.Executor,
		Mailbox: f.Mailbox, Roster: roster, Device: f.Device, Research: cfg.Research, Quality: cfg.Quality,
		Knowledge: kb, KnowledgeConfig: cfg.Knowledge, Audio: cfg.Audio, GPU: f.GPU, Leases: f.Leases, ComfyUI: cfg.ComfyUI}); err != nil {
		return err
	}
	// The team packs are indexed at boot when they changed (a hash per file); a
	// pack that fails to index is searched without its new documents, not a
	// worker that refuses to start.
	if reps, err := knowledge.IndexPacks(ctx, kb, cfg.Knowledge.PacksDir); err != nil {
		f.Log.Warn("knowledge packs not fully indexed", "dir", cfg.Knowledge.PacksDir, "err", err)
	} else if len(reps) > 0 {
		f.Log.Info("knowledge packs indexed", "dir", cfg.Knowledge.PacksDir, "packs", len(reps))
	}
	if opts.ExtraTools != nil {
		opts.ExtraTools(f.Registry)
	}
	mw := append([]tools.Middleware{}, opts.Middleware...)
	var redact func(string) string
	if !opts.NoGate {
		gate, err := f.openGate(sec, opts)
		if err != nil {
			return err
		}
		mw = append(mw, gate.Middleware, (&tools.Intents{Store: f.Store, Reg: f.Registry}).Middleware)
		f.gate = gate
		if cfg.Tracing.CaptureContent {
			redact = gate.RedactText // the audit trail's masking; no gate, no content
		}
	}
	if opts.NoGate {
		f.Router = tools.NewRouter(f.Registry, mw...)
	} else {
		f.Router = tools.NewGatedRouter(f.Registry, mw...)
	}
	models := opts.Models
	if models == nil {
		models = &ModelFactory{LLM: cfg.LLM, ScriptLatency: cfg.Worker.ScriptLatency, Traffic: f.Traffic}
	}
	var audit worker.AuditWriter
	if f.Audit != nil {
		audit = f.Audit
	}
	windowTable, err := cfg.LLM.WindowTable()
	if err != nil {
		return fmt.Errorf("llm.windows: %w", err)
	}
	wcfg := cfg.Worker
	wcfg.Workspaces = cfg.Workspaces
	wcfg.ReviewModel = cfg.Quality.Review.Model
	wcfg.MaxWait = cfg.LLM.MaxWait
	if wcfg.PrincipalDailyBudget, err = cfg.LLM.DailyBudget(); err != nil {
		return fmt.Errorf("llm.budgets.principal_daily: %w", err)
	}
	// The product rules plug into the agent loop as hooks.
	wcfg.ReplyChecks = []hook.ReplyCheck{qa.Check, requiredoutput.Check}
	wcfg.PostRun = []hook.PostRun{finishimage.New(finishimage.Deps{Store: f.Store, Queue: f.Queue, Events: f.Events,
		Finisher: f.finisher(), Log: f.Log}).PostRun()}
	var recall worker.MemoryRecaller
	if n := cfg.Memory.WithDefaults().CacheEntries; n > 0 {
		if f.MemoryIndex, err = store.NewMemoryIndex(f.Store, n); err != nil {
			return fmt.Errorf("memory.cache_entries: %w", err)
		}
		recall = f.MemoryIndex
	}
	f.Worker = worker.New(wcfg, worker.Deps{MemoryRecall: recall, Store: f.Store, Queue: f.Queue, Events: f.Events, Router: f.Router, Models: models, Metrics: f.Metrics, ModelLabels: knownModels(cfg, f.Registry), Log: f.Log, Gated: !opts.NoGate,
		Mailbox: f.Mailbox, Leases: f.Leases, GPU: f.GPU, LeaseRetry: cfg.Streams.LeaseRetry, Audit: audit, Workspaces: f.Workspaces,
		Knowledge: kb, Memory: cfg.Memory, Windows: newWindows(windowTable), Tracing: f.Tracing, RedactContent: redact})
	return nil
}

// finisher runs finish_image's post-run upscales on the leased qwen service.
func (f *Fleet) finisher() *comfyuitools.Finisher {
	fin := &comfyuitools.Finisher{Client: f.Cfg.ComfyUI.Client, WaitTimeout: f.Cfg.ComfyUI.WaitTimeout, Log: f.Log.With("component", "finish_image")}
	if f.Leases != nil {
		fin.Service = f.Leases.Service
	}
	return fin
}

// retentionSweeper is the retention sweep the maintenance tick runs (on
// whichever worker takes it).
func (f *Fleet) retentionSweeper() *retention.Sweeper {
	m, err := metrics.NewRetention(f.Metrics.Registry)
	if err != nil {
		f.Log.Warn("retention metrics not registered", "err", err)
	}
	return retention.New(f.Cfg.Retention, retention.Deps{Store: f.Store, Mailbox: f.Mailbox, Metrics: m, Workspaces: f.Workspaces,
		Knowledge: f.knowledgeBase(), Log: f.Log.With("component", "retention")})
}

// knowledgeBase is the PostgreSQL knowledge backend of this process.
func (f *Fleet) knowledgeBase() *knowledge.Postgres {
	return knowledge.NewPostgres(f.Store.Pool, f.Cfg.Knowledge, knowledge.WithLogger(f.Log.With("component", "knowledge")))
}

// removeProject removes a deleted project's knowledge and workspace (the api
// role's hook; the store has deleted its rows and memory). A worker on another
// host keeps its copy of the workspace mount until its sweep: the directory is
// removed where this process can see it.
func (f *Fleet) removeProject(ctx context.Context, p store.Project) error {
	var errs []error
	if _, err := f.knowledgeBase().DeleteSource(ctx, knowledge.Project(p.ID)); err != nil {
		errs = append(errs, fmt.Errorf("knowledge: %w", err))
	}
	if f.Workspaces != nil && p.Workspace != "" {
		id := p.Workspace
		if err := f.Workspaces.Unmount(ctx, id); err != nil {
			errs = append(errs, fmt.Errorf("workspace: %w", err))
		} else if err := os.RemoveAll(f.Workspaces.Dir(id)); err != nil {
			errs = append(errs, fmt.Errorf("workspace: %w", err))
		} else if err := os.Remove(f.Workspaces.Image(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("workspace image: %w", err))
		}
	}
	return errors.Join(errs...)
}

func (f *Fleet) openGate(sec security.Config, opts Options) (*security.Gate, error) {
	rules, err := f.loadRules(sec)
	if err != nil {
		return nil, err
	}
	dlp, err := egress.NewDLP()
	if err != nil {
		return nil, err
	}
	f.Audit = security.NewAuditor(security.AuditConfig{}, f.Store, f.Log, func(n int) { f.Metrics.AuditBuffer.Set(float64(n)) })
	f.openApprovals(opts)
	return security.NewGate(security.GateDeps{Registry: f.Registry, Rules: rules, DLP: dlp, Approvals: f.Approvals, Metrics: f.Metrics, Log: f.Log,
		Secrets: f.Secrets, Policy: f.Policy, Flow: f.Cfg.Security.Flow, InstructionFiles: f.Cfg.Security.FlowInstructionFiles,
		PrivateContent: f.Cfg.Security.FlowPrivateContent}), nil
}

// loadSecrets reads the team secrets' values from the process environment or files.
func loadSecrets(srcs map[string]egress.SecretSource) (*egress.Secrets, error) {
	secrets, err := egress.LoadSecrets(srcs, os.LookupEnv)
	if err != nil {
		return nil, fmt.Errorf("security.secrets: %w", err)
	}
	return secrets, nil
}

// WatchRules hot-reloads the permissions file until ctx ends (roles that dispatch tools).
func (f *Fleet) WatchRules(ctx context.Context) error {
	if f.Rules == nil {
		return nil
	}
	return f.Rules.Watch(ctx, 200*time.Millisecond)
}

// Close flushes the audit buffer and releases connections.
func (f *Fleet) Close() {
	if f.Audit != nil {
		f.Audit.Close()
	}
	if f.Workspaces != nil {
		f.Workspaces.Close() // a spare image being made is finished or removed first
	}
	f.closeEgressProxy()
	if f.stopPolicy != nil {
		f.stopPolicy()
	}
	if f.Executor != nil && f.ownExecutor {
		_ = f.Executor.Close()
	}
	f.contracts.close() // before the store: its row is deleted
	if f.Client != nil {
		_ = f.Client.Close()
	}
	for _, rc := range f.serverClients {
		_ = rc.Close()
	}
	if f.hub != nil {
		_ = f.hub.Close()
	}
	if f.Events != nil && f.Events.Announcer != nil {
		f.Events.Announcer.Close() // what is pending, published before Redis closes
	}
	if f.Redis != nil {
		_ = f.Redis.Close()
	}
	if f.Store != nil {
		f.Store.Close()
	}
	// Last: the spans of everything above are flushed.
	if err := f.Tracing.Shutdown(context.Background()); err != nil {
		f.Log.Warn("tracing shutdown", "err", err)
	}
}

// EventsHub is the process's one events hub, made on first use and closed by
// Close: the API's streams and the MCP server's waits share its subscription.
func (f *Fleet) EventsHub() *events.Hub {
	f.hubOnce.Do(func() { f.hub = events.NewHub(f.Redis, f.Log) })
	return f.hub
}

// Submitter builds what starts runs (package submit) for every way a run
// begins in this process: the API's submit and retry, schedules, inbound
// webhooks. It needs the catalog (the API's and the scheduler's opens load it).
func (f *Fleet) Submitter() *submit.Submitter {
	// config.Validate has checked the budget.
	daily, _ := f.Cfg.LLM.DailyBudget()
	return submit.New(submit.Config{MaxRunsInFlight: f.Cfg.API.MaxRunsInFlight, PrincipalDailyBudget: daily}, submit.Deps{
		Store: f.Store, Queue: f.Queue, Fairness: f.Cfg.Fairness.WithDefaults(), Events: f.Events, Registry: f.Registry,
		Templates: templates.Dir{Path: f.Cfg.Templates}, Leases: f.Leases, Metrics: f.Metrics, Log: f.Log,
		CheckDisk: f.Workspaces.CheckFree, CheckModels: f.Traffic.CheckModels, Tracing: f.Tracing})
}

// API builds the HTTP API.
func (f *Fleet) API() *api.Server {
	if err := f.Metrics.WatchQueues(asynq.NewInspectorFromRedisClient(f.Redis), metrics.QueueConfig{Queues: queue.Queues(), AsynqmonNames: true, Log: f.Log}); err != nil {
		f.Log.Error("queue metrics", "err", err)
	}
	deps := api.Deps{Store: f.Store, Redis: f.Redis, RedisOpt: f.RedisOpt, Queue: f.Queue, Fairness: f.Cfg.Fairness.WithDefaults(), Events: f.Events, Hub: f.EventsHub(), Registry: f.Registry,
		Templates: templates.Dir{Path: f.Cfg.Templates}, Metrics: f.Metrics, Leases: f.Leases, Log: f.Log,
		RemoveProject: f.removeProject, WorkspaceDir: f.Workspaces.Dir, PromoteWorkspace: f.Workspaces.Promote, Submit: f.Submitter(), Limits: f.Cfg.OperatorLimits(),
		Schedules: f.Cfg.Schedules, TraceURL: f.Cfg.Tracing.TraceURL}
	if f.Worker != nil && f.gate != nil {
		deps.Replay = func(ctx context.Context, runID string) (replay.Report, error) {
			return f.Replay(ctx, runID, ReplayOptions{})
		}
		deps.Fork = func(ctx context.Context, runID string, by submit.Principal, req api.ForkRequest) (replay.ForkResult, error) {
			return f.Fork(ctx, runID, ForkOptions{At: req.At, By: by, Team: req.Team, Model: req.Model, Prompt: req.Prompt})
		}
	} else if f.Queue != nil {
		// An API process alone (the split deployment): a worker runs them,
		// and copies a promoted workspace (this process may see the
		// workspaces read-only, as compose mounts them).
		deps.Replay, deps.Fork = f.replayRemote, f.forkRemote
		deps.PromoteWorkspace = f.promoteRemote
	}
	if f.Approvals != nil { // a nil *Approvals in the interface would not read as "no gate"
		deps.Approvals = f.Approvals
	}
	return api.New(f.Cfg.API.Config, deps)
}

// RunAPI serves the API until ctx ends, then drains connections; beside it, on
// a listener of its own, the MCP server (RunMCP) when profiles are configured.
func (f *Fleet) RunAPI(ctx context.Context) error {
	if f.Registry == nil {
		return errors.New("api: this process was not opened for the api role (fleet.OpenAPI)")
	}
	return RunAll(ctx, f.runAPI, f.RunMCP, func(ctx context.Context) error { return f.ServeMetrics(ctx, f.Cfg.API.MetricsAddr) })
}

func (f *Fleet) runAPI(ctx context.Context) error {
	if f.Registry == nil {
		return errors.New("api: this process was not opened for the api role (fleet.OpenAPI)")
	}
	if err := f.Cfg.API.CheckAuth(); err != nil {
		return err
	}
	if f.Worker == nil { // a worker of this process watches them
		if err := f.WatchRules(ctx); err != nil {
			return err
		}
	}
	srv := f.API()
	defer srv.Close()
	ln, err := net.Listen("tcp", f.Cfg.API.Addr)
	if err != nil {
		return fmt.Errorf("api (AETHERIUM_API_ADDR=%s): %w", f.Cfg.API.Addr, err)
	}
	f.RegisterEndpoint(ctx, egress.EndpointAPI, ln.Addr().String())
	errc := make(chan error, 2)
	go func() { errc <- srv.App.Listener(ln) }()
	f.Log.Info("api listening", "addr", ln.Addr().String())
	// api.hooks.addr: a listener of its own serving only POST /hooks/:id.
	var hooks *fiber.App
	if addr := f.Cfg.API.Hooks.Addr; addr != "" {
		hln, err := net.Listen("tcp", addr)
		if err != nil {
			_ = srv.App.Shutdown()
			return fmt.Errorf("hooks listener (AETHERIUM_API_HOOKS_ADDR=%s): %w", addr, err)
		}
		f.RegisterEndpoint(ctx, egress.EndpointHooks, hln.Addr().String())
		hooks = srv.HooksApp()
		go func() { errc <- hooks.Listener(hln) }()
		f.Log.Info("hooks listening", "addr", hln.Addr().String())
	}
	select {
	case err := <-errc:
		return fmt.Errorf("api (AETHERIUM_API_ADDR=%s): %w", f.Cfg.API.Addr, err)
	case <-ctx.Done():
	}
	if hooks != nil {
		if err := hooks.ShutdownWithTimeout(f.Cfg.Worker.ShutdownTimeout); err != nil {
			f.Log.Warn("hooks listener shutdown", "err", err)
		}
	}
	if err := srv.App.ShutdownWithTimeout(f.Cfg.Worker.ShutdownTimeout); err != nil {
		return fmt.Errorf("api shutdown: %w", err)
	}
	f.Log.Info("api stopped")
	return nil
}

// WorkerServer builds the asynq server and handler of the worker role. The returned
// cancel ends the handlers' base context: in-flight steps stop, release their
// sessions and their tasks go back to the queue.
func (f *Fleet) WorkerServer() (*asynq.Server, *asynq.ServeMux, context.CancelFunc) {
	base, cancel := context.WithCancel(context.Background())
	w := f.Worker
	// The server's own client carries the Waker's hook: after a dequeue round
	// that found nothing it sleeps until a task is announced (or the idle poll
	// interval passes), so asynq itself polls almost without pause.
	waker := queue.NewWaker(f.Redis, len(queue.Queues()), f.Cfg.Worker.TaskCheckInterval)
	rc := f.redisConn.Client()
	rc.AddHook(waker.Hook())
	// Closed with the fleet: asynq does not close a client it was given, and a
	// shutdown still hands unfinished tasks back through it after cancel.
	f.serverClients = append(f.serverClients, rc)
	go func() { _ = waker.Run(base) }()
	srv := asynq.NewServerFromRedisClient(rc, w.ServerConfig(asynq.Config{
		Concurrency:       f.Cfg.Worker.Concurrency,
		Queues:            queue.Weights(),
		TaskCheckInterval: wakePoll,
		ShutdownTimeout:   f.Cfg.Worker.ShutdownTimeout,
		BaseContext:       func() context.Context { return base },
		Logger:            asynqLogger{f.Log.With("component", "asynq")},
		LogLevel:          asynq.WarnLevel,
	}))
	mux := w.Mux()
	// A payload of a contract this build does not read is refused before any
	// handler, and kept (retried, then archived with the reason).
	mux.Use(queue.ContractMiddleware)
	if f.Approvals != nil {
		mux.HandleFunc(queue.TypeApprovalExpire, f.Approvals.Expire)
	}
	if f.Webhooks != nil {
		mux.HandleFunc(queue.TypeWebhookDeliver, f.Webhooks.Handle)
	}
	if f.gate != nil {
		mux.HandleFunc(queue.TypeReplay, f.handleReplayTask)
	}
	if f.Workspaces != nil {
		mux.HandleFunc(queue.TypePromote, f.handlePromoteTask)
	}
	mux.Use(logctx.TaskMiddleware())
	// The runner leaves the dispatcher's window when base ends; the returned
	// cancel waits for that, so a stopped process's slots are not counted on
	// (and filled) for the WorkerTTL a crashed one's are.
	beats := make(chan struct{})
	if runner := f.Queue.FairRunner(workerName(), f.Cfg.Worker.Concurrency, f.Log.With("component", "fair")); runner != nil {
		mux.Use(runner.Middleware)
		runner.Observe = func(st fair.Stats) {
			for state, v := range map[string]int{"pending": st.Pending, "keys": st.Keys, "in_flight": st.InFlight, "window": st.Window, "blocked": st.Blocked} {
				f.Metrics.FairDispatch.WithLabelValues(state).Set(float64(v))
			}
		}
		go func() {
			defer close(beats)
			if err := runner.Run(base, fairBeat); err != nil {
				f.Log.Warn("fair dispatch: leave", "err", err)
			}
		}()
	} else {
		close(beats)
	}
	scheduler.NewMaintenance(f.schedulerConfig(), scheduler.MaintenanceDeps{
		Store: f.Store, Queue: f.Queue, Fail: w.FailRun, AnnounceEnd: w.AnnounceEnd, Start: w.StartAdmitted, Log: f.Log,
		Mailbox: f.Mailbox, Leases: f.Leases, GPU: f.GPU, Executor: f.Executor, Workspaces: f.Workspaces,
		Retention:     f.retentionSweeper(),
		CancelWork:    comfyuitools.Canceler{Leases: f.Leases, Client: f.Cfg.ComfyUI.Client, VideoService: f.Cfg.ComfyUI.VideoService}.CancelRun,
		AfterRelease:  w.AfterCleanup,
		SweepWebhooks: f.sweepWebhooks(),
	}).Register(mux)
	f.Metrics.WorkerStarted(f.Cfg.Worker.Concurrency)
	stopped := sync.OnceFunc(func() { f.Metrics.WorkerStopped(f.Cfg.Worker.Concurrency) })
	return srv, mux, func() { cancel(); <-beats; stopped() }
}

// sweepWebhooks is the maintenance's webhook sweep, nil without webhooks.
func (f *Fleet) sweepWebhooks() func(context.Context) (int, error) {
	if f.Webhooks == nil {
		return nil
	}
	return f.Webhooks.Sweep
}

// fairBeat is how often a worker process heartbeats its capacity and its
// running tasks to the fair dispatcher (well inside fair.DefaultWorkerTTL and
// DefaultRunLease); each beat also dispatches what expired leases freed.
const fairBeat = 2 * time.Second

// workerName names this worker process for the fair dispatcher.
func workerName() string {
	host, _ := os.Hostname()
	return queue.WorkerName(host, os.Getpid(), time.Now())
}

// wakePoll is asynq's own pause after an empty dequeue round; the Waker does the
// waiting.
const wakePoll = time.Millisecond

// RunWorker processes tasks until ctx ends, then lets in-flight steps finish within
// the shutdown timeout and hands the rest back to the queue.
func (f *Fleet) RunWorker(ctx context.Context) error {
	if f.Worker == nil {
		return errors.New("worker: this process was not opened for the worker role (fleet.OpenWorker)")
	}
	// A host that cannot make quota workspaces stops the worker at once, saying
	// what it lacks, rather than failing every run.
	if err := f.Workspaces.Check(); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	srv, mux, cancel := f.WorkerServer()
	defer cancel()
	if err := f.WatchRules(ctx); err != nil {
		return err
	}
	if err := f.Traffic.Watch(ctx); err != nil {
		return fmt.Errorf("worker: llm reload: %w", err)
	}
	if err := srv.Start(mux); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	f.Log.Info("worker started", "concurrency", f.Cfg.Worker.Concurrency)
	<-ctx.Done()
	f.Log.Info("worker stopping", "timeout", f.Cfg.Worker.ShutdownTimeout.String())
	srv.Stop()
	timer := time.AfterFunc(f.Cfg.Worker.ShutdownTimeout, cancel)
	defer timer.Stop()
	srv.Shutdown()
	f.Log.Info("worker stopped")
	return nil
}

// RunScheduler enqueues the periodic maintenance ticks and fires the
// schedules (package schedules) until ctx ends.
func (f *Fleet) RunScheduler(ctx context.Context) error {
	s := scheduler.New(f.schedulerConfig(), scheduler.Deps{Queue: f.Queue, Log: f.Log})
	sch, err := f.Schedules(schedules.Deps{})
	if err != nil {
		return err
	}
	f.Log.Info("scheduler started", "period", s.Config().Period.String(), "schedules_period", sch.Config().Period.String())
	err = RunAll(ctx, s.Run, sch.Run)
	f.Log.Info("scheduler stopped")
	return err
}

func (f *Fleet) schedulerConfig() scheduler.Config {
	c := f.Cfg.Scheduler
	c.AuditRetention = f.Cfg.Security.AuditRetention // the key is security.audit_retention
	return c
}

// ServeMetrics runs a /metrics listener on addr until ctx ends (no-op when empty).
func (f *Fleet) ServeMetrics(ctx context.Context, addr string) error {
	if addr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("metrics listener %s: %w", addr, err)
	}
	name := egress.EndpointWorkerMetrics
	switch addr {
	case f.Cfg.Scheduler.MetricsAddr:
		name = egress.EndpointSchedulerMetrics
	case f.Cfg.API.MetricsAddr:
		name = egress.EndpointAPI
	}
	f.RegisterEndpoint(ctx, name, ln.Addr().String())
	if err := f.Metrics.ServeListener(ctx, ln); err != nil {
		return fmt.Errorf("metrics listener %s: %w", addr, err)
	}
	return nil
}

// RunAll runs the given role functions concurrently; the first error cancels the rest.
func RunAll(ctx context.Context, fns ...func(context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, len(fns))
	for i, fn := range fns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(ctx); err != nil {
				errs[i] = err
				cancel()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

type asynqLogger struct{ l *slog.Logger }

func (a asynqLogger) Debug(args ...any) { a.l.Debug(fmt.Sprint(args...)) }
func (a asynqLogger) Info(args ...any)  { a.l.Info(fmt.Sprint(args...)) }
func (a asynqLogger) Warn(args ...any)  { a.l.Warn(fmt.Sprint(args...)) }
func (a asynqLogger) Error(args ...any) { a.l.Error(fmt.Sprint(args...)) }
func (a asynqLogger) Fatal(args ...any) { a.l.Error(fmt.Sprint(args...)); os.Exit(1) }

// OpenStore connects to Postgres only (migrations).
func OpenStore(ctx context.Context, cfg config.Config) (*store.Store, error) {
	st, err := store.Open(ctx, cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("postgres (AETHERIUM_DATABASE_URL): %w", err)
	}
	return st, nil
}

// knownModels are the model names the operator wrote down (the providers' defaults
// and every shipped template's models): the only ones the LLM metrics label by name.
func knownModels(cfg config.Config, reg *tools.Registry) *metrics.LabelSet {
	set := metrics.NewLabelSet(cfg.LLM.OpenAI.Model, cfg.LLM.Anthropic.Model)
	dir := templates.Dir{Path: cfg.Templates}
	names, _ := dir.List()
	for _, name := range names {
		t, err := dir.Load(name, reg)
		if err != nil {
			continue // a broken template is reported when it is used
		}
		set.Add(t.Model.Model)
		for _, n := range append([]templates.Node{t.Supervisor}, t.Workers...) {
			if n.Model != nil {
				set.Add(n.Model.Model)
			}
		}
	}
	return set
}
