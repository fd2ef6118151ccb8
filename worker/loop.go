package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/aetherium-engine/aetherium/events"
	"github.com/aetherium-engine/aetherium/lease"
	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/logctx"
	"github.com/aetherium-engine/aetherium/mailbox"
	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/security"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/templates"
	"github.com/aetherium-engine/aetherium/tools"
)

type stepInput struct {
	// batch collects the tool.call events of one step; flushed before any other
	// event of the step is recorded, so the stream keeps its order.
	batch *[]store.NewEvent
	// audit collects the gate's audit rows of the step's calls; they are written
	// with the save that makes the calls' results durable (or when the step ends).
	audit *[]store.AuditRow
	run   store.Run
	team  templates.Template
	node  templates.Node
	role  string
	// initial is the session as the first delivery creates it.
	initial    store.Session
	access     tools.Access
	delegation *store.Delegation
}

// step drives one session as far as it can go without waiting: resolve pending tool
// calls, ask the model, run its tool calls, repeat. Every change is saved under the
// step's lease before the next one, so a redelivery resumes where this left off.
func (w *Worker) step(ctx context.Context, in stepInput) (retErr error) {
	// Every log line of this step carries the run and agent (and the asynq task id
	// the task middleware put on ctx) through the logctx handler.
	ctx = logctx.Run(ctx, in.run.ID, in.node.Name)
	// Set before anything can fail the step: failStep writes both.
	in.batch, in.audit = new([]store.NewEvent), new([]store.AuditRow)
	token := uuid.NewString()
	sess, ok, err := w.store.AcquireSession(ctx, in.initial, token, w.cfg.StepLease)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: %s", ErrSessionBusy, in.initial.ID)
	}
	defer func() {
		if err := w.store.ReleaseSession(context.WithoutCancel(ctx), sess.ID, token); err != nil {
			w.log.WarnContext(ctx, "release session", "session", sess.ID, "err", err)
		}
	}()
	log := w.log.With("session", sess.ID)
	if sess.Status == "done" {
		return w.finishSession(ctx, in, &sess)
	}
	if len(in.team.GPUServices) > 0 {
		lctx, release, err := w.holdLeases(ctx, in.run.ID, in.team.GPUServices)
		if err != nil {
			if retry, reason := leaseFailure(err); !retry {
				w.failStep(ctx, in, reason, err.Error())
				return nil
			} else if errors.Is(err, lease.ErrWaiting) {
				log.InfoContext(ctx, "waiting for a GPU lease", "err", err)
				return &leaseWait{after: w.leaseRetry, err: err}
			}
			return err
		}
		defer release()
		ctx = lctx
	}
	workspace, reason, err := w.workspace(ctx, in.run.ID)
	if reason != "" {
		w.failStep(ctx, in, reason, err.Error())
		return nil
	}
	if err != nil {
		return err
	}
	defer func() {
		// Whatever the step did, its calls reach the audit trail and the event log.
		w.flushAudit(context.WithoutCancel(ctx), in)
		if err := w.flushEvents(context.WithoutCancel(ctx), in); err != nil && retErr == nil {
			retErr = err
		}
	}()
	lastSave := time.Now()
	save := func() error {
		lastSave = time.Now()
		_, err := w.persist(ctx, in, &sess, token, 0)
		return err
	}
	c := &coordinator{w: w, in: in, session: &sess, save: save}
	tsess := &tools.Session{
		RunID: in.run.ID, SessionID: sess.ID, Team: in.team.Name, Agent: in.node.Name, Role: in.role,
		Workspace: workspace, Access: in.access, AllowedDomains: in.team.AllowedDomains,
		ToolDefaults: in.team.ToolDefaults, Coordinator: c, Peers: peers(in.team), EgressDenyPrivate: in.team.Egress.DenyPrivate(),
		EgressPorts: in.team.EgressPorts,
	}
	tsess.TeamSource = tools.TeamSourceOf(in.run.Template)
	tctx := security.WithAuditSink(tools.WithSession(ctx, tsess), func(r store.AuditRow) { *in.audit = append(*in.audit, r) })

	// Teammates' messages join the context once per turn, right before the model is
	// asked (after any tool results, which must directly follow their call). They are
	// acknowledged only when this step returns having persisted its work, so a crash
	// mid-turn shows them again — and SkipSeen keeps them from appearing twice.
	var ackMail mailbox.Ack
	mailRead := w.mailbox == nil || in.role == "subagent"
	readMail := func() error {
		mailRead = true
		msgs, ack, err := w.mailbox.Read(ctx, in.run.ID, in.node.Name, w.consumer, mailbox.SkipSeen(func(id string) bool {
			return inContext(sess.Messages, id)
		}))
		if err != nil {
			return fmt.Errorf("read mailbox: %w", err)
		}
		ackMail = ack
		if len(msgs) == 0 {
			return nil
		}
		// Persisted with the model's answer, before the step can return cleanly.
		sess.Messages = append(sess.Messages, llm.Message{Role: llm.RoleUser, Content: mailbox.Format(msgs)})
		return nil
	}
	defer func() {
		if ackMail != nil && retErr == nil && ctx.Err() == nil {
			if err := ackMail(context.WithoutCancel(ctx)); err != nil {
				w.log.WarnContext(ctx, "mailbox ack", "session", sess.ID, "err", err)
			}
		}
	}()

	provider, model, err := w.models.For(in.team, in.node)
	if err != nil {
		w.failStep(ctx, in, "model_unavailable", fmt.Sprintf("%s: %v", in.node.Name, err))
		return nil
	}
	defs := w.router.Registry().Definitions(in.access)

	// The run as this delivery loaded it, then as each save reports it; read again
	// before a model call when older than runFresh (a long tool call), so a
	// cancellation stops the step before its next model call.
	run, runAt := in.run, time.Now()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if store.Terminal(run.Status) && !replyUnsaved(in.role, run.Status, sess.Messages) {
			w.ensureTerminalEvent(ctx, run.ID)
			return nil
		}

		// 1. Tool calls of the last assistant message that have no result yet.
		if pending := pendingCalls(sess.Messages); len(pending) > 0 {
			waiting := false
			for _, call := range pending {
				msg, state, err := w.resolveCall(tctx, in, &sess, call)
				if err != nil {
					return err
				}
				switch state {
				case callWaiting:
					waiting = true
					continue
				case callFinal:
					sess.Messages = append(sess.Messages, msg)
					sess.Status = "done"
					if err := save(); err != nil {
						return err
					}
					return w.finishSession(ctx, in, &sess)
				}
				sess.Messages = append(sess.Messages, msg)
				if msg.IsError {
					sess.Failures++
				} else {
					sess.Failures = 0
				}
				// Tool results are persisted with the next model answer (one write per
				// turn, not per call): a crash before it re-runs idempotent calls and
				// replays the others from their recorded intents. A long run of calls
				// still saves now and then, which also renews the step's lease.
				if time.Since(lastSave) > w.cfg.StepLease/3 {
					if err := save(); err != nil {
						return err
					}
				}
				if sess.Failures >= w.cfg.CircuitBreaker {
					w.failStep(ctx, in, "circuit_breaker", fmt.Sprintf("%s: %d consecutive failed tool calls, last: %s", in.node.Name, sess.Failures, msg.Content))
					return nil
				}
			}
			if waiting {
				if sess.Status != "waiting" {
					sess.Status = "waiting"
					if err := save(); err != nil {
						return err
					}
				}
				log.DebugContext(ctx, "session waits for delegations")
				return nil
			}
			// Results are complete in the tool order the model gave, since pending
			// calls are answered in order and only appended when ready.
			sess.Status = "active"
			continue
		}

		// 2. A final answer ends the session.
		if last := sess.Messages[len(sess.Messages)-1]; last.Role == llm.RoleAssistant && len(last.ToolCalls) == 0 {
			sess.Status = "done"
			if err := save(); err != nil {
				return err
			}
			return w.finishSession(ctx, in, &sess)
		}

		// 3. Teammates' messages, once per turn.
		if !mailRead {
			if err := readMail(); err != nil {
				return err
			}
		}

		// 4. Ask the model.
		if time.Since(runAt) > runFresh {
			if run, err = w.store.GetRun(ctx, in.run.ID); err != nil {
				return err
			}
			runAt = time.Now()
			if store.Terminal(run.Status) {
				continue
			}
		}
		if sess.Steps >= w.cfg.MaxSteps {
			w.failStep(ctx, in, "max_steps", fmt.Sprintf("%s used its %d model calls without finishing", in.node.Name, w.cfg.MaxSteps))
			return nil
		}
		if run.TokenBudget > 0 && run.TokensUsed >= run.TokenBudget {
			w.failStep(ctx, in, "budget_exceeded", fmt.Sprintf("token budget of %d is spent (%d used)", run.TokenBudget, run.TokensUsed))
			return nil
		}
		start := time.Now()
		resp, err := provider.Complete(ctx, llm.Request{Model: model.Model, Agent: in.node.Name, Messages: sess.Messages, Tools: defs, MaxTokens: model.MaxTokens})
		w.observeLLM(provider.Name(), model.Model, start, resp, err)
		if err == nil {
			err = checkAnswer(&resp.Message, sess.Steps)
		}
		switch {
		case err == nil:
		case errors.Is(err, llm.ErrExhausted):
			w.failStep(ctx, in, "script_exhausted", fmt.Sprintf("%s: %v", in.node.Name, err))
			return nil
		case errors.Is(err, llm.ErrMalformed):
			// Tell the model what was wrong and ask again; the breaker bounds this.
			sess.Failures++
			sess.Steps++
			sess.Messages = append(sess.Messages, llm.Message{Role: llm.RoleUser, Content: "Your last answer could not be used (" + err.Error() + "). Answer again, using only the tools you were given."})
			if sess.Failures >= w.cfg.CircuitBreaker {
				w.failStep(ctx, in, "circuit_breaker", fmt.Sprintf("%s: %d consecutive unusable model answers, last: %v", in.node.Name, sess.Failures, err))
				return nil
			}
			if err := save(); err != nil {
				return err
			}
			continue
		case ctx.Err() != nil:
			return ctx.Err()
		default:
			return fmt.Errorf("model call for %s: %w", in.node.Name, err)
		}
		sess.Messages = append(sess.Messages, resp.Message)
		sess.Steps++
		final := len(resp.Message.ToolCalls) == 0
		if final {
			sess.Status = "done" // saved with the answer: no second write to end the session
		}
		lastSave = time.Now()
		// The answer, the results and audit rows of the calls before it, their events
		// and its own agent.message event: one transaction.
		saved, err := w.persist(ctx, in, &sess, token, resp.Usage.Total(), store.NewEvent{
			Key: fmt.Sprintf("msg:%s:%d", sess.ID, sess.Steps), Type: events.ModelAnswered, Agent: in.node.Name,
			Data: map[string]any{"content": truncate(resp.Message.Content, 2000), "tool_calls": callNames(resp.Message.ToolCalls), "tokens": resp.Usage.Total()},
		})
		if err != nil {
			return err
		}
		run.Status, run.TokensUsed, run.TokenBudget, runAt = saved.RunStatus, saved.TokensUsed, saved.TokenBudget, time.Now()
		if saved.TokenBudget > 0 && saved.TokensUsed > saved.TokenBudget {
			w.failStep(ctx, in, "budget_exceeded", fmt.Sprintf("token budget of %d exceeded (%d used)", saved.TokenBudget, saved.TokensUsed))
			return nil
		}
		if final {
			return w.finishSession(ctx, in, &sess)
		}
	}
}

