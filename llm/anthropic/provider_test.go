package anthropic_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/llm/anthropic"
	"github.com/aetherium-engine/aetherium/llm/llmtest"
	"github.com/stretchr/testify/require"
)

func newProvider(t *testing.T, opts llmtest.Options) llm.Provider {
	t.Helper()
	p, err := anthropic.New(anthropic.Config{
		BaseURL:    opts.BaseURL,
		APIKey:     "test-key",
		Model:      opts.Model,
		MaxRetries: opts.MaxRetries,
		Timeout:    10 * time.Second,
		HTTPClient: opts.HTTPClient,
	})
	require.NoError(t, err)
	return p
}

func TestConformance(t *testing.T) {
	t.Parallel()
	llmtest.RunConformance(t, fake{}, newProvider)
}

func TestNewValidatesConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		cfg     anthropic.Config
		wantErr string
	}{
		{name: "defaults", cfg: anthropic.Config{APIKey: "k", Model: "claude-test"}},
		{name: "gateway without key", cfg: anthropic.Config{BaseURL: "http://gateway.internal"}},
		{name: "no key for the real API", cfg: anthropic.Config{Model: "claude-test"}, wantErr: "APIKey is required"},
		{name: "relative base URL", cfg: anthropic.Config{BaseURL: "gateway.internal", APIKey: "k"}, wantErr: "invalid BaseURL"},
		{name: "negative timeout", cfg: anthropic.Config{APIKey: "k", Timeout: -time.Second}, wantErr: "negative Timeout"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, err := anthropic.New(tc.cfg)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, "anthropic", p.Name())
		})
	}
}

func TestNoModelIsAClearError(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewServer(t, fake{}.Path(), llmtest.JSON(fake{}.Answer(llmtest.Answer{Text: "hi"})))
	p, err := anthropic.New(anthropic.Config{BaseURL: srv.URL, APIKey: "k"})
	require.NoError(t, err)

	_, err = p.Complete(t.Context(), llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}})
	require.ErrorContains(t, err, "no model")
	require.Zero(t, srv.Count())
}

func TestCredentials(t *testing.T) {
	// Not parallel: t.Setenv checks that credentials in the environment
	// never stands in for an empty configured key.
	t.Setenv("ANTHROPIC_API_KEY", "from-the-environment")
	t.Setenv("ANTHROPIC_AUTH_TOKEN", "from-the-environment")
	tests := []struct {
		name   string
		apiKey string
	}{
		{name: "configured key is sent", apiKey: "sk-ant-test"},
		{name: "empty key sends none", apiKey: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := llmtest.NewServer(t, fake{}.Path(), llmtest.JSON(fake{}.Answer(llmtest.Answer{Model: "m", Text: "hi"})))
			p, err := anthropic.New(anthropic.Config{BaseURL: srv.URL, APIKey: tc.apiKey, Model: "m"})
			require.NoError(t, err)
			_, err = p.Complete(t.Context(), llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}})
			require.NoError(t, err)

			h := srv.Last(t).Header
			sent := h.Get("X-Api-Key") + " " + h.Get("Authorization")
			require.NotContains(t, sent, "from-the-environment")
			if tc.apiKey == "" {
				require.Empty(t, strings.TrimSpace(sent))
			} else {
				require.Contains(t, sent, tc.apiKey)
			}
			require.NotEmpty(t, h.Get("Anthropic-Version"))
		})
	}
}

type wireMessage struct {
	Role    string           `json:"role"`
	Content []map[string]any `json:"content"`
}

func blockTypes(m wireMessage) []string {
	types := make([]string, 0, len(m.Content))
	for _, b := range m.Content {
		types = append(types, b["type"].(string))
	}
	return types
}

