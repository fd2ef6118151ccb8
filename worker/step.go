package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"github.com/aetherium-engine/aetherium/events"
	"github.com/aetherium-engine/aetherium/lease"
	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/logctx"
	"github.com/aetherium-engine/aetherium/mailbox"
	"github.com/aetherium-engine/aetherium/review"
	"github.com/aetherium-engine/aetherium/sandbox"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/templates"
	"github.com/aetherium-engine/aetherium/tools"
	"github.com/aetherium-engine/aetherium/tracing"
	"github.com/aetherium-engine/aetherium/worker/hook"
)

// stepInput is what a handler knows about the session it steps.
type stepInput struct {
	// out collects the step's tool.call events and audit rows until a save (or the
	// step's end) writes them.
	out  *stepWriter
	run  store.Run
	team templates.Template
	node templates.Node
	role string
	// initial is the session as the first delivery creates it.
	initial    store.Session
	access     tools.Access
	delegation *store.Delegation
	// acquire is what the step's lease is taken with besides the session (a
	// turn's start: its delegation marked running, its event), in one transaction.
	acquire store.Acquire
	// acquired is set when the handler already holds the lease (a resumed
	// supervisor leases its session with its run read), under token.
	acquired *store.Acquired
	token    string
	// delegations are those the session made, by call, as the lease was taken.
	delegations map[string][]store.Delegation
}

// stepRun is one step's state: the session it holds under its lease token and what
// the step learnt so far. Its methods are the step's phases.
type stepRun struct {
	w     *Worker
	in    stepInput
	sess  store.Session
	token string
	log   *slog.Logger
	// lastSave renews the lease: a long run of tool calls saves now and then.
	lastSave time.Time
	// run is the run as this delivery loaded it, then as each save reports it;
	// read again before a model call when older than runFresh.
	run   store.Run
	runAt time.Time
	// tctx is the context of the session's tool calls (the sandbox caller);
	// tsess is who makes them (tools.Call.Session).
	tctx     context.Context
	tsess    *tools.Session
	provider llm.Provider
	model    llm.ModelConfig
	defs     []llm.ToolDef
	mailRead bool
	// labelled is how many untrusted sources the last flow.labelled event named.
	labelled int
	// memoryAt is what the acquire read for the session's memory recall (nil:
	// not read; the recall asks PostgreSQL itself).
	memoryAt *store.MemoryAt
	// content fingerprints the private content of the history once the session
	// has read untrusted content too (the flow rules' content check).
	content *sessionContent
	ackMail mailbox.Ack
	// workspace is the run's workspace directory (reply checks read it).
	workspace string
	// released: a save gave the lease up (the step's last one).
	released bool
	// asked: the step made its first model call.
	asked bool
	// refit: a provider refused the last request as too long and the step
	// compacted for it; a second refusal in a row fails the step.
	refit bool
}

// runFresh is how old the step's view of its run may be before a model call.
const runFresh = time.Second

// errStop ends the step's loop cleanly: the phase that returns it has done
// everything the step owes (failed the run, saved a waiting session, finished it).
var errStop = errors.New("step ends")

// errTerminal: the run ended while the step ran (cancelled, failed elsewhere).
var errTerminal = errors.New("run ended")