// runFresh is how old the step's view of its run may be before a model call.
const runFresh = time.Second

type callState int

const (
	callDone callState = iota
	callWaiting
	callFinal
)

// resolveCall produces the tool message for one pending call: from its finished
// delegations, or by dispatching it through the router (gate included). A call that
// must wait (delegations, an approval) yields callWaiting and no message; its
// tool.call event is recorded once, when its outcome is known.
func (w *Worker) resolveCall(ctx context.Context, in stepInput, sess *store.Session, call llm.ToolCall) (llm.Message, callState, error) {
	start := time.Now()
	if call.Name == "delegate" || call.Name == "spawn_subagents" {
		ds, err := w.store.DelegationsForCall(ctx, sess.ID, call.ID)
		if err != nil {
			return llm.Message{}, callDone, err
		}
		// Once the session is waiting, every delegation of its calls was recorded and
		// enqueued and the call's audit row saved with that status. Before that (a
		// crash mid-dispatch) the call is dispatched again, even when its delegations
		// have all finished meanwhile: dispatching is idempotent, completes whatever was
		// missing, and writes the audit row the crash lost.
		if len(ds) > 0 && sess.Status == "waiting" {
			return w.delegationAnswer(in, sess, call, ds, start)
		}
	}
	res, err := w.router.Dispatch(logctx.Tool(ctx, call.Name), tools.Call{ID: call.ID, Name: call.Name, Args: call.Args})
	if ctx.Err() != nil {
		return llm.Message{}, callDone, ctx.Err()
	}
	if err == nil && res.Pending {
		if call.Name == "delegate" || call.Name == "spawn_subagents" {
			// Redispatched after a crash: the delegations may be done already, and
			// nothing would resume the session again.
			ds, derr := w.store.DelegationsForCall(ctx, sess.ID, call.ID)
			if derr != nil {
				return llm.Message{}, callDone, derr
			}
			if len(ds) > 0 && allFinished(ds) {
				return w.delegationAnswer(in, sess, call, ds, start)
			}
		}
		return llm.Message{}, callWaiting, nil
	}
	if errors.Is(err, tools.ErrInfrastructure) {
		// Not the model's mistake: the step fails and its task retries the call.
		return llm.Message{}, callDone, fmt.Errorf("%s: %w", call.Name, err)
	}
	decision, layer := "allowed", ""
	msg := llm.Message{Role: llm.RoleTool, ToolCallID: call.ID, Name: call.Name, Content: res.Content}
	if err != nil {
		decision = "error"
		var d *tools.Denied
		switch {
		case errors.As(err, &d):
			decision, layer = "denied", d.Layer
		case errors.Is(err, tools.ErrOutcomeUnknown):
			decision = "unknown"
		}
		msg.Content, msg.IsError = "error: "+err.Error(), true
	}
	w.recordCall(in, sess, call, decision, layer, errString(err), msg.Content, start)
	if err == nil && res.Final {
		return msg, callFinal, nil
	}
	return msg, callDone, nil
}

