// Package worker holds the asynq handlers of the fleet: the supervisor step
// (run:supervise) and the agent turn (agent:turn), both driving the same durable
// agent loop. A step persists after every model answer and every tool result and
// returns when it must wait; it never blocks on another job.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/hibiken/asynq"

	"github.com/aetherium-engine/aetherium/events"
	"github.com/aetherium-engine/aetherium/gpu"
	"github.com/aetherium-engine/aetherium/internal/defaults"
	"github.com/aetherium-engine/aetherium/knowledge"
	"github.com/aetherium-engine/aetherium/lease"
	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/logctx"
	"github.com/aetherium-engine/aetherium/mailbox"
	"github.com/aetherium-engine/aetherium/memory"
	"github.com/aetherium-engine/aetherium/metrics"
	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/submit"
	"github.com/aetherium-engine/aetherium/templates"
	"github.com/aetherium-engine/aetherium/tools"
	"github.com/aetherium-engine/aetherium/tracing"
	"github.com/aetherium-engine/aetherium/worker/hook"
	"github.com/aetherium-engine/aetherium/wsquota"
)

// Defaults of Config.
const (
	DefaultConcurrency       = 20
	DefaultShutdownTimeout   = 10 * time.Second
	DefaultTaskCheckInterval = 100 * time.Millisecond
	DefaultStepLease         = 2 * time.Minute
	DefaultMaxRetry          = 5
	DefaultCircuitBreaker    = 5
	// DefaultMaxSteps is generous: a long coding or research session makes
	// hundreds of model calls, and since compaction (issue 38) a step's cost no
	// longer grows with the session; the circuit breaker and the budgets are
	// the loop guards.
	DefaultMaxSteps = 500
	// DefaultCompactAt is the share of a model's context window past which a
	// session is compacted before its next request.
	DefaultCompactAt = 0.8
	// DefaultKeepTurns is how many of the last turns a compaction keeps verbatim.
	DefaultKeepTurns = 4
	// DefaultSummaryTokens is the largest summary a compaction asks for.
	DefaultSummaryTokens = 2000
	// DefaultNotesTokens bounds the session's working notes (ADR 5).
	DefaultNotesTokens = 1000
	// DefaultMaxWait is how long a step may wait for model rate limits.
	DefaultMaxWait = 10 * time.Minute
	// DefaultMetricsAddr is where a worker process serves /metrics (Defaults sets
	// it: an empty MetricsAddr disables the listener).
	DefaultMetricsAddr = "127.0.0.1:9091"
	// DefaultLeaseRetry is Deps.LeaseRetry's default.
	DefaultLeaseRetry = 2 * time.Second
	// DefaultMaxCallsPerMessage is how many tool calls of one model message run
	// (issue 34: one message with 150 delegate calls made 150 delegations). Models
	// rarely ask for more than a handful of parallel calls; spawn_subagents fans out
	// at most 8 (orchestration.MaxSubagents).
	DefaultMaxCallsPerMessage = 32
	// DefaultMaxDelegationsPerSession bounds the delegations one session makes
	// (delegate, spawn_subagents, code_review's reviewer): five full
	// spawn_subagents calls.
	DefaultMaxDelegationsPerSession = 40
	// DefaultMaxDelegationsPerRun bounds a run's delegations, all sessions
	// together: the fan-out one run may put on the shared workers.
	DefaultMaxDelegationsPerRun = 100
)

