package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aetherium-engine/aetherium/events"
	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/logctx"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/tools"
)

type callState int

const (
	callDone callState = iota
	callWaiting
	callFinal
	// callRejected: answered with a human reviewer's rejection, which is no
	// failure of the agent's unless its team counts rejections.
	callRejected
)

// resolveCall produces the tool message for one pending call: from its finished
// delegations, or by dispatching it through the router (gate included). A call that
// must wait (delegations, an approval) yields callWaiting and no message; its
// tool.call event is recorded once, when its outcome is known.
func (w *Worker) resolveCall(ctx context.Context, tsess *tools.Session, in stepInput, sess *store.Session, call llm.ToolCall) (llm.Message, callState, error) {
	start := time.Now()
	// The call's delegations as the step's lease was taken: those made since are
	// this step's own (enqueued after its next save), not yet running.
	ds := in.delegations[call.ID]
	if delegating(call.Name) && len(ds) > 0 && sess.Status == "waiting" {
		// Once the session is waiting, every delegation of its calls was recorded
		// (before the save that made it wait) and the call's audit row saved with it.
		// Before that (a crash mid-dispatch) the call is dispatched again, even when
		// its delegations have all finished meanwhile: dispatching is idempotent,
		// completes whatever was missing, and writes the audit row the crash lost.
		if err := w.requeuePending(ctx, in.run, ds); err != nil {
			return llm.Message{}, callDone, err
		}
		return w.delegationAnswer(ctx, in, sess, call, ds, start)
	}
	dctx, span := w.startToolCall(ctx, call)
	res, err := w.router.Dispatch(logctx.Tool(dctx, call.Name), tools.Call{ID: call.ID, Name: call.Name, Args: call.Args, Session: tsess})
	endToolCall(span, err == nil && res.Pending, err)
	if ctx.Err() != nil {
		return llm.Message{}, callDone, ctx.Err()
	}
	if err == nil && res.Pending {
		// A dispatched delegation is audited now (its row is saved with the
		// session's "waiting"); its tool.call event waits for the results.
		in.out.audited(res.Audit)
		if delegating(call.Name) && len(ds) > 0 && allFinished(ds) {
			// Redispatched after a crash: the delegations are done already, and
			// nothing would resume the session again.
			in.out.dropDelegations(call.ID)
			return w.delegationAnswer(ctx, in, sess, call, ds, start)
		}
		return llm.Message{}, callWaiting, nil
	}
	if errors.Is(err, tools.ErrInfrastructure) {
		// Not the model's mistake: the step fails and its task retries the call.
		return llm.Message{}, callDone, fmt.Errorf("%s: %w", call.Name, err)
	}
	outcome, layer := tools.Classify(err)
	raw := res.Content
	if err != nil {
		raw = "error: " + err.Error()
	}
	// Valid text (no NUL, valid UTF-8), a large result's head only (results.go).
	msg := llm.Message{Role: llm.RoleTool, ToolCallID: call.ID, Name: call.Name, Content: w.resultText(ctx, tsess, call, raw)}
	if err != nil {
		msg.IsError = true
		var d *tools.Denied
		msg.Refused = errors.As(err, &d) && !d.Ran
	}
	w.recordCall(ctx, in, sess, call, outcome, layer, errString(err), msg.Content, start, res.Audit)
	if err == nil && res.Final {
		return msg, callFinal, nil
	}
	if d := (*tools.Denied)(nil); errors.As(err, &d) && d.Human {
		return msg, callRejected, nil
	}
	return msg, callDone, nil
}

// CapLayer is the deny_layer of the calls the worker's caps refuse (per model
// message, per session and per run): the audit trail and the metrics tell them
// from the gate's layers, and each reason starts with the cap's name.
const CapLayer = "cap"

// overCap returns the ids of the calls of the session's last assistant message
// past the first max, and how many calls the message made: those calls are not
// run (MaxCallsPerMessage).
func overCap(msgs []llm.Message, max int) (map[string]bool, int) {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role != llm.RoleAssistant {
			continue
		}
		calls := msgs[i].ToolCalls
		if len(calls) <= max {
			return nil, len(calls)
		}
		out := make(map[string]bool, len(calls)-max)
		for _, c := range calls[max:] {
			out[c.ID] = true
		}
		return out, len(calls)
	}
	return nil, 0
}

