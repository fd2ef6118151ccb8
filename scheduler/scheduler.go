// Package scheduler is the periodic-maintenance role. Each period every replica
// enqueues each maintenance task (queue.MaintenanceTasks) with the TaskID
// <type>:<tick> (queue.MaintenanceTaskID), where tick is the period-aligned time:
// replicas compute the same id, so however many schedulers run, a tick is
// enqueued — and run — once (asynq refuses a duplicate TaskID while the
// task, or its retained record, exists). The worker fleet handles the tasks
// (Maintenance, mounted on the worker role's server), and with them the
// run:cleanup of every finished run (enqueued by OnEvent).
package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/hibiken/asynq"

	"github.com/aetherium-engine/aetherium/events"
	"github.com/aetherium-engine/aetherium/gpu"
	"github.com/aetherium-engine/aetherium/internal/defaults"
	"github.com/aetherium-engine/aetherium/lease"
	"github.com/aetherium-engine/aetherium/mailbox"
	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/retention"
	"github.com/aetherium-engine/aetherium/sandbox"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/wsquota"
)

// Defaults of Config.
const (
	DefaultPeriod      = 15 * time.Second
	DefaultQueuedAfter = 30 * time.Second
	DefaultStuckAfter  = time.Hour
	// DefaultResumeAfter is how long a running run may show no sign of life
	// before its sessions are woken (capped at half of StuckAfter).
	DefaultResumeAfter = 5 * time.Minute
	// DefaultAuditRetention is security.audit_retention's default.
	DefaultAuditRetention = store.DefaultAuditRetention
	// DefaultMetricsAddr is where the scheduler role serves /metrics (Defaults sets
	// it: an empty MetricsAddr disables the listener).
	DefaultMetricsAddr = "127.0.0.1:9092"
)

// Config is the scheduler role and its maintenance (the `scheduler` section of
// aetherium.yaml). Zero fields take the defaults (WithDefaults).
type Config struct {
	// Period is the tick interval of every task. Default DefaultPeriod.
	Period time.Duration `yaml:"period"`
	// StuckAfter fails non-terminal runs with no event for this long, except
	// MCP runs (an MCP client's session, idle between calls). Default
	// DefaultStuckAfter.
	StuckAfter time.Duration `yaml:"stuck_after"`
	// ResumeAfter wakes a running run that showed no sign of life for this
	// long (no event, no session under a step's lease, no approval pending):
	// its supervisor and each open delegation get a step task, once per stall.
	// A run whose next step was in Redis only (a restore onto an empty Redis,
	// a failover that lost writes) goes on instead of failing as stuck; a run
	// whose task is merely late gets a wake-up that finds its work taken or
	// does it (the delivery contract makes both safe). Default
	// DefaultResumeAfter; at most half of StuckAfter (a longer one is cut to
	// that: a stalled run is woken before it is failed).
	ResumeAfter time.Duration `yaml:"resume_after"`
	// MetricsAddr serves /metrics for the scheduler. Env
	// AETHERIUM_SCHEDULER_METRICS_ADDR. Default DefaultMetricsAddr; empty disables it.
	MetricsAddr string `yaml:"metrics_addr"`
	// QueuedAfter re-enqueues runs still queued after this long. Default
	// DefaultQueuedAfter. Not a configuration key.
	QueuedAfter time.Duration `yaml:"-"`
	// AuditRetention deletes tool_audit rows older than this. Default
	// DefaultAuditRetention. Its key is security.audit_retention (the audit is the
	// gate's); the composition root copies it here.
	AuditRetention time.Duration `yaml:"-"`
}

// Defaults is the configuration of a deployment that sets nothing: WithDefaults
// plus the fields whose zero means "off" (MetricsAddr).
func Defaults() Config {
	return Config{MetricsAddr: DefaultMetricsAddr}.WithDefaults()
}

// WithDefaults returns c with every zero field whose zero means "unset" filled in.
func (c Config) WithDefaults() Config {
	c.Period = defaults.Positive(c.Period, DefaultPeriod)
	c.QueuedAfter = defaults.Positive(c.QueuedAfter, DefaultQueuedAfter)
	c.StuckAfter = defaults.Positive(c.StuckAfter, DefaultStuckAfter)
	c.ResumeAfter = defaults.Positive(c.ResumeAfter, DefaultResumeAfter)
	// At most half of StuckAfter, whichever was set: a stalled run must be
	// woken before it is failed (the config layer fills the defaults before
	// the file's keys, so a lone stuck_after: 2m meets a 5 m default here).
	c.ResumeAfter = min(c.ResumeAfter, c.StuckAfter/2)
	c.AuditRetention = defaults.Positive(c.AuditRetention, DefaultAuditRetention)
	return c
}