// step drives one session as far as it can go without waiting: resolve pending tool
// calls, ask the model, run its tool calls, repeat. Every change is saved under the
// step's lease before the next one, so a redelivery resumes where this left off.
func (w *Worker) step(ctx context.Context, in stepInput) (retErr error) {
	// Every log line of this step carries the run and agent (and the asynq task id
	// the task middleware put on ctx) through the logctx handler.
	ctx = logctx.Run(ctx, in.run.ID, in.node.Name)
	ctx, span := w.startStep(ctx, in)
	defer func() {
		tracing.Fail(span, retErr)
		span.End()
	}()
	in.out = &stepWriter{} // before anything can fail the step: failStep flushes it
	got := in.acquired
	if got == nil {
		a := in.acquire
		a.Initial, a.Token, a.Lease = in.initial, uuid.NewString(), w.cfg.StepLease
		a.Memory = w.memoryAsked(in)
		a.Todos = w.router.Registry().HoldsTodos(in.access)
		acq, err := w.store.AcquireStep(ctx, a)
		if err != nil {
			return err
		}
		if err := w.events.Announce(ctx, in.run.ID, acq.Events); err != nil {
			return err
		}
		got, in.token = &acq, a.Token
	}
	if !got.OK {
		return Snooze(busyRetry, fmt.Errorf("%w: %s", ErrSessionBusy, in.initial.ID))
	}
	sess, token := got.Session, in.token
	in.delegations = got.Delegations
	// A lease taken before the session's tools were known (a resumed
	// supervisor's) did not read the list: its first use does.
	in.out.todos = tools.NewTodos(got.Todos, in.acquired == nil && got.Todos != nil)
	linkDelegations(span, in.delegations, pendingCalls(sess.Messages))
	var s *stepRun
	defer func() {
		if s != nil && s.released {
			return // the step's last save gave the lease up
		}
		if err := w.store.ReleaseSession(context.WithoutCancel(ctx), sess.ID, token); err != nil && !w.staleRefused(ctx, "release", sess.ID, err) {
			w.log.WarnContext(ctx, "release session", "session", sess.ID, "err", err)
		}
	}()
	s = &stepRun{w: w, in: in, sess: sess, token: token, log: w.log.With("session", sess.ID), run: in.run, runAt: time.Now(), lastSave: time.Now(),
		memoryAt: got.Memory}
	if s.sess.Status == "done" {
		return w.finishSession(ctx, in, &s.sess)
	}
	ctx, release, err := s.holdLeases(ctx)
	if err != nil || release == nil {
		return stopped(err)
	}
	defer release()
	if err := s.prepare(ctx); err != nil {
		return stopped(err)
	}
	defer func() {
		// Whatever the step did, its calls reach the audit trail and the event log.
		w.flushAudit(context.WithoutCancel(ctx), in)
		if err := w.flushEvents(context.WithoutCancel(ctx), in); err != nil && retErr == nil {
			retErr = err
		}
	}()
	defer func() {
		// Teammates' messages are acknowledged only when the step returns having
		// persisted its work, so a crash mid-turn shows them again.
		if s.ackMail != nil && retErr == nil && ctx.Err() == nil {
			if err := s.ackMail(context.WithoutCancel(ctx)); err != nil {
				w.log.WarnContext(ctx, "mailbox ack", "session", s.sess.ID, "err", err)
			}
		}
	}()
	return stopped(s.loop(ctx))
}

// stopped maps errStop, a clean end, to nil.
func stopped(err error) error {
	if errors.Is(err, errStop) {
		return nil
	}
	return err
}

// loop runs the session's turns until it must wait or ends.
func (s *stepRun) loop(ctx context.Context) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if store.Terminal(s.run.Status) && !replyUnsaved(s.in.role, s.run.Status, s.sess.Messages) {
			s.w.ensureTerminalEvent(ctx, s.run.ID)
			return nil
		}
		// 1. Tool calls of the last assistant message that have no result yet.
		if pending := pendingCalls(s.sess.Messages); len(pending) > 0 {
			if err := s.resolvePending(ctx, pending); err != nil {
				return err
			}
			continue
		}
		// 2. A final answer ends the session.
		if last := s.sess.Messages[len(s.sess.Messages)-1]; last.Role == llm.RoleAssistant && len(last.ToolCalls) == 0 {
			return s.end(ctx, saveOpts{})
		}
		// 3. Teammates' messages, once per turn, right before the model is asked
		// (after any tool results, which must directly follow their call).
		if !s.mailRead {
			if err := s.readMail(ctx); err != nil {
				return err
			}
		}
		// 4. Ask the model.
		if err := s.ask(ctx); err != nil {
			return err
		}
	}
}