// Config is the worker role: its asynq server and the agent loop (the `worker`
// section of aetherium.yaml). Zero fields take their defaults (WithDefaults).
type Config struct {
	// Concurrency is the number of tasks one worker process runs at once.
	// Env AETHERIUM_WORKER_CONCURRENCY. Default DefaultConcurrency.
	Concurrency int `yaml:"concurrency"`
	// ShutdownTimeout is how long in-flight tasks may run after SIGTERM before they
	// are handed back to the queue. Default DefaultShutdownTimeout.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	// TaskCheckInterval is how long an idle worker waits for a wake-up before it
	// polls its queues again. Enqueuers announce every task due now
	// (queue.WakeChannel) and the worker's asynq server sleeps in a queue.Waker
	// until then, so a hop takes about a millisecond whatever this is; it bounds
	// the wait of tasks nobody announces (retries, scheduled tasks) and of
	// everything while the announcement channel is down. Polling instead, as asynq
	// does, made each hop of a delegation wait about a whole interval (measured on
	// this machine, 2 cores: 100ms gave p50 96 ms a hop, 5ms 3.7 ms) and a short
	// interval costs an idle worker process several per cent of a core (7 % at
	// 5ms, 1 % at 100ms, over a minute). Default DefaultTaskCheckInterval.
	TaskCheckInterval time.Duration `yaml:"task_check_interval"`
	// StepLease is how long a step owns its session; renewed on every save (a
	// crashed worker's lease simply expires). Default DefaultStepLease.
	StepLease time.Duration `yaml:"step_lease"`
	// MaxRetry is how often a failing task is retried before its run fails; 0 runs
	// a task once. Default DefaultMaxRetry (set by Defaults: zero is meaningful).
	MaxRetry int `yaml:"max_retry"`
	// CircuitBreaker fails a run after this many consecutive failed tool calls or
	// unusable model answers in one session. Default DefaultCircuitBreaker.
	CircuitBreaker int `yaml:"circuit_breaker"`
	// MaxSteps bounds model calls per session, a backstop against loops. Default
	// DefaultMaxSteps.
	MaxSteps int `yaml:"max_steps"`
	// CompactAt is the share of the model's context window (llm.windows) past
	// which a session's next request first compacts the session: its older turns
	// summarized, the last KeepTurns kept verbatim. Default DefaultCompactAt.
	CompactAt float64 `yaml:"compact_at"`
	// KeepTurns is how many of the last turns a compaction keeps verbatim (fewer,
	// down to one, when they alone would not fit). Default DefaultKeepTurns.
	KeepTurns int `yaml:"keep_turns"`
	// SummaryTokens is the largest summary a compaction asks the model for.
	// Default DefaultSummaryTokens.
	SummaryTokens int `yaml:"summary_tokens"`
	// NotesTokens bounds the session's working notes, shown to the model at
	// every turn start. Default DefaultNotesTokens.
	NotesTokens int `yaml:"notes_tokens"`
	// MetricsAddr serves /metrics for this worker. Env
	// AETHERIUM_WORKER_METRICS_ADDR. Default DefaultMetricsAddr; empty disables it.
	MetricsAddr string `yaml:"metrics_addr"`
	// MaxCallsPerMessage is how many tool calls of one model message run, in the
	// order the model gave them. Each call past it is not run: it is answered with
	// a refusal naming this key, audited as a denial (layer "cap", reason
	// "calls_per_message: …"), and the message counts once toward the circuit
	// breaker, as an unusable answer does. Default DefaultMaxCallsPerMessage.
	MaxCallsPerMessage int `yaml:"max_calls_per_message"`
	// MaxDelegationsPerSession and MaxDelegationsPerRun bound the delegations
	// (delegate, spawn_subagents, code_review) one session, and one run in all,
	// makes. The store checks them in the transaction that records the
	// delegations, so steps running at once cannot pass them; a call that would
	// is refused whole (a denial of layer "cap", reason
	// "delegations_per_session: …" or "delegations_per_run: …") and counts as a
	// failed tool call. Defaults DefaultMaxDelegationsPerSession and
	// DefaultMaxDelegationsPerRun.
	MaxDelegationsPerSession int `yaml:"max_delegations_per_session"`
	MaxDelegationsPerRun     int `yaml:"max_delegations_per_run"`
	// ResultHeadBytes is how much of a tool result the model receives: a larger
	// result is stored whole (PostgreSQL, table tool_results) and the model gets
	// its head, cut on a UTF-8 boundary, with its size and an id it pages the rest
	// with (the read_result tool). Default DefaultResultHeadBytes.
	ResultHeadBytes int `yaml:"result_head_bytes"`
	// ScriptLatency is slept before every answer of the script model, standing in
	// for model think time (benchmarks and drills of I/O-bound fleets). Default 0.
	ScriptLatency time.Duration `yaml:"script_latency"`
	// ReviewModel is the model code_review's reviewer asks, on the provider of
	// the calling agent's model (a team on the script model keeps its
	// screenplay). Empty: the calling agent's own model. Set from the quality
	// section's review_model, not a key of the worker section.
	ReviewModel string `yaml:"-"`
	// MaxWait bounds how long a step may stay parked by model rate limits
	// (from its first park until a model call goes through) before its run
	// fails with reason rate_limited. Default DefaultMaxWait. Set from
	// llm.max_wait, not a key of the worker section.
	MaxWait time.Duration `yaml:"-"`
	// PrincipalDailyBudget stops a principal's runs (budget_exceeded) once its
	// model calls cost this much since midnight UTC; 0 = none. Set from
	// llm.budgets.principal_daily, not a key of the worker section.
	PrincipalDailyBudget llm.Money `yaml:"-"`

	// Workspaces is the root of per-run workspace directories; used (with no quota)
	// only when Deps.Workspaces is nil. Not a key of the worker section (the
	// top-level `workspaces` is).
	Workspaces string `yaml:"-"`

	// The hooks: the product rules the composition root (package fleet)
	// registers, so this package keeps the durable agent loop only (package
	// hook is their contract). Not keys of the worker section.

	// ReplyChecks are consulted, in order, on every final answer of a session
	// (a model message with no tool calls) before the session ends, and on a
	// supervisor's reply call: the first that sends the answer back
	// (hook.SendBack) gives the agent its reason (a user message, or the reply
	// call's error), and each refusal counts toward the circuit breaker; an
	// answer no check refuses stands. Default none (a worker alone knows no
	// product rule); Validate refuses a nil check. The fleet registers the QA
	// rule (package qa) and the required_output rule (package requiredoutput).
	ReplyChecks []hook.ReplyCheck `yaml:"-"`
	// PostRun is the registry of post-run work, keyed by Name: run:cleanup
	// calls each one's Schedule after the run's leases are released
	// (AfterCleanup), the worker's Mux handles each one's TaskType, and a task
	// out of retries is settled by its GaveUp, never failing its run. Default
	// none; Validate refuses an incomplete entry and a name or task type taken
	// twice. The fleet registers finish_image's upscale (package finishimage).
	PostRun []hook.PostRun `yaml:"-"`
}

