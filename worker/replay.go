package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/replay"
	"github.com/aetherium-engine/aetherium/review"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/templates"
	"github.com/aetherium-engine/aetherium/tools"
	"github.com/aetherium-engine/aetherium/worker/hook"
)

// Replay judges a finished run's record again with this worker's engine
// (issue 44, docs/replay.md): every session's recorded calls go through
// router — the fleet's gate in its recorded form in front of replay.Terminal
// (tools.NewRecordedRouter), so the layers decide for real and no tool runs —
// with the session's flow label derived from its history as the live step
// derives it (labelOf); each final answer and reply goes through the reply
// checks (QA, required_output) and the reviewer's format rule; the
// per-message cap, the circuit breaker and max_steps count as the step counts
// them. The model's answers and the tools' results are the record's. Replay
// reads the workspace as it is now (the reply checks), writes nothing, emits
// nothing and enqueues nothing.
//
// A fork (issue 44 part 2) is this walk up to its step k, then the live step
// from the record's history at k: the steps' state hashes say that the served
// prefix is the record's.
func (w *Worker) Replay(ctx context.Context, rec replay.Record, router *tools.Router) (replay.Report, error) {
	rep := replay.Report{RunID: rec.Run.ID, Status: rec.Run.Status}
	team, err := templates.ParseJSON(rec.Run.Team)
	if err != nil {
		return rep, fmt.Errorf("%w: run %s: its team: %w", replay.ErrCorruptRecord, rec.Run.ID, err)
	}
	r := &replayer{w: w, rec: rec, router: router, team: team, rep: &rep,
		audit: map[string]store.AuditRow{}, made: map[string][]store.Delegation{}, byID: map[string]store.Delegation{},
		workspace: w.workspaces.Dir(rec.Run.WorkspaceID())}
	for _, row := range rec.Audit {
		r.audit[row.CallKey] = row // the last row of a call is its outcome
	}
	for _, d := range rec.Delegations {
		r.byID[d.ID] = d
		key := d.ParentSession + ":" + d.ToolCallID
		r.made[key] = append(r.made[key], d)
	}
	if err := r.checkRecord(); err != nil {
		return rep, err
	}
	for i := range rec.Sessions {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		if err := r.session(ctx, &rec.Sessions[i]); err != nil {
			return rep, err
		}
	}
	rep.Sessions = len(rec.Sessions)
	return rep, nil
}

// replayer is one replay's state.
type replayer struct {
	w         *Worker
	rec       replay.Record
	router    *tools.Router
	team      templates.Template
	rep       *replay.Report
	audit     map[string]store.AuditRow
	made      map[string][]store.Delegation // by parent session ":" call id
	byID      map[string]store.Delegation
	workspace string
}

// corrupt is a record the walk cannot go on from.
func corrupt(format string, a ...any) error {
	return fmt.Errorf("%w: %s", replay.ErrCorruptRecord, fmt.Sprintf(format, a...))
}

// checkRecord finds what the walk would trip over: a session whose
// delegation is missing, a finished delegation without its session, a
// history whose tool messages answer no call.
func (r *replayer) checkRecord() error {
	sessions := map[string]bool{}
	for _, s := range r.rec.Sessions {
		sessions[s.ID] = true
		if s.DelegationID != "" {
			if _, ok := r.byID[s.DelegationID]; !ok {
				return corrupt("session %s (%s) belongs to delegation %s, which the record does not hold", s.ID, s.Agent, s.DelegationID)
			}
		}
		if len(s.Messages) < 2 || s.Messages[0].Role != llm.RoleSystem {
			return corrupt("session %s (%s): a history of %d messages without its system prompt and task", s.ID, s.Agent, len(s.Messages))
		}
		if err := checkHistory(s.Messages); err != nil {
			return corrupt("session %s (%s): %v", s.ID, s.Agent, err)
		}
	}
	if len(r.rec.Sessions) == 0 {
		return corrupt("run %s has no session", r.rec.Run.ID)
	}
	for _, d := range r.rec.Delegations {
		if !sessions[d.ParentSession] {
			return corrupt("delegation %s (%s) was made by session %s, which the record does not hold", d.ID, d.Agent, d.ParentSession)
		}
		// A delegation that never started (its run ended first) has no session.
		if d.Status == store.DelegationCompleted && !sessions[queue.DelegationSession(d.ID).String()] {
			return corrupt("delegation %s (%s) completed, but its session is missing", d.ID, d.Agent)
		}
	}
	return nil
}