// Validate reports every invalid field, naming its key.
func (c Config) Validate() error {
	var errs []error
	if c.Period < 0 || c.StuckAfter < 0 || c.ResumeAfter < 0 {
		errs = append(errs, errors.New("scheduler.period, scheduler.stuck_after, scheduler.resume_after: must not be negative"))
	}

	if c.MetricsAddr != "" {
		if _, _, err := net.SplitHostPort(c.MetricsAddr); err != nil {
			errs = append(errs, fmt.Errorf("scheduler.metrics_addr: want host:port, got %q", c.MetricsAddr))
		}
	}
	return errors.Join(errs...)
}

// Scheduler enqueues the ticks.
type Scheduler struct {
	cfg   Config
	queue *queue.Enqueuer
	log   *slog.Logger
	now   func() time.Time
}

// Deps are the Scheduler's collaborators.
type Deps struct {
	// Queue enqueues the ticks.
	Queue *queue.Enqueuer
	Log   *slog.Logger
}

// New returns a Scheduler.
func New(cfg Config, d Deps) *Scheduler {
	if d.Log == nil {
		d.Log = slog.Default()
	}
	return &Scheduler{cfg: cfg.WithDefaults(), queue: d.Queue, log: d.Log, now: time.Now}
}

// Config is the Scheduler's configuration, defaults filled in.
func (s *Scheduler) Config() Config { return s.cfg }

// Tick enqueues every task for the tick containing now; it returns how many this
// call enqueued (0 when another replica was first).
func (s *Scheduler) Tick(ctx context.Context) (int, error) {
	now := s.now()
	n := 0
	var errs []error
	for _, typ := range queue.MaintenanceTasks() {
		enqueued, err := s.queue.Maintenance(ctx, typ, now, s.cfg.Period)
		if err != nil {
			errs = append(errs, err)
		} else if enqueued {
			n++
		}
	}
	return n, errors.Join(errs...)
}

// Run ticks at every period boundary until ctx ends.
func (s *Scheduler) Run(ctx context.Context) error {
	for {
		if _, err := s.Tick(ctx); err != nil {
			s.log.Warn("maintenance tick", "err", err)
		}
		next := s.now().Truncate(s.cfg.Period).Add(s.cfg.Period)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Until(next)):
		}
	}
}

// Maintenance handles the maintenance tasks on the worker fleet: the periodic
// ticks and the run:cleanup of each finished run. Optional parts left nil skip
// their task.
type Maintenance struct {
	cfg Config
	d   MaintenanceDeps
}

// MaintenanceDeps are the parts the maintenance tasks work on.
type MaintenanceDeps struct {
	Store *store.Store
	Queue *queue.Enqueuer
	// Fail ends a run that made no progress for Config.StuckAfter (the worker's
	// FailRun).
	Fail func(ctx context.Context, runID, reason, msg string)
	// AnnounceEnd stores the terminal event of a run that ended without one
	// (the worker's AnnounceEnd), which also enqueues its cleanup.
	AnnounceEnd func(ctx context.Context, runID string)
	// Start starts runs admitted by the admission sweep (the worker's
	// StartAdmitted): their run.admitted event and first step.
	Start   func(ctx context.Context, runs []store.Run)
	Mailbox *mailbox.Mailbox
	Leases  *lease.Manager
	GPU     *gpu.Controller
	// Executor is the sandbox: run:cleanup releases a finished run's container, and
	// with Docker the orphan sweep removes the containers of runs that ended.
	Executor sandbox.Executor
	// Workspaces unmounts the workspaces of runs that ended a while ago.
	Workspaces *wsquota.Manager
	// Retention deletes what outlived its retention (runs, egress rows, dead
	// letters, deleted projects' knowledge); nil skips the tick.
	Retention *retention.Sweeper
	Log       *slog.Logger
	// Ran, when set, is told each task that ran: its type and task id (tests).
	Ran func(typ, taskID string)
	// CancelWork stops a finished run's work on GPU services (ComfyUI prompts:
	// toolbox/comfyui.Canceler). run:cleanup calls it before releasing the run's
	// leases, so its requests still carry a live grant.
	CancelWork func(ctx context.Context, runID string) error
	// AfterRelease schedules a finished run's post-run work (the worker's
	// AfterCleanup: finish_image's upscale). run:cleanup calls it after the
	// run's leases are released, so post-run work never holds the run's own
	// grant; its error retries the (idempotent) cleanup.
	AfterRelease func(ctx context.Context, runID string) error
	// SweepWebhooks enqueues the outbound webhook deliveries whose events'
	// own enqueue was lost (webhook.Deliverer.Sweep), on the stuck-runs tick;
	// nil when no webhook is configured.
	SweepWebhooks func(ctx context.Context) (int, error)
}

