package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/aetherium-engine/aetherium/events"
	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/review"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/tools"
	"github.com/aetherium-engine/aetherium/worker/hook"
)

// coordinator implements tools.Coordinator for the session being stepped.
type coordinator struct {
	w       *Worker
	in      stepInput
	session *store.Session
	// workspace is the run's workspace (reply checks read it).
	workspace string
	// save persists the session with the step's results, audit rows and events.
	save func() error
}

// Delegate implements tools.Coordinator.
func (c *coordinator) Delegate(ctx context.Context, callID string, reqs []tools.DelegateRequest) error {
	// Everything is checked before anything is recorded: a refused call leaves no
	// delegation behind.
	for _, r := range reqs {
		if r.Tools != nil || r.Review {
			continue // subagents and reviewers are created by name from their parent
		}
		if c.in.role == "subagent" {
			return errors.New("delegate: subagents cannot delegate")
		}
		if r.Agent == c.in.node.Name {
			return fmt.Errorf("delegate: %s cannot delegate to itself", r.Agent)
		}
		if _, ok := c.in.team.Worker(r.Agent); !ok {
			names := make([]string, 0, len(c.in.team.Workers))
			for _, wk := range c.in.team.Workers {
				names = append(names, wk.Name)
			}
			return fmt.Errorf("delegate: unknown agent %q (workers: %s)", r.Agent, strings.Join(names, ", "))
		}
	}
	ds := make([]store.Delegation, len(reqs))
	for i, r := range reqs {
		id := delegationID(c.session.ID, callID, i, r.Agent)
		ds[i] = store.Delegation{ID: id, RunID: c.in.run.ID, ParentSession: c.session.ID, ToolCallID: callID, Agent: r.Agent, Task: r.Task, Tools: r.Tools}
		if r.Review {
			ds[i].Kind, ds[i].Tools = store.DelegationReview, []string{}
		}
	}
	// Recorded now, all or none, against the session's and the run's caps (the
	// store counts in the transaction that inserts, so concurrent steps of the run
	// cannot pass them). Their turns are enqueued once the save that makes the
	// session wait for them committed (persist); a crash before it leaves them
	// pending, and the redelivered step redispatches the call, which finds them
	// recorded (the same ids) and enqueues them then.
	err := c.w.store.RecordDelegations(ctx, c.session.ID, c.in.token, ds, store.DelegationLimits{
		PerSession: c.w.cfg.MaxDelegationsPerSession, PerRun: c.w.cfg.MaxDelegationsPerRun,
	})
	var capErr *store.DelegationCapError
	if errors.As(err, &capErr) {
		return delegationCapDenial(capErr)
	}
	if err != nil {
		return tools.Infrastructure(err)
	}
	for i, d := range ds {
		c.in.out.delegate(d, store.NewEvent{Key: "delegated:" + d.ID, Type: events.Delegated, Agent: c.in.node.Name,
			Data: events.DelegationCreatedData{DelegationID: d.ID, To: d.Agent, Task: truncate(reqs[i].Task, 2000)}})
	}
	return nil
}

// delegationCapDenial is the refusal of a call whose delegations would pass a
// cap: a denial of the cap layer (audited by the gate like any denial), worded for
// the model, which can finish with what it has or do the work itself.
func delegationCapDenial(e *store.DelegationCapError) error {
	key := "max_delegations_per_" + e.Scope
	return &tools.Denied{Layer: CapLayer, Reason: fmt.Sprintf("delegations_per_%s: this %s already made %d of the %d delegations it may make (worker.%s); "+
		"this call asked for %d more and delegated nothing. Do the work yourself or finish with what you have.", e.Scope, e.Scope, e.Have, e.Cap, key, e.Want)}
}

// Reply implements tools.Coordinator.
func (c *coordinator) Reply(ctx context.Context, message string) error {
	if c.in.role != "supervisor" {
		return errors.New("reply: only the supervisor replies to the user; end your turn with a final message instead")
	}
	// The reply checks hold for a supervisor's reply as for a worker's final
	// answer: a refusal is a tool error, which counts toward the circuit
	// breaker.
	back, err := c.w.checkReply(ctx, hook.Reply{Node: c.in.node, Access: c.in.access, Workspace: c.workspace,
		History: c.session.Messages, Answer: message, ViaReplyTool: true})
	if err != nil {
		return tools.Infrastructure(fmt.Errorf("reply check: %w", err))
	}
	if back != nil {
		return errors.New("reply: " + back.Reason)
	}
	// What came before the reply is saved first: once the run is completed, a
	// redelivered step only replays the reply itself (see replyUnsaved).
	if err := c.save(); err != nil {
		return tools.Infrastructure(err)
	}
	changed, admitted, err := c.w.store.FinishRun(ctx, c.in.run.ID, store.RunCompleted, message, "", "")
	if err != nil {
		return tools.Infrastructure(err)
	}
	c.w.StartAdmitted(ctx, admitted)
	if changed {
		c.w.observeFinished(ctx, c.in.run.ID)
	}
	// The run.completed event follows the reply's tool.call event: finishSession
	// records it after the step saves the reply's result.
	return nil
}