// checkHistory refuses a tool message that answers no call of the model
// message before it, or answers one twice.
func checkHistory(msgs []llm.Message) error {
	var calls map[string]bool
	answered := map[string]bool{}
	for i, m := range msgs {
		switch m.Role {
		case llm.RoleAssistant:
			calls, answered = map[string]bool{}, map[string]bool{}
			for _, c := range m.ToolCalls {
				if c.ID == "" || calls[c.ID] {
					return fmt.Errorf("message %d: tool call %q has no id or repeats one", i, c.Name)
				}
				calls[c.ID] = true
			}
		case llm.RoleTool:
			if m.Compacted != nil {
				continue
			}
			if !calls[m.ToolCallID] {
				return fmt.Errorf("message %d: a tool result for call %q, which the model message before it did not make", i, m.ToolCallID)
			}
			if answered[m.ToolCallID] {
				return fmt.Errorf("message %d: call %q answered twice", i, m.ToolCallID)
			}
			answered[m.ToolCallID] = true
		case llm.RoleSystem, llm.RoleUser:
		default:
			return fmt.Errorf("message %d: unknown role %q", i, m.Role)
		}
	}
	return nil
}

// sessionWalk is one session's replay.
type sessionWalk struct {
	r       *replayer
	in      stepInput
	sess    *store.Session
	tsess   *tools.Session
	turn    int
	fails   int
	recH    replay.Hasher
	repH    replay.Hasher
	hashed  int // messages folded into the hashes
	stopped bool
}

// session replays one session.
func (r *replayer) session(ctx context.Context, sess *store.Session) error {
	in := stepInput{run: r.rec.Run, team: r.team}
	if sess.DelegationID == "" {
		in.node, in.role = r.team.Supervisor, "supervisor"
		in.access = r.w.router.Registry().Resolve(tools.Node{Role: "supervisor", MCPServers: in.node.MCPServers, Tools: in.node.Tools})
	} else {
		d := r.byID[sess.DelegationID]
		node, role, access, ok := r.w.delegateNode(r.team, d)
		if !ok {
			return corrupt("session %s: delegation %s names agent %q, which is not in the team", sess.ID, d.ID, d.Agent)
		}
		in.node, in.role, in.access, in.delegation = node, role, access, &d
	}
	if sess.Compactions > 0 {
		r.rep.Notes = append(r.rep.Notes, fmt.Sprintf("session %s (%s) was compacted %d times: the turns its summaries stand for are not replayed",
			sess.ID, sess.Agent, sess.Compactions))
	}
	sw := &sessionWalk{r: r, in: in, sess: sess, tsess: toolSession(in, sess.ID, r.workspace, nil)}
	msgs := sess.Messages
	for i, m := range msgs {
		if m.Role != llm.RoleAssistant || sw.stopped {
			continue
		}
		sw.fold(i + 1)
		sw.turn++
		if sw.turn > r.w.cfg.MaxSteps {
			sw.limit("max_steps", fmt.Sprintf("%s used its %d model calls without finishing", in.node.Name, r.w.cfg.MaxSteps), i)
			continue
		}
		if len(m.ToolCalls) == 0 {
			if err := sw.answer(ctx, i); err != nil {
				return err
			}
			continue
		}
		if err := sw.calls(ctx, i); err != nil {
			return err
		}
	}
	if pending := pendingCalls(msgs); len(pending) > 0 {
		r.rep.Notes = append(r.rep.Notes, fmt.Sprintf("session %s (%s): %d calls of its last model message have no result in the record (the run ended first): not judged",
			sess.ID, sess.Agent, len(pending)))
	}
	return nil
}