// NewMaintenance returns the maintenance handlers.
func NewMaintenance(cfg Config, d MaintenanceDeps) *Maintenance {
	if d.Log == nil {
		d.Log = slog.Default()
	}
	return &Maintenance{cfg: cfg.WithDefaults(), d: d}
}

// Register adds the maintenance handlers to mux.
func (m *Maintenance) Register(mux *asynq.ServeMux) {
	d := m.d
	h := func(typ string, fn func(context.Context, *asynq.Task) error) {
		mux.HandleFunc(typ, func(ctx context.Context, t *asynq.Task) error {
			if d.Ran != nil {
				id, _ := asynq.GetTaskID(ctx)
				d.Ran(typ, id)
			}
			return fn(ctx, t)
		})
	}
	tick := func(typ string, fn func(context.Context) error) {
		h(typ, func(ctx context.Context, _ *asynq.Task) error { return fn(ctx) })
	}
	h(queue.TypeRunCleanup, m.cleanupRun)
	tick(queue.TypeRequeueQueued, m.requeueQueued)
	tick(queue.TypeStuckRuns, m.stuckRuns)
	tick(queue.TypeAuditPurge, m.auditPurge)
	tick(queue.TypeLeaseReap, sweep(d.Leases != nil, d.Leases.Reap))
	tick(queue.TypeMailboxReclaim, sweep(d.Mailbox != nil, d.Mailbox.Reclaim))
	tick(queue.TypeMailboxTrim, sweep(d.Mailbox != nil, d.Mailbox.Trim))
	tick(queue.TypeGPUStopIdle, func(ctx context.Context) error {
		if d.GPU == nil {
			return nil
		}
		stopped, err := d.GPU.StopIdle(ctx)
		if len(stopped) > 0 {
			d.Log.Info("idle GPU services stopped", "services", stopped)
		}
		return err
	})
	tick(queue.TypeSandboxOrphans, m.cleanupOrphans)
	tick(queue.TypeWorkspaceSweep, m.sweepWorkspaces)
	tick(queue.TypeRetention, sweep(d.Retention != nil, d.Retention.Sweep))
}

// sweep is the tick of a component's own sweep; a fleet without the component
// (present false) has nothing to sweep. What the sweep did is not reported.
func sweep[S any](present bool, fn func(context.Context) (S, error)) func(context.Context) error {
	return func(ctx context.Context) error {
		if !present {
			return nil
		}
		_, err := fn(ctx)
		return err
	}
}

// OnEvent enqueues the cleanup of a run when its terminal event is stored (an
// events.Recorder hook of every role that emits events). The task id is the run's
// (queue.CleanupTaskID), so a repeated terminal event enqueues it once.
func OnEvent(q *queue.Enqueuer) func(ctx context.Context, e events.Stored) error {
	return func(ctx context.Context, e events.Stored) error {
		if !events.Terminal(e.Type) {
			return nil
		}
		if err := q.CleanupRun(ctx, e.RunID); err != nil {
			return fmt.Errorf("enqueue run cleanup: %w", err)
		}
		return nil
	}
}

