package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"

	"github.com/aetherium-engine/aetherium/events"
	"github.com/aetherium-engine/aetherium/logctx"
	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/sandbox"
	"github.com/aetherium-engine/aetherium/security"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/templates"
	"github.com/aetherium-engine/aetherium/tools"
)

// MCPRole is the session role of an outside MCP client's calls (audit rows,
// approvals): not an agent of a team, a person's client acting through a profile.
const MCPRole = "mcp"

// handleMCPCall executes one tool call of an outside MCP client (mcp:call)
// through the same router, gate, intents and audit as an agent's call, in the
// workspace of the call's run. It never waits for a human: a call whose approval
// is pending is parked (waiting) and the decision's resume task runs it again,
// when the gate finds the decided approval. Every move of the call is
// conditional on this delivery's claim, so a redelivered task finds the call
// claimed or done and does not run the tool twice; a delivery that died
// mid-call leaves its claim to go stale, and the next one meets the call's
// intent (a non-idempotent tool is reported "outcome unknown", not repeated).
func (w *Worker) handleMCPCall(ctx context.Context, t *asynq.Task) error {
	p, err := queue.Decode[queue.MCPCallPayload](t)
	if err != nil {
		return err
	}
	token := uuid.NewString()
	call, ok, err := w.store.ClaimMCPCall(ctx, p.CallID, token, w.cfg.StepLease)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%w: mcp call %s does not exist", asynq.SkipRetry, p.CallID)
	}
	if err != nil {
		return err
	}
	if !ok {
		if call.Status == store.MCPCallRunning {
			// Another delivery holds it (or held it and died: its claim goes stale).
			return Snooze(busyRetry, fmt.Errorf("%w: mcp call %s", ErrSessionBusy, call.ID))
		}
		return nil // done (a duplicate delivery), or waiting for its approval
	}
	ctx = logctx.Run(ctx, call.RunID, call.Principal)
	m := &mcpCall{w: w, call: call, token: token, start: time.Now()}
	return m.run(ctx)
}

// mcpCall is one claimed delivery of an MCP call.
type mcpCall struct {
	w     *Worker
	call  store.MCPCall
	token string
	start time.Time
}

func (m *mcpCall) run(ctx context.Context) error {
	w, call := m.w, m.call
	run, err := w.store.GetRun(ctx, call.RunID)
	if err != nil {
		return m.requeue(ctx, err)
	}
	if store.Terminal(run.Status) {
		return m.finish(ctx, run, store.MCPCall{Decision: string(tools.OutcomeError), IsError: true,
			Result: fmt.Sprintf("the MCP session's run %s ended (%s %s): call again to start a new one", run.ID, run.Status, run.Reason)}, nil)
	}
	team, err := templates.ParseJSON(run.Team)
	if err != nil || len(team.Workers) != 1 {
		return m.finish(ctx, run, store.MCPCall{Decision: string(tools.OutcomeError), IsError: true,
			Result: fmt.Sprintf("run %s holds no MCP profile (team of %d nodes, %v)", run.ID, len(team.Workers), err)}, nil)
	}
	node := team.Workers[0]
	workspace, reason, err := w.workspace(ctx, run.WorkspaceID())
	if reason != "" {
		return m.finish(ctx, run, store.MCPCall{Decision: string(tools.OutcomeError), IsError: true, Result: reason + ": " + err.Error()}, nil)
	}
	if err != nil {
		return m.requeue(ctx, err)
	}
	sessionID := queue.MCPCallSession(call.ID).String()
	tsess := &tools.Session{
		RunID: run.ID, SessionID: sessionID, Owner: run.Owner, Team: team.Name, Agent: call.Principal, Role: MCPRole,
		TeamSource: tools.TeamSourceOf(run.Template), Workspace: workspace,
		Access:         w.router.Registry().Resolve(tools.Node{Role: MCPRole, MCPServers: node.MCPServers, Tools: node.Tools}),
		AllowedDomains: team.AllowedDomains, ToolDefaults: team.ToolDefaults,
		EgressDenyPrivate: team.Egress.DenyPrivate(), EgressPorts: team.EgressPorts,
		KnowledgePacks: team.Knowledge.Packs, Project: run.ProjectID, ImageModel: team.ImageModel,
		Coordinator: mcpCoordinator{w: w, runID: run.ID, agent: call.Principal},
	}
	tctx := logctx.Tool(sandbox.WithCaller(ctx, sandbox.Caller{Run: run.ID, Principal: call.Principal}), call.Tool)
	stopRenew := m.keepClaim(ctx)
	res, err := w.router.Dispatch(tctx, tools.Call{ID: call.ID, Name: call.Tool, Args: json.RawMessage(call.Args), Session: tsess})
	stopRenew()
	switch {
	case ctx.Err() != nil:
		return m.requeue(ctx, ctx.Err())
	case err == nil && res.Pending:
		// The approval's decision (or expiry) resumes this call with a task of its own.
		ok, rerr := w.store.ReleaseMCPCall(ctx, call.ID, m.token, store.MCPCallWaiting, security.ApprovalID(sessionID, call.ID))
		if rerr == nil && !ok {
			w.log.WarnContext(ctx, "mcp call: claim lost while parking it for its approval", "call", call.ID)
		}
		if rerr == nil && ok {
			w.events.AnnounceMCPCall(ctx, call.ID) // the client's wait shows the approval
		}
		return rerr
	case errors.Is(err, tools.ErrInfrastructure):
		return m.requeue(ctx, fmt.Errorf("%s: %w", call.Tool, err))
	}
	outcome, layer := tools.Classify(err)
	out := store.MCPCall{Decision: string(outcome), Result: res.Content, DenyLayer: layer}
	if err != nil {
		out.IsError, out.Result = true, err.Error()
		var d *tools.Denied
		if errors.As(err, &d) {
			out.DenyReason = d.Reason
		}
	}
	return m.finish(ctx, run, out, res.Audit)
}

