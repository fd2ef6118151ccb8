// Package scheduler is the periodic-maintenance role. Each period every replica
// enqueues each maintenance task (queue.MaintenanceTasks) with the TaskID
// <type>:<tick> (queue.MaintenanceTaskID), where tick is the period-aligned time:
// replicas compute the same id, so however many schedulers run, a tick is
// enqueued — and run — once (asynq refuses a duplicate TaskID while the
// task, or its retained record, exists). The worker fleet handles the tasks.
package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/hibiken/asynq"

	"github.com/aetherium-engine/aetherium/gpu"
	"github.com/aetherium-engine/aetherium/lease"
	"github.com/aetherium-engine/aetherium/mailbox"
	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/store"
)

// Config tunes maintenance.
type Config struct {
	// Period is the tick interval of every task. Default 15s.
	Period time.Duration
	// QueuedAfter re-enqueues runs still queued after this long. Default 30s.
	QueuedAfter time.Duration
	// StuckAfter fails non-terminal runs with no event for this long. Default 1h.
	StuckAfter time.Duration
	// AuditRetention deletes tool_audit rows older than this. Default 2160h (90 days).
	AuditRetention time.Duration
}

func (c *Config) defaults() {
	if c.Period <= 0 {
		c.Period = 15 * time.Second
	}
	if c.QueuedAfter <= 0 {
		c.QueuedAfter = 30 * time.Second
	}
	if c.StuckAfter <= 0 {
		c.StuckAfter = time.Hour
	}
	if c.AuditRetention <= 0 {
		c.AuditRetention = 90 * 24 * time.Hour
	}
}

// Scheduler enqueues the ticks.
type Scheduler struct {
	cfg   Config
	queue *queue.Enqueuer
	log   *slog.Logger
	now   func() time.Time
}

// New returns a Scheduler enqueueing through q.
func New(cfg Config, q *queue.Enqueuer, log *slog.Logger) *Scheduler {
	cfg.defaults()
	if log == nil {
		log = slog.Default()
	}
	return &Scheduler{cfg: cfg, queue: q, log: log, now: time.Now}
}

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

// Maintenance handles the ticks on the worker fleet. Optional parts left nil skip
// their task.
type Maintenance struct {
	Config  Config
	Store   *store.Store
	Queue   *queue.Enqueuer
	Fail    func(ctx context.Context, runID, reason, msg string)
	Mailbox *mailbox.Mailbox
	Leases  *lease.Manager
	GPU     *gpu.Controller
	Orphans func(ctx context.Context) error
	// Workspaces unmounts the workspaces of runs that ended a while ago.
	Workspaces func(ctx context.Context) error
	Log        *slog.Logger
	// Ran, when set, is told each task that ran: its type and task id (tests).
	Ran func(typ, taskID string)
}

// Register adds the maintenance handlers to mux.
func (m *Maintenance) Register(mux *asynq.ServeMux) {
	m.Config.defaults()
	h := func(typ string, fn func(context.Context) error) {
		mux.HandleFunc(typ, func(ctx context.Context, _ *asynq.Task) error {
			if m.Ran != nil {
				id, _ := asynq.GetTaskID(ctx)
				m.Ran(typ, id)
			}
			return fn(ctx)
		})
	}
	h(queue.TypeRequeueQueued, m.requeueQueued)
	h(queue.TypeStuckRuns, m.stuckRuns)
	h(queue.TypeAuditPurge, m.auditPurge)
	h(queue.TypeLeaseReap, func(ctx context.Context) error {
		if m.Leases == nil {
			return nil
		}
		_, err := m.Leases.Reap(ctx)
		return err
	})
	h(queue.TypeMailboxReclaim, func(ctx context.Context) error {
		if m.Mailbox == nil {
			return nil
		}
		_, err := m.Mailbox.Reclaim(ctx)
		return err
	})
	h(queue.TypeMailboxTrim, func(ctx context.Context) error {
		if m.Mailbox == nil {
			return nil
		}
		_, err := m.Mailbox.Trim(ctx)
		return err
	})
	h(queue.TypeGPUStopIdle, func(ctx context.Context) error {
		if m.GPU == nil {
			return nil
		}
		stopped, err := m.GPU.StopIdle(ctx)
		if len(stopped) > 0 {
			m.Log.Info("idle GPU services stopped", "services", stopped)
		}
		return err
	})
	h(queue.TypeSandboxOrphans, func(ctx context.Context) error {
		if m.Orphans == nil {
			return nil
		}
		return m.Orphans(ctx)
	})
	h(queue.TypeWorkspaceSweep, func(ctx context.Context) error {
		if m.Workspaces == nil {
			return nil
		}
		return m.Workspaces(ctx)
	})
}

func (m *Maintenance) requeueQueued(ctx context.Context) error {
	ids, err := m.Store.QueuedRuns(ctx, m.Config.QueuedAfter, 500)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if err := m.Queue.Supervise(ctx, id, "start"); err != nil {
			return err
		}
	}
	if len(ids) > 0 {
		m.Log.Info("re-enqueued queued runs", "count", len(ids))
	}
	return nil
}

func (m *Maintenance) stuckRuns(ctx context.Context) error {
	ids, err := m.Store.StaleRuns(ctx, m.Config.StuckAfter, 500)
	if err != nil {
		return err
	}
	for _, id := range ids {
		m.Fail(ctx, id, "stuck", fmt.Sprintf("no progress for %s", m.Config.StuckAfter))
	}
	return nil
}

func (m *Maintenance) auditPurge(ctx context.Context) error {
	n, err := m.Store.PurgeAudit(ctx, m.Config.AuditRetention)
	if err != nil {
		return err
	}
	if n > 0 {
		m.Log.Info("audit rows purged", "count", n, "retention", m.Config.AuditRetention.String())
	}
	return nil
}