func TestWireShape(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		req   llm.Request
		check func(t *testing.T, maxTokens int, system []map[string]any, msgs []wireMessage)
	}{
		{
			name: "max_tokens defaults when the request leaves it",
			req:  llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}},
			check: func(t *testing.T, maxTokens int, _ []map[string]any, _ []wireMessage) {
				require.Equal(t, anthropic.DefaultMaxTokens, maxTokens)
			},
		},
		{
			name: "system messages go to the system field",
			req: llm.Request{Messages: []llm.Message{
				{Role: llm.RoleSystem, Content: "one"},
				{Role: llm.RoleUser, Content: "hi"},
				{Role: llm.RoleSystem, Content: "two"},
			}},
			check: func(t *testing.T, _ int, system []map[string]any, msgs []wireMessage) {
				require.Len(t, system, 2)
				require.Equal(t, "one", system[0]["text"])
				require.Equal(t, "two", system[1]["text"])
				require.Len(t, msgs, 1)
				require.Equal(t, "user", msgs[0].Role)
			},
		},
		{
			name: "consecutive tool results share one user message",
			req: llm.Request{Messages: []llm.Message{
				{Role: llm.RoleUser, Content: "go"},
				{Role: llm.RoleAssistant, Content: "Running both.", ToolCalls: []llm.ToolCall{
					{ID: "t1", Name: "ls", Args: json.RawMessage(`{"dir":"."}`)},
					{ID: "t2", Name: "noargs"},
				}},
				{Role: llm.RoleTool, ToolCallID: "t1", Content: "a\nb"},
				{Role: llm.RoleTool, ToolCallID: "t2", Content: "boom", IsError: true},
				{Role: llm.RoleUser, Content: "and now?"},
			}},
			check: func(t *testing.T, _ int, _ []map[string]any, msgs []wireMessage) {
				require.Len(t, msgs, 3)
				require.Equal(t, "assistant", msgs[1].Role)
				require.Equal(t, []string{"text", "tool_use", "tool_use"}, blockTypes(msgs[1]))
				require.Equal(t, map[string]any{}, msgs[1].Content[2]["input"], "missing args are sent as an empty object")

				require.Equal(t, "user", msgs[2].Role)
				require.Equal(t, []string{"tool_result", "tool_result", "text"}, blockTypes(msgs[2]), "tool results come first")
				require.Equal(t, "t1", msgs[2].Content[0]["tool_use_id"])
				require.NotEqual(t, true, msgs[2].Content[0]["is_error"])
				require.Equal(t, "t2", msgs[2].Content[1]["tool_use_id"])
				require.Equal(t, true, msgs[2].Content[1]["is_error"])
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := llmtest.NewServer(t, fake{}.Path(), llmtest.JSON(fake{}.Answer(llmtest.Answer{Model: "m", Text: "ok"})))
			p := newProvider(t, llmtest.Options{BaseURL: srv.URL, Model: "m", MaxRetries: 1})
			_, err := p.Complete(t.Context(), tc.req)
			require.NoError(t, err)

			var body struct {
				MaxTokens int              `json:"max_tokens"`
				System    []map[string]any `json:"system"`
				Messages  []wireMessage    `json:"messages"`
			}
			require.NoError(t, json.Unmarshal(srv.Last(t).Body, &body))
			tc.check(t, body.MaxTokens, body.System, body.Messages)
		})
	}
}

func TestAnswerEdgeCases(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		body      string
		want      llm.Response
		malformed bool
	}{
		{
			name:      "tool_use stop without a tool_use block",
			body:      `{"type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"calling"}],"stop_reason":"tool_use","usage":{"input_tokens":1,"output_tokens":1}}`,
			malformed: true,
		},
		{
			name:      "tool call cut off by max_tokens",
			body:      `{"type":"message","role":"assistant","model":"m","content":[{"type":"tool_use","id":"t","name":"write","input":{"path":"a"}}],"stop_reason":"max_tokens","usage":{"input_tokens":1,"output_tokens":1}}`,
			malformed: true,
		},
		{
			name:      "JSON that is not an object",
			body:      `"message"`,
			malformed: true,
		},
		{
			name: "thinking is dropped, text blocks are joined, cache tokens count as input",
			body: `{"type":"message","role":"assistant","model":"claude-x","content":[` +
				`{"type":"thinking","thinking":"hmm","signature":"sig"},` +
				`{"type":"text","text":"Hello, "},{"type":"text","text":"world."}` +
				`],"stop_reason":"end_turn","usage":{"input_tokens":10,"cache_creation_input_tokens":100,"cache_read_input_tokens":1000,"output_tokens":7}}`,
			want: llm.Response{
				Message:  llm.Message{Role: llm.RoleAssistant, Content: "Hello, world."},
				Usage:    llm.Usage{InputTokens: 1110, OutputTokens: 7, CachedInputTokens: 1000, CacheWriteTokens: 100},
				Model:    "claude-x",
				Provider: "anthropic",
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := llmtest.NewServer(t, fake{}.Path(), llmtest.JSON([]byte(tc.body)))
			p := newProvider(t, llmtest.Options{BaseURL: srv.URL, Model: "m", MaxRetries: 1})
			resp, err := p.Complete(t.Context(), llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}})
			if tc.malformed {
				require.ErrorIs(t, err, llm.ErrMalformed)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, resp)
		})
	}
}