// keepClaim renews the claim while the tool runs (a render or a test suite
// outlasts worker.step_lease), until the returned stop is called.
func (m *mcpCall) keepClaim(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(m.w.cfg.StepLease / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if ok, err := m.w.store.RenewMCPCall(ctx, m.call.ID, m.token); (err != nil || !ok) && ctx.Err() == nil {
					m.w.log.WarnContext(ctx, "mcp call: claim not renewed", "call", m.call.ID, "lost", !ok, "err", err)
				}
			}
		}
	}()
	return func() { cancel(); <-done }
}

// finish records the outcome with its audit row, then the call's event.
func (m *mcpCall) finish(ctx context.Context, run store.Run, out store.MCPCall, audit *store.AuditRow) error {
	w, call := m.w, m.call
	done, err := w.store.FinishMCPCall(context.WithoutCancel(ctx), call.ID, m.token, out, audit)
	if err != nil {
		return err
	}
	if !done {
		w.log.WarnContext(ctx, "mcp call: claim lost before its outcome was recorded", "call", call.ID)
		return nil
	}
	w.events.AnnounceMCPCall(context.WithoutCancel(ctx), call.ID) // the client's wait answers
	w.observeTool(ctx, call.Tool, out.Decision, out.DenyLayer, m.start)
	key := "tool:" + queue.MCPCallSession(call.ID).String() + ":" + call.ID
	if err := w.events.Emit(context.WithoutCancel(ctx), run.ID, key, events.ToolCall, call.Principal, events.ToolCallData{
		Tool: call.Tool, CallID: call.ID, Decision: out.Decision, Layer: out.DenyLayer, Error: errorText(out),
		Result: truncate(out.Result, 500), DurationMS: time.Since(m.start).Milliseconds(), MCPProfile: call.Profile,
	}); err != nil {
		// The outcome is stored and the client gets it; only the stream misses it.
		w.log.WarnContext(ctx, "mcp call event", "call", call.ID, "err", err)
	}
	return nil
}

func errorText(out store.MCPCall) string {
	if out.IsError {
		return truncate(out.Result, 500)
	}
	return ""
}

// requeue hands the call back (queued) so the task's retry claims it again.
func (m *mcpCall) requeue(ctx context.Context, cause error) error {
	if _, err := m.w.store.ReleaseMCPCall(context.WithoutCancel(ctx), m.call.ID, m.token, store.MCPCallQueued, ""); err != nil {
		return errors.Join(cause, err)
	}
	return cause
}

// mcpGaveUp answers a call whose task exhausted its retries, so the client
// waiting for it gets an error instead of waiting out its timeout. Its run is
// the client's session, not a job: it is not failed.
func (w *Worker) mcpGaveUp(ctx context.Context, t *asynq.Task, attempts int, cause error) {
	p, err := queue.Decode[queue.MCPCallPayload](t)
	if err != nil {
		return
	}
	token := uuid.NewString()
	call, ok, err := w.store.ClaimMCPCall(ctx, p.CallID, token, 0)
	if err != nil || !ok {
		return
	}
	out := store.MCPCall{Decision: string(tools.OutcomeUnknown), IsError: true,
		Result: fmt.Sprintf("%s failed %d times, its outcome is unknown: %v", call.Tool, attempts, cause)}
	if _, err := w.store.FinishMCPCall(ctx, call.ID, token, out, nil); err != nil {
		w.log.ErrorContext(ctx, "mcp call gave up", "call", call.ID, "err", err)
		return
	}
	w.events.AnnounceMCPCall(ctx, call.ID)
}

// mcpCoordinator gives an MCP client's calls the run-level effects a profile
// may use: events. Delegation and replies belong to a team's agents.
type mcpCoordinator struct {
	w     *Worker
	runID string
	agent string
}

func (c mcpCoordinator) Delegate(context.Context, string, []tools.DelegateRequest) error {
	return errors.New("an MCP client cannot delegate: it is not an agent of a team")
}

func (c mcpCoordinator) Reply(context.Context, string) error {
	return errors.New("an MCP client cannot reply: its run is its session, not a job with an answer")
}

func (c mcpCoordinator) Emit(ctx context.Context, key, typ string, data any) error {
	return c.w.events.Emit(ctx, c.runID, key, typ, c.agent, data)
}
