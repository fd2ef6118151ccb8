// Package scheduler is the periodic-maintenance role: an asynq Scheduler enqueues
// maintenance ticks (deduplicated with Unique, so 2+ replicas run each tick once) and
// the worker fleet handles them like any other task.
package scheduler

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/hibiken/asynq"

	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/worker"
)

// Task types and queue.
const (
	TypeRequeueQueued = "maintenance:requeue-queued"
	TypeStuckRuns     = "maintenance:stuck-runs"
	Queue             = "maintenance"
)

// Config tunes maintenance.
type Config struct {
	// Every is the tick interval (cron spec). Default "@every 30s".
	Every string
	// QueuedAfter re-enqueues runs still queued after this long. Default 30s.
	QueuedAfter time.Duration
	// StuckAfter fails non-terminal runs with no event for this long. Default 1h.
	StuckAfter time.Duration
}

func (c *Config) defaults() {
	if c.Every == "" {
		c.Every = "@every 30s"
	}
	if c.QueuedAfter <= 0 {
		c.QueuedAfter = 30 * time.Second
	}
	if c.StuckAfter <= 0 {
		c.StuckAfter = time.Hour
	}
}

// New returns an asynq Scheduler with the maintenance ticks registered.
func New(cfg Config, redis asynq.RedisConnOpt, log *slog.Logger) (*asynq.Scheduler, error) {
	cfg.defaults()
	s := asynq.NewScheduler(redis, &asynq.SchedulerOpts{
		Location: time.UTC,
		PostEnqueueFunc: func(info *asynq.TaskInfo, err error) {
			if err != nil && log != nil {
				log.Debug("maintenance tick not enqueued", "err", err)
			}
		},
	})
	for _, typ := range []string{TypeRequeueQueued, TypeStuckRuns} {
		// Unique dedupes the ticks of several scheduler replicas.
		if _, err := s.Register(cfg.Every, asynq.NewTask(typ, nil), asynq.Queue(Queue), asynq.Unique(20*time.Second), asynq.MaxRetry(1)); err != nil {
			return nil, fmt.Errorf("scheduler: register %s: %w", typ, err)
		}
	}
	return s, nil
}

// Maintenance handles the ticks on the worker fleet.
type Maintenance struct {
	Config Config
	Store  *store.Store
	Queue  *worker.Enqueuer
	Fail   func(ctx context.Context, runID, reason, msg string)
	Log    *slog.Logger
}

// Register adds the maintenance handlers to mux.
func (m *Maintenance) Register(mux *asynq.ServeMux) {
	m.Config.defaults()
	mux.HandleFunc(TypeRequeueQueued, m.requeueQueued)
	mux.HandleFunc(TypeStuckRuns, m.stuckRuns)
}

func (m *Maintenance) requeueQueued(ctx context.Context, _ *asynq.Task) error {
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

func (m *Maintenance) stuckRuns(ctx context.Context, _ *asynq.Task) error {
	ids, err := m.Store.StaleRuns(ctx, m.Config.StuckAfter, 500)
	if err != nil {
		return err
	}
	for _, id := range ids {
		m.Fail(ctx, id, "stuck", fmt.Sprintf("no progress for %s", m.Config.StuckAfter))
	}
	return nil
}