// delegationAnswer is the tool message of a delegate / spawn_subagents call whose
// delegations are recorded: their results once all are finished, else callWaiting.
func (w *Worker) delegationAnswer(in stepInput, sess *store.Session, call llm.ToolCall, ds []store.Delegation, start time.Time) (llm.Message, callState, error) {
	msg, state, err := delegationResult(call, ds)
	if err != nil || state == callWaiting {
		return msg, state, err
	}
	decision := "allowed"
	if msg.IsError {
		decision = "error"
	}
	w.recordCall(in, sess, call, decision, "", "", msg.Content, start)
	return msg, state, nil
}

// recordCall counts the call and batches its tool.call event (written with the step's
// next save or flush).
func (w *Worker) recordCall(in stepInput, sess *store.Session, call llm.ToolCall, decision, layer, errMsg, result string, start time.Time) {
	w.observeTool(call.Name, decision, layer, start)
	ev := store.NewEvent{Key: "tool:" + sess.ID + ":" + call.ID, Type: events.ToolCall, Agent: in.node.Name, Data: map[string]any{
		"tool": call.Name, "call_id": call.ID, "decision": decision, "layer": layer, "error": errMsg,
		"result": truncate(result, 500), "duration_ms": time.Since(start).Milliseconds(),
	}}
	*in.batch = append(*in.batch, ev)
}

