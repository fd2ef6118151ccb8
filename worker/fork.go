package worker

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/replay"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/templates"
	"github.com/aetherium-engine/aetherium/tools"
)

// ForkPlan is what a fork of a run at a step starts from (issue 44 part 2,
// docs/fork.md): the new run's sessions and delegations (the record's up to
// the step, under the new run's ids) and the recorded calls that rebuild the
// new run's own state as it was at the step (its workspace files, its plan).
type ForkPlan struct {
	// At is the step forked at; Shared the steps served from the record.
	At, Shared int
	// Sessions: the supervisor's, cut at the step, and the finished sessions
	// of the delegations it made before it.
	Sessions    []store.Session
	Delegations []store.Delegation
	// Restore are the calls re-applied to the new run's own state, in the
	// order the gate let them through (audit order).
	Restore []RestoreCall
	// Live is what runs live first: "the model" (the supervisor is asked
	// again) or the calls of the recorded model message from the step on.
	Live string
}

// RestoreCall is one recorded call re-applied by RestoreFork.
type RestoreCall struct {
	Session string // the new run's session id
	// From is the recorded session the call ran in (its approval's key).
	From   string
	Agent  string
	node   templates.Node
	role   string
	access tools.Access
	Call   llm.ToolCall
	team   templates.Template
}

// forkRestorable reports whether a recorded call is re-applied to a fork's
// own state: the workspace tools' edits (files of the fork's workspace) and
// the planning tools (the fork's plan and todo rows). Their effects are the
// fork's own; nothing else runs.
func forkRestorable(spec *tools.Spec) bool {
	return !spec.ReadOnly && (spec.Group == "workspace" || spec.Group == "planning")
}

// forkNeutral reports whether a recorded call left nothing a fork must
// rebuild: it changes nothing (ReadOnly), or what it changed is in the record
// the fork copies (delegations, the reply, progress events and questions).
func forkNeutral(spec *tools.Spec) bool {
	return spec.ReadOnly || spec.Group == "orchestration" || spec.Group == "comms" || delegating(spec.Name)
}