// holdLeases takes the team's GPU leases for the step. A nil release with a nil
// error means the step ended (the run failed, or it waits for a lease).
func (s *stepRun) holdLeases(ctx context.Context) (context.Context, func(), error) {
	if len(s.in.team.GPUServices) == 0 {
		return ctx, func() {}, nil
	}
	lctx, release, err := s.w.holdLeases(ctx, s.in.run.ID, s.in.team.GPUServices)
	if err == nil {
		return lctx, release, nil
	}
	if retry, reason := leaseFailure(err); !retry {
		s.fail(ctx, reason, err.Error())
		return ctx, nil, errStop
	} else if errors.Is(err, lease.ErrWaiting) {
		s.log.InfoContext(ctx, "waiting for a GPU lease", "err", err)
		return ctx, nil, Snooze(s.w.leaseRetry, fmt.Errorf("%w: %w", ErrLeaseWaiting, err))
	}
	return ctx, nil, err
}

// prepare opens the workspace, builds the tool session and picks the model.
func (s *stepRun) prepare(ctx context.Context) error {
	w, in := s.w, s.in
	workspace, reason, err := w.workspace(ctx, in.run.WorkspaceID())
	if reason != "" {
		s.fail(ctx, reason, err.Error())
		return errStop
	}
	if err != nil {
		return err
	}
	c := &coordinator{w: w, in: in, session: &s.sess, workspace: workspace, save: func() error { return s.save(ctx) }}
	tsess := toolSession(in, s.sess.ID, workspace, c)
	tsess.Todos = in.out.todos
	// One-shot containers the calls start count against the run and its owner.
	s.tctx, s.tsess = sandbox.WithCaller(ctx, sandbox.Caller{Run: in.run.ID, Principal: in.run.Owner}), tsess
	s.workspace = workspace
	s.mailRead = w.mailbox == nil || in.role == "subagent" || in.role == "reviewer"
	if s.provider, s.model, err = w.models.For(in.team, in.node); err != nil {
		s.fail(ctx, "model_unavailable", fmt.Sprintf("%s: %v", in.node.Name, err))
		return errStop
	}
	s.defs = w.router.Registry().Definitions(in.access)
	s.indexProjectFolder(ctx, workspace)
	if err := s.injectMemory(ctx); err != nil {
		return err
	}
	return s.relabel(ctx)
}

// toolSession is who a session's calls are made by (tools.Call.Session): the
// live step's, with its coordinator, and a replay's, without one.
func toolSession(in stepInput, sessionID, workspace string, c tools.Coordinator) *tools.Session {
	return &tools.Session{
		RunID: in.run.ID, SessionID: sessionID, Owner: in.run.Owner, Team: in.team.Name, Agent: in.node.Name, Role: in.role,
		TeamSource: tools.TeamSourceOf(in.run.Template), Workspace: workspace, Access: in.access,
		AllowedDomains: in.team.AllowedDomains, ToolDefaults: in.team.ToolDefaults, Coordinator: c,
		Peers: peers(in.team), EgressDenyPrivate: in.team.Egress.DenyPrivate(), EgressPorts: in.team.EgressPorts,
		KnowledgePacks: in.team.Knowledge.Packs, Project: in.run.ProjectID, ImageModel: in.team.ImageModel,
	}
}