// Defaults is the configuration of a deployment that sets nothing: WithDefaults
// plus the fields whose zero means something else (MaxRetry 0 runs a task once,
// an empty MetricsAddr disables the listener).
func Defaults() Config {
	return Config{MaxRetry: DefaultMaxRetry, MetricsAddr: DefaultMetricsAddr}.WithDefaults()
}

// WithDefaults returns c with every zero field whose zero means "unset" filled in.
func (c Config) WithDefaults() Config {
	c.Concurrency = defaults.Positive(c.Concurrency, DefaultConcurrency)
	c.ShutdownTimeout = defaults.Positive(c.ShutdownTimeout, DefaultShutdownTimeout)
	c.TaskCheckInterval = defaults.Positive(c.TaskCheckInterval, DefaultTaskCheckInterval)
	c.StepLease = defaults.Positive(c.StepLease, DefaultStepLease)
	c.CircuitBreaker = defaults.Positive(c.CircuitBreaker, DefaultCircuitBreaker)
	c.MaxSteps = defaults.Positive(c.MaxSteps, DefaultMaxSteps)
	c.MaxWait = defaults.Positive(c.MaxWait, DefaultMaxWait)
	c.CompactAt = defaults.Positive(c.CompactAt, DefaultCompactAt)
	c.KeepTurns = defaults.Positive(c.KeepTurns, DefaultKeepTurns)
	c.SummaryTokens = defaults.Positive(c.SummaryTokens, DefaultSummaryTokens)
	c.NotesTokens = defaults.Positive(c.NotesTokens, DefaultNotesTokens)
	c.MaxCallsPerMessage = defaults.Positive(c.MaxCallsPerMessage, DefaultMaxCallsPerMessage)
	c.MaxDelegationsPerSession = defaults.Positive(c.MaxDelegationsPerSession, DefaultMaxDelegationsPerSession)
	c.MaxDelegationsPerRun = defaults.Positive(c.MaxDelegationsPerRun, DefaultMaxDelegationsPerRun)
	c.ResultHeadBytes = defaults.Positive(c.ResultHeadBytes, DefaultResultHeadBytes)
	return c
}