// PlanFork builds the plan of a fork of rec at step at of rep (the replay of
// rec: its step numbering, judged by the engine as it is now). newRun is the
// fork's id; team is the fork's team (the supervisor's system prompt is
// rebuilt from it when it differs).
func (w *Worker) PlanFork(rec replay.Record, rep replay.Report, at int, newRun string, team templates.Template) (ForkPlan, error) {
	plan := ForkPlan{At: at, Shared: at - 1}
	if at < 1 || at > len(rep.StepList) {
		return plan, fmt.Errorf("%w: step %d: run %s has steps 1-%d", replay.ErrBadForkPoint, at, rec.Run.ID, len(rep.StepList))
	}
	st := rep.StepList[at-1]
	sup := -1
	for i, s := range rec.Sessions {
		if s.DelegationID == "" {
			sup = i
		}
	}
	if sup < 0 {
		return plan, fmt.Errorf("%w: run %s has no supervisor session", replay.ErrCorruptRecord, rec.Run.ID)
	}
	supSess := rec.Sessions[sup]
	if st.Session != supSess.ID {
		first, last := supervisorSteps(rep, supSess.ID)
		return plan, fmt.Errorf("%w: step %d is %s's (a delegation's session): a fork starts at a step of the supervisor's session, steps %d-%d",
			replay.ErrBadForkPoint, at, st.Agent, first, last)
	}
	if st.Kind == replay.KindLimit {
		return plan, fmt.Errorf("%w: step %d is a limit the engine reached (%s), not a step a run can start at", replay.ErrBadForkPoint, at, st.Replayed.Decision)
	}
	if supSess.Compactions > 0 {
		return plan, fmt.Errorf("%w: the supervisor's session was compacted: its stored context is a summary, not the record a fork shares", replay.ErrBadForkPoint)
	}
	// The supervisor's history, cut at the step: before the model message
	// when the step is its first call (or its final answer: the model is asked
	// again), else the message and the results of its calls before the step.
	msgs := supSess.Messages
	i, turn := -1, 0
	for j, m := range msgs {
		if m.Role == llm.RoleAssistant {
			if turn++; turn == st.Turn {
				i = j
				break
			}
		}
	}
	if i < 0 {
		return plan, fmt.Errorf("%w: step %d: turn %d is not in the supervisor's history", replay.ErrCorruptRecord, at, st.Turn)
	}
	before := map[string]bool{} // the supervisor's calls before the step
	for _, m := range msgs[:i] {
		for _, c := range m.ToolCalls {
			before[c.ID] = true
		}
	}
	kept := msgs[:i]
	plan.Live = "the model"
	if st.Kind == replay.KindCall && len(msgs[i].ToolCalls) > 0 && msgs[i].ToolCalls[0].ID != st.CallID {
		for _, c := range msgs[i].ToolCalls {
			if c.ID == st.CallID {
				break
			}
			before[c.ID] = true
		}
		kept = msgs[:i+1]
		for _, m := range msgs[i+1:] {
			if m.Role != llm.RoleTool || !before[m.ToolCallID] {
				break
			}
			kept = append(kept, m)
		}
		plan.Live = fmt.Sprintf("the calls of the recorded model message from %s (%s) on", st.Tool, st.CallID)
	}
	kept = append([]llm.Message(nil), kept...)
	if len(kept) < 2 {
		return plan, fmt.Errorf("%w: the supervisor's history has no task", replay.ErrCorruptRecord)
	}
	if prompt := supervisorPrompt(team); prompt != kept[0].Content {
		kept[0].Content = prompt // the fork's team: its supervisor's prompt from here on
	}
	newSup := queue.SupervisorSession(newRun).String()
	plan.Sessions = append(plan.Sessions, store.Session{ID: newSup, RunID: newRun, Agent: supSess.Agent, Role: supSess.Role,
		Status: "active", Steps: assistantCount(kept), Messages: kept})

	// The delegations made before the step, and theirs, under new ids.
	sessions := map[string]int{supSess.ID: sup}
	for i, s := range rec.Sessions {
		sessions[s.ID] = i
	}
	renamed := map[string]string{supSess.ID: newSup} // old session id -> new
	prefix := map[string]bool{}                      // old call keys before the fork point
	for id := range before {
		prefix[supSess.ID+":"+id] = true
	}
	ds := append([]store.Delegation(nil), rec.Delegations...)
	sort.SliceStable(ds, func(a, b int) bool { return ds[a].ID < ds[b].ID })
	for changed := true; changed; {
		changed = false
		for _, d := range ds {
			oldSess := queue.DelegationSession(d.ID).String()
			parent, ok := renamed[d.ParentSession]
			if _, done := renamed[oldSess]; done || !ok || !prefix[d.ParentSession+":"+d.ToolCallID] {
				continue
			}
			changed = true
			n := 0
			for _, o := range ds {
				if o.ParentSession == d.ParentSession && o.ToolCallID == d.ToolCallID && o.ID < d.ID {
					n++
				}
			}
			nd := d
			nd.ID, nd.RunID, nd.ParentSession = delegationID(parent, d.ToolCallID, n, d.Agent), newRun, parent
			if nd.Status != store.DelegationCompleted && nd.Status != store.DelegationFailed {
				return plan, fmt.Errorf("%w: delegation %s (%s), made before step %d, is %s in the record", replay.ErrCorruptRecord, d.ID, d.Agent, at, d.Status)
			}
			plan.Delegations = append(plan.Delegations, nd)
			newSess := queue.DelegationSession(nd.ID).String()
			renamed[oldSess] = newSess
			si, ok := sessions[oldSess]
			if !ok {
				continue // it never started: its result is its error
			}
			s := rec.Sessions[si]
			if s.Compactions > 0 {
				return plan, fmt.Errorf("%w: %s's session (delegation %s) was compacted: its stored context is a summary, not the record a fork shares", replay.ErrBadForkPoint, s.Agent, d.ID)
			}
			plan.Sessions = append(plan.Sessions, store.Session{ID: newSess, RunID: newRun, Agent: s.Agent, Role: s.Role, DelegationID: nd.ID,
				Status: "done", Steps: s.Steps, Messages: s.Messages})
			for _, m := range s.Messages {
				for _, c := range m.ToolCalls {
					prefix[s.ID+":"+c.ID] = true
				}
			}
		}
	}

	// The calls before the step whose effects the fork must have: re-applied
	// in the order the gate let them through; one whose effects the record
	// does not hold (a shell command, a device) refuses the fork.
	reg := w.router.Registry()
	calls := map[string]llm.ToolCall{}
	failed := map[string]bool{}
	for _, s := range rec.Sessions {
		for _, m := range s.Messages {
			for _, c := range m.ToolCalls {
				calls[s.ID+":"+c.ID] = c
			}
			if m.Role == llm.RoleTool && m.IsError {
				failed[s.ID+":"+m.ToolCallID] = true
			}
		}
	}
	stepOf := map[string]int{}
	for _, s := range rep.StepList {
		if s.Kind == replay.KindCall {
			stepOf[s.Session+":"+s.CallID] = s.Index
		}
	}
	for _, row := range rec.Audit {
		c, ok := calls[row.CallKey]
		if !prefix[row.CallKey] || !ok || row.Decision != string(tools.OutcomeAllowed) || failed[row.CallKey] {
			continue
		}
		spec, ok := reg.Spec(c.Name)
		switch {
		case ok && forkNeutral(spec):
			continue
		case !ok || !forkRestorable(spec):
			return plan, fmt.Errorf("%w: step %d (%s's call %s) ran before step %d and changed what the record does not hold; fork at step %d or before",
				replay.ErrBadForkPoint, stepOf[row.CallKey], row.Agent, c.Name, at, stepOf[row.CallKey])
		}
		oldSess := row.CallKey[:strings.LastIndex(row.CallKey, ":")]
		s := rec.Sessions[sessions[oldSess]]
		// As the call ran: the original team's node and access.
		orig, err := templates.ParseJSON(rec.Run.Team)
		if err != nil {
			return plan, fmt.Errorf("%w: run %s: its team: %w", replay.ErrCorruptRecord, rec.Run.ID, err)
		}
		in := stepInput{run: rec.Run, team: orig}
		if s.DelegationID == "" {
			in.node, in.role = orig.Supervisor, "supervisor"
			in.access = reg.Resolve(tools.Node{Role: "supervisor", MCPServers: in.node.MCPServers, Tools: in.node.Tools})
		} else {
			node, role, access, ok := w.delegateNode(orig, rowDelegation(rec.Delegations, s.DelegationID))
			if !ok {
				return plan, fmt.Errorf("%w: session %s names an agent not in the team", replay.ErrCorruptRecord, s.ID)
			}
			in.node, in.role, in.access = node, role, access
		}
		plan.Restore = append(plan.Restore, RestoreCall{Session: renamed[oldSess], From: oldSess, Agent: s.Agent, team: orig, node: in.node, role: in.role, access: in.access, Call: c})
	}
	return plan, nil
}

