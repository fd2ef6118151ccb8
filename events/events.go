// Package events records run events in PostgreSQL (the durable, resumable log the SSE
// stream replays) and announces each new one on Redis pub/sub so followers wake at once.
package events

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/aetherium-engine/aetherium/store"
)

// Event types.
const (
	RunQueued = "run.queued"
	// RunAdmitted records that a run which waited for its fairness key's run
	// limit (fairness.keys.<key>.runs) was admitted and will start.
	RunAdmitted        = "run.admitted"
	RunStarted         = "run.started"
	RunCompleted       = "run.completed"
	RunFailed          = "run.failed"
	RunCancelled       = "run.cancelled"
	Delegated          = "delegation.created"
	DelegationFinished = "delegation.finished"
	TurnStarted        = "agent.turn_started"
	ModelAnswered      = "agent.message"
	ToolCall           = "tool.call"
	// ApprovalRequested records that a call (or an ask_user question) waits
	// for a person; ApprovalDecided who decided it, how and why.
	ApprovalRequested = "approval.requested"
	ApprovalDecided   = "approval.decided"
	Progress          = "progress"
	Notification      = "notification"
	// MailboxDeadLetter records a peer message dropped after its deliveries
	// failed (the mailbox's dead letter).
	MailboxDeadLetter = "mailbox.dead_letter"
	// ModelWaiting records that an agent's model call was parked by a rate
	// limit (the fleet's governor or the provider's 429/503/529): which limit,
	// and how long until it asks again. Once per wait.
	ModelWaiting = "agent.waiting"
	// SessionCompacted records that a session's older turns were summarized to
	// fit its model's context window: the tokens before and after, the rows the
	// summary stands for (the full history stays stored).
	SessionCompacted = "session.compacted"
	// MemoryInjected records which memory entries a session was given, and why.
	MemoryInjected = "memory.injected"
	// FlowLabelled records that a session read (or inherited) more untrusted
	// content, naming the sources: the flow rules now judge its calls by them.
	FlowLabelled = "flow.labelled"
	// FlowUntrustedWrite marks a workspace file written by a session that had
	// read untrusted content, for a person to review (the session's edits stay
	// revertible, revert_file).
	FlowUntrustedWrite = "flow.untrusted_write"
	// PostRunFinishImage is the outcome of a run's post-run finish_image
	// upscale (done, partial, failed or skipped, per picture), recorded after
	// the run's terminal event: the run's live stream has ended, so a client
	// reads it by resuming the stream past the terminal event (Last-Event-ID),
	// and webhooks deliver it like any other event. Never Terminal.
	PostRunFinishImage = "postrun.finish_image"
)

// PostRun reports whether an event type is a post-run event (recorded after
// the run's terminal one).
func PostRun(typ string) bool { return strings.HasPrefix(typ, "postrun.") }

// Terminal reports whether an event type ends a run's stream.
func Terminal(typ string) bool {
	return typ == RunCompleted || typ == RunFailed || typ == RunCancelled
}

// Channel is the pub/sub channel announcing a run's new events.
func Channel(runID string) string { return "aetherium:events:" + runID }

// EndChannel announces that a run's terminal event was stored: a watcher that
// only cares about the run's end (an MCP call waiting for its approval) is not
// woken by every other event of the run.
func EndChannel(runID string) string { return "aetherium:run-end:" + runID }

// MCPCallChannel announces a change of an MCP call's state in mcp_calls (parked
// on its approval, done): the client's wait re-reads the row then, instead of
// polling it.
func MCPCallChannel(callID string) string { return "aetherium:mcp-call:" + callID }

// Recorder stores and announces events.
type Recorder struct {
	Store *store.Store
	Redis redis.UniversalClient
	Log   *slog.Logger
	// OnEvent, when set, is called once per newly stored event (webhook fan-out).
	// Its error fails the Emit, so the step retries and the delivery is not lost.
	OnEvent func(ctx context.Context, e Stored) error
	// Announcer, when set, publishes the announcements off the caller's path;
	// nil publishes each one before Emit and Announce return.
	Announcer *Announcer
}