// Validate reports every invalid field, naming its key.
func (c Config) Validate() error {
	var errs []error
	if c.Concurrency <= 0 {
		errs = append(errs, fmt.Errorf("worker.concurrency (AETHERIUM_WORKER_CONCURRENCY): must be positive, got %d", c.Concurrency))
	}
	if c.StepLease < time.Second {
		errs = append(errs, errors.New("worker.step_lease: must be at least 1s"))
	}
	if c.MaxRetry < 0 || c.CircuitBreaker <= 0 || c.MaxSteps <= 0 {
		errs = append(errs, errors.New("worker: max_retry must be >= 0, circuit_breaker and max_steps > 0"))
	}
	if c.MaxCallsPerMessage <= 0 || c.MaxDelegationsPerSession <= 0 || c.MaxDelegationsPerRun <= 0 {
		errs = append(errs, fmt.Errorf("worker: max_calls_per_message, max_delegations_per_session and max_delegations_per_run must be positive, got %d, %d, %d",
			c.MaxCallsPerMessage, c.MaxDelegationsPerSession, c.MaxDelegationsPerRun))
	}
	if c.ResultHeadBytes < MinResultHeadBytes {
		errs = append(errs, fmt.Errorf("worker.result_head_bytes: must be at least %d, got %d", MinResultHeadBytes, c.ResultHeadBytes))
	}
	if c.MaxDelegationsPerSession > c.MaxDelegationsPerRun {
		errs = append(errs, fmt.Errorf("worker.max_delegations_per_session (%d) must not exceed worker.max_delegations_per_run (%d)", c.MaxDelegationsPerSession, c.MaxDelegationsPerRun))
	}
	if c.CompactAt <= 0 || c.CompactAt > 1 {
		errs = append(errs, fmt.Errorf("worker.compact_at: want a share of the context window in (0, 1], got %v", c.CompactAt))
	}
	if c.KeepTurns <= 0 || c.SummaryTokens <= 0 || c.NotesTokens <= 0 {
		errs = append(errs, fmt.Errorf("worker: keep_turns, summary_tokens and notes_tokens must be positive, got %d, %d, %d", c.KeepTurns, c.SummaryTokens, c.NotesTokens))
	}
	if c.MaxWait < 0 || c.PrincipalDailyBudget < 0 {
		errs = append(errs, fmt.Errorf("llm.max_wait and llm.budgets.principal_daily must not be negative, got %s and %s", c.MaxWait, c.PrincipalDailyBudget))
	}
	if c.MetricsAddr != "" {
		if _, _, err := net.SplitHostPort(c.MetricsAddr); err != nil {
			errs = append(errs, fmt.Errorf("worker.metrics_addr: want host:port, got %q", c.MetricsAddr))
		}
	}
	return errors.Join(append(errs, c.validateHooks())...)
}

