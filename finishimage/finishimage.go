// Package finishimage is finish_image's post-run work (toolbox/comfyui/finish.go),
// registered with the worker as a hook.PostRun by the composition root: the 2K
// upscale of a completed run's pictures, which starts only once the run has
// ended.
//
//  1. During the run, finish_image records one finish_images row per picture.
//  2. run:cleanup (scheduler.Maintenance) releases the run's leases and then
//     calls the worker's AfterCleanup, which calls Schedule. A completed run
//     with pending pictures gets its run:finish-image task
//     (queue.FinishImageTaskID: one per run); a failed or cancelled run's
//     pending pictures are settled as skipped and the postrun.finish_image
//     event says so.
//  3. Run (the worker's handler of run:finish-image) takes a lease of its own
//     on the qwen service, holder FinishHolder(run) (the run's own lease is
//     gone: its slot went to whoever waited, and this task queues behind them
//     like any run). A busy service snoozes the task (no worker waits, no
//     retry is spent). It upscales each pending picture, settling each row
//     once (a conditional UPDATE), so a redelivery skips what is done; an
//     upscale already on disk from a delivery that crashed before recording
//     it is recognised (comfyui.FinishedUpscale) and not made again. It
//     releases the lease and records the postrun.finish_image event (keyed
//     once per run) with every picture's outcome, which the API's event
//     stream, the CLI and webhooks show although the run's live stream has
//     ended.
//  4. A task out of retries (the service kept failing) settles what is still
//     pending as failed and records the event (GaveUp).
package finishimage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/aetherium-engine/aetherium/events"
	"github.com/aetherium-engine/aetherium/lease"
	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/store"
	comfyuitools "github.com/aetherium-engine/aetherium/toolbox/comfyui"
	"github.com/aetherium-engine/aetherium/worker/hook"
)

// Name keys the work in the worker's post-run registry.
const Name = "finish_image"

// FinishHolder is the lease holder of a run's post-run upscale.
func FinishHolder(runID string) string { return lease.PostRunHolder(runID) }

// finishEventKey keys the postrun.finish_image event: one per run.
const finishEventKey = "postrun:finish_image"

// Store is what the work needs of the database: the run and its
// finish_images rows. *store.Store implements it.
type Store interface {
	GetRun(ctx context.Context, id string) (store.Run, error)
	FinishImages(ctx context.Context, runID string) ([]store.FinishImage, error)
	SettleFinishImage(ctx context.Context, runID, path, status string, width, height int, errMsg string) (bool, error)
	SettlePendingFinishImages(ctx context.Context, runID, status, errMsg string) (int, error)
}

var _ Store = (*store.Store)(nil)

// Deps are the work's collaborators.
type Deps struct {
	Store  Store
	Queue  *queue.Enqueuer
	Events *events.Recorder
	// Finisher runs the upscales. Nil: a task settles its pictures as failed.
	Finisher *comfyuitools.Finisher
	Log      *slog.Logger
}

// Work is finish_image's post-run work.
type Work struct{ d Deps }

// New returns the work over d.
func New(d Deps) *Work {
	if d.Log == nil {
		d.Log = slog.Default()
	}
	return &Work{d: d}
}

// PostRun is the work's entry in the worker's post-run registry.
func (w *Work) PostRun() hook.PostRun {
	return hook.PostRun{Name: Name, TaskType: queue.TypeFinishImage, Schedule: w.Schedule, Run: w.Run, GaveUp: w.GaveUp}
}

// Schedule is run:cleanup's hook after the run's leases are released: it
// schedules the run's upscale. Idempotent: the task id is the run's, settling
// skips only pending rows and the event is keyed once per run.
func (w *Work) Schedule(ctx context.Context, runID string) error {
	imgs, err := w.d.Store.FinishImages(ctx, runID)
	if err != nil || len(imgs) == 0 {
		return err
	}
	run, err := w.d.Store.GetRun(ctx, runID)
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
		if _, err := w.d.Store.SettlePendingFinishImages(ctx, runID, store.FinishSkipped, "the run "+run.Status+" before it completed"); err != nil {
			return err
		}
		return w.emitFinish(ctx, run)
	}
	if w.d.Queue == nil {
		return errors.New("post-run work: this worker has no queue")
	}
	return w.d.Queue.FinishImage(ctx, runID)
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