// Fanout is one OnEvent hook made of several, called in order; the first error
// stops the rest and fails the Emit.
func Fanout(hooks ...func(ctx context.Context, e Stored) error) func(ctx context.Context, e Stored) error {
	return func(ctx context.Context, e Stored) error {
		for _, h := range hooks {
			if err := h(ctx, e); err != nil {
				return err
			}
		}
		return nil
	}
}

// Stored identifies a newly stored event.
type Stored struct {
	ID    int64
	RunID string
	Type  string
}

// Emit stores the event once per key and announces it. typ must be declared
// (Types); data is its payload struct, as every emit site passes it
// (TestEmitSitesPassDeclaredPayloads). A failed announcement is only logged:
// followers also poll, so the event is never lost.
func (r *Recorder) Emit(ctx context.Context, runID, key, typ, agent string, data any) error {
	if err := CheckType(typ); err != nil {
		return fmt.Errorf("emit: %w", err)
	}
	id, inserted, err := r.Store.AppendEvent(ctx, runID, key, typ, agent, data)
	if err != nil {
		return fmt.Errorf("emit %s: %w", typ, err)
	}
	if inserted && r.OnEvent != nil {
		if err := r.OnEvent(ctx, Stored{ID: id, RunID: runID, Type: typ}); err != nil {
			return fmt.Errorf("emit %s: %w", typ, err)
		}
	}
	if inserted {
		r.publish(ctx, Channel(runID), id)
		if Terminal(typ) {
			r.publish(ctx, EndChannel(runID), id)
		}
	}
	return nil
}

// AnnounceMCPCall wakes the wait of an MCP call whose row changed (parked on its
// approval, done). Only logged when it fails: the wait re-reads on its safety
// tick, and the row is the truth either way.
func (r *Recorder) AnnounceMCPCall(ctx context.Context, callID string) {
	r.publish(ctx, MCPCallChannel(callID), 1)
}

func (r *Recorder) publish(ctx context.Context, channel string, msg any) {
	if r == nil || r.Redis == nil {
		return
	}
	if r.Announcer != nil {
		r.Announcer.Publish(ctx, channel, msg)
		return
	}
	if err := r.Redis.Publish(ctx, channel, msg).Err(); err != nil && r.Log != nil {
		r.Log.Warn("event announce failed", "channel", channel, "err", err)
	}
}

// DelegationFinishedKey is the key of a delegation's delegation.finished event:
// one event per delegation, whoever records it (the worker when the delegation's
// session ends, EmitTerminal when its run's end closed it). The store's
// UnannouncedDelegations looks the events up by this key.
func DelegationFinishedKey(delegationID string) string { return "delegation-finished:" + delegationID }

// maxDelegationResult bounds a delegation's result in its delegation.finished
// event (the full result stays on the delegation's row).
const maxDelegationResult = 2000

// FinishedDelegation is the data of a delegation.finished event, its result cut
// to maxDelegationResult.
func FinishedDelegation(id, status, result, errMsg string) DelegationFinishedData {
	if len(result) > maxDelegationResult {
		n := maxDelegationResult
		for n > 0 && !utf8.RuneStart(result[n]) {
			n--
		}
		result = result[:n] + "…"
	}
	return DelegationFinishedData{DelegationID: id, Status: status, Result: result, Error: errMsg}
}