// validateHooks reports a nil reply check and a post-run entry without a
// name, a task type, Schedule or Run, or whose name or task type is taken (by
// another entry or by the worker's own tasks).
func (c Config) validateHooks() error {
	var errs []error
	for i, check := range c.ReplyChecks {
		if check == nil {
			errs = append(errs, fmt.Errorf("worker: reply check %d is nil", i+1))
		}
	}
	names := map[string]bool{}
	types := map[string]bool{queue.TypeSupervise: true, queue.TypeTurn: true, queue.TypeMCPCall: true}
	for i, p := range c.PostRun {
		switch {
		case p.Name == "" || p.TaskType == "" || p.Schedule == nil || p.Run == nil:
			errs = append(errs, fmt.Errorf("worker: post-run entry %d (%q) needs a name, a task type, Schedule and Run", i+1, p.Name))
		case names[p.Name]:
			errs = append(errs, fmt.Errorf("worker: post-run work %q is registered twice", p.Name))
		case types[p.TaskType]:
			errs = append(errs, fmt.Errorf("worker: post-run work %q: task type %s is taken", p.Name, p.TaskType))
		}
		names[p.Name], types[p.TaskType] = true, true
	}
	return errors.Join(errs...)
}

// Models picks the provider for a node of a team (the composition root supplies
// one: the worker knows no concrete provider).
type Models interface {
	For(team templates.Template, node templates.Node) (llm.Provider, llm.ModelConfig, error)
}

// Worker runs the handlers.
type Worker struct {
	cfg    Config
	store  Store
	queue  *queue.Enqueuer
	events *events.Recorder
	router *tools.Router
	// modelLabels bounds the model label of the LLM metrics.
	modelLabels *metrics.LabelSet
	models      Models
	metrics     *metrics.Metrics
	log         *slog.Logger
	gated       bool
	mailbox     *mailbox.Mailbox
	windows     Windows
	// consumer names this process as a mailbox reader.
	consumer   string
	leases     *lease.Manager
	gpu        *gpu.Controller
	leaseRetry time.Duration
	audit      AuditWriter
	workspaces *wsquota.Manager
	knowledge  knowledge.Backend
	memory     memory.Config
	recall     MemoryRecaller
	// recallAt is recall when it can recall as of the acquire's read; nil: the
	// acquire does not read it (the store's recall would not use it).
	recallAt MemoryRecallerAt
	tracing  *tracing.Provider
	redact   func(string) string
}

// AuditWriter takes audit rows a step could not write itself (the Auditor).
type AuditWriter interface {
	Write(ctx context.Context, r store.AuditRow) error
}

// Deps are the Worker's collaborators.
type Deps struct {
	Store   Store
	Queue   *queue.Enqueuer
	Events  *events.Recorder
	Router  *tools.Router
	Models  Models
	Metrics *metrics.Metrics
	// ModelLabels are the model names that get a metrics series of their own (the
	// configured and shipped ones); a submitted team's other names count as
	// "other". Nil counts every model as "other".
	ModelLabels *metrics.LabelSet
	Log         *slog.Logger
	// Gated tells the worker a permission gate middleware counts denials.
	Gated bool
	// Mailbox, when set, is drained into each session at the start of its turn.
	Mailbox *mailbox.Mailbox
	// Leases and GPU serve teams that declare gpu_services (GPU may be nil when
	// no service has a container to start).
	Leases *lease.Manager
	GPU    *gpu.Controller
	// LeaseRetry is how soon a step waiting for a lease is retried. Default
	// DefaultLeaseRetry.
	LeaseRetry time.Duration
	// Audit, when set, takes the audit rows a step fails to write (the database
	// refused them) and retries them. Without it such rows are logged.
	Audit AuditWriter
	// Workspaces makes and mounts the runs' workspaces (quota, free-disk guard).
	// Nil: plain directories under Config.Workspaces.
	Workspaces *wsquota.Manager
	// Knowledge, when set, indexes a project's knowledge/ folder when a run of the
	// project starts (files a person added since).
	Knowledge knowledge.Backend
	// Memory tunes agent memory (ADR 5) of project runs.
	Memory memory.Config
	// MemoryRecall, when set, serves a new session's memory recall (the
	// process's store.MemoryIndex). Nil: Store's RecallMemory reads PostgreSQL.
	MemoryRecall MemoryRecaller
	// Windows, when set, keeps each session's requests inside its model's
	// context window (compaction, issue 38). Nil: requests grow unchecked.
	Windows Windows
	// Tracing makes the spans of steps, model calls and tool calls, children
	// of the run's submit span (store.Run.TraceContext). Nil: tracing is off.
	Tracing *tracing.Provider
	// RedactContent, when set (tracing.capture_content), masks the messages
	// and answer a model call's span then carries. Nil: no content on spans.
	RedactContent func(string) string
}