// refuseOverCap answers a call past the per-message cap without running it: a
// tool message naming the cap (so the model can ask again for what matters), the
// call's tool.call event and an audit row of a denial of the cap layer. The row
// keeps no arguments: the call never reached the gate that redacts them.
func (w *Worker) refuseOverCap(ctx context.Context, in stepInput, sess *store.Session, call llm.ToolCall, made int) llm.Message {
	start := time.Now()
	max := w.cfg.MaxCallsPerMessage
	reason := fmt.Sprintf("calls_per_message: your message made %d tool calls; only the first %d run (worker.max_calls_per_message), "+
		"so this one was not run. Ask again for the calls that still matter, at most %d in one message.", made, max, max)
	denied := &tools.Denied{Layer: CapLayer, Reason: reason}
	tier := ""
	if _, ok := w.router.Registry().Spec(call.Name); ok {
		tier = tools.TierOf(call.Name).String()
	}
	row := &store.AuditRow{
		CallKey: sess.ID + ":" + call.ID, At: start, RunID: in.run.ID, Team: in.team.Name, Agent: in.node.Name, Role: in.role,
		Tool: call.Name, Tier: tier, Decision: string(tools.OutcomeDenied), DenyLayer: CapLayer, DenyReason: reason,
		Summary: "not run: past the per-message call cap",
	}
	msg := llm.Message{Role: llm.RoleTool, ToolCallID: call.ID, Name: call.Name, Content: "error: " + denied.Error(), IsError: true, Refused: true}
	w.recordCall(ctx, in, sess, call, tools.OutcomeDenied, CapLayer, denied.Error(), msg.Content, start, row)
	return msg
}

// delegating reports a tool whose call is answered by delegations: delegate,
// spawn_subagents, and code_review (its reviewer).
func delegating(tool string) bool {
	return tool == tools.Delegate || tool == tools.SpawnSubagents || tool == tools.CodeReview
}

// delegationAnswer is the tool message of a delegate / spawn_subagents call whose
// delegations are recorded: their results once all are finished, else callWaiting.
func (w *Worker) delegationAnswer(ctx context.Context, in stepInput, sess *store.Session, call llm.ToolCall, ds []store.Delegation, start time.Time) (llm.Message, callState, error) {
	msg, state, err := delegationResult(call, ds)
	if err != nil || state == callWaiting {
		return msg, state, err
	}
	if msg.Provenance, err = w.resultProvenance(ctx, ds); err != nil {
		return llm.Message{}, callDone, err
	}
	outcome := tools.OutcomeAllowed
	if msg.IsError {
		outcome = tools.OutcomeError
	}
	// Audited when the call was dispatched (saved with the session's "waiting").
	w.recordCall(ctx, in, sess, call, outcome, "", "", msg.Content, start, nil)
	return msg, state, nil
}

// requeuePending enqueues again the turns of delegations not started yet: the
// save that recorded them committed, but the step may have died before it
// enqueued them. Task ids make this a no-op while the first enqueue stands.
func (w *Worker) requeuePending(ctx context.Context, run store.Run, ds []store.Delegation) error {
	for _, d := range ds {
		if d.Status != store.DelegationPending {
			continue
		}
		if err := w.queue.Turn(ctx, routeOf(run), d.ID, "start"); err != nil {
			return fmt.Errorf("enqueue delegation %s: %w", d.ID, err)
		}
	}
	return nil
}

// recordCall counts the call and hands its tool.call event and audit row to the
// step's writer (written with the step's next save or flush).
func (w *Worker) recordCall(ctx context.Context, in stepInput, sess *store.Session, call llm.ToolCall, outcome tools.Outcome, layer, errMsg, result string, start time.Time, audit *store.AuditRow) {
	decision := string(outcome)
	w.observeTool(ctx, call.Name, decision, layer, start)
	ev := store.NewEvent{Key: "tool:" + sess.ID + ":" + call.ID, Type: events.ToolCall, Agent: in.node.Name, Data: events.ToolCallData{
		Tool: call.Name, CallID: call.ID, Decision: decision, Layer: layer, Error: errMsg,
		Result: truncate(result, 500), DurationMS: time.Since(start).Milliseconds(),
	}}
	in.out.call(ev, audit)
}
