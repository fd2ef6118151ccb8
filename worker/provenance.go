package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/aetherium-engine/aetherium/events"
	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/mailbox"
	"github.com/aetherium-engine/aetherium/memory"
	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/tools"
)

// maxSourceBytes bounds the argument a label's source quotes.
const maxSourceBytes = 120

// labelOf derives what a session has read from its durable history: the answer to
// every call of a tool whose registration declares what it reads (tools.Reads),
// and the recalled memory injected before its first turn. A failed call counts
// too: its error may quote what the remote chose (a status line, a content type);
// only a call refused before it ran (llm.Message.Refused) or not answered yet has
// read nothing.
// Derived, not stored: the history is saved with every turn, so the label
// survives a crash and a redelivery exactly as the history does, and a replayed
// call cannot be counted twice.
func labelOf(reg *tools.Registry, msgs []llm.Message) *tools.Label {
	l := &tools.Label{}
	walkReads(reg, msgs, func(_ int, p tools.Provenance, source, _ string) { l.Add(p, source) })
	return l
}

// walkReads calls visit for every read the history records, in order: the
// provenance a message carries (a delegation's task or result, a teammate's
// message, recalled memory, a labelled file), injected memory, and the answer
// of every call of a tool whose registration declares what it reads. text is
// the message that holds what was read.
func walkReads(reg *tools.Registry, msgs []llm.Message, visit func(i int, p tools.Provenance, source, text string)) {
	calls := map[string]llm.ToolCall{}
	turn := 0
	for i, m := range msgs {
		if m.Provenance != nil {
			v := via(i, m)
			for _, s := range m.Provenance.Private {
				visit(i, tools.Private, v+s, m.Content)
			}
			for _, s := range m.Provenance.Untrusted {
				visit(i, tools.Untrusted, v+s, m.Content)
			}
		}
		switch m.Role {
		case llm.RoleSystem:
			if i > 0 {
				// injectMemory's block: entries earlier runs of the project wrote.
				visit(i, tools.Private, "recalled memory", m.Content)
			}
		case llm.RoleAssistant:
			turn++
			for _, c := range m.ToolCalls {
				calls[c.ID] = c
			}
		case llm.RoleTool:
			c, ok := calls[m.ToolCallID]
			if !ok || m.Refused {
				continue
			}
			spec, ok := reg.Spec(c.Name)
			if !ok || spec.Reads == tools.Trusted {
				continue
			}
			target := readTarget(c.Args)
			if spec.Reads == tools.Untrusted && spec.LoopbackInSandbox && ownApp(target) {
				// The run's own app (a loopback URL a LoopbackInSandbox tool
				// reaches inside the run's sandbox): the session wrote what it
				// serves, so reading it adds nothing the label lacks. Another
				// tool's loopback URL is the worker host's, whoever serves it.
				continue
			}
			visit(i, spec.Reads, fmt.Sprintf("%s %s (turn %d)", c.Name, target, turn), m.Content)
		}
	}
}

// via names where a message's carried provenance came from, for the approver.
func via(i int, m llm.Message) string {
	switch {
	case i == 0:
		return "via the run's request: "
	case m.Role == llm.RoleTool && m.Name != "":
		return "via " + m.Name + " from "
	case m.Role == llm.RoleSystem:
		return "via recalled memory: "
	case i == 1:
		return "via the delegated task: "
	}
	return "via a teammate's message: "
}

// readTarget is what a call read: its url, path, query or command argument,
// bounded, so an approver sees "web_fetch https://…" rather than a tool name.
func readTarget(args json.RawMessage) string {
	var a map[string]any
	if json.Unmarshal(args, &a) != nil {
		return ""
	}
	for _, k := range []string{"url", "base_url", "path", "query", "command", "source"} {
		if v, ok := a[k].(string); ok && v != "" {
			v = printable(v)
			if len(v) > maxSourceBytes {
				v = strings.ToValidUTF8(v[:maxSourceBytes], "") + "…"
			}
			return v
		}
	}
	return ""
}

// printable is what an approver may be shown of an argument the model (and so the
// page it read) chose: white space folded to single spaces, control and
// formatting characters (NUL, bidi overrides, zero-width) dropped, so a source
// cannot forge lines or reorder the text of the approval card.
func printable(s string) string {
	s = strings.Map(func(r rune) rune {
		switch {
		case unicode.IsSpace(r):
			return ' '
		case unicode.IsControl(r), unicode.Is(unicode.Cf, r), r == utf8.RuneError:
			return -1
		}
		return r
	}, strings.ToValidUTF8(s, ""))
	return strings.Join(strings.Fields(s), " ")
}

