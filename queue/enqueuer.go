package queue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/aetherium-engine/aetherium/queue/fair"
)

// Defaults of Config.
const (
	// DefaultRetention is how long a finished task's id is kept by default.
	DefaultRetention = 24 * time.Hour
)

// Fixed task options: how often the tasks other than supervise and turn are
// retried, and how long one attempt of any task but a maintenance tick may run.
const (
	approvalExpireMaxRetry = 10
	webhookMaxRetry        = 12
	cleanupMaxRetry        = 10
	finishImageMaxRetry    = 8
	replayMaxRetry         = 2
	maintenanceMaxRetry    = 1
	taskTimeout            = 30 * time.Minute
)

// Config tunes the Enqueuer.
type Config struct {
	// MaxRetry is the retry budget of supervise and turn tasks: when the last
	// attempt fails, the worker fails the run (task_failed). 0 runs a task once.
	// Negative is invalid. The deployment sets it from worker.max_retry (default 5).
	MaxRetry int
	// Retention keeps a finished task's id in Redis so that a late duplicate enqueue
	// of the same deterministic id is refused instead of running the task again.
	// Applies to every task but the maintenance ticks (kept four periods).
	// Default DefaultRetention.
	Retention time.Duration
	// Wake, when set, announces every task due now on WakeChannel, which idle
	// workers' Wakers follow: a hop then takes about a millisecond instead of a
	// poll interval. Best effort: an announcement that fails only means a worker
	// finds the task at its next poll.
	Wake redis.UniversalClient
	// Fair, when set, is the fair dispatcher the tasks of runs (supervisor
	// steps, agent turns, MCP calls) go through: they wait in their fairness
	// key's line and are released to asynq as worker slots free up (see
	// FairRunner). Nil enqueues them into asynq at once, in submission order.
	Fair *fair.Dispatcher
	// Fairness gives each fairness key's weight and turn limit to Fair.
	Fairness Fairness
	// Contract, when set, is the payload contract version every process of
	// the fleet reads (the oldest of the versions they report): the Enqueuer
	// writes that version, clamped to MinContractVersion..ContractVersion.
	// Nil writes ContractVersion (a fleet of one build: dev, tests).
	Contract func() int
}

// WithDefaults returns c with every unset field at its default.
func (c Config) WithDefaults() Config {
	c.Retention = cmp.Or(c.Retention, DefaultRetention)
	return c
}

func (c Config) validate() error {
	if c.MaxRetry < 0 {
		return fmt.Errorf("queue: MaxRetry %d is negative", c.MaxRetry)
	}
	if c.Retention < 0 {
		return fmt.Errorf("queue: Retention %s is negative", c.Retention)
	}
	return nil
}

// Enqueuer pushes the fleet's tasks, each with its deterministic id and options. An
// enqueue refused because the id (or, with Unique, the task) already exists is a
// success: at-least-once delivery makes duplicates normal.
type Enqueuer struct {
	client      *asynq.Client
	cfg         Config
	wakeChannel string
}

// NewEnqueuer returns an Enqueuer pushing through client (which the caller owns and
// closes).
func NewEnqueuer(client *asynq.Client, cfg Config) (*Enqueuer, error) {
	if client == nil {
		return nil, errors.New("queue: nil asynq client")
	}
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	e := &Enqueuer{client: client, cfg: cfg}
	if cfg.Wake != nil {
		e.wakeChannel = WakeChannelOf(cfg.Wake)
	}
	return e, nil
}

// Supervise enqueues a supervisor step of run, whose route r is; key
// distinguishes the start ("start") from each resume (its cause), so duplicates
// collapse.
func (e *Enqueuer) Supervise(ctx context.Context, r Route, runID, key string) error {
	return e.runTask(ctx, r, SuperviseTask(runID), options{queue: QueueSupervisor, id: SuperviseTaskID(runID, key),
		maxRetry: e.cfg.MaxRetry, retention: e.cfg.Retention, timeout: taskTimeout})
}