// cleanupRun releases what a finished run held (queue.TypeRunCleanup). It is
// idempotent: every release tolerates "already released".
func (m *Maintenance) cleanupRun(ctx context.Context, t *asynq.Task) error {
	var p queue.CleanupPayload
	if err := json.Unmarshal(t.Payload(), &p); err != nil {
		return fmt.Errorf("%w: %v", asynq.SkipRetry, err)
	}
	var errs []error
	if m.d.Mailbox != nil {
		if err := m.d.Mailbox.DeleteRun(ctx, p.RunID); err != nil {
			errs = append(errs, fmt.Errorf("mailboxes: %w", err))
		}
	}
	if m.d.CancelWork != nil {
		if err := m.d.CancelWork(ctx, p.RunID); err != nil {
			// Logged, not retried: the leases must still be released.
			m.d.Log.Warn("cancel GPU work of a finished run", "run_id", p.RunID, "err", err)
		}
	}
	if m.d.Leases != nil {
		if err := m.d.Leases.ReleaseAll(ctx, p.RunID); err != nil {
			errs = append(errs, fmt.Errorf("leases: %w", err))
		}
	}
	if m.d.Executor != nil {
		if err := m.d.Executor.Release(ctx, p.RunID); err != nil {
			errs = append(errs, fmt.Errorf("sandbox: %w", err))
		}
	}
	if m.d.AfterRelease != nil && len(errs) == 0 {
		// Only once everything is released: the post-run task must find the
		// run's slot free (its own lease queues like any run's).
		if err := m.d.AfterRelease(ctx, p.RunID); err != nil {
			errs = append(errs, fmt.Errorf("post-run work: %w", err))
		}
	}
	return errors.Join(errs...)
}

// runActive reports whether a run may still need its resources; a lookup error
// counts as active, so a database hiccup never removes a live container.
func (m *Maintenance) runActive(ctx context.Context, runID string) bool {
	r, err := m.d.Store.GetRun(ctx, runID)
	if errors.Is(err, store.ErrNotFound) {
		return false
	}
	return err != nil || !store.Terminal(r.Status)
}

// cleanupOrphans removes sandbox containers of runs that ended (or vanished).
func (m *Maintenance) cleanupOrphans(ctx context.Context) error {
	d, ok := m.d.Executor.(*sandbox.Docker)
	if !ok {
		return nil
	}
	_, err := d.CleanupOrphans(ctx, func(runID string) bool { return m.runActive(ctx, runID) })
	return err
}

// sweepWorkspaces unmounts the workspaces of runs that ended more than
// workspace_unmount_after ago (or vanished), a project's once its last run did;
// the worker mounts one again when needed. Each run is looked up under its workspace's lock, so a lookup error
// keeps the workspace mounted.
func (m *Maintenance) sweepWorkspaces(ctx context.Context) error {
	if m.d.Workspaces == nil {
		return nil
	}
	after := m.d.Workspaces.Config().UnmountAfter
	swept, err := m.d.Workspaces.Sweep(ctx, func(ctx context.Context, id string) bool {
		// A run's own workspace or a project's (project-…, shared by its runs).
		idle, err := m.d.Store.WorkspaceIdle(ctx, id, after)
		if err != nil {
			m.d.Log.Warn("workspace sweep: keeping a workspace mounted whose runs cannot be read", "workspace", id, "err", err)
		}
		return err == nil && idle
	})
	if len(swept) > 0 {
		m.d.Log.Info("workspaces unmounted", "count", len(swept), "unmount_after", after.String())
	}
	return err
}

func (m *Maintenance) requeueQueued(ctx context.Context) error {
	runs, err := m.d.Store.QueuedRuns(ctx, m.cfg.QueuedAfter, 500)
	if err != nil {
		return err
	}
	for _, r := range runs {
		if err := m.d.Queue.Supervise(ctx, queue.Route{Key: r.FairKey, Priority: r.Priority}, r.ID, "start"); err != nil {
			return err
		}
	}
	if len(runs) > 0 {
		m.d.Log.Info("re-enqueued queued runs", "count", len(runs))
	}
	// A waiting run's approval times out by its expiry task, which lives in
	// Redis only: after a restore onto an empty Redis (or a failover that lost
	// it) nothing would end the wait, and a waiting run is not a stuck one. An
	// approval still pending QueuedAfter past its expiry gets its task again
	// (same task id: a task still there makes this a no-op).
	overdue, err := m.d.Store.OverdueApprovals(ctx, m.cfg.QueuedAfter, 500)
	if err != nil {
		return err
	}
	for _, a := range overdue {
		if err := m.d.Queue.ExpireApproval(ctx, a.ID, a.ExpiresAt); err != nil {
			return err
		}
	}
	if len(overdue) > 0 {
		m.d.Log.Info("re-enqueued the expiry of overdue approvals", "count", len(overdue))
	}
	// Runs waiting for admission whose key has room (a limit raised, an end
	// whose admission failed): admitted and started here.
	admitted, err := m.d.Store.AdmitWaiting(ctx, 500)
	if m.d.Start != nil {
		m.d.Start(ctx, admitted)
	}
	if len(admitted) > 0 {
		m.d.Log.Info("admitted waiting runs", "count", len(admitted))
	}
	return err
}