// New returns a Worker. It panics on hooks Validate refuses (Config.ReplyChecks,
// Config.PostRun): they are the composition root's code, not configuration.
func New(cfg Config, d Deps) *Worker {
	cfg = cfg.WithDefaults()
	if err := cfg.validateHooks(); err != nil {
		panic(err) // the composition root registered them wrong: a programming error
	}
	if d.Log == nil {
		d.Log = slog.Default()
	}
	if d.LeaseRetry <= 0 {
		d.LeaseRetry = DefaultLeaseRetry
	}
	if d.Workspaces == nil {
		root := cfg.Workspaces
		if root == "" {
			root = "."
		}
		var err error
		if d.Workspaces, err = wsquota.New(root, wsquota.Config{}); err != nil {
			panic(err) // the zero config always validates
		}
	}
	if d.MemoryRecall == nil {
		d.MemoryRecall = d.Store
	}
	recallAt, _ := d.MemoryRecall.(MemoryRecallerAt)
	return &Worker{recall: d.MemoryRecall, recallAt: recallAt, workspaces: d.Workspaces, cfg: cfg, store: d.Store, queue: d.Queue, events: d.Events, router: d.Router, models: d.Models, metrics: d.Metrics, log: d.Log, gated: d.Gated,
		mailbox: d.Mailbox, consumer: consumerName(), leases: d.Leases, gpu: d.GPU, leaseRetry: d.LeaseRetry, audit: d.Audit, modelLabels: d.ModelLabels,
		knowledge: d.Knowledge, memory: d.Memory.WithDefaults(), windows: d.Windows, tracing: d.Tracing, redact: d.RedactContent}
}

func consumerName() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%d", host, os.Getpid())
}

// Mux returns the asynq handler of the worker's task types: the supervisor
// step, the agent turn, an outside MCP client's tool call (mcp:call) and the
// task of each post-run entry (Config.PostRun).
func (w *Worker) Mux() *asynq.ServeMux {
	mux := asynq.NewServeMux()
	if w.metrics != nil {
		mux.Use(w.metrics.TaskMiddleware(outcome))
	}
	mux.HandleFunc(queue.TypeSupervise, w.handleSupervise)
	mux.HandleFunc(queue.TypeTurn, w.handleTurn)
	mux.HandleFunc(queue.TypeMCPCall, w.handleMCPCall)
	for _, p := range w.cfg.PostRun {
		mux.HandleFunc(p.TaskType, w.handlePostRun(p))
	}
	return mux
}

// errorHandler fails the run when a task has exhausted its retries: the circuit
// breaker at task level, so a run never hangs on a job that keeps failing.
func (w *Worker) errorHandler() asynq.ErrorHandler {
	return asynq.ErrorHandlerFunc(func(ctx context.Context, t *asynq.Task, err error) {
		ctx = logctx.Task(ctx, t)
		retried, _ := asynq.GetRetryCount(ctx)
		maxRetry, _ := asynq.GetMaxRetry(ctx)
		if !isFailure(err) || retried < maxRetry {
			w.log.WarnContext(ctx, "task failed, will retry", "type", t.Type(), "retried", retried, "err", err)
			return
		}
		if errors.Is(err, queue.ErrFutureContract) || errors.Is(err, store.ErrFutureSession) {
			// Written by a newer build (docs/how-to/upgrade.md): asynq archives it
			// with the reason; its run is not failed for what this build
			// cannot read, and an upgraded worker can run it from the archive.
			w.log.ErrorContext(ctx, "task of a newer contract archived; its run is left as it is", "type", t.Type(), "err", err)
			return
		}
		if t.Type() == queue.TypeMCPCall {
			w.mcpGaveUp(context.WithoutCancel(ctx), t, retried+1, err)
			return
		}
		if p, ok := w.postRunOf(t.Type()); ok {
			// Post-run work fails itself, never its run (which ended).
			w.postRunGaveUp(context.WithoutCancel(ctx), p, t, retried+1, err)
			return
		}
		runID, err2 := w.runOfTask(context.WithoutCancel(ctx), t)
		if err2 != nil {
			w.log.ErrorContext(ctx, "task exhausted retries; cannot find its run", "type", t.Type(), "err", err, "lookup_err", err2)
			return
		}
		w.FailRun(context.WithoutCancel(ctx), runID, "task_failed", fmt.Sprintf("%s failed %d times: %v", t.Type(), retried+1, err))
	})
}