// Turn enqueues the agent turn of a delegation of a run whose route r is; key
// as in Supervise.
func (e *Enqueuer) Turn(ctx context.Context, r Route, delegationID, key string) error {
	return e.runTask(ctx, r, TurnTask(delegationID), options{queue: QueueWorkers, id: TurnTaskID(delegationID, key),
		maxRetry: e.cfg.MaxRetry, retention: e.cfg.Retention, timeout: taskTimeout})
}

// Resume enqueues the next step of a session of a run whose route r is: a
// supervisor session resumes with a supervise task, a delegation's session with
// a turn task. key names the cause (the approval decided, the delegation
// finished), so each cause resumes once.
func (e *Enqueuer) Resume(ctx context.Context, r Route, s SessionID, key string) error {
	if err := s.Validate(); err != nil {
		return fmt.Errorf("resume: %w", err)
	}
	if s.IsMCPCall() {
		return e.MCPCall(ctx, r, s.MCPCall, key)
	}
	if s.IsSupervisor() {
		return e.Supervise(ctx, r, s.Run, key)
	}
	return e.Turn(ctx, r, s.Delegation, key)
}

// MCPCall enqueues the execution of an outside MCP client's tool call (on the
// workers queue, like an agent's turn) whose run's route r is; key is "start" or
// the cause of a resume ("approval:<approval>"), so each cause runs the call's
// task once.
func (e *Enqueuer) MCPCall(ctx context.Context, r Route, callID, key string) error {
	return e.runTask(ctx, r, MCPCallTask(callID), options{queue: QueueWorkers, id: MCPCallTaskID(callID, key),
		maxRetry: e.cfg.MaxRetry, retention: e.cfg.Retention, timeout: taskTimeout})
}

// ExpireApproval schedules the expiry of an approval at at (on the supervisor
// queue: an expiry unblocks a waiting run).
func (e *Enqueuer) ExpireApproval(ctx context.Context, approvalID string, at time.Time) error {
	_, err := e.enqueue(ctx, ApprovalExpireTask(approvalID), options{queue: QueueSupervisor, id: ApprovalExpireTaskID(approvalID),
		maxRetry: approvalExpireMaxRetry, retention: e.cfg.Retention, timeout: taskTimeout, processAt: at})
	return err
}

// DeliverWebhook enqueues the delivery of event eventID to webhook hook (whose
// URL has the given digest: webhook.Hook.Digest).
func (e *Enqueuer) DeliverWebhook(ctx context.Context, hook int, digest string, eventID int64) error {
	_, err := e.DeliverWebhookOnce(ctx, hook, digest, eventID)
	return err
}

// DeliverWebhookOnce is DeliverWebhook saying whether this call enqueued the
// delivery (false: it was enqueued before, and is pending, retrying, done or
// archived within the retention).
func (e *Enqueuer) DeliverWebhookOnce(ctx context.Context, hook int, digest string, eventID int64) (bool, error) {
	return e.enqueue(ctx, WebhookTask(hook, digest, eventID), options{queue: QueueMaintenance, id: WebhookTaskID(hook, digest, eventID),
		maxRetry: webhookMaxRetry, retention: e.cfg.Retention, timeout: taskTimeout})
}

// CleanupRun enqueues the release of a finished run's resources.
func (e *Enqueuer) CleanupRun(ctx context.Context, runID string) error {
	_, err := e.enqueue(ctx, CleanupTask(runID), options{queue: QueueMaintenance, id: CleanupTaskID(runID),
		maxRetry: cleanupMaxRetry, retention: e.cfg.Retention, timeout: taskTimeout})
	return err
}

// FinishImage enqueues the post-run upscale of a completed run's pictures on
// the maintenance queue (it runs after the run, at the lowest priority). A
// wait for its GPU lease snoozes it without spending its retries.
func (e *Enqueuer) FinishImage(ctx context.Context, runID string) error {
	_, err := e.enqueue(ctx, FinishImageTask(runID), options{queue: QueueMaintenance, id: FinishImageTaskID(runID),
		maxRetry: finishImageMaxRetry, retention: e.cfg.Retention, timeout: taskTimeout})
	return err
}