// EmitTerminal records the terminal event of a finished run from its stored status,
// keyed store.TerminalEventKey: whoever finished the run, and however often this
// runs, the stream gets exactly one. The delegation.finished events of the
// delegations the run's end closed (store.FinishRun) are recorded first, from
// their rows and under their own keys, so a follower whose stream ends at the
// terminal event sees them, and a retry of this (every caller runs it again on
// redelivery) records what a crash in between lost.
//
// The end's hooks (OnEvent: the run's cleanup, its webhooks) run until they
// held once, not only when this call stored the event: the run's end stays
// unannounced (store.MarkEndAnnounced, after them) until they did, so a
// delivery that stored the event and then died or failed in a hook leaves the
// end to the next delivery or to the stuck-runs tick (store.UnannouncedEnds),
// which run them again (each hook is keyed: a second run enqueues nothing new).
func (r *Recorder) EmitTerminal(ctx context.Context, run store.Run) error {
	if err := r.emitClosedDelegations(ctx, run.ID); err != nil {
		return err
	}
	typ := map[string]string{store.RunCompleted: RunCompleted, store.RunFailed: RunFailed, store.RunCancelled: RunCancelled}[run.Status]
	if err := CheckType(typ); err != nil {
		return fmt.Errorf("emit terminal event of run %s (%s): %w", run.ID, run.Status, err)
	}
	t, err := r.Store.AppendTerminalEvent(ctx, run.ID, typ, RunEndedData{
		Status: run.Status, Result: run.Result, Error: run.Error, Reason: run.Reason, TokensUsed: run.TokensUsed,
	})
	if err != nil {
		return fmt.Errorf("emit %s: %w", typ, err)
	}
	if t.ID == 0 || (t.Announced && !t.Inserted) {
		return nil // heard already, or being stored by a writer that announces it
	}
	if r.OnEvent != nil {
		if err := r.OnEvent(ctx, Stored{ID: t.ID, RunID: run.ID, Type: typ}); err != nil {
			return fmt.Errorf("emit %s: %w", typ, err)
		}
	}
	r.publish(ctx, Channel(run.ID), t.ID)
	r.publish(ctx, EndChannel(run.ID), t.ID)
	if t.Announced {
		return nil
	}
	return r.Store.MarkEndAnnounced(ctx, run.ID)
}

// emitClosedDelegations records the missing delegation.finished events of a
// finished run's delegations (store.UnannouncedDelegations).
func (r *Recorder) emitClosedDelegations(ctx context.Context, runID string) error {
	ds, err := r.Store.UnannouncedDelegations(ctx, runID)
	if err != nil {
		return fmt.Errorf("emit %s: %w", DelegationFinished, err)
	}
	if len(ds) == 0 {
		return nil
	}
	evs := make([]store.NewEvent, len(ds))
	for i, d := range ds {
		evs[i] = store.NewEvent{Key: DelegationFinishedKey(d.ID), Type: DelegationFinished, Agent: d.Agent,
			Data: FinishedDelegation(d.ID, d.Status, d.Result, d.Error)}
	}
	return r.EmitBatch(ctx, runID, evs)
}

// EmitBatch stores several events of one run in one statement (each once per key)
// and announces them with one publish: the hot path of tool-call events.
func (r *Recorder) EmitBatch(ctx context.Context, runID string, evs []store.NewEvent) error {
	for _, e := range evs {
		if err := CheckType(e.Type); err != nil {
			return fmt.Errorf("emit batch: %w", err)
		}
	}
	stored, err := r.Store.AppendEvents(ctx, runID, evs)
	if err != nil {
		return fmt.Errorf("emit batch: %w", err)
	}
	return r.Announce(ctx, runID, stored)
}

// Announce hands events stored elsewhere (with a session save, say) to OnEvent and
// wakes followers with one publish.
func (r *Recorder) Announce(ctx context.Context, runID string, stored []store.Event) error {
	var last int64
	ended := false
	for _, e := range stored {
		if r.OnEvent != nil {
			if err := r.OnEvent(ctx, Stored{ID: e.ID, RunID: runID, Type: e.Type}); err != nil {
				return fmt.Errorf("emit %s: %w", e.Type, err)
			}
		}
		last = max(last, e.ID)
		ended = ended || Terminal(e.Type)
	}
	if last > 0 {
		r.publish(ctx, Channel(runID), last)
		if ended {
			r.publish(ctx, EndChannel(runID), last)
		}
	}
	return nil
}