// fold adds the history up to msgs[:n] to both hashes.
func (sw *sessionWalk) fold(n int) {
	for ; sw.hashed < n && sw.hashed < len(sw.sess.Messages); sw.hashed++ {
		m := sw.sess.Messages[sw.hashed]
		sw.recH.Add(m)
		sw.repH.Add(m)
	}
}

// add numbers a step, hashes both sides and keeps the first divergence.
func (sw *sessionWalk) add(st replay.Step, what string) {
	rep := sw.r.rep
	rep.Steps++
	st.Index = rep.Steps
	st.Session, st.Agent, st.Role, st.Turn = sw.sess.ID, sw.sess.Agent, sw.in.role, sw.turn
	sw.recH.Add(st.Recorded)
	sw.repH.Add(st.Replayed)
	st.RecordedHash, st.ReplayedHash = sw.recH.Sum(), sw.repH.Sum()
	st.Same = st.Recorded.Same(st.Replayed)
	rep.FinalHash = st.ReplayedHash
	if !st.Same {
		rep.Differing++
		if rep.Divergence == nil {
			rep.Diverged = true
			rep.Divergence = &replay.Divergence{Step: st, What: what}
		}
	}
	rep.StepList = append(rep.StepList, st)
}

// limit records a limit the replayed engine reaches at message i: the
// record ended there (the run failed for it) or went on.
func (sw *sessionWalk) limit(reason, msg string, i int) {
	recorded := replay.Side{Decision: "continued"}
	if i >= len(sw.sess.Messages)-1 && sw.r.rec.Run.Reason == reason {
		recorded = replay.Side{Decision: reason, Error: sw.r.rec.Run.Error}
	}
	sw.stopped = true
	sw.add(replay.Step{Kind: replay.KindLimit, Recorded: recorded, Replayed: replay.Side{Decision: reason, Error: msg}},
		"the session ends now ("+reason+") where the record went on")
}

// calls judges the calls of the model message at i.
func (sw *sessionWalk) calls(ctx context.Context, i int) error {
	msgs := sw.sess.Messages
	m := msgs[i]
	refused, made := overCap(msgs[:i+1], sw.r.w.cfg.MaxCallsPerMessage)
	counted := false
	for _, call := range m.ToolCalls {
		t := answerOf(msgs, i, call.ID)
		if t < 0 {
			continue // unanswered: the record ended while it waited (noted)
		}
		recorded := sw.recorded(call, msgs[t])
		var replayed replay.Side
		if refused[call.ID] {
			replayed = replay.Side{Decision: string(tools.OutcomeDenied), Layer: CapLayer,
				Error: fmt.Sprintf("calls_per_message: the message made %d tool calls, the cap is %d", made, sw.r.w.cfg.MaxCallsPerMessage)}
		} else {
			var err error
			if replayed, err = sw.judge(ctx, call, msgs, t); err != nil {
				return err
			}
		}
		what := fmt.Sprintf("%s's call %s (%s) was %s then and is %s now", sw.sess.Agent, call.Name, call.ID, sideWords(recorded), sideWords(replayed))
		if recorded.Delegations != replayed.Delegations {
			what += fmt.Sprintf("; it made %d delegations then and would make %d now", recorded.Delegations, replayed.Delegations)
		}
		sw.add(replay.Step{Kind: replay.KindCall, Tool: call.Name, CallID: call.ID, Recorded: recorded, Replayed: replayed}, what)
		sw.fold(t + 1)
		// The circuit breaker, as resolvePending counts it.
		switch {
		case refused[call.ID]:
			if !counted {
				counted = true
				sw.fails++
			}
		case replayed.Layer == "approval" && strings.Contains(replayed.Error, "rejected by a human reviewer") && !sw.in.team.CountRejections:
		case replayed.Decision != string(tools.OutcomeAllowed) && replayed.Decision != "pending":
			sw.fails++
		default:
			sw.fails = 0
		}
		if sw.fails >= sw.r.w.cfg.CircuitBreaker {
			sw.limit("circuit_breaker", fmt.Sprintf("%s: %d consecutive failed tool calls", sw.in.node.Name, sw.fails), t)
			return nil
		}
	}
	return nil
}