// resolvePending answers the pending calls in the order the model gave them. It
// returns errStop when the session waits for delegations or an approval, or ended.
func (s *stepRun) resolvePending(ctx context.Context, pending []llm.ToolCall) error {
	waiting := false
	refused, made := overCap(s.sess.Messages, s.w.cfg.MaxCallsPerMessage)
	counted := false
	for _, call := range pending {
		if refused[call.ID] {
			// Past the per-message cap: answered, never run. The message is the
			// model's garbage, not a run of failed calls: it counts once toward the
			// circuit breaker, as an unusable answer does (a redelivery that finds
			// some refusals saved counts it again at most once).
			s.sess.Messages = append(s.sess.Messages, s.w.refuseOverCap(ctx, s.in, &s.sess, call, made))
			if !counted {
				counted = true
				s.sess.Failures++
				if s.sess.Failures >= s.w.cfg.CircuitBreaker {
					s.fail(ctx, "circuit_breaker", fmt.Sprintf("%s: %d consecutive failures, last: a message of %d tool calls (worker.max_calls_per_message is %d)",
						s.in.node.Name, s.sess.Failures, made, s.w.cfg.MaxCallsPerMessage))
					return errStop
				}
			}
			continue
		}
		msg, state, err := s.w.resolveCall(s.tctx, s.tsess, s.in, &s.sess, call)
		if err != nil {
			return err
		}
		switch state {
		case callWaiting:
			waiting = true
			continue
		case callFinal:
			s.sess.Messages = append(s.sess.Messages, msg)
			return s.end(ctx, saveOpts{})
		}
		if err := s.inheritFileLabels(call, &msg); err != nil {
			return err
		}
		s.sess.Messages = append(s.sess.Messages, msg)
		if err := s.markUntrustedWrite(ctx, call, msg); err != nil {
			return err
		}
		// The next call is judged by what this one read (the flow rules).
		if err := s.relabel(ctx); err != nil {
			return err
		}
		if state == callRejected && !s.in.team.CountRejections {
			// The reviewer's feedback: the agent acts on it, nothing failed.
		} else if msg.IsError {
			s.sess.Failures++
		} else {
			s.sess.Failures = 0
		}
		// Tool results are persisted with the next model answer (one write per turn,
		// not per call): a crash before it re-runs idempotent calls and replays the
		// others from their recorded intents. A long run of calls still saves now and
		// then, which also renews the step's lease.
		if time.Since(s.lastSave) > s.w.cfg.StepLease/3 {
			if err := s.save(ctx); err != nil {
				return err
			}
		}
		if s.sess.Failures >= s.w.cfg.CircuitBreaker {
			s.fail(ctx, "circuit_breaker", fmt.Sprintf("%s: %d consecutive failed tool calls, last: %s", s.in.node.Name, s.sess.Failures, msg.Content))
			return errStop
		}
	}
	if waiting {
		// The step's last save: the session waits (with the delegations its calls
		// made, recorded in the same transaction) and the lease is given up.
		if s.sess.Status != "waiting" || len(s.in.out.delegations) > 0 {
			s.sess.Status = "waiting"
			if err := s.saveLast(ctx, saveOpts{}); err != nil {
				return err
			}
		}
		s.log.DebugContext(ctx, "session waits for delegations")
		return errStop
	}
	// Results are complete in the tool order the model gave, since pending calls
	// are answered in order and only appended when ready.
	s.sess.Status = "active"
	return nil
}

// readMail adds teammates' messages to the context. They are persisted with the
// model's answer and acknowledged when the step ends cleanly; SkipSeen keeps a
// message shown before a crash from appearing twice.
func (s *stepRun) readMail(ctx context.Context) error {
	s.mailRead = true
	msgs, ack, err := s.w.mailbox.Read(ctx, s.in.run.ID, s.in.node.Name, s.w.consumer, mailbox.SkipSeen(func(id string) bool {
		return inContext(s.sess.Messages, id)
	}))
	if err != nil {
		return fmt.Errorf("read mailbox: %w", err)
	}
	s.ackMail = ack
	if len(msgs) > 0 {
		s.sess.Messages = append(s.sess.Messages, llm.Message{Role: llm.RoleUser, Content: mailbox.Format(msgs), Provenance: mailProvenance(msgs)})
		return s.relabel(ctx)
	}
	return nil
}