// failStep records the step's tool calls, then fails the run (terminal event last).
func (w *Worker) failStep(ctx context.Context, in stepInput, reason, msg string) {
	w.flushAudit(ctx, in)
	if err := w.flushEvents(ctx, in); err != nil {
		w.log.WarnContext(ctx, "tool events before failing the run", "err", err)
	}
	w.FailRun(ctx, in.run.ID, reason, msg)
}

// persist saves the session with everything the step owes the database since its
// last save: tokens, events (then extra) and audit rows, in one transaction.
func (w *Worker) persist(ctx context.Context, in stepInput, sess *store.Session, token string, tokens int, extra ...store.NewEvent) (store.StepSaved, error) {
	evs := append(*in.batch, extra...)
	saved, err := w.store.SaveStep(ctx, sess, token, w.cfg.StepLease, store.StepWrite{Tokens: tokens, Events: evs, Audit: *in.audit})
	if err != nil {
		return saved, err
	}
	*in.batch, *in.audit = (*in.batch)[:0], (*in.audit)[:0]
	return saved, w.events.Announce(ctx, in.run.ID, saved.Events)
}

// flushAudit writes the audit rows no save took: the step is ending (failed, waiting,
// interrupted) and the calls ran. The Auditor, which retries, takes them when the
// database refuses them now.
func (w *Worker) flushAudit(ctx context.Context, in stepInput) {
	rows := *in.audit
	if len(rows) == 0 {
		return
	}
	*in.audit = nil
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
	if len(*in.batch) == 0 {
		return nil
	}
	err := w.events.EmitBatch(ctx, in.run.ID, *in.batch)
	*in.batch = (*in.batch)[:0]
	return err
}

