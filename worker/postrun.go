package worker

// Post-run work: what a run asked for that starts only once the run has
// ended. Today that is finish_image's 2K upscale (toolbox/comfyui/finish.go):
//
//  1. During the run, finish_image records one finish_images row per picture.
//  2. run:cleanup (scheduler.Maintenance) releases the run's leases and then
//     calls AfterCleanup. A completed run with pending pictures gets its
//     run:finish-image task (queue.FinishImageTaskID: one per run); a failed
//     or cancelled run's pending pictures are settled as skipped and the
//     postrun.finish_image event says so.
//  3. handleFinishImage takes a lease of its own on the qwen service, holder
//     FinishHolder(run) (the run's own lease is gone: its slot went to
//     whoever waited, and this task queues behind them like any run). A busy
//     service snoozes the task (no worker waits, no retry is spent). It
//     upscales each pending picture, settling each row once (a conditional
//     UPDATE), so a redelivery skips what is done; an upscale already on disk
//     from a delivery that crashed before recording it is recognised
//     (comfyui.FinishedUpscale) and not made again. It releases the lease and
//     records the postrun.finish_image event (keyed once per run) with every
//     picture's outcome, which the API's event stream, the CLI and webhooks
//     show although the run's live stream has ended.
//  4. A task out of retries (the service kept failing) settles what is still
//     pending as failed and records the event (errorHandler).

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/hibiken/asynq"

	"github.com/aetherium-engine/aetherium/events"
	"github.com/aetherium-engine/aetherium/lease"
	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/store"
	comfyuitools "github.com/aetherium-engine/aetherium/toolbox/comfyui"
)

// FinishHolder is the lease holder of a run's post-run upscale.
func FinishHolder(runID string) string { return lease.PostRunHolder(runID) }

// finishEventKey keys the postrun.finish_image event: one per run.
const finishEventKey = "postrun:finish_image"

// AfterCleanup is run:cleanup's hook after the run's leases are released
// (scheduler.MaintenanceDeps.AfterRelease): it schedules the run's post-run
// work. Idempotent: the task id is the run's, settling skips only pending
// rows and the event is keyed once per run.
func (w *Worker) AfterCleanup(ctx context.Context, runID string) error {
	imgs, err := w.store.FinishImages(ctx, runID)
	if err != nil || len(imgs) == 0 {
		return err
	}
	run, err := w.store.GetRun(ctx, runID)
	if err != nil {
		return err
	}
	if !store.Terminal(run.Status) {
		return fmt.Errorf("post-run work of run %s: the run is %s, not finished", runID, run.Status)
	}
	if pending(imgs) == 0 {
		return w.emitFinish(ctx, run)
	}
	if run.Status != store.RunCompleted {
		if _, err := w.store.SettlePendingFinishImages(ctx, runID, store.FinishSkipped, "the run "+run.Status+" before it completed"); err != nil {
			return err
		}
		return w.emitFinish(ctx, run)
	}
	if w.queue == nil {
		return errors.New("post-run work: this worker has no queue")
	}
	return w.queue.FinishImage(ctx, runID)
}

func pending(imgs []store.FinishImage) int {
	n := 0
	for _, im := range imgs {
		if im.Status == store.FinishPending {
			n++
		}
	}
	return n
}