// breakpoints lists where a request body puts cache_control: "tools[i]",
// "system[i]", "messages[i][j]".
func breakpoints(t *testing.T, body []byte) []string {
	t.Helper()
	var req struct {
		Tools    []map[string]any `json:"tools"`
		System   []map[string]any `json:"system"`
		Messages []wireMessage    `json:"messages"`
	}
	require.NoError(t, json.Unmarshal(body, &req))
	var at []string
	mark := func(where string, b map[string]any) {
		if cc, ok := b["cache_control"]; ok {
			require.Equal(t, map[string]any{"type": "ephemeral"}, cc, where)
			at = append(at, where)
		}
	}
	for i, b := range req.Tools {
		mark(fmt.Sprintf("tools[%d]", i), b)
	}
	for i, b := range req.System {
		mark(fmt.Sprintf("system[%d]", i), b)
	}
	for i, m := range req.Messages {
		for j, b := range m.Content {
			mark(fmt.Sprintf("messages[%d][%d]", i, j), b)
		}
	}
	return at
}

func TestPromptCacheBreakpoints(t *testing.T) {
	t.Parallel()
	off := false
	tools := []llm.ToolDef{{Name: "ls"}, {Name: "cat"}, {Name: "grep"}}
	session := []llm.Message{
		{Role: llm.RoleSystem, Content: "You are terse."},
		{Role: llm.RoleSystem, Content: "Work in /src."},
		{Role: llm.RoleUser, Content: "List and read."},
		{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "t1", Name: "ls"}}},
		{Role: llm.RoleTool, ToolCallID: "t1", Content: "a.go"},
		{Role: llm.RoleAssistant, Content: "Reading.", ToolCalls: []llm.ToolCall{{ID: "t2", Name: "cat"}, {ID: "t3", Name: "cat"}}},
		{Role: llm.RoleTool, ToolCallID: "t2", Content: "package a"},
		{Role: llm.RoleTool, ToolCallID: "t3", Content: "", IsError: true},
	}
	tests := []struct {
		name  string
		cache *bool
		req   llm.Request
		want  []string
	}{
		{
			name: "tools, system, the newest message and the previous turn's",
			req:  llm.Request{Messages: session, Tools: tools},
			want: []string{"tools[2]", "system[1]", "messages[2][0]", "messages[4][1]"},
		},
		{
			name: "first turn: one message breakpoint",
			req:  llm.Request{Messages: session[:3], Tools: tools},
			want: []string{"tools[2]", "system[1]", "messages[0][0]"},
		},
		{
			name: "no tools and no system",
			req:  llm.Request{Messages: session[2:5]},
			want: []string{"messages[0][0]", "messages[2][0]"},
		},
		{
			name:  "switched off",
			cache: &off,
			req:   llm.Request{Messages: session, Tools: tools},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := llmtest.NewServer(t, fake{}.Path(), llmtest.JSON(fake{}.Answer(llmtest.Answer{Model: "m", Text: "ok"})))
			p, err := anthropic.New(anthropic.Config{BaseURL: srv.URL, Model: "m", PromptCache: tc.cache})
			require.NoError(t, err)
			_, err = p.Complete(t.Context(), tc.req)
			require.NoError(t, err)
			got := breakpoints(t, srv.Last(t).Body)
			require.Equal(t, tc.want, got)
			require.LessOrEqual(t, len(got), 4, "the API allows four breakpoints")
			_, err = fake{}.Decode(srv.Last(t).Body)
			require.NoError(t, err, "the marked request is still a valid one")
		})
	}
}

func TestBadUsageIsMalformed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		usage string
	}{
		{name: "negative input", usage: `{"input_tokens":-1,"output_tokens":1}`},
		{name: "negative cache read", usage: `{"input_tokens":1,"cache_read_input_tokens":-100,"output_tokens":1}`},
		{name: "absurd output", usage: `{"input_tokens":1,"output_tokens":1000000000}`},
		{name: "counts whose sum overflows", usage: `{"input_tokens":4611686018427387904,"cache_read_input_tokens":4611686018427387904,"cache_creation_input_tokens":4611686018427387904,"output_tokens":1}`},
		{name: "not an integer", usage: `{"input_tokens":1.5,"output_tokens":1}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			body := `{"type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":` + tc.usage + `}`
			srv := llmtest.NewServer(t, fake{}.Path(), llmtest.JSON([]byte(body)))
			p := newProvider(t, llmtest.Options{BaseURL: srv.URL, Model: "m", MaxRetries: 1})
			_, err := p.Complete(t.Context(), llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}})
			require.ErrorIs(t, err, llm.ErrMalformed)
		})
	}
}
