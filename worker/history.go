package worker

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/mailbox"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/templates"
	"github.com/aetherium-engine/aetherium/tools"
)

// The pure functions over a session's history: what the step reads from the
// messages it loaded, with no I/O, each unit-tested in history_test.go.

// replyUnsaved reports a supervisor whose reply finished the run but whose session
// was not saved after it (a worker died in between): the step replays the reply —
// idempotent, the run is already completed — so its audit row and event land.
func replyUnsaved(role, status string, msgs []llm.Message) bool {
	if role != "supervisor" || status != store.RunCompleted {
		return false
	}
	p := pendingCalls(msgs)
	return len(p) > 0 && p[0].Name == tools.Reply
}

// delegationResult answers a delegate / spawn_subagents / code_review call once
// all its delegations are finished.
func delegationResult(call llm.ToolCall, ds []store.Delegation) (llm.Message, callState, error) {
	if !allFinished(ds) {
		return llm.Message{}, callWaiting, nil
	}
	msg := llm.Message{Role: llm.RoleTool, ToolCallID: call.ID, Name: call.Name}
	if call.Name != tools.SpawnSubagents { // one delegation: delegate, code_review
		d := ds[0]
		if d.Status == store.DelegationFailed {
			msg.Content, msg.IsError = fmt.Sprintf("%s failed: %s", d.Agent, d.Error), true
		} else {
			msg.Content = d.Result
		}
		return msg, callDone, nil
	}
	type out struct {
		Agent  string `json:"agent"`
		Status string `json:"status"`
		Result string `json:"result,omitempty"`
		Error  string `json:"error,omitempty"`
	}
	res := make([]out, len(ds))
	for i, d := range ds {
		res[i] = out{Agent: d.Agent, Status: d.Status, Result: d.Result, Error: d.Error}
	}
	raw, _ := json.Marshal(res)
	msg.Content = string(raw)
	return msg, callDone, nil
}

func allFinished(ds []store.Delegation) bool {
	for _, d := range ds {
		if d.Status != store.DelegationCompleted && d.Status != store.DelegationFailed {
			return false
		}
	}
	return true
}

func peers(t templates.Template) []string {
	out := []string{t.Supervisor.Name}
	for _, w := range t.Workers {
		out = append(out, w.Name)
	}
	return out
}

// inContext reports whether a mailbox message id already appears in the context.
func inContext(msgs []llm.Message, id string) bool {
	marker := mailbox.Marker(id)
	for _, m := range msgs {
		if m.Compacted != nil && slices.Contains(m.Compacted.Mail, id) {
			return true // shown before a compaction summarized it
		}
		if m.Role == llm.RoleUser && strings.Contains(m.Content, marker) {
			return true
		}
	}
	return false
}

// mailIDs are the ids of the teammates' messages a user message shows (its
// lines in mailbox.Format's form).
func mailIDs(m llm.Message) []string {
	if m.Role != llm.RoleUser {
		return nil
	}
	var ids []string
	for _, line := range strings.Split(m.Content, "\n") {
		if !strings.HasPrefix(line, `{"id":`) {
			continue
		}
		var x struct {
			ID string `json:"id"`
		}
		if json.Unmarshal([]byte(line), &x) == nil && x.ID != "" && strings.HasPrefix(line, mailbox.Marker(x.ID)) {
			ids = append(ids, x.ID)
		}
	}
	return ids
}

// pendingCalls returns the calls of the last assistant message that no tool message
// answers yet.
func pendingCalls(msgs []llm.Message) []llm.ToolCall {
	last := -1
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == llm.RoleAssistant {
			last = i
			break
		}
	}
	if last < 0 || len(msgs[last].ToolCalls) == 0 {
		return nil
	}
	answered := map[string]bool{}
	for _, m := range msgs[last+1:] {
		if m.Role == llm.RoleTool {
			answered[m.ToolCallID] = true
		}
	}
	var out []llm.ToolCall
	for _, c := range msgs[last].ToolCalls {
		if !answered[c.ID] {
			out = append(out, c)
		}
	}
	return out
}

// checkAnswer rejects answers the loop cannot act on and gives every tool call a
// unique id (some servers omit or repeat them).
func checkAnswer(m *llm.Message, step int) error {
	m.Role = llm.RoleAssistant
	if len(m.ToolCalls) == 0 && strings.TrimSpace(m.Content) == "" {
		return fmt.Errorf("%w: empty answer with no tool calls", llm.ErrMalformed)
	}
	// The session cannot store a NUL (PostgreSQL text and jsonb refuse it).
	if strings.ContainsRune(m.Content, 0) {
		return fmt.Errorf("%w: the answer holds a NUL character", llm.ErrMalformed)
	}
	for i, c := range m.ToolCalls {
		if strings.ContainsRune(c.Name, 0) || store.HasNUL(c.Args) {
			return fmt.Errorf("%w: tool call %d holds a NUL character (\\u0000) in its arguments", llm.ErrMalformed, i+1)
		}
		// An unpaired surrogate escape reads as U+FFFD: the session's jsonb
		// would refuse the answer, and its save with it, at every redelivery.
		m.ToolCalls[i].Args = store.JSONBSafe(c.Args)
	}
	// Every id the model gave counts as taken before any is generated, so a
	// generated id never repeats one that comes later in the same answer.
	given := map[string]int{}
	for _, c := range m.ToolCalls {
		given[c.ID]++
	}
	seen := map[string]bool{}
	for i := range m.ToolCalls {
		c := &m.ToolCalls[i]
		if strings.TrimSpace(c.Name) == "" {
			return fmt.Errorf("%w: tool call %d has no name", llm.ErrMalformed, i+1)
		}
		if c.ID == "" || seen[c.ID] {
			id := fmt.Sprintf("call_s%d_%d", step+1, i+1)
			for n := 2; seen[id] || given[id] > 0; n++ {
				id = fmt.Sprintf("call_s%d_%d_%d", step+1, i+1, n)
			}
			c.ID = id
		}
		seen[c.ID] = true
		if len(c.Args) == 0 {
			c.Args = json.RawMessage("{}")
		}
	}
	return nil
}

func callNames(cs []llm.ToolCall) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Name
	}
	return out
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// truncate cuts s to at most n bytes on a character boundary (event payloads must
// stay valid UTF-8).
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