// ask checks the run's limits, asks the model and saves its answer with everything
// the step owes the database, in one transaction.
func (s *stepRun) ask(ctx context.Context) error {
	if err := s.checkLimits(ctx); errors.Is(err, errTerminal) {
		return nil // the loop's next turn ends the step
	} else if err != nil {
		return err
	}
	if !s.asked {
		s.asked = true
		s.w.observeFirstModelCall(ctx, s.in.role)
	}
	req, est, err := s.fit(ctx, false)
	if err != nil {
		return err
	}
	start := time.Now()
	cctx, span := s.w.startModelCall(ctx, s.provider.Name(), s.model)
	resp, err := s.provider.Complete(cctx, req)
	took := time.Since(start)
	s.w.captureContent(span, req, resp, err)
	endModelCall(span, resp, err)
	if errors.Is(err, llm.ErrContextLength) && !s.refit {
		// The provider counts more than the estimate did: compact now and ask
		// once more (a second refusal fails the step like any model error).
		s.refit = true
		s.w.observeLLM(cctx, s.provider.Name(), s.model.Model, start, resp, err)
		if est > 0 {
			s.w.windows.Refused(s.windowModel(), est+s.model.MaxTokens)
		}
		if _, _, err := s.fit(ctx, true); err != nil {
			return err
		}
		return nil // the loop's next turn asks again
	}
	if err == nil {
		s.refit = false
		if est > 0 && resp.Usage.InputTokens > 0 {
			s.w.windows.Observe(s.windowModel(), est, resp.Usage.InputTokens)
		}
	}
	provider, model := s.provider.Name(), s.model.Model
	if resp.Provider != "" && (resp.Fallback || model == "") {
		provider, model = resp.Provider, resp.Model // the link of a fallback chain that answered
	}
	s.w.observeLLM(cctx, provider, model, start, resp, err)
	if err == nil {
		err = checkAnswer(&resp.Message, s.sess.Steps)
	}
	var wait *llm.WaitError
	switch {
	case err == nil:
	case errors.As(err, &wait):
		return s.park(ctx, wait)
	case errors.Is(err, llm.ErrExhausted):
		s.fail(ctx, "script_exhausted", fmt.Sprintf("%s: %v", s.in.node.Name, err))
		return errStop
	case errors.Is(err, llm.ErrMalformed):
		// Tell the model what was wrong and ask again; the breaker bounds this.
		s.sess.Failures++
		s.sess.Steps++
		s.sess.Messages = append(s.sess.Messages, llm.Message{Role: llm.RoleUser, Content: "Your last answer could not be used (" + err.Error() + "). Answer again, using only the tools you were given."})
		if s.sess.Failures >= s.w.cfg.CircuitBreaker {
			s.fail(ctx, "circuit_breaker", fmt.Sprintf("%s: %d consecutive unusable model answers, last: %v", s.in.node.Name, s.sess.Failures, err))
			return errStop
		}
		return s.save(ctx)
	case ctx.Err() != nil:
		return ctx.Err()
	default:
		return fmt.Errorf("model call for %s: %w", s.in.node.Name, err)
	}
	s.sess.Messages = append(s.sess.Messages, resp.Message)
	s.sess.Steps++
	final := len(resp.Message.ToolCalls) == 0
	// sendBack refuses a final answer with the reason, up to the circuit
	// breaker (what names the refused things in the failure).
	sendBack := func(reason, what string) error {
		s.sess.Failures++
		s.sess.Messages = append(s.sess.Messages, llm.Message{Role: llm.RoleUser, Content: reason})
		final = false
		if s.sess.Failures >= s.w.cfg.CircuitBreaker {
			s.fail(ctx, "circuit_breaker", fmt.Sprintf("%s: %d %s sent back, last: %s", s.in.node.Name, s.sess.Failures, what, reason))
			return errStop
		}
		return nil
	}
	if final {
		// The product rules' reply checks (Config.ReplyChecks): the first
		// refusal sends the answer back.
		back, err := s.w.checkReply(ctx, hook.Reply{Node: s.in.node, Access: s.in.access, Workspace: s.workspace,
			History: s.sess.Messages[:len(s.sess.Messages)-1], Answer: resp.Message.Content})
		if err != nil {
			return fmt.Errorf("reply check of %s: %w", s.in.node.Name, err)
		}
		if back != nil {
			if err := sendBack(back.Reason, back.What); err != nil {
				return err
			}
		}
	}
	if final && s.in.role == "reviewer" {
		// A review that does not conform is asked for once more, with the reason;
		// the second answer stands (finishSession fails the delegation if it is
		// still wrong).
		if _, perr := review.Parse(resp.Message.Content); perr != nil && !reviewRetried(s.sess.Messages) {
			s.sess.Messages = append(s.sess.Messages, llm.Message{Role: llm.RoleUser, Content: review.RetryPrompt(perr)})
			final = false
		}
	}
	data := events.ModelAnsweredData{Content: truncate(resp.Message.Content, 2000), ToolCalls: callNames(resp.Message.ToolCalls), Tokens: resp.Usage.Total(),
		Provider: cmp.Or(resp.Provider, s.provider.Name()), Model: cmp.Or(resp.Model, s.model.Model),
		Fallback: resp.Fallback, CachedTokens: resp.Usage.CachedInputTokens, DurationMS: took.Milliseconds()}
	if resp.Priced {
		data.Cost = resp.Cost.String()
	}
	answer := store.NewEvent{Key: fmt.Sprintf("msg:%s:%d", s.sess.ID, s.sess.Steps), Type: events.ModelAnswered, Agent: s.in.node.Name, Data: data}
	call := s.modelCall(resp)
	notes := s.takeNotes(resp.Message.Content)
	if final {
		// Saved with the answer: no second write to end the session.
		return s.end(ctx, saveOpts{tokens: resp.Usage.Total(), call: call, extra: []store.NewEvent{answer}, notes: notes})
	}
	s.lastSave = time.Now()
	saved, err := s.w.persist(ctx, s.in, &s.sess, s.token, saveOpts{tokens: resp.Usage.Total(), call: call, extra: []store.NewEvent{answer}, notes: notes})
	if err != nil {
		return err
	}
	return s.afterSave(ctx, saved)
}

