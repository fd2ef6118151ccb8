// Package script is the deterministic LLM provider: it replays a screenplay of tool
// calls per agent, so whole runs are testable and demoable without a model.
//
// The turn to play is the number of assistant messages already in the conversation,
// so a redelivered step replays exactly the same answer (idempotent by construction).
package script

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aetherium-engine/aetherium/llm"
)

// Script is the screenplay: agent name → its turns, in order.
type Script struct {
	Agents map[string][]Turn `yaml:"agents" json:"agents"`
}

// Turn is one model message: tool calls, or a final `say` with no tool calls.
type Turn struct {
	Calls []Call `yaml:"calls,omitempty" json:"calls,omitempty"`
	Say   string `yaml:"say,omitempty" json:"say,omitempty"`
}

// Call is one scripted tool call.
type Call struct {
	Tool string         `yaml:"tool" json:"tool"`
	Args map[string]any `yaml:"args,omitempty" json:"args,omitempty"`
}

// ErrExhausted reports an agent that asked for more turns than its script has. It
// is llm.ErrExhausted, so the agent loop recognizes it without importing this
// provider.
var ErrExhausted = llm.ErrExhausted

// Validate reports turns that are neither calls nor say, or both.
func (s Script) Validate() []error {
	var errs []error
	for agent, turns := range s.Agents {
		for i, t := range turns {
			if (len(t.Calls) == 0) == (t.Say == "") {
				errs = append(errs, fmt.Errorf("script.agents.%s[%d]: a turn has either calls or say", agent, i))
			}
			for j, c := range t.Calls {
				if c.Tool == "" {
					errs = append(errs, fmt.Errorf("script.agents.%s[%d].calls[%d]: tool is required", agent, i, j))
				}
			}
		}
	}
	return errs
}

// Provider replays a Script.
type Provider struct {
	script Script
	// latency is slept before each answer (benchmarks of I/O-bound fleets).
	latency time.Duration
}

// New returns a provider replaying s; latency simulates model think time.
func New(s Script, latency time.Duration) *Provider {
	return &Provider{script: s, latency: latency}
}

// Name implements llm.Provider.
func (p *Provider) Name() string { return "script" }

// Complete implements llm.Provider.
func (p *Provider) Complete(ctx context.Context, req llm.Request) (llm.Response, error) {
	if p.latency > 0 {
		t := time.NewTimer(p.latency)
		select {
		case <-ctx.Done():
			t.Stop()
			return llm.Response{}, ctx.Err()
		case <-t.C:
		}
	}
	if req.Purpose == llm.PurposeSummary {
		// A screenplay has no summaries: a compaction is answered by a
		// deterministic condenser (the same summary however often it is asked).
		msg := llm.Message{Role: llm.RoleAssistant, Content: Condense(req, max(req.MaxTokens, 50)*4)}
		return llm.Response{Message: msg, Usage: estimate(req, msg), Model: "script"}, nil
	}
	turns, ok := p.script.Agents[req.Agent]
	if !ok {
		return llm.Response{}, fmt.Errorf("%w: agent %q has no script", ErrExhausted, req.Agent)
	}
	// Turns a compaction summarized count: the screenplay goes on where it was.
	idx := llm.Answers(req.Messages)
	if idx >= len(turns) {
		return llm.Response{}, fmt.Errorf("%w: agent %q asked for turn %d, script has %d", ErrExhausted, req.Agent, idx+1, len(turns))
	}
	t := turns[idx]
	msg := llm.Message{Role: llm.RoleAssistant, Content: t.Say}
	for j, c := range t.Calls {
		args := c.Args
		if args == nil {
			args = map[string]any{}
		}
		raw, err := json.Marshal(args)
		if err != nil {
			return llm.Response{}, fmt.Errorf("script %s turn %d call %d: %w", req.Agent, idx+1, j+1, err)
		}
		msg.ToolCalls = append(msg.ToolCalls, llm.ToolCall{
			ID: fmt.Sprintf("call_%d_%d", idx+1, j+1), Name: c.Tool, Args: raw,
		})
	}
	return llm.Response{Message: msg, Usage: estimate(req, msg), Model: "script"}, nil
}

// estimate counts ~4 bytes per token so budgets behave plausibly with the script model.
func estimate(req llm.Request, out llm.Message) llm.Usage {
	in := 0
	for _, m := range req.Messages {
		in += len(m.Content) + 16
		for _, c := range m.ToolCalls {
			in += len(c.Args) + len(c.Name)
		}
	}
	o := len(out.Content)
	for _, c := range out.ToolCalls {
		o += len(c.Args) + len(c.Name)
	}
	return llm.Usage{InputTokens: in/4 + 1, OutputTokens: o/4 + 1}
}

// Condense is the script model's summary of a compaction request: the first
// line of each message of its transcript (the request's last message), each
// clipped to 160 bytes, the newest kept within limit bytes.
func Condense(req llm.Request, limit int) string {
	if len(req.Messages) == 0 {
		return ""
	}
	var lines []string
	for _, l := range strings.Split(req.Messages[len(req.Messages)-1].Content, "\n") {
		if strings.HasPrefix(l, "[") {
			if len(l) > 160 {
				cut := 160
				for cut > 0 && !utf8.RuneStart(l[cut]) {
					cut--
				}
				l = l[:cut] + "…"
			}
			lines = append(lines, l)
		}
	}
	total, first := 0, 0
	for i := len(lines) - 1; i >= 0; i-- {
		if total+len(lines[i])+1 > limit {
			first = i + 1
			break
		}
		total += len(lines[i]) + 1
	}
	if first == len(lines) {
		return "(nothing to keep)"
	}
	return strings.Join(lines[first:], "\n")
}