// finishSession publishes a finished session's outcome. Idempotent: it runs again
// when a redelivery finds the session already done.
func (w *Worker) finishSession(ctx context.Context, in stepInput, sess *store.Session) error {
	final := ""
	if n := len(sess.Messages); n > 0 {
		last := sess.Messages[n-1]
		if last.Role == llm.RoleAssistant {
			final = last.Content
		}
	}
	if in.role == "supervisor" {
		// A supervisor that ends without reply still finishes the run with its last words.
		changed, err := w.store.FinishRun(ctx, in.run.ID, store.RunCompleted, final, "", "")
		if err != nil {
			return err
		}
		if changed {
			w.observeFinished(ctx, in.run.ID)
		}
		w.ensureTerminalEvent(ctx, in.run.ID)
		return nil
	}
	d := in.delegation
	if _, err := w.store.FinishDelegation(ctx, d.ID, store.DelegationCompleted, final, ""); err != nil {
		return err
	}
	if err := w.events.Emit(ctx, in.run.ID, "delegation-finished:"+d.ID, events.DelegationFinished, d.Agent, map[string]any{
		"delegation_id": d.ID, "status": store.DelegationCompleted, "result": truncate(final, 2000),
	}); err != nil {
		return err
	}
	return w.resumeParent(ctx, *d)
}

// resumeParent enqueues the step of the session that delegated d. The TaskID names
// d, so however often d finishes, the parent is resumed once for it.
func (w *Worker) resumeParent(ctx context.Context, d store.Delegation) error {
	parent, err := queue.ParseRunSession(d.RunID, d.ParentSession)
	if err != nil {
		return fmt.Errorf("delegation %s: parent session: %w", d.ID, err)
	}
	return w.queue.Resume(ctx, parent, "after:"+d.ID)
}

// coordinator implements tools.Coordinator for the session being stepped.
type coordinator struct {
	w       *Worker
	in      stepInput
	session *store.Session
	// save persists the session with the step's results, audit rows and events.
	save func() error
}