// Emit implements tools.Coordinator.
func (c *coordinator) Emit(ctx context.Context, key, typ string, data any) error {
	if err := c.w.flushEvents(ctx, c.in); err != nil {
		return err
	}
	return c.w.events.Emit(ctx, c.in.run.ID, key, typ, c.in.node.Name, data)
}

func delegationID(sessionID, callID string, i int, agent string) string {
	h := sha256.Sum256([]byte(fmt.Sprintf("%s\x00%s\x00%d\x00%s", sessionID, callID, i, agent)))
	return "del_" + hex.EncodeToString(h[:12])
}

// checkReply runs the reply checks (Config.ReplyChecks) on an answer, in
// order: the first refusal, or nil when the answer stands; an error is a
// check that failed.
func (w *Worker) checkReply(ctx context.Context, r hook.Reply) (*hook.SendBack, error) {
	for _, check := range w.cfg.ReplyChecks {
		var back *hook.SendBack
		if err := check(ctx, r); errors.As(err, &back) {
			return back, nil
		} else if err != nil {
			return nil, err
		}
	}
	return nil, nil
}

// finishSession publishes a finished session's outcome. Idempotent: it runs again
// when a redelivery finds the session already done.
func (w *Worker) finishSession(ctx context.Context, in stepInput, sess *store.Session) error {
	final := lastWords(sess)
	if in.role == "supervisor" {
		// A supervisor that ends without reply still finishes the run with its last words.
		changed, admitted, err := w.store.FinishRun(ctx, in.run.ID, store.RunCompleted, final, "", "")
		if err != nil {
			return err
		}
		w.StartAdmitted(ctx, admitted)
		if changed {
			w.observeFinished(ctx, in.run.ID)
		}
		w.ensureTerminalEvent(ctx, in.run.ID)
		return nil
	}
	d := in.delegation
	out := delegationOutcome(in.role, d.ID, final)
	finished, err := w.store.FinishDelegation(ctx, d.ID, out.Status, out.Result, out.Error)
	if err != nil {
		return err
	}
	if !finished {
		// Closed already: by an earlier delivery of this step, or by its run's
		// end (store.FinishRun). The event says what the row says.
		cur, err := w.store.GetDelegation(ctx, d.ID)
		if err != nil {
			return err
		}
		out = store.DelegationOutcome{ID: cur.ID, Status: cur.Status, Result: cur.Result, Error: cur.Error}
	}
	ev := delegationFinishedEvent(*d, out)
	if err := w.events.Emit(ctx, in.run.ID, ev.Key, ev.Type, ev.Agent, ev.Data); err != nil {
		return err
	}
	return w.resumeParent(ctx, in.run, *d)
}

// lastWords is a finished session's last assistant message, when it is the last message.
func lastWords(sess *store.Session) string {
	if n := len(sess.Messages); n > 0 {
		if last := sess.Messages[n-1]; last.Role == llm.RoleAssistant {
			return last.Content
		}
	}
	return ""
}

// delegationOutcome is how a delegation whose session ended with final ends.
func delegationOutcome(role, id, final string) store.DelegationOutcome {
	out := store.DelegationOutcome{ID: id, Status: store.DelegationCompleted, Result: final}
	if role == "reviewer" {
		out.Status, out.Result, out.Error = reviewOutcome(final)
	}
	return out
}

// delegationFinishedEvent announces a delegation's outcome (once, by its key).
func delegationFinishedEvent(d store.Delegation, out store.DelegationOutcome) store.NewEvent {
	return store.NewEvent{Key: events.DelegationFinishedKey(d.ID), Type: events.DelegationFinished, Agent: d.Agent,
		Data: events.FinishedDelegation(d.ID, out.Status, out.Result, out.Error)}
}

// reviewOutcome is how a reviewer's delegation ends: completed with the
// validated review (findings by severity, counts) as its result, or failed when
// its answer still does not conform after the one retry.
func reviewOutcome(final string) (status, result, errMsg string) {
	fs, err := review.Parse(final)
	if err != nil {
		return store.DelegationFailed, "", "the reviewer's answer did not conform to the review schema after one retry: " + err.Error()
	}
	raw, err := json.Marshal(review.NewResult(fs))
	if err != nil {
		return store.DelegationFailed, "", "encode the review: " + err.Error()
	}
	return store.DelegationCompleted, string(raw), ""
}

// reviewRetried reports a reviewer session that was already asked once more.
func reviewRetried(msgs []llm.Message) bool {
	for _, m := range msgs {
		if m.Role == llm.RoleUser && review.IsRetry(m.Content) {
			return true
		}
	}
	return false
}

// resumeParent enqueues the step of the session that delegated d. The TaskID names
// d, so however often d finishes, the parent is resumed once for it.
func (w *Worker) resumeParent(ctx context.Context, run store.Run, d store.Delegation) error {
	parent, err := queue.ParseRunSession(d.RunID, d.ParentSession)
	if err != nil {
		return fmt.Errorf("delegation %s: parent session: %w", d.ID, err)
	}
	return w.queue.Resume(ctx, routeOf(run), parent, "after:"+d.ID)
}