// afterSave takes the run's state from a save's answer: a step learns of a
// cancellation and of its budget from its own writes, without a read.
func (s *stepRun) afterSave(ctx context.Context, saved store.StepSaved) error {
	s.run.Status, s.run.TokensUsed, s.run.TokenBudget, s.runAt = saved.RunStatus, saved.TokensUsed, saved.TokenBudget, time.Now()
	s.run.Cost, s.run.CostBudget = saved.Cost, saved.CostBudget
	if saved.TokenBudget > 0 && saved.TokensUsed > saved.TokenBudget {
		s.fail(ctx, "budget_exceeded", fmt.Sprintf("token budget of %d exceeded (%d used)", saved.TokenBudget, saved.TokensUsed))
		return errStop
	}
	if saved.CostBudget > 0 && saved.Cost > saved.CostBudget {
		s.fail(ctx, "budget_exceeded", fmt.Sprintf("cost budget of %s exceeded (%s spent)", llm.Money(saved.CostBudget), llm.Money(saved.Cost)))
		return errStop
	}
	return nil
}

// end finishes the session in one save: its "done", the answer's tokens and
// event, a delegation's outcome with its event, and the lease given up. Then the
// parent is resumed (a delegation) or the run finished (a supervisor without
// reply).
func (s *stepRun) end(ctx context.Context, o saveOpts) error {
	s.sess.Status = "done"
	in := s.in
	if d := in.delegation; d != nil && in.role != "supervisor" {
		out := delegationOutcome(in.role, d.ID, lastWords(&s.sess))
		// Its label goes with the outcome: the parent's resume reads it from
		// the delegation's row, not from this session's history.
		label, err := s.w.resultLabel(s.sess.Messages)
		if err != nil {
			return err
		}
		out.Label = label
		o.finish = &out
		o.extra = append(o.extra, delegationFinishedEvent(*d, out))
	}
	o.release = true
	saved, err := s.w.persist(ctx, in, &s.sess, s.token, o)
	if err != nil {
		return err
	}
	s.released = true
	if err := s.afterSave(ctx, saved); err != nil {
		return err
	}
	if o.finish != nil {
		if err := s.w.resumeParent(ctx, in.run, *in.delegation); err != nil {
			return err
		}
		return errStop
	}
	return s.finish(ctx)
}

