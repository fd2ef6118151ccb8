package worker

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"

	"github.com/aetherium-engine/aetherium/events"
	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/review"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/templates"
	"github.com/aetherium-engine/aetherium/tools"
	"github.com/aetherium-engine/aetherium/wsquota"
)

func (w *Worker) handleSupervise(ctx context.Context, t *asynq.Task) error {
	p, err := queue.Decode[queue.SupervisePayload](t)
	if err != nil {
		return err
	}
	// A resumed supervisor reads its run and leases its session (with the
	// delegations it made) in one transaction; the first step, which finds no
	// session, creates it from the run's team below.
	token := uuid.NewString()
	acq, err := w.store.AcquireStep(ctx, store.Acquire{
		Initial: store.Session{ID: queue.SupervisorSession(p.RunID).String(), RunID: p.RunID},
		Token:   token, Lease: w.cfg.StepLease, LoadRun: true,
	})
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%w: run %s does not exist", asynq.SkipRetry, p.RunID)
	}
	if err != nil {
		return err
	}
	run := acq.Run
	release := func() {
		if acq.OK {
			if err := w.store.ReleaseSession(context.WithoutCancel(ctx), acq.Session.ID, token); err != nil && !w.staleRefused(ctx, "release", acq.Session.ID, err) {
				w.log.WarnContext(ctx, "release session", "session", acq.Session.ID, "err", err)
			}
		}
	}
	// A run its reply completed is stepped once more when the step that replied
	// died before it saved the reply's result: the reply is replayed (it changes
	// nothing) so its result and audit row land (replyUnsaved).
	if store.Terminal(run.Status) && !(acq.OK && replyUnsaved("supervisor", run.Status, acq.Session.Messages)) {
		release()
		w.ensureTerminalEvent(ctx, run.ID)
		return nil
	}
	team, err := templates.ParseJSON(run.Team)
	if err != nil {
		release()
		w.FailRun(ctx, run.ID, "invalid_team", err.Error())
		return nil
	}
	startedData := events.RunStartedData{Team: team.Name}
	started := store.NewEvent{Key: "started", Type: events.RunStarted, Agent: team.Supervisor.Name, Data: startedData}
	var first store.Acquire
	switch {
	case run.Status == store.RunQueued && !acq.Exists:
		// The first step starts the run, and records that, with the lease it takes
		// on the new session: one transaction, not three.
		first = store.Acquire{StartRun: true, Events: []store.NewEvent{started}}
	case run.Status == store.RunQueued:
		// A session without a started run: a delivery of a version that started
		// the run after making the session.
		if _, err := w.store.StartRun(ctx, run.ID); err != nil {
			release()
			return err
		}
		if err := w.events.Emit(ctx, run.ID, started.Key, started.Type, started.Agent, startedData); err != nil {
			release()
			return err
		}
	}
	node := team.Supervisor
	sess := store.Session{
		ID: queue.SupervisorSession(run.ID).String(), RunID: run.ID, Agent: node.Name, Role: "supervisor",
		Messages: []llm.Message{
			{Role: llm.RoleSystem, Content: supervisorPrompt(team), Provenance: requestProvenance(run)},
			{Role: llm.RoleUser, Content: run.Prompt},
		},
	}
	access := w.router.Registry().Resolve(tools.Node{Role: "supervisor", MCPServers: node.MCPServers, Tools: node.Tools})
	in := stepInput{run: run, team: team, node: node, role: "supervisor", initial: sess, access: access, acquire: first}
	if acq.Exists {
		in.acquired, in.token = &acq, token
	}
	return w.step(ctx, in)
}

var subagentName = regexp.MustCompile(`^(.+)-sub-\d+$`)