// Replay enqueues the replay (or, with p.Fork, the fork) of a finished run on
// the maintenance queue (an analysis, below the runs' own steps) under
// ReplayTaskID(p.RunID, key), kept keep after it ends: the result a worker
// writes is read back from the task (asynq.Inspector.GetTaskInfo). It returns
// the task's id; an id that exists already (the same request, pending or
// done) is no error. A replay is retried (it writes nothing); a fork never is
// (it may have started its run before it failed).
func (e *Enqueuer) Replay(ctx context.Context, p ReplayPayload, key string, keep time.Duration) (string, error) {
	id := ReplayTaskID(p.RunID, key)
	retries := replayMaxRetry
	if len(p.Fork) > 0 {
		retries = 0
	}
	_, err := e.enqueue(ctx, newTask(TypeReplay, p), options{queue: QueueMaintenance, id: id,
		maxRetry: retries, retention: keep, timeout: taskTimeout})
	return id, err
}

// Promote enqueues a promotion's copy under PromoteTaskID(p.From, p.To,
// nonce) on the maintenance queue, kept keep after it ends (the API process
// reads the worker's result back from the task). It is not retried: the API
// process, which holds the project's row, asks again as a new request.
func (e *Enqueuer) Promote(ctx context.Context, p PromotePayload, nonce string, keep time.Duration) (string, error) {
	id := PromoteTaskID(p.From, p.To, nonce)
	_, err := e.enqueue(ctx, newTask(TypePromote, p), options{queue: QueueMaintenance, id: id,
		maxRetry: 0, retention: keep, timeout: taskTimeout})
	return id, err
}

// Maintenance enqueues maintenance task typ for the tick of period that contains
// now, and reports whether this call enqueued it (false: another scheduler replica
// was first). The tick's record is kept four periods, so a late replica's enqueue
// still collapses, and one attempt may run four periods.
func (e *Enqueuer) Maintenance(ctx context.Context, typ string, now time.Time, period time.Duration) (bool, error) {
	return e.enqueue(ctx, asynq.NewTask(typ, nil), options{queue: QueueMaintenance, id: MaintenanceTaskID(typ, now, period),
		maxRetry: maintenanceMaxRetry, retention: 4 * period, timeout: 4 * period})
}

// options are one task's enqueue options, all explicit.
type options struct {
	queue     string
	id        string
	maxRetry  int
	retention time.Duration
	timeout   time.Duration
	// processAt delays the task (zero: now).
	processAt time.Time
	// stamped: the payload already carries its enqueue time (a dispatched
	// task's is its submission).
	stamped bool
}

// enqueue is the one place a task is enqueued. It reports whether this call
// enqueued the task; an id that already exists is no error.
func (e *Enqueuer) enqueue(ctx context.Context, t *asynq.Task, o options) (bool, error) {
	opts := []asynq.Option{asynq.Queue(o.queue), asynq.TaskID(o.id), asynq.MaxRetry(o.maxRetry),
		asynq.Retention(o.retention), asynq.Timeout(o.timeout)}
	t = versioned(t, e.writeVersion())
	if !o.processAt.IsZero() {
		opts = append(opts, asynq.ProcessAt(o.processAt))
	} else if !o.stamped {
		// Due now: the handler measures how long it waited (EnqueuedAt). A
		// scheduled task's wait is its schedule, not the queue's.
		t = stamp(t, time.Now())
	}
	_, err := e.client.EnqueueContext(ctx, t, opts...)
	switch {
	case err == nil:
		if e.cfg.Wake != nil && o.processAt.IsZero() {
			_ = e.cfg.Wake.Publish(ctx, e.wakeChannel, o.queue).Err()
		}
		return true, nil
	case errors.Is(err, asynq.ErrTaskIDConflict), errors.Is(err, asynq.ErrDuplicateTask):
		return false, nil // already enqueued (or done): at-least-once makes this normal
	default:
		return false, fmt.Errorf("enqueue %s %s: %w", t.Type(), o.id, err)
	}
}
