package submit

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/aetherium-engine/aetherium/events"
	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/store"
)

// StartAdmitted starts the runs the end of a run admitted (store.FinishRun
// admits its key's next waiting runs in the same transaction): a run.admitted
// event and the first supervisor step each. A failure is logged, not
// returned: the runs are admitted durably, and the queued-runs sweep starts
// what this could not. Every path that ends a run (the API's cancel, a
// schedule's cancel_previous, the worker's end of a run, the scheduler's
// sweeps) starts them here.
func StartAdmitted(ctx context.Context, ev *events.Recorder, q *queue.Enqueuer, log *slog.Logger, runs []store.Run) {
	for _, r := range runs {
		if err := ev.Emit(ctx, r.ID, "admitted", events.RunAdmitted, "", events.RunAdmittedData{Priority: r.Priority}); err != nil {
			log.ErrorContext(ctx, "admitted run: event", "run_id", r.ID, "err", err)
		}
		if err := q.Supervise(ctx, queue.Route{Key: r.FairKey, Priority: r.Priority}, r.ID, "start"); err != nil {
			log.ErrorContext(ctx, "admitted run: enqueue", "run_id", r.ID, "err", err)
		}
	}
}

// Cancel ends a run cancelled with reason, as a person's cancel or a
// schedule's cancel_previous does: the runs its end admits start, its first
// step gives up its place in line if still there, and its terminal event is
// stored. changed is false when the run had already ended (r is as it ended).
func (s *Submitter) Cancel(ctx context.Context, runID, reason string) (r store.Run, changed bool, err error) {
	changed, admitted, err := s.d.Store.FinishRun(ctx, runID, store.RunCancelled, "", reason, "cancelled")
	if err != nil {
		return r, false, fmt.Errorf("cancel run %s: %w", runID, err)
	}
	StartAdmitted(ctx, s.d.Events, s.d.Queue, s.d.Log, admitted)
	if r, err = s.d.Store.GetRun(ctx, runID); err != nil {
		return r, changed, err
	}
	if !changed {
		return r, false, nil
	}
	// Its first step, if still in its key's line, would only start to find the
	// run cancelled: it gives its place up now.
	if err := s.d.Queue.Withdraw(ctx, queue.SuperviseTaskID(runID, "start")); err != nil {
		s.d.Log.WarnContext(ctx, "cancel: withdraw the first step", "run_id", runID, "err", err)
	}
	if s.d.Metrics != nil {
		s.d.Metrics.RunsFinished.WithLabelValues(store.RunCancelled).Inc()
	}
	return r, true, s.d.Events.EmitTerminal(ctx, r)
}