func (w *Worker) runOfTask(ctx context.Context, t *asynq.Task) (string, error) {
	switch t.Type() {
	case queue.TypeSupervise:
		p, err := queue.Decode[queue.SupervisePayload](t)
		return p.RunID, err
	case queue.TypeTurn:
		p, err := queue.Decode[queue.TurnPayload](t)
		if err != nil {
			return "", err
		}
		d, err := w.store.GetDelegation(ctx, p.DelegationID)
		return d.RunID, err
	}
	return "", fmt.Errorf("unknown task type %s", t.Type())
}

// FailRun ends a run as failed (once) and records the terminal event.
func (w *Worker) FailRun(ctx context.Context, runID, reason, msg string) {
	changed, admitted, err := w.store.FinishRun(ctx, runID, store.RunFailed, "", msg, reason)
	if err != nil {
		w.log.ErrorContext(ctx, "fail run", "run_id", runID, "err", err)
		return
	}
	w.StartAdmitted(ctx, admitted)
	if changed {
		w.log.WarnContext(ctx, "run failed", "run_id", runID, "reason", reason, "error", msg)
		w.observeFinished(ctx, runID)
	}
	w.ensureTerminalEvent(ctx, runID)
}

func (w *Worker) observeFinished(ctx context.Context, runID string) {
	if w.metrics == nil {
		return
	}
	r, err := w.store.GetRun(ctx, runID)
	if err != nil {
		return
	}
	w.metrics.RunsFinished.WithLabelValues(r.Status).Inc()
	if r.FinishedAt != nil {
		w.metrics.RunDuration.Observe(r.FinishedAt.Sub(r.CreatedAt).Seconds())
	}
}

// AnnounceEnd stores the terminal event of a run that ended without one
// (the stuck-runs tick's store.UnannouncedEnds).
func (w *Worker) AnnounceEnd(ctx context.Context, runID string) { w.ensureTerminalEvent(ctx, runID) }

// ensureTerminalEvent records the run's terminal event from its stored status. Keyed
// "terminal", so whoever finished the run, and however often this runs, the stream
// gets exactly one.
func (w *Worker) ensureTerminalEvent(ctx context.Context, runID string) {
	r, err := w.store.GetRun(ctx, runID)
	if err != nil || !store.Terminal(r.Status) {
		return
	}
	if err := w.events.EmitTerminal(ctx, r); err != nil {
		w.log.ErrorContext(ctx, "terminal event", "run_id", runID, "err", err)
	}
}

// routeOf is the route of run's tasks in the fair dispatcher.
func routeOf(run store.Run) queue.Route {
	return queue.Route{Key: run.FairKey, Priority: run.Priority}
}

// StartAdmitted starts the runs the end of a run admitted (store.FinishRun
// admits its key's next waiting runs in the same transaction): a run.admitted
// event and the first supervisor step each. A failure is logged: the runs are
// admitted durably, and the queued-runs sweep starts what this could not.
func (w *Worker) StartAdmitted(ctx context.Context, runs []store.Run) {
	submit.StartAdmitted(ctx, w.events, w.queue, w.log, runs)
}
