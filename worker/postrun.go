package worker

// Post-run work: what a run asked for that starts only once the run has
// ended (Config.PostRun, the hooks the composition root registers; package
// hook is their contract). The worker owns its durability: run:cleanup
// (scheduler.Maintenance, retried) calls AfterCleanup once the run's leases
// are released, and each entry's Schedule enqueues the run's task under a
// deterministic id; the worker handles the task (handlePostRun), giving it
// the run, its workspace and a lease of its own that snoozes the task while
// the service is busy; a task out of retries is settled by its GaveUp
// (errorHandler), never failing its run.

import (
	"context"
	"errors"
	"fmt"

	"github.com/hibiken/asynq"
	"go.opentelemetry.io/otel/trace"

	"github.com/aetherium-engine/aetherium/lease"
	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/tracing"
	"github.com/aetherium-engine/aetherium/worker/hook"
)

// postRunPayload is what the worker reads of a post-run task's payload: the
// run (hook.PostRun.TaskType).
type postRunPayload struct {
	RunID string `json:"run_id"`
}

// AfterCleanup is run:cleanup's hook after the run's leases are released
// (scheduler.MaintenanceDeps.AfterRelease): it schedules the run's post-run
// work, every entry of Config.PostRun in order. Idempotent as each Schedule
// is; an error retries the cleanup.
func (w *Worker) AfterCleanup(ctx context.Context, runID string) error {
	var errs []error
	for _, p := range w.cfg.PostRun {
		if err := p.Schedule(ctx, runID); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p.Name, err))
		}
	}
	return errors.Join(errs...)
}

// postRunOf is the post-run entry whose task type is typ.
func (w *Worker) postRunOf(typ string) (hook.PostRun, bool) {
	for _, p := range w.cfg.PostRun {
		if p.TaskType == typ {
			return p, true
		}
	}
	return hook.PostRun{}, false
}

// handlePostRun handles p's task: it loads the run and hands the delivery to
// p.Run.
func (w *Worker) handlePostRun(p hook.PostRun) asynq.HandlerFunc {
	return func(ctx context.Context, t *asynq.Task) error {
		pl, err := queue.Decode[postRunPayload](t)
		if err != nil {
			return err
		}
		run, err := w.store.GetRun(ctx, pl.RunID)
		if errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("%w: run %s does not exist", asynq.SkipRetry, pl.RunID)
		}
		if err != nil {
			return err
		}
		// A post-run task is a span of its run's trace, like its steps.
		ctx, span := w.tracing.StartRemote(ctx, run.TraceContext, "post_run "+p.Name, trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithAttributes(tracing.RunID.String(run.ID), tracing.TaskType.String(p.TaskType)))
		defer span.End()
		err = p.Run(ctx, hook.Delivery{
			Run: run,
			Workspace: func(ctx context.Context) (string, string, error) {
				return w.workspace(ctx, run.WorkspaceID())
			},
			Hold: func(ctx context.Context, service string) (hook.Lease, string, error) {
				return w.holdPostRun(ctx, p.Name, run.ID, service)
			},
		})
		tracing.Fail(span, err)
		return err
	}
}

// holdPostRun takes run's post-run lease on service for the work named name
// (hook.Delivery.Hold), and keeps it renewed until its Release.
func (w *Worker) holdPostRun(ctx context.Context, name, runID, service string) (hook.Lease, string, error) {
	holder := lease.PostRunHolder(runID)
	g, err := w.acquireOne(ctx, service, holder)
	if err != nil {
		if retry, reason := leaseFailure(err); !retry {
			return hook.Lease{}, reason, err
		} else if errors.Is(err, lease.ErrWaiting) {
			w.log.InfoContext(ctx, "post-run work waits for a GPU lease", "run_id", runID, "work", name, "err", err)
			return hook.Lease{}, "", Snooze(w.leaseRetry, fmt.Errorf("%w: %w", ErrLeaseWaiting, err))
		}
		return hook.Lease{}, "", err
	}
	kctx, cancel := context.WithCancelCause(ctx)
	kept := make(chan struct{})
	go func() {
		defer close(kept)
		if err := w.leases.Keep(kctx, g, 0); errors.Is(err, lease.ErrLost) {
			cancel(fmt.Errorf("GPU lease on %s lost: %w", service, err))
		}
	}()
	release := func() {
		cancel(nil)
		<-kept
		if _, err := w.leases.Release(context.WithoutCancel(ctx), service, holder, g.Token); err != nil {
			w.log.WarnContext(ctx, "release the post-run lease", "run_id", runID, "work", name, "service", service, "err", err)
		}
	}
	return hook.Lease{Grant: g, Ctx: kctx, Release: release}, "", nil
}

// acquireOne takes holder's lease on service, starting the service's
// container when the fleet manages it.
func (w *Worker) acquireOne(ctx context.Context, service, holder string) (lease.Grant, error) {
	if w.leases == nil {
		return lease.Grant{}, fmt.Errorf("%w: this deployment has no lease manager", lease.ErrUnknownService)
	}
	if w.gpu != nil {
		return w.gpu.Acquire(ctx, service, holder)
	}
	return w.leases.Acquire(ctx, service, holder)
}

// postRunGaveUp hands a post-run task that ran out of retries to its entry's
// GaveUp.
func (w *Worker) postRunGaveUp(ctx context.Context, p hook.PostRun, t *asynq.Task, attempts int, cause error) {
	pl, err := queue.Decode[postRunPayload](t)
	if err != nil || p.GaveUp == nil {
		return
	}
	p.GaveUp(ctx, pl.RunID, attempts, cause)
}