// answerOf is the index of the tool message that answers call id of the
// model message at i, or -1.
func answerOf(msgs []llm.Message, i int, id string) int {
	for t := i + 1; t < len(msgs) && msgs[t].Role != llm.RoleAssistant; t++ {
		if msgs[t].Role == llm.RoleTool && msgs[t].ToolCallID == id {
			return t
		}
	}
	return -1
}

// recorded is the decision the record holds for a call: its audit row, or
// what its tool message says when it has none (a delegation's answer).
func (sw *sessionWalk) recorded(call llm.ToolCall, msg llm.Message) replay.Side {
	side := replay.Side{Delegations: len(sw.r.made[sw.sess.ID+":"+call.ID])}
	if row, ok := sw.r.audit[sw.sess.ID+":"+call.ID]; ok {
		side.Decision, side.Layer, side.Error = row.Decision, row.DenyLayer, row.DenyReason
		if side.Error == "" {
			side.Error = row.Error
		}
		if side.Decision == "timed_out" {
			side.Decision = string(tools.OutcomeDenied)
		}
		return side
	}
	switch {
	case msg.Refused:
		side.Decision = string(tools.OutcomeDenied)
		rest, _ := strings.CutPrefix(msg.Content, "error: denied by ")
		side.Layer, _, _ = strings.Cut(rest, ":")
	case msg.IsError:
		side.Decision = string(tools.OutcomeError)
	default:
		side.Decision = string(tools.OutcomeAllowed)
	}
	if msg.IsError {
		side.Error = truncate(msg.Content, 500)
	}
	return side
}

// judge dispatches one recorded call through the replaying router, with the
// session's label as the live step had it before the call's result.
func (sw *sessionWalk) judge(ctx context.Context, call llm.ToolCall, msgs []llm.Message, t int) (replay.Side, error) {
	reg := sw.r.w.router.Registry()
	l := labelOf(reg, msgs[:t])
	if l.Untrusted() && l.Private() {
		c, err := newSessionContent()
		if err != nil {
			return replay.Side{}, err
		}
		c.fold(reg, msgs[:t])
		l.Content = c
	}
	sw.tsess.Label = l
	delegated := sw.r.made[sw.sess.ID+":"+call.ID]
	served := replay.Served{Message: &msgs[t], Delegated: len(delegated) > 0}
	res, err := sw.r.router.Dispatch(replay.Reached(ctx, served, &sw.r.rep.ServedFromRecord),
		tools.Call{ID: call.ID, Name: call.Name, Args: call.Args, Session: sw.tsess})
	if errors.Is(err, tools.ErrInfrastructure) || (err != nil && ctx.Err() != nil) {
		return replay.Side{}, fmt.Errorf("replay %s %s: %w", call.Name, call.ID, err)
	}
	outcome, layer := tools.Classify(err)
	side := replay.Side{Decision: string(outcome), Layer: layer, Error: errString(err)}
	if res.Audit != nil {
		side.Decision, side.Layer = res.Audit.Decision, res.Audit.DenyLayer
		if res.Audit.DenyReason != "" {
			side.Error = res.Audit.DenyReason // as the recorded side reads its row
		}
		if side.Decision == "timed_out" {
			side.Decision = string(tools.OutcomeDenied)
		}
	}
	switch {
	case err == nil && res.Pending && !served.Delegated:
		// The gate holds the call now and nobody decided it: it would wait.
		return replay.Side{Decision: "pending", Layer: "approval", Error: res.Content}, nil
	case errors.Is(err, replay.ErrNotRecorded):
		side = replay.Side{Decision: string(tools.OutcomeAllowed), Error: "would run now: " + replay.ErrNotRecorded.Error()}
	}
	if side.Decision == string(tools.OutcomeAllowed) && delegating(call.Name) {
		side.Delegations = delegationsAsked(call)
	}
	if call.Name == tools.Reply && (err == nil || !isDenied(err)) {
		if err := sw.replyCheck(ctx, call, msgs, t, &side); err != nil {
			return replay.Side{}, err
		}
	}
	return side, nil
}

