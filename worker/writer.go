package worker

import (
	"context"
	"errors"
	"fmt"

	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/tools"
)

// stepWriter collects what a step owes the database besides its session: the
// tool.call events and the audit rows of the calls it ran. A save takes them in
// the transaction that makes the calls' results durable, so a crash loses neither
// without the other; whatever no save took is flushed when the step ends.
type stepWriter struct {
	events []store.NewEvent
	audit  []store.AuditRow
	// delegations are those the step's calls recorded (Coordinator.Delegate):
	// their turns are enqueued once the next save (the session waiting for them)
	// commits.
	delegations []store.Delegation
	// todos is the agent's todo list as the step holds it (tools.Session.Todos):
	// a save stores it when the step's calls changed it.
	todos *tools.Todos
}

// delegate records a delegation and its event for the next save.
func (sw *stepWriter) delegate(d store.Delegation, ev store.NewEvent) {
	sw.delegations = append(sw.delegations, d)
	sw.events = append(sw.events, ev)
}

// call records one call's event and, when the gate audited it, its row.
func (sw *stepWriter) call(ev store.NewEvent, row *store.AuditRow) {
	sw.events = append(sw.events, ev)
	if row != nil {
		sw.audit = append(sw.audit, *row)
	}
}

// audited records a row without an event (a call that waits for its result).
func (sw *stepWriter) audited(row *store.AuditRow) {
	if row != nil {
		sw.audit = append(sw.audit, *row)
	}
}

// dropDelegations forgets the delegations a call made again (a redispatch whose
// first dispatch's delegations all finished: nothing is left to run).
func (sw *stepWriter) dropDelegations(callID string) {
	kept := sw.delegations[:0]
	for _, d := range sw.delegations {
		if d.ToolCallID != callID {
			kept = append(kept, d)
		}
	}
	sw.delegations = kept
}

// write is what the next save carries, extra events last.
func (sw *stepWriter) write(tokens int, extra ...store.NewEvent) store.StepWrite {
	evs := append(sw.events[:len(sw.events):len(sw.events)], extra...)
	return store.StepWrite{Tokens: tokens, Events: evs, Audit: sw.audit}
}

// saved forgets what a save wrote.
func (sw *stepWriter) saved() {
	sw.events, sw.audit, sw.delegations = sw.events[:0], sw.audit[:0], nil
}

// takeEvents and takeAudit hand over what no save took.
func (sw *stepWriter) takeEvents() []store.NewEvent {
	evs := sw.events
	sw.events = nil
	return evs
}

func (sw *stepWriter) takeAudit() []store.AuditRow {
	rows := sw.audit
	sw.audit = nil
	return rows
}

// saveOpts are what a save carries besides the step writer's rows.
type saveOpts struct {
	tokens int
	// call is the model call whose answer the save holds (its cost and ledger row).
	call  *store.ModelCall
	extra []store.NewEvent
	// release ends the step's lease with the save (the step's last write).
	release bool
	finish  *store.DelegationOutcome
	// compacted is the compaction the save stores; notes overwrite the
	// session's working memory.
	compacted *store.Compaction
	notes     *string
}

// persist saves the session with everything the step owes the database since its
// last save: tokens, events (then extra) and audit rows, in one transaction. The
// turns of the delegations the step's calls recorded are enqueued once it
// committed; a failure there fails the step, and its redelivery, finding the
// session waiting on delegations still pending, enqueues them again.
func (w *Worker) persist(ctx context.Context, in stepInput, sess *store.Session, token string, o saveOpts) (store.StepSaved, error) {
	sw := in.out.write(o.tokens, o.extra...)
	delegations := in.out.delegations
	sw.Memory = w.sessionMemory(in, sess) // a session ending with this save is remembered in it
	sw.Release, sw.Finish, sw.Call = o.release, o.finish, o.call
	sw.Compacted, sw.Notes = o.compacted, o.notes
	if len(delegations) > 0 {
		// Their tasks carry what this session had read, as this save leaves
		// its history: stored with them, for their turns to read.
		label, err := w.taskLabel(sess.Messages)
		if err != nil {
			return store.StepSaved{}, err
		}
		sw.TaskLabel = label
		for _, d := range delegations {
			sw.Delegated = append(sw.Delegated, d.ID)
		}
	}
	todos, mark, changed := in.out.todos.Unsaved()
	if changed {
		sw.Todos = &todos
	}
	saved, err := w.store.SaveStep(ctx, sess, token, w.cfg.StepLease, sw)
	if err != nil {
		w.staleRefused(ctx, "save", sess.ID, err)
		return saved, err
	}
	in.out.saved()
	in.out.todos.Saved(mark)
	if err := w.events.Announce(ctx, in.run.ID, saved.Events); err != nil {
		return saved, err
	}
	for _, d := range delegations {
		if err := w.queue.Turn(ctx, routeOf(in.run), d.ID, "start"); err != nil {
			return saved, fmt.Errorf("enqueue delegation %s: %w", d.ID, err)
		}
	}
	return saved, nil
}

// staleRefused reports whether err is the session lease refusing a write of this
// step because another delivery took the session over (the step was paused or cut
// off past its lease); it counts and logs each such refusal, with a fixed message
// the drills look for.
func (w *Worker) staleRefused(ctx context.Context, kind, session string, err error) bool {
	if !errors.Is(err, store.ErrLeaseLost) {
		return false
	}
	if w.metrics != nil {
		w.metrics.StaleWritesRefused.WithLabelValues(kind).Inc()
	}
	w.log.WarnContext(ctx, "stale write refused", "kind", kind, "session", session, "err", err)
	return true
}

// flushAudit writes the audit rows no save took: the step is ending (failed, waiting,
// interrupted) and the calls ran. The Auditor, which retries, takes them when the
// database refuses them now.
func (w *Worker) flushAudit(ctx context.Context, in stepInput) {
	rows := in.out.takeAudit()
	if len(rows) == 0 {
		return
	}
	err := w.store.InsertAudit(ctx, rows)
	if err == nil {
		return
	}
	if w.audit == nil {
		for _, r := range rows {
			w.log.ErrorContext(ctx, "audit row NOT written", "call_key", r.CallKey, "tool", r.Tool, "decision", r.Decision, "err", err)
		}
		return
	}
	w.log.WarnContext(ctx, "audit rows handed to the audit writer", "rows", len(rows), "err", err)
	for _, r := range rows {
		if werr := w.audit.Write(ctx, r); werr != nil {
			w.log.ErrorContext(ctx, "audit row NOT written", "call_key", r.CallKey, "tool", r.Tool, "decision", r.Decision, "err", werr)
		}
	}
}

// flushEvents records the step's batched tool.call events.
func (w *Worker) flushEvents(ctx context.Context, in stepInput) error {
	evs := in.out.takeEvents()
	if len(evs) == 0 {
		return nil
	}
	return w.events.EmitBatch(ctx, in.run.ID, evs)
}

// failStep records the step's tool calls, then fails the run (terminal event last).
func (w *Worker) failStep(ctx context.Context, in stepInput, reason, msg string) {
	w.flushAudit(ctx, in)
	if err := w.flushEvents(ctx, in); err != nil {
		w.log.WarnContext(ctx, "tool events before failing the run", "err", err)
	}
	w.FailRun(ctx, in.run.ID, reason, msg)
}