// ownApp tells a loopback http(s) URL: the run's app in its own sandbox.
func ownApp(target string) bool {
	u, err := url.Parse(target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	return tools.IsLoopbackHost(u.Hostname())
}

// taskProvenance is what a delegation's task carries: the label of the session
// that delegated, from its history as saved before the delegation's turn was
// enqueued. A delegated agent is steered by its task, so it inherits it. The
// save that recorded the delegation stored that label with it (issue 45: no
// read of the delegating session's history per round trip); a delegation
// without one (recorded by an older build) has it derived here.
func (w *Worker) taskProvenance(ctx context.Context, d store.Delegation) (*llm.Provenance, error) {
	if d.TaskLabel != nil {
		var p llm.Provenance
		if err := json.Unmarshal(d.TaskLabel, &p); err != nil {
			// A label never gets cleaner by a corrupt field.
			return &llm.Provenance{Untrusted: []string{"a delegated task whose stored label did not parse"}}, nil
		}
		if len(p.Private) == 0 && len(p.Untrusted) == 0 {
			return nil, nil
		}
		return &p, nil
	}
	msgs, err := w.store.SessionMessages(ctx, d.ParentSession)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	if msgs == nil {
		return nil, nil // the parent's session is gone with its run
	}
	return labelOf(w.router.Registry(), msgs).Record(), nil
}

// taskLabel is the label taskProvenance reads, as the delegations' stored
// TaskLabel: what a session whose history is msgs had read.
func (w *Worker) taskLabel(msgs []llm.Message) (json.RawMessage, error) {
	return storedLabel(labelOf(w.router.Registry(), msgs).Record(), "the delegations' task label")
}

// requestProvenance is what the run's request carries that no person wrote
// (store.Run.Untrusted: a webhook's payload mapped into its prompt and
// variables). Every session of the run starts with it on its system message:
// the variables render into every agent's prompt, so each session has read
// it, not only the supervisor that was given the prompt.
func requestProvenance(run store.Run) *llm.Provenance {
	if len(run.Untrusted) == 0 {
		return nil
	}
	return &llm.Provenance{Untrusted: slices.Clone(run.Untrusted)}
}

// resultProvenance is what delegations' results carry back to the session that
// asked: what each delegated session read itself (not what it inherited with its
// task or with the run's request, which the parent has already), named by agent.
// The label the ending save stored with the outcome is taken from the row the
// resume already read (issue 45: no read of the whole history per round trip);
// a row without one (finished by an older build or by a redelivery's
// FinishDelegation) has it derived from the saved history, as before.
func (w *Worker) resultProvenance(ctx context.Context, ds []store.Delegation) (*llm.Provenance, error) {
	l := &tools.Label{}
	for _, d := range ds {
		if d.ResultLabel != nil {
			var p llm.Provenance
			if err := json.Unmarshal(d.ResultLabel, &p); err != nil {
				// A label never gets cleaner by a corrupt field.
				l.Add(tools.Untrusted, d.Agent+": a delegation whose stored result label did not parse")
				continue
			}
			l.AddRecord(&p, d.Agent+": ")
			continue
		}
		msgs, err := w.store.SessionMessages(ctx, queue.DelegationSession(d.ID).String())
		if errors.Is(err, store.ErrNotFound) {
			continue // failed before its session began: it read nothing
		}
		if err != nil {
			return nil, err
		}
		l.AddRecord(w.ownLabel(msgs), d.Agent+": ")
	}
	return l.Record(), nil
}

// ownLabel is the label of what a delegated session read itself: its history
// without the provenance of its system message (the run's request) and task
// (the delegating session's), which the parent has already.
func (w *Worker) ownLabel(msgs []llm.Message) *llm.Provenance {
	if len(msgs) > 1 {
		msgs = slices.Clone(msgs)
		msgs[0].Provenance, msgs[1].Provenance = nil, nil
	}
	return labelOf(w.router.Registry(), msgs).Record()
}

// resultLabel is ownLabel as the delegation's stored ResultLabel.
func (w *Worker) resultLabel(msgs []llm.Message) (json.RawMessage, error) {
	return storedLabel(w.ownLabel(msgs), "the delegation's result label")
}

// storedLabel is a label as a delegation's row stores it: "{}" when clean, so
// a stored clean label is told from none stored.
func storedLabel(p *llm.Provenance, what string) (json.RawMessage, error) {
	if p == nil {
		p = &llm.Provenance{}
	}
	raw, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", what, err)
	}
	return raw, nil
}

// mailProvenance joins what the senders of these messages had read, each source
// named with its sender. A message whose provenance does not parse is taken as
// untrusted: the label must never get cleaner by a corrupt field.
func mailProvenance(msgs []mailbox.Message) *llm.Provenance {
	l := &tools.Label{}
	for _, m := range msgs {
		if len(m.Provenance) == 0 {
			continue
		}
		var p llm.Provenance
		if err := json.Unmarshal(m.Provenance, &p); err != nil {
			l.Add(tools.Untrusted, m.From+": a message whose provenance did not parse")
			continue
		}
		l.AddRecord(&p, m.From+": ")
	}
	return l.Record()
}