// RestoreFork re-applies plan's recorded calls to run's own state (its
// workspace at dir, its plan rows) through the registered tools alone: no
// gate (no audit row, no approval), no sandbox, no network, no model. The
// caller forgets the ended sessions' snapshots (their edits are no longer
// revertible, as in the record).
func (w *Worker) RestoreFork(ctx context.Context, plan ForkPlan, run store.Run, dir string) (int, error) {
	router := tools.NewRouter(w.router.Registry())
	for i, rc := range plan.Restore {
		in := stepInput{run: run, team: rc.team, node: rc.node, role: rc.role, access: rc.access}
		if _, err := router.Dispatch(ctx, tools.Call{ID: rc.Call.ID, Name: rc.Call.Name, Args: rc.Call.Args, Session: toolSession(in, rc.Session, dir, nil)}); err != nil {
			return i, fmt.Errorf("restore %s's call %s (%s): %w", rc.Agent, rc.Call.Name, rc.Call.ID, err)
		}
	}
	return len(plan.Restore), nil
}

func supervisorSteps(rep replay.Report, session string) (first, last int) {
	for _, s := range rep.StepList {
		if s.Session == session {
			if first == 0 {
				first = s.Index
			}
			last = s.Index
		}
	}
	return first, last
}

func assistantCount(msgs []llm.Message) int {
	n := 0
	for _, m := range msgs {
		if m.Role == llm.RoleAssistant {
			n++
		}
	}
	return n
}

func rowDelegation(ds []store.Delegation, id string) store.Delegation {
	for _, d := range ds {
		if d.ID == id {
			return d
		}
	}
	return store.Delegation{ID: id}
}