// stuckRuns fails the runs that made no progress for StuckAfter and wakes
// those quiet for ResumeAfter. One tick for both (not a task type of its own):
// a worker of the previous version must know every maintenance task the
// scheduler enqueues during a rolling upgrade.
func (m *Maintenance) stuckRuns(ctx context.Context) error {
	ids, err := m.d.Store.StaleRuns(ctx, m.cfg.StuckAfter, 500)
	if err != nil {
		return err
	}
	for _, id := range ids {
		m.d.Fail(ctx, id, "stuck", fmt.Sprintf("no progress for %s", m.cfg.StuckAfter))
	}
	return errors.Join(m.resumeStalled(ctx), m.announceEnds(ctx), m.sweepWebhooks(ctx))
}

// sweepWebhooks enqueues the webhook deliveries that storing their events
// lost (on the stuck-runs tick, like announceEnds: a tick of its own would be
// a task type the previous version's workers do not know during an upgrade).
func (m *Maintenance) sweepWebhooks(ctx context.Context) error {
	if m.d.SweepWebhooks == nil {
		return nil
	}
	n, err := m.d.SweepWebhooks(ctx)
	if n > 0 {
		m.d.Log.Warn("enqueued webhook deliveries whose events' own enqueue was lost", "count", n)
	}
	if err != nil {
		return fmt.Errorf("webhook sweep: %w", err)
	}
	return nil
}

// announceEnds stores the terminal event of runs that ended QueuedAfter ago
// without one, and runs the end's hooks of those whose event is stored but
// whose hooks never held: their ender died between the end and its event (or
// between the event and its hooks, or a hook failed) and no redelivery came
// (its task was in Redis only), or a restored dump caught that gap. Without it
// the end is heard by no one: no stream closes, no cleanup, no webhook.
func (m *Maintenance) announceEnds(ctx context.Context) error {
	if m.d.AnnounceEnd == nil {
		return nil
	}
	ids, err := m.d.Store.UnannouncedEnds(ctx, m.cfg.QueuedAfter, 500)
	if err != nil {
		return err
	}
	for _, id := range ids {
		m.d.AnnounceEnd(ctx, id)
	}
	if len(ids) > 0 {
		m.d.Log.Warn("announced run ends that had no terminal event", "count", len(ids))
	}
	return nil
}

// resumeStalled gives each stalled run's supervisor and open delegations a
// step task keyed by the stall (its newest event): a task still in Redis, or
// one this stall already had, makes it a no-op. A woken session that waits
// (for a delegation, a teammate) stays waiting; one whose step was lost takes
// it. Mailbox messages lost with Redis stay lost (docs/backup.md).
func (m *Maintenance) resumeStalled(ctx context.Context) error {
	if m.d.Queue == nil {
		return nil
	}
	runs, err := m.d.Store.StalledRuns(ctx, m.cfg.ResumeAfter, 500)
	if err != nil {
		return err
	}
	var errs []error
	for _, r := range runs {
		route, key := queue.Route{Key: r.FairKey, Priority: r.Priority}, fmt.Sprintf("resume:%d", r.LastEvent)
		if err := m.d.Queue.Supervise(ctx, route, r.ID, key); err != nil {
			errs = append(errs, fmt.Errorf("wake run %s: %w", r.ID, err))
			continue
		}
		for _, d := range r.Delegations {
			if err := m.d.Queue.Turn(ctx, route, d, key); err != nil {
				errs = append(errs, fmt.Errorf("wake delegation %s of run %s: %w", d, r.ID, err))
			}
		}
		m.d.Log.Warn("woke a stalled run (no event, no step under way, no approval pending)",
			"run", r.ID, "quiet_for", m.cfg.ResumeAfter.String(), "open_delegations", len(r.Delegations), "key", key)
	}
	return errors.Join(errs...)
}

func (m *Maintenance) auditPurge(ctx context.Context) error {
	n, err := m.d.Store.PurgeAudit(ctx, m.cfg.AuditRetention)
	if err != nil {
		return err
	}
	if n > 0 {
		m.d.Log.Info("audit rows purged", "count", n, "retention", m.cfg.AuditRetention.String())
	}
	return nil
}