func (w *Worker) handleTurn(ctx context.Context, t *asynq.Task) error {
	p, err := queue.Decode[queue.TurnPayload](t)
	if err != nil {
		return err
	}
	d, run, err := w.store.GetTurn(ctx, p.DelegationID)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%w: delegation %s does not exist", asynq.SkipRetry, p.DelegationID)
	}
	if err != nil {
		return err
	}
	if store.Terminal(run.Status) {
		if _, err := w.store.FinishDelegation(ctx, d.ID, store.DelegationFailed, "", "run ended: "+run.Status); err != nil {
			return err
		}
		w.ensureTerminalEvent(ctx, run.ID)
		return nil
	}
	team, err := templates.ParseJSON(run.Team)
	if err != nil {
		w.FailRun(ctx, run.ID, "invalid_team", err.Error())
		return nil
	}
	node, role, access, ok := w.delegateNode(team, d)
	if !ok {
		w.FailRun(ctx, run.ID, "unknown_agent", fmt.Sprintf("delegation %s names agent %q, which is not in the team", d.ID, d.Agent))
		return nil
	}
	sess := store.Session{
		ID: queue.DelegationSession(d.ID).String(), RunID: run.ID, Agent: d.Agent, Role: role, DelegationID: d.ID,
		Messages: []llm.Message{{Role: llm.RoleSystem, Content: node.Prompt, Provenance: requestProvenance(run)}, {Role: llm.RoleUser, Content: d.Task}},
	}
	if d.Status == store.DelegationPending {
		// The session is created by this turn (a running delegation has one):
		// its task carries what the delegating session had read (the flow rules).
		if sess.Messages[1].Provenance, err = w.taskProvenance(ctx, d); err != nil {
			return err
		}
	}
	// The delegation is marked running and its turn announced with the lease, in
	// one transaction.
	start := store.Acquire{StartDelegation: d.ID, Events: []store.NewEvent{{
		Key: "turn:" + d.ID, Type: events.TurnStarted, Agent: d.Agent, Data: events.TurnStartedData{DelegationID: d.ID},
	}}}
	return w.step(ctx, stepInput{run: run, team: team, node: node, role: role, initial: sess, access: access, delegation: &d, acquire: start})
}

// delegateNode is the node a delegation runs as: a worker of the team; a
// subagent (the parent's model and framing, with the tool list spawn_subagents
// capped to the parent's own); or code_review's reviewer (no tools, the review
// prompt, the parent's model or worker.review_model). ok is false when a worker
// delegation names no worker of the team.
func (w *Worker) delegateNode(team templates.Template, d store.Delegation) (node templates.Node, role string, access tools.Access, ok bool) {
	if d.Tools == nil {
		n, ok := team.Worker(d.Agent)
		if !ok {
			return node, "worker", access, false
		}
		return n, "worker", w.router.Registry().Resolve(tools.Node{Role: "worker", MCPServers: n.MCPServers, Tools: n.Tools}), true
	}
	parentName := d.Agent
	if m := subagentName.FindStringSubmatch(d.Agent); m != nil {
		parentName = m[1]
	}
	if d.Kind == store.DelegationReview {
		parentName = review.Caller(d.Agent)
	}
	parent := team.Supervisor
	if wn, found := team.Worker(parentName); found {
		parent = wn
	}
	if d.Kind == store.DelegationReview {
		model := team.ModelFor(parent)
		if w.cfg.ReviewModel != "" && model.Provider != "script" {
			model.Model = w.cfg.ReviewModel
		}
		return templates.Node{Name: d.Agent, Prompt: review.SystemPrompt, Model: &model}, "reviewer", tools.Access{}, true
	}
	node = templates.Node{Name: d.Agent, Prompt: "You are a subagent of " + parentName + ". Do the task and answer with your findings.", Model: parent.Model}
	access = w.router.Registry().Resolve(tools.Node{Role: "subagent", Tools: d.Tools})
	if len(d.Tools) == 0 {
		access = tools.Access{}
	}
	return node, "subagent", access, true
}

// supervisorPrompt frames the supervisor's own prompt with its team roster.
func supervisorPrompt(team templates.Template) string {
	var b strings.Builder
	b.WriteString(team.Supervisor.Prompt)
	if len(team.Workers) > 0 {
		b.WriteString("\n\nWorkers you can delegate to (delegate tool, one task each):\n")
		names := make([]string, 0, len(team.Workers))
		for _, wk := range team.Workers {
			names = append(names, wk.Name)
		}
		sort.Strings(names)
		for _, n := range names {
			wk, _ := team.Worker(n)
			first, _, _ := strings.Cut(wk.Prompt, "\n")
			fmt.Fprintf(&b, "- %s: %s\n", n, first)
		}
	}
	b.WriteString("\nWhen the work is done, call reply with the final answer for the user.")
	return b.String()
}

// workspace returns a run's workspace directory, made and mounted (with a quota)
// when needed. A refusal no retry can change comes with the reason to fail the run
// with: workspace_disk_full (the free-disk guard) or workspace_unavailable (quota
// workspaces cannot be made here).
func (w *Worker) workspace(ctx context.Context, runID string) (dir string, reason string, err error) {
	dir, err = w.workspaces.Open(ctx, runID)
	switch {
	case err == nil:
		return dir, "", nil
	case errors.Is(err, wsquota.ErrDiskFull):
		return "", "workspace_disk_full", err
	case errors.Is(err, wsquota.ErrUnavailable), errors.Is(err, wsquota.ErrNotEmpty):
		return "", "workspace_unavailable", err
	}
	return "", "", err
}