func isDenied(err error) bool {
	var d *tools.Denied
	return errors.As(err, &d)
}

// delegationsAsked is how many delegations an allowed delegating call makes:
// one task (delegate, code_review's reviewer), or spawn_subagents' tasks.
func delegationsAsked(call llm.ToolCall) int {
	if call.Name != tools.SpawnSubagents {
		return 1
	}
	var a struct {
		Tasks []json.RawMessage `json:"tasks"`
	}
	if json.Unmarshal(call.Args, &a) != nil {
		return 0
	}
	return len(a.Tasks)
}

// replyCheck judges a supervisor's reply call the gate let through with the
// reply checks, as the coordinator does before it finishes the run.
func (sw *sessionWalk) replyCheck(ctx context.Context, call llm.ToolCall, msgs []llm.Message, t int, side *replay.Side) error {
	var a struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(call.Args, &a) != nil || strings.TrimSpace(a.Message) == "" {
		return nil // the handler's own refusal, served from the record
	}
	back, err := sw.r.w.checkReply(ctx, hook.Reply{Node: sw.in.node, Access: sw.in.access, Workspace: sw.r.workspace,
		History: msgs[:t], Answer: a.Message, ViaReplyTool: true})
	if err != nil {
		return fmt.Errorf("reply check of %s: %w", sw.in.node.Name, err)
	}
	switch {
	case back != nil:
		side.Decision, side.Layer, side.Error = string(tools.OutcomeError), "", "reply: "+back.Reason
	case strings.HasPrefix(msgs[t].Content, "error: reply: "):
		// Refused by a reply check then; none refuses it now.
		side.Decision, side.Error = string(tools.OutcomeAllowed), ""
	}
	return nil
}

// answer judges the final answer at i: accepted (the session ended on it) or
// sent back (a user message follows with the reason).
func (sw *sessionWalk) answer(ctx context.Context, i int) error {
	msgs := sw.sess.Messages
	recorded := replay.Side{Decision: "accepted"}
	if i+1 < len(msgs) && msgs[i+1].Role == llm.RoleUser {
		recorded = replay.Side{Decision: "sent_back", Error: truncate(msgs[i+1].Content, 500)}
	}
	replayed := replay.Side{Decision: "accepted"}
	back, err := sw.r.w.checkReply(ctx, hook.Reply{Node: sw.in.node, Access: sw.in.access, Workspace: sw.r.workspace,
		History: msgs[:i], Answer: msgs[i].Content})
	if err != nil {
		return fmt.Errorf("reply check of %s: %w", sw.in.node.Name, err)
	}
	if back != nil {
		replayed = replay.Side{Decision: "sent_back", Error: truncate(back.Reason, 500)}
		sw.fails++
	} else if sw.in.role == "reviewer" {
		if _, perr := review.Parse(msgs[i].Content); perr != nil && !reviewRetried(msgs[:i+1]) {
			replayed = replay.Side{Decision: "sent_back", Error: truncate(review.RetryPrompt(perr), 500)}
		}
	}
	sw.add(replay.Step{Kind: replay.KindAnswer, Recorded: recorded, Replayed: replayed},
		fmt.Sprintf("%s's final answer was %s then and is %s now", sw.sess.Agent, recorded.Decision, replayed.Decision))
	sw.fold(i + 2)
	if back != nil && sw.fails >= sw.r.w.cfg.CircuitBreaker {
		sw.limit("circuit_breaker", fmt.Sprintf("%s: %d answers sent back", sw.in.node.Name, sw.fails), i+1)
	}
	return nil
}

// sideWords is a side in a few words ("denied by rules").
func sideWords(s replay.Side) string {
	if s.Layer != "" {
		return s.Decision + " by " + s.Layer
	}
	return s.Decision
}
