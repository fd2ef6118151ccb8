package worker

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"

	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/tools"
)

// maxSourceBytes bounds the argument a label's source quotes.
const maxSourceBytes = 120

// labelOf derives what a session has read from its durable history: the result
// of every call that did not fail, of a tool whose registration declares what it
// reads (tools.Reads), and the recalled memory injected before its first turn.
// Derived, not stored: the history is saved with every turn, so the label
// survives a crash and a redelivery exactly as the history does, and a replayed
// call cannot be counted twice.
func labelOf(reg *tools.Registry, msgs []llm.Message) *tools.Label {
	l := &tools.Label{}
	calls := map[string]llm.ToolCall{}
	turn := 0
	for i, m := range msgs {
		switch m.Role {
		case llm.RoleSystem:
			if i > 0 {
				// injectMemory's block: entries earlier runs of the project wrote.
				l.Add(tools.Private, "recalled memory")
			}
		case llm.RoleAssistant:
			turn++
			for _, c := range m.ToolCalls {
				calls[c.ID] = c
			}
		case llm.RoleTool:
			c, ok := calls[m.ToolCallID]
			if !ok || m.IsError {
				continue
			}
			spec, ok := reg.Spec(c.Name)
			if !ok || spec.Reads == tools.Trusted {
				continue
			}
			target := readTarget(c.Args)
			if spec.Reads == tools.Untrusted && ownApp(target) {
				// The run's own app (loopback in its sandbox): the session wrote
				// what it serves, so reading it adds nothing the label lacks.
				continue
			}
			l.Add(spec.Reads, fmt.Sprintf("%s %s (turn %d)", c.Name, target, turn))
		}
	}
	return l
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
			if len(v) > maxSourceBytes {
				v = strings.ToValidUTF8(v[:maxSourceBytes], "") + "…"
			}
			return v
		}
	}
	return ""
}

// ownApp tells a loopback http(s) URL: the run's app in its own sandbox.
func ownApp(target string) bool {
	u, err := url.Parse(target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	return tools.IsLoopbackHost(u.Hostname())
}