// Run is one delivery of run:finish-image (see the top of this file).
func (w *Work) Run(ctx context.Context, d hook.Delivery) error {
	run := d.Run
	imgs, err := w.d.Store.FinishImages(ctx, run.ID)
	if err != nil {
		return err
	}
	if pending(imgs) == 0 {
		return w.emitFinish(ctx, run) // a redelivery after the work was done
	}
	giveUp := func(msg string) error {
		if _, err := w.d.Store.SettlePendingFinishImages(ctx, run.ID, store.FinishFailed, msg); err != nil {
			return err
		}
		return w.emitFinish(ctx, run)
	}
	if w.d.Finisher == nil {
		return giveUp("this fleet has no ComfyUI finisher configured")
	}
	dir, reason, err := d.Workspace(ctx)
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

	l, reason, err := d.Hold(ctx, comfyuitools.FinishService())
	if reason != "" {
		return giveUp(fmt.Sprintf("%s: %v", reason, err))
	}
	if err != nil {
		return err
	}
	defer l.Release()

	for _, im := range imgs {
		if im.Status != store.FinishPending {
			continue
		}
		if wd, ht, ok := comfyuitools.FinishedUpscale(root, im.Path, im.Output); ok {
			if _, err := w.d.Store.SettleFinishImage(ctx, run.ID, im.Path, store.FinishDone, wd, ht, ""); err != nil {
				return err
			}
			continue
		}
		wd, ht, err := w.d.Finisher.Upscale(l.Ctx, l.Grant, root, run.ID, im.Path, im.Output)
		switch {
		case err == nil:
			_, err = w.d.Store.SettleFinishImage(ctx, run.ID, im.Path, store.FinishDone, wd, ht, "")
		case errors.Is(err, comfyuitools.ErrPicture):
			_, err = w.d.Store.SettleFinishImage(ctx, run.ID, im.Path, store.FinishFailed, 0, 0, err.Error())
		default:
			if cause := context.Cause(l.Ctx); cause != nil && ctx.Err() == nil {
				err = fmt.Errorf("%w (%v)", err, cause)
			}
			return fmt.Errorf("upscale %s of run %s: %w", im.Path, run.ID, err) // retried: done pictures stay done
		}
		if err != nil {
			return err
		}
	}
	l.Release()
	return w.emitFinish(ctx, run)
}

// GaveUp settles a run's still-pending pictures as failed when its
// run:finish-image task ran out of retries, and records the event.
func (w *Work) GaveUp(ctx context.Context, runID string, attempts int, cause error) {
	msg := fmt.Sprintf("gave up after %d attempts: %v", attempts, cause)
	if _, err := w.d.Store.SettlePendingFinishImages(ctx, runID, store.FinishFailed, msg); err != nil {
		w.d.Log.ErrorContext(ctx, "settle post-run upscale", "run_id", runID, "err", err)
		return
	}
	run, err := w.d.Store.GetRun(ctx, runID)
	if err == nil {
		err = w.emitFinish(ctx, run)
	}
	if err != nil {
		w.d.Log.ErrorContext(ctx, "post-run event", "run_id", runID, "err", err)
	}
}

// emitFinish records the run's postrun.finish_image event from its rows:
// status done (every picture), failed (none), skipped (the run did not
// complete) or partial.
func (w *Work) emitFinish(ctx context.Context, run store.Run) error {
	imgs, err := w.d.Store.FinishImages(ctx, run.ID)
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
	return w.d.Events.Emit(ctx, run.ID, finishEventKey, events.PostRunFinishImage, "", events.FinishImageData{
		Status: status, RunStatus: run.Status, Service: comfyuitools.FinishService(), Holder: FinishHolder(run.ID),
		LongSide: comfyuitools.FinishLongSide, Done: count[store.FinishDone], Failed: count[store.FinishFailed],
		Skipped: count[store.FinishSkipped], Files: imgs,
	})
}