// handleFinishImage is run:finish-image (see the top of this file).
func (w *Worker) handleFinishImage(ctx context.Context, t *asynq.Task) error {
	p, err := queue.Decode[queue.FinishImagePayload](t)
	if err != nil {
		return err
	}
	run, err := w.store.GetRun(ctx, p.RunID)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%w: run %s does not exist", asynq.SkipRetry, p.RunID)
	}
	if err != nil {
		return err
	}
	imgs, err := w.store.FinishImages(ctx, run.ID)
	if err != nil {
		return err
	}
	if pending(imgs) == 0 {
		return w.emitFinish(ctx, run) // a redelivery after the work was done
	}
	giveUp := func(msg string) error {
		if _, err := w.store.SettlePendingFinishImages(ctx, run.ID, store.FinishFailed, msg); err != nil {
			return err
		}
		return w.emitFinish(ctx, run)
	}
	if w.finisher == nil {
		return giveUp("this fleet has no ComfyUI finisher configured")
	}
	dir, reason, err := w.workspace(ctx, run.WorkspaceID())
	if reason != "" {
		return giveUp(fmt.Sprintf("%s: %v", reason, err))
	}
	if err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("open workspace of run %s: %w", run.ID, err)
	}
	defer root.Close()

	service, holder := comfyuitools.FinishService(), FinishHolder(run.ID)
	g, err := w.acquireOne(ctx, service, holder)
	if err != nil {
		if retry, reason := leaseFailure(err); !retry {
			return giveUp(fmt.Sprintf("%s: %v", reason, err))
		} else if errors.Is(err, lease.ErrWaiting) {
			w.log.InfoContext(ctx, "post-run upscale waits for a GPU lease", "run_id", run.ID, "err", err)
			return Snooze(w.leaseRetry, fmt.Errorf("%w: %w", ErrLeaseWaiting, err))
		}
		return err
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
			w.log.WarnContext(ctx, "release the post-run lease", "run_id", run.ID, "service", service, "err", err)
		}
	}
	defer release()

	for _, im := range imgs {
		if im.Status != store.FinishPending {
			continue
		}
		if wd, ht, ok := comfyuitools.FinishedUpscale(root, im.Path, im.Output); ok {
			if _, err := w.store.SettleFinishImage(ctx, run.ID, im.Path, store.FinishDone, wd, ht, ""); err != nil {
				return err
			}
			continue
		}
		wd, ht, err := w.finisher.Upscale(kctx, g, root, run.ID, im.Path, im.Output)
		switch {
		case err == nil:
			_, err = w.store.SettleFinishImage(ctx, run.ID, im.Path, store.FinishDone, wd, ht, "")
		case errors.Is(err, comfyuitools.ErrPicture):
			_, err = w.store.SettleFinishImage(ctx, run.ID, im.Path, store.FinishFailed, 0, 0, err.Error())
		default:
			if cause := context.Cause(kctx); cause != nil && ctx.Err() == nil {
				err = fmt.Errorf("%w (%v)", err, cause)
			}
			return fmt.Errorf("upscale %s of run %s: %w", im.Path, run.ID, err) // retried: done pictures stay done
		}
		if err != nil {
			return err
		}
	}
	release()
	return w.emitFinish(ctx, run)
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

// finishGaveUp settles a run's still-pending pictures as failed when its
// run:finish-image task ran out of retries, and records the event.
func (w *Worker) finishGaveUp(ctx context.Context, t *asynq.Task, attempts int, cause error) {
	p, err := queue.Decode[queue.FinishImagePayload](t)
	if err != nil {
		return
	}
	msg := fmt.Sprintf("gave up after %d attempts: %v", attempts, cause)
	if _, err := w.store.SettlePendingFinishImages(ctx, p.RunID, store.FinishFailed, msg); err != nil {
		w.log.ErrorContext(ctx, "settle post-run upscale", "run_id", p.RunID, "err", err)
		return
	}
	run, err := w.store.GetRun(ctx, p.RunID)
	if err == nil {
		err = w.emitFinish(ctx, run)
	}
	if err != nil {
		w.log.ErrorContext(ctx, "post-run event", "run_id", p.RunID, "err", err)
	}
}

// emitFinish records the run's postrun.finish_image event from its rows:
// status done (every picture), failed (none), skipped (the run did not
// complete) or partial.
func (w *Worker) emitFinish(ctx context.Context, run store.Run) error {
	imgs, err := w.store.FinishImages(ctx, run.ID)
	if err != nil {
		return err
	}
	if len(imgs) == 0 {
		return nil
	}
	if pending(imgs) > 0 {
		return fmt.Errorf("post-run event of run %s: %d pictures still pending", run.ID, pending(imgs))
	}
	count := map[string]int{}
	for _, im := range imgs {
		count[im.Status]++
	}
	status := "partial"
	for _, s := range []string{store.FinishDone, store.FinishFailed, store.FinishSkipped} {
		if count[s] == len(imgs) {
			status = s
		}
	}
	return w.events.Emit(ctx, run.ID, finishEventKey, events.PostRunFinishImage, "", map[string]any{
		"status": status, "run_status": run.Status, "service": comfyuitools.FinishService(), "holder": FinishHolder(run.ID),
		"long_side": comfyuitools.FinishLongSide, "done": count[store.FinishDone], "failed": count[store.FinishFailed],
		"skipped": count[store.FinishSkipped], "files": imgs,
	})
}