// Delegate implements tools.Coordinator.
func (c *coordinator) Delegate(ctx context.Context, callID string, reqs []tools.DelegateRequest) error {
	for _, r := range reqs {
		if r.Tools != nil {
			continue // subagents are created by name from their parent
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
	for i, r := range reqs {
		id := delegationID(c.session.ID, callID, i, r.Agent)
		d := store.Delegation{ID: id, RunID: c.in.run.ID, ParentSession: c.session.ID, ToolCallID: callID, Agent: r.Agent, Task: r.Task, Tools: r.Tools}
		if r.Tools == nil && c.in.role == "subagent" {
			return errors.New("delegate: subagents cannot delegate")
		}
		// Failures past this point are ours, not the model's: the step is retried
		// and completes whatever was missing (every write here is idempotent).
		if _, err := c.w.store.InsertDelegation(ctx, d); err != nil {
			return tools.Infrastructure(err)
		}
		if err := c.Emit(ctx, "delegated:"+id, events.Delegated, map[string]any{"delegation_id": id, "to": r.Agent, "task": truncate(r.Task, 2000)}); err != nil {
			return tools.Infrastructure(err)
		}
		if err := c.w.queue.Turn(ctx, id, "start"); err != nil {
			return tools.Infrastructure(fmt.Errorf("enqueue delegation %s: %w", id, err))
		}
	}
	return nil
}

// Reply implements tools.Coordinator.
func (c *coordinator) Reply(ctx context.Context, message string) error {
	if c.in.role != "supervisor" {
		return errors.New("reply: only the supervisor replies to the user; end your turn with a final message instead")
	}
	// What came before the reply is saved first: once the run is completed, a
	// redelivered step only replays the reply itself (see replyUnsaved).
	if err := c.save(); err != nil {
		return tools.Infrastructure(err)
	}
	changed, err := c.w.store.FinishRun(ctx, c.in.run.ID, store.RunCompleted, message, "", "")
	if err != nil {
		return tools.Infrastructure(err)
	}
	if changed {
		c.w.observeFinished(ctx, c.in.run.ID)
	}
	// The run.completed event follows the reply's tool.call event: finishSession
	// records it after the step saves the reply's result.
	return nil
}

// Emit implements tools.Coordinator.
func (c *coordinator) Emit(ctx context.Context, key, typ string, data map[string]any) error {
	if err := c.w.flushEvents(ctx, c.in); err != nil {
		return err
	}
	return c.w.events.Emit(ctx, c.in.run.ID, key, typ, c.in.node.Name, data)
}

func delegationID(sessionID, callID string, i int, agent string) string {
	h := sha256.Sum256([]byte(fmt.Sprintf("%s\x00%s\x00%d\x00%s", sessionID, callID, i, agent)))
	return "del_" + hex.EncodeToString(h[:12])
}

func (w *Worker) observeLLM(provider, model string, start time.Time, resp llm.Response, err error) {
	if w.metrics == nil {
		return
	}
	if model == "" {
		model = resp.Model
	}
	// Model names come from submitted teams (and from the provider's answer):
	// only known ones become label values.
	model = w.modelLabels.Value(model)
	outcome := "ok"
	if err != nil {
		outcome = "error"
	}
	w.metrics.LLMRequests.WithLabelValues(provider, model, outcome).Inc()
	w.metrics.LLMLatency.WithLabelValues(provider, model).Observe(time.Since(start).Seconds())
	if err == nil {
		w.metrics.LLMTokens.WithLabelValues(provider, model, "input").Add(float64(resp.Usage.InputTokens))
		w.metrics.LLMTokens.WithLabelValues(provider, model, "output").Add(float64(resp.Usage.OutputTokens))
	}
}

func (w *Worker) observeTool(tool, decision, layer string, start time.Time) {
	if w.metrics == nil {
		return
	}
	// A tool name comes from the model: one it hallucinated is not a label value.
	if _, ok := w.router.Registry().Spec(tool); !ok {
		tool = "unknown"
	}
	w.metrics.ToolCalls.WithLabelValues(tool, tools.TierOf(tool).String(), decision).Inc()
	w.metrics.ToolDuration.WithLabelValues(tool).Observe(time.Since(start).Seconds())
	// The gate counts its own denials; without a gate, count the router's refusals.
	if decision == "denied" && !w.gated {
		w.metrics.GateDenials.WithLabelValues(layer).Inc()
	}
}