// memoryProvenance is what recalled entries carry: each entry a session wrote
// (its final answer) has that session's label, stored with the entry when it
// was written, so an instruction a hostile page planted in one run's answer
// comes back untrusted in the next, long after the run itself was deleted. An
// entry a person added adds nothing beyond recalled memory's own private
// label; an older entry whose session is gone counts as untrusted.
func (w *Worker) memoryProvenance(ctx context.Context, entries []memory.Scored, stored map[int64]store.MemoryEntry) (*llm.Provenance, error) {
	l := &tools.Label{}
	for _, e := range entries {
		m := stored[e.ID]
		via := fmt.Sprintf("entry %d: ", e.ID)
		if m.Provenance != nil {
			// Stored when the entry was written: it holds however old the entry.
			var p llm.Provenance
			if err := json.Unmarshal(m.Provenance, &p); err != nil {
				l.Add(tools.Untrusted, via+"a memory entry whose stored provenance did not parse")
				continue
			}
			l.AddRecord(&p, via)
			continue
		}
		if m.SessionID == "" {
			continue // a person's entry
		}
		// Written before entries stored their label: derived from the writing
		// session while it exists.
		msgs, err := w.store.SessionMessages(ctx, m.SessionID)
		if errors.Is(err, store.ErrNotFound) {
			// The session is gone (retention): what it had read is unknown, and
			// a label never gets cleaner for a missing record.
			l.Add(tools.Untrusted, via+"written by session "+printable(m.SessionID)+", which no longer exists: what it had read is unknown")
			continue
		}
		if err != nil {
			return nil, err
		}
		l.AddRecord(labelOf(w.router.Registry(), msgs).Record(), via)
	}
	return l.Record(), nil
}

// relabel derives the session's label from its history (the flow rules judge
// the next call by it) and records a flow.labelled event when it holds more
// untrusted sources than the last one named. The key counts the sources, so a
// redelivered step records nothing twice.
func (s *stepRun) relabel(ctx context.Context) error {
	l := labelOf(s.w.router.Registry(), s.sess.Messages)
	s.tsess.Label = l
	if l.Untrusted() && l.Private() {
		if s.content == nil {
			c, err := newSessionContent()
			if err != nil {
				return err
			}
			s.content = c
		}
		s.content.fold(s.w.router.Registry(), s.sess.Messages)
		l.Content = s.content
	}
	n := l.UntrustedCount()
	if n <= s.labelled {
		return nil
	}
	s.labelled = n
	rec := l.Record()
	return s.w.events.Emit(ctx, s.in.run.ID, fmt.Sprintf("label:%s:%d", s.sess.ID, n), events.FlowLabelled, s.in.node.Name, events.FlowLabelledData{
		Untrusted: rec.Untrusted, Private: rec.Private,
	})
}

// markUntrustedWrite records a flow.untrusted_write event for a file a session
// that had read untrusted content wrote (a tools.WritesPath call that did not
// fail): what it wrote may carry the page's instructions, so it is marked for a
// person's review. The key is the call's, so a redelivered step records it once.
func (s *stepRun) markUntrustedWrite(ctx context.Context, call llm.ToolCall, msg llm.Message) error {
	if msg.IsError || !s.tsess.Label.Untrusted() {
		return nil
	}
	spec, ok := s.w.router.Registry().Spec(call.Name)
	if !ok {
		return nil
	}
	p := writtenPath(spec, call, msg)
	if p == "" {
		return nil
	}
	if rel := workspaceRel(s.tsess.Workspace, p); rel != "" && s.tsess.Workspace != "" {
		if err := labelFile(s.tsess.Workspace, rel, s.tsess.Label.Record().Untrusted); err != nil {
			return err
		}
	}
	return s.w.events.Emit(ctx, s.in.run.ID, "untrusted-write:"+s.sess.ID+":"+call.ID, events.FlowUntrustedWrite, s.in.node.Name, events.FlowUntrustedWriteData{
		Tool: call.Name, Path: printable(p), Untrusted: s.tsess.Label.Record().Untrusted,
	})
}

// writtenPath is the workspace file a successful call wrote: a WritesPath
// tool's argument, or the path in the receipt of a tool that writes where later
// runs read (write_knowledge's knowledge/<slug>.md, which search_knowledge
// later names).
func writtenPath(spec *tools.Spec, call llm.ToolCall, msg llm.Message) string {
	if p := spec.WrittenPath(call.Args); p != "" {
		return p
	}
	if !spec.Persists {
		return ""
	}
	var receipt struct {
		Path string `json:"path"`
	}
	if json.Unmarshal([]byte(msg.Content), &receipt) != nil {
		return ""
	}
	return receipt.Path
}

// inheritFileLabels adds to a private read's answer the labels of the labelled
// workspace files it read (filelabels.go): saved with the history, so labelOf
// counts them like any carried provenance. A call refused before it ran read
// nothing.
func (s *stepRun) inheritFileLabels(call llm.ToolCall, msg *llm.Message) error {
	if msg.Refused {
		return nil
	}
	spec, ok := s.w.router.Registry().Spec(call.Name)
	if !ok {
		return nil
	}
	p, err := fileProvenance(s.tsess.Workspace, spec, call, msg.Content)
	if err != nil || p == nil {
		return err
	}
	if msg.Provenance == nil {
		msg.Provenance = p
		return nil
	}
	msg.Provenance.Untrusted = append(msg.Provenance.Untrusted, p.Untrusted...)
	return nil
}
