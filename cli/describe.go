package cli

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// describe is one event as --follow, events and runs show print it: the time,
// the agent, the type, and what happened in words. Every type has a detail:
// one this CLI does not know is shown by its data's fields, never as a bare
// type. An approval's lines carry what the operator needs to act: its id, tool,
// tier and why, then the command to type; a decision names who decided what.
// Text from a model or a person goes through printable (no terminal escapes).
func describe(e sseEvent) string {
	var d map[string]any
	_ = json.Unmarshal(e.Data, &d)
	who := e.Agent
	if who == "" {
		who = "-"
	}
	detail, next := eventDetail(e.Type, d)
	if detail == "" {
		detail = genericDetail(d)
	}
	line := fmt.Sprintf("%s %-12s %-20s %s", e.Time.Local().Format("15:04:05"), who, e.Type, printable(detail))
	line = strings.TrimRight(line, " ")
	if next != "" {
		// Under the detail, where the eye goes next.
		line += "\n" + strings.Repeat(" ", 43) + printable(next)
	}
	return line
}

// eventDetail is the detail of the types this CLI knows, and for a pending
// approval the commands that decide it ("" for a type it does not know).
func eventDetail(typ string, d map[string]any) (detail, next string) {
	s := func(k string) string {
		if v, ok := d[k]; ok && v != nil {
			return fmt.Sprint(v)
		}
		return ""
	}
	switch typ {
	case "run.queued":
		detail = "priority " + s("priority")
		if _, ok := d["position"]; ok {
			detail += fmt.Sprintf(", waiting for its key's run limit (%s): position %s", s("run_limit"), s("position"))
		}
	case "run.admitted":
		detail = "a run of its key ended: admitted"
	case "run.started":
		detail = "team " + s("team")
	case "run.completed":
		detail = "result: " + oneLine(s("result"), 100)
	case "run.failed", "run.cancelled":
		detail = strings.TrimPrefix(s("reason")+": "+s("error"), ": ")
	case "delegation.created":
		detail = fmt.Sprintf("→ %s: %s", s("to"), oneLine(s("task"), 100))
	case "delegation.finished":
		detail = s("status")
	case "agent.turn_started":
		detail = "turn of delegation " + s("delegation_id")
	case "agent.message":
		if c := s("content"); c != "" {
			detail = oneLine(c, 100)
		} else {
			detail = "calls " + oneLine(jsonText(d["tool_calls"]), 100)
		}
	case "agent.waiting":
		detail = fmt.Sprintf("rate limited (%s): asks again in %sms", s("limit"), s("retry_after_ms"))
	case "tool.call":
		detail = fmt.Sprintf("%s [%s]", s("tool"), s("decision"))
		if e := s("error"); e != "" {
			detail += " " + oneLine(e, 200)
		}
	case "approval.requested":
		return approvalRequested(s, d)
	case "approval.decided":
		return approvalDecided(s), ""
	case "progress":
		detail = fmt.Sprintf("%s%% %s", s("percent"), s("message"))
	case "notification":
		detail = fmt.Sprintf("[%s] %s", s("level"), s("message"))
	case "session.compacted":
		detail = fmt.Sprintf("history summarized: %s → %s tokens", s("tokens_before"), s("tokens_after"))
	case "memory.injected":
		entries, _ := d["entries"].([]any)
		detail = fmt.Sprintf("%d memory entries of project %s (%s tokens)", len(entries), s("project"), s("tokens"))
	case "flow.labelled":
		detail = "read untrusted content: " + oneLine(jsonText(d["untrusted"]), 150)
	case "flow.untrusted_write":
		detail = fmt.Sprintf("%s wrote %s after reading untrusted content: review it", s("tool"), s("path"))
	case "mailbox.dead_letter":
		detail = fmt.Sprintf("message %s → %s dropped: %s", s("from"), s("to"), s("reason"))
	case "postrun.finish_image":
		detail = fmt.Sprintf("%s: %s done, %s failed, %s skipped", s("status"), s("done"), s("failed"), s("skipped"))
		if files, _ := d["files"].([]any); len(files) > 0 {
			var outs []string
			for _, f := range files {
				if m, _ := f.(map[string]any); m["status"] == "done" {
					outs = append(outs, fmt.Sprint(m["output"]))
				}
			}
			if len(outs) > 0 {
				detail += " → " + strings.Join(outs, ", ")
			}
		}
	}
	return detail, next
}

// approvalRequested: which call (or question) waits, why, and how to decide.
func approvalRequested(s func(string) string, d map[string]any) (detail, next string) {
	id := s("approval_id")
	if s("kind") == "question" {
		detail = fmt.Sprintf("%s question: %s", id, oneLine(s("question"), 150))
		if choices, _ := d["choices"].([]any); len(choices) > 0 {
			var cs []string
			for _, c := range choices {
				cs = append(cs, fmt.Sprint(c))
			}
			detail += " [" + strings.Join(cs, " | ") + "]"
		}
		return detail, fmt.Sprintf("answer: aetherium approvals answer %s ANSWER", id)
	}
	detail = fmt.Sprintf("%s %s (%s) waits for a human", id, s("tool"), s("tier"))
	if why := s("why"); why != "" {
		detail += ": " + oneLine(why, 150)
	}
	return detail, fmt.Sprintf("approve: aetherium approvals approve %s · deny: aetherium approvals deny %s --reason WHY · details: aetherium approvals show %s", id, id, id)
}

// approvalDecided: who decided what, and with what reason, grant or answer.
func approvalDecided(s func(string) string) string {
	subject := s("approval_id")
	if t := s("tool"); t != "" && s("kind") != "question" {
		subject += " " + t
	}
	detail := fmt.Sprintf("%s: %s by %s", subject, s("status"), s("decided_by"))
	if a := s("answer"); a != "" {
		detail += ": " + oneLine(a, 150)
	}
	if r := s("reason"); r != "" {
		detail += fmt.Sprintf(" (%s)", oneLine(r, 150))
	}
	if s("edited") == "true" {
		detail += ", with edited arguments"
	}
	if g := s("grant_id"); g != "" {
		detail += ", grant " + g
	}
	return detail
}

// genericDetail shows an event of a type this CLI does not know by its data:
// key=value, sorted, values on one line and shortened.
func genericDetail(d map[string]any) string {
	keys := make([]string, 0, len(d))
	for k := range d {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		v := d[k]
		var text string
		switch v := v.(type) {
		case string:
			text = oneLine(v, 80)
		case nil:
			text = "null"
		case map[string]any, []any:
			text = oneLine(jsonText(v), 80)
		default:
			text = fmt.Sprint(v)
		}
		parts = append(parts, k+"="+text)
	}
	if len(parts) == 0 {
		return "(no data)"
	}
	return oneLine(strings.Join(parts, " "), 200)
}

func jsonText(v any) string {
	raw, _ := json.Marshal(v)
	return string(raw)
}