// checkLimits refreshes a stale view of the run (a cancellation stops the step
// before its next model call) and enforces max_steps and the token budget.
func (s *stepRun) checkLimits(ctx context.Context) error {
	if time.Since(s.runAt) > runFresh {
		run, err := s.w.store.GetRun(ctx, s.in.run.ID)
		if err != nil {
			return err
		}
		s.run, s.runAt = run, time.Now()
		if store.Terminal(run.Status) {
			return errTerminal
		}
	}
	if s.sess.Steps >= s.w.cfg.MaxSteps {
		s.fail(ctx, "max_steps", fmt.Sprintf("%s used its %d model calls without finishing", s.in.node.Name, s.w.cfg.MaxSteps))
		return errStop
	}
	if s.run.TokenBudget > 0 && s.run.TokensUsed >= s.run.TokenBudget {
		s.fail(ctx, "budget_exceeded", fmt.Sprintf("token budget of %d is spent (%d used)", s.run.TokenBudget, s.run.TokensUsed))
		return errStop
	}
	if s.run.CostBudget > 0 && s.run.Cost >= s.run.CostBudget {
		s.fail(ctx, "budget_exceeded", fmt.Sprintf("cost budget of %s is spent (%s spent)", llm.Money(s.run.CostBudget), llm.Money(s.run.Cost)))
		return errStop
	}
	if daily := s.w.cfg.PrincipalDailyBudget; daily > 0 {
		spent, err := s.w.store.SpentToday(ctx, s.run.Owner)
		if err != nil {
			return err
		}
		if llm.Money(spent) >= daily {
			s.fail(ctx, "budget_exceeded", fmt.Sprintf("%s spent %s today, its daily budget is %s (llm.budgets.principal_daily)", s.run.Owner, llm.Money(spent), daily))
			return errStop
		}
	}
	return nil
}

// modelCall is the ledger row of an answered call.
func (s *stepRun) modelCall(resp llm.Response) *store.ModelCall {
	u := resp.Usage
	return &store.ModelCall{Agent: s.in.node.Name, Provider: cmp.Or(resp.Provider, s.provider.Name()), Model: cmp.Or(resp.Model, s.model.Model),
		Fallback: resp.Fallback, InputTokens: int64(u.InputTokens), OutputTokens: int64(u.OutputTokens),
		CachedTokens: int64(u.CachedInputTokens), CacheWriteTokens: int64(u.CacheWriteTokens), Cost: int64(resp.Cost), Priced: resp.Priced}
}

// park snoozes the step while a rate limit holds its model call back: the
// session is as its last save left it, the task runs again after the wait
// without counting a failure and without holding a worker slot. The wait is
// bounded from its first park (the session's waiting_since, which the next
// save clears): past MaxWait the run fails with reason rate_limited.
func (s *stepRun) park(ctx context.Context, wait *llm.WaitError) error {
	since, now, err := s.w.store.MarkWaiting(ctx, s.sess.ID, s.token)
	if err != nil {
		return err
	}
	after := max(wait.After, busyRetry)
	if waited := now.Sub(since); waited+after > s.w.cfg.MaxWait {
		s.fail(ctx, "rate_limited", fmt.Sprintf("%s waited %s for %s, past llm.max_wait (%s): %v", s.in.node.Name,
			waited.Round(time.Second), wait.Limit, s.w.cfg.MaxWait, wait))
		return errStop
	}
	if now.Sub(since) < time.Second {
		// Once per wait, not per park: the Studio shows the agent waiting and why.
		data := events.ModelWaitingData{Limit: wait.Limit, RetryAfterMS: after.Milliseconds()}
		if wait.Cause != nil {
			data.Cause = truncate(wait.Cause.Error(), 300)
		}
		if err := s.w.events.Emit(ctx, s.in.run.ID, fmt.Sprintf("wait:%s:%d:%d", s.sess.ID, s.sess.Steps, since.UnixMilli()), events.ModelWaiting, s.in.node.Name, data); err != nil {
			return err
		}
	}
	return Snooze(after, fmt.Errorf("%w: %w", ErrRateLimitWaiting, wait))
}

// save persists the session with the step's results, audit rows and events.
func (s *stepRun) save(ctx context.Context) error {
	s.lastSave = time.Now()
	_, err := s.w.persist(ctx, s.in, &s.sess, s.token, saveOpts{})
	return err
}

// saveLast is the step's last save: it gives the lease up.
func (s *stepRun) saveLast(ctx context.Context, o saveOpts) error {
	o.release = true
	if _, err := s.w.persist(ctx, s.in, &s.sess, s.token, o); err != nil {
		return err
	}
	s.released = true
	return nil
}

// finish publishes the finished session and ends the step.
func (s *stepRun) finish(ctx context.Context) error {
	if err := s.w.finishSession(ctx, s.in, &s.sess); err != nil {
		return err
	}
	return errStop
}

// fail records the step's tool calls, then fails the run.
func (s *stepRun) fail(ctx context.Context, reason, msg string) {
	s.w.failStep(ctx, s.in, reason, msg)
}
