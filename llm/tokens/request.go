package tokens

import (
	"math"
	"strings"

	"github.com/aetherium-engine/aetherium/llm"
)

// Overheads of the chat format, as OpenAI documents them for its chat models
// (the "How to count tokens with tiktoken" cookbook): each message is wrapped
// in about three tokens of role and separators, a message's name costs one
// more, and the reply is primed with three. Tool definitions and tool calls
// are not documented; perTool is a guess of the same size for the framing of
// each (OpenAI renders tools into the system prompt, Anthropic into its own),
// and the schema's JSON punctuation, counted as text, runs above the
// rendering's.
const (
	perMessage = 3
	perName    = 1
	perReply   = 3
	perTool    = 3
)

// Request is the input tokens of r as c counts them: every message's role and
// content (a tool result's included), the name and arguments of its tool
// calls, the tool definitions (name, description, JSON schema) and the chat
// format's overheads. Missing arguments and schemas count as the "{}" and
// empty object schema the providers send in their place. A nil c is
// ForModel(r.Model). MaxTokens is not counted: it is the answer's share of the
// window, which the caller adds (see Fits). Counting a long history every turn
// is slow with a tokenizer: pass a Memo.
func Request(c Counter, r llm.Request) int {
	if c == nil {
		c = ForModel(r.Model)
	}
	n := perReply
	for _, m := range r.Messages {
		n += perMessage + c.Count(string(m.Role)) + c.Count(m.Content)
		if m.Name != "" {
			n += perName + c.Count(m.Name)
		}
		for _, tc := range m.ToolCalls {
			n += perTool + c.Count(tc.Name) + c.Count(sent(tc.Args, "{}"))
		}
	}
	for _, t := range r.Tools {
		n += perTool + c.Count(t.Name) + c.Count(t.Description) + c.Count(sent(t.Parameters, emptySchema))
	}
	return n
}

// emptySchema is what both providers send for a tool without parameters.
const emptySchema = `{"type":"object","properties":{}}`

// sent is raw JSON as the providers send it: none (or null) is sent as
// empty, since neither vendor accepts a missing object, and the count must
// not fall short of what goes on the wire.
func sent(raw []byte, empty string) string {
	s := strings.TrimSpace(string(raw))
	if s == "" || s == "null" {
		return empty
	}
	return s
}

// Fits reports whether a request of input tokens, with room for output
// tokens of answer, fits within l's context window; output 0 means l.Output,
// which is what a provider reserves when the request names no max_tokens.
func (l Limits) Fits(input, output int) bool {
	if output <= 0 {
		output = l.Output
	}
	return input <= l.Context-output
}

// ceilScaled is ceil(n × scale) for the small scales of a Calibrator, without
// float noise turning an exact product into one more token.
func ceilScaled(n int, scale float64) int {
	return int(math.Ceil(float64(n)*scale - 1e-9))
}
