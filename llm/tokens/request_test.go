package tokens_test

import (
	"encoding/json"
	"testing"

	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/llm/tokens"
	"github.com/stretchr/testify/require"
)

// words counts one token a space-separated word, so the overheads show.
type words struct{}

func (words) Count(s string) int {
	n, in := 0, false
	for _, r := range s {
		if r == ' ' {
			in = false
			continue
		}
		if !in {
			n++
		}
		in = true
	}
	return n
}

func (words) Name() string { return "words" }

func TestRequest(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		req  llm.Request
		want int
	}{
		{name: "empty: the reply priming", want: 3},
		{
			name: "one message: overhead, role, content",
			req:  llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "hello there world"}}},
			want: 3 + 3 + 1 + 3,
		},
		{
			name: "a named tool result",
			req:  llm.Request{Messages: []llm.Message{{Role: llm.RoleTool, Content: "file contents", Name: "read_file", ToolCallID: "call_1"}}},
			want: 3 + 3 + 1 + 2 + 1 + 1,
		},
		{
			name: "tool calls: name and arguments",
			req: llm.Request{Messages: []llm.Message{{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{
				{ID: "c1", Name: "read_file", Args: json.RawMessage(`{"path": "a b"}`)},
				{ID: "c2", Name: "list"},
			}}}},
			want: 3 + 3 + 1 + (3 + 1 + 3) + (3 + 1 + 1),
		},
		{
			name: "a tool without parameters is sent the empty schema",
			req:  llm.Request{Tools: []llm.ToolDef{{Name: "now", Parameters: json.RawMessage("null")}}},
			want: 3 + 3 + 1 + 0 + 1,
		},
		{
			name: "tool definitions: name, description, schema",
			req: llm.Request{Tools: []llm.ToolDef{
				{Name: "read_file", Description: "reads a file", Parameters: json.RawMessage(`{"type": "object"}`)},
			}},
			want: 3 + 3 + 1 + 3 + 2,
		},
		{
			name: "MaxTokens is not input",
			req:  llm.Request{MaxTokens: 1000, Messages: []llm.Message{{Role: llm.RoleSystem, Content: "be brief"}}},
			want: 3 + 3 + 1 + 2,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, tokens.Request(words{}, tc.req))
		})
	}
}

func TestRequestMatchesOpenAICookbook(t *testing.T) {
	t.Parallel()
	// The OpenAI cookbook's example conversation ("How to count tokens with
	// tiktoken"): 129 prompt tokens for gpt-4 (cl100k_base) as the API
	// reported them, the first three of its messages carrying a name field
	// that Message spells Name.
	msgs := []llm.Message{
		{Role: llm.RoleSystem, Content: "You are a helpful, pattern-following assistant that translates corporate jargon into plain English."},
		{Role: llm.RoleSystem, Name: "example_user", Content: "New synergies will help drive top-line growth."},
		{Role: llm.RoleSystem, Name: "example_assistant", Content: "Things working well together will increase revenue."},
		{Role: llm.RoleSystem, Name: "example_user", Content: "Let's circle back when we have more bandwidth to touch base on opportunities for increased leverage."},
		{Role: llm.RoleSystem, Name: "example_assistant", Content: "Let's talk later when we're less busy about how to do better."},
		{Role: llm.RoleUser, Content: "This late pivot means we don't have time to boil the ocean for the client deliverable."},
	}
	got := tokens.Request(nil, llm.Request{Model: "gpt-4", Messages: msgs})
	require.Equal(t, 129, got)
}

func TestRequestNilCounterIsTheModels(t *testing.T) {
	t.Parallel()
	req := llm.Request{Model: "claude-sonnet-4-5", Messages: []llm.Message{{Role: llm.RoleUser, Content: english}}}
	require.Equal(t, tokens.Request(tokens.Estimate{}, req), tokens.Request(nil, req))
}

func TestLimitsFits(t *testing.T) {
	t.Parallel()
	l := tokens.Limits{Context: 1000, Output: 100}
	tests := []struct {
		input, output int
		want          bool
	}{
		{900, 100, true},
		{901, 100, false},
		{900, 0, true},
		{950, 50, true},
		{951, 50, false},
		{901, 0, false},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, l.Fits(tc.input, tc.output), "%d + %d", tc.input, tc.output)
	}
}
