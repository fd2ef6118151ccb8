package worker

import (
	"context"
	"encoding/json"
	"time"

	"github.com/aetherium-engine/aetherium/events"
	"github.com/aetherium-engine/aetherium/knowledge"
	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/memory"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/tools"
)

// Project runs (issue 17): the project's workspace, its knowledge folder indexed
// when a run starts, its memory recalled into a new session and extended when a
// session ends.

// indexProjectFolder indexes the files a person added under the project's
// knowledge/ folder, once per run (the supervisor's first step; a redelivery
// re-reads and finds the hashes unchanged).
func (s *stepRun) indexProjectFolder(ctx context.Context, workspace string) {
	w := s.w
	if w.knowledge == nil || s.in.run.ProjectID == "" || s.in.role != "supervisor" || s.sess.Steps > 0 {
		return
	}
	if _, err := knowledge.IndexFolder(ctx, w.knowledge, s.in.run.ProjectID, workspace); err != nil {
		s.log.WarnContext(ctx, "project knowledge folder not fully indexed", "project", s.in.run.Project, "project_id", s.in.run.ProjectID, "err", err)
	}
}

// injectMemory adds the project's memory, recalled for this session's task, to a
// new session's context (after its prompt, before its task), as quoted data.
// It is saved with the session, so a redelivered step sees the same block; the
// run's events record which entries were injected and why.
func (s *stepRun) injectMemory(ctx context.Context) error {
	project := s.in.run.ProjectID
	if project == "" || s.in.role == "reviewer" || s.sess.Steps > 0 || len(s.sess.Messages) != 2 {
		return nil
	}
	task := s.sess.Messages[1].Content
	cands, err := s.recallMemory(ctx, project, task)
	if err != nil {
		return err
	}
	entries := make([]memory.Entry, len(cands))
	for i, c := range cands {
		entries[i] = memory.Entry{ID: c.ID, Project: c.Project, Scope: c.Scope, Agent: c.Agent, RunID: c.RunID, Content: c.Content,
			Author: c.Author, At: c.CreatedAt, Relevance: c.Relevance}
	}
	ranked := memory.Rank(s.w.memory, entries, s.in.node.Name, time.Now())
	block := memory.Format(ranked)
	if block == "" {
		return nil
	}
	byID := make(map[int64]store.MemoryEntry, len(cands))
	for _, c := range cands {
		byID[c.ID] = c
	}
	prov, err := s.w.memoryProvenance(ctx, ranked, byID)
	if err != nil {
		return err
	}
	msgs := make([]llm.Message, 0, 3)
	msgs = append(msgs, s.sess.Messages[0], llm.Message{Role: llm.RoleSystem, Content: block, Provenance: prov}, s.sess.Messages[1])
	s.sess.Messages = msgs
	s.sess.Rewrite(1) // the task row becomes the memory block's, the task the next
	picked := make([]events.MemoryEntryRef, len(ranked))
	for i, r := range ranked {
		picked[i] = events.MemoryEntryRef{ID: r.ID, Score: r.Score, Relevance: r.Relevance, RunID: r.RunID, Agent: r.Agent, Scope: r.Scope}
	}
	return s.w.events.Emit(ctx, s.in.run.ID, "memory:"+s.sess.ID, events.MemoryInjected, s.in.node.Name, events.MemoryInjectedData{
		Project: project, Entries: picked, Tokens: memory.Tokens(block),
	})
}

// memoryAsked is what a step's acquire reads for injectMemory's recall (a
// store.MemoryAt of the run's project and the session's task), or nil: no
// recaller that would use it, or no session this step creates that recalls.
// A session that exists already (a redelivery of a first step that did not
// save) recalls without it.
func (w *Worker) memoryAsked(in stepInput) *store.MemoryAt {
	if w.recallAt == nil || in.run.ProjectID == "" || in.role == "reviewer" || len(in.initial.Messages) != 2 ||
		in.delegation != nil && in.delegation.Status != store.DelegationPending {
		return nil
	}
	return &store.MemoryAt{Project: in.run.ProjectID, Text: in.initial.Messages[1].Content}
}

// recallMemory reads the recall's candidates: as of the session's acquire when
// it read them for this project and task (the index then answers without a
// round trip when it is current), else as of now.
func (s *stepRun) recallMemory(ctx context.Context, project, task string) ([]store.MemoryEntry, error) {
	if at := s.memoryAt; at != nil && s.w.recallAt != nil && at.Project == project && at.Text == task {
		return s.w.recallAt.RecallMemoryAt(ctx, *at, s.in.node.Name, s.w.memory.Candidates)
	}
	return s.w.recall.RecallMemory(ctx, project, s.in.node.Name, task, s.w.memory.Candidates)
}

// sessionMemory is the long-term entry of a session that ends with this save:
// its task and its final answer, condensed (no model call). A supervisor's entry
// is the project's; a worker's or subagent's is its own agent's.
func (w *Worker) sessionMemory(in stepInput, sess *store.Session) *store.MemoryEntry {
	if in.run.ProjectID == "" || sess.Status != "done" || in.role == "reviewer" {
		return nil
	}
	task := ""
	for _, m := range sess.Messages {
		if m.Role == llm.RoleUser {
			task = m.Content
			break
		}
	}
	answer := finalAnswer(sess.Messages)
	if answer == "" {
		return nil
	}
	scope := memory.ScopeAgent
	if in.role == "supervisor" {
		scope = memory.ScopeProject
	}
	// The writer's label goes with the entry: the entry outlives the session
	// (retention), and a recall must still name what the writer had read.
	prov := labelOf(w.router.Registry(), sess.Messages).Record()
	if prov == nil {
		prov = &llm.Provenance{}
	}
	raw, err := json.Marshal(prov)
	if err != nil {
		raw = nil // unreachable: two string slices; the recall then derives it
	}
	return &store.MemoryEntry{Project: in.run.ProjectID, Tier: store.MemoryLongTerm, Scope: scope, Agent: in.node.Name,
		RunID: in.run.ID, SessionID: sess.ID, Content: memory.Condense(task, answer, w.memory.EntryChars), Provenance: raw}
}

// finalAnswer is what a finished session answered: its last assistant text, or
// the message of the reply call that ended it.
func finalAnswer(msgs []llm.Message) string {
	for i := len(msgs) - 1; i >= 0; i-- {
		m := msgs[i]
		if m.Role != llm.RoleAssistant {
			continue
		}
		if m.Content != "" {
			return m.Content
		}
		for _, c := range m.ToolCalls {
			if c.Name == tools.Reply {
				var a struct {
					Message string `json:"message"`
				}
				if json.Unmarshal(c.Args, &a) == nil && a.Message != "" {
					return a.Message
				}
			}
		}
	}
	return ""
}
