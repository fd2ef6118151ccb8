package openai_test

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/llm/llmtest"
	"github.com/aetherium-engine/aetherium/llm/openai"
	"github.com/stretchr/testify/require"
)

func newProvider(t *testing.T, opts llmtest.Options) llm.Provider {
	t.Helper()
	p, err := openai.New(openai.Config{
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
		cfg     openai.Config
		wantErr string
	}{
		{name: "defaults", cfg: openai.Config{Model: "gpt-test", APIKey: "k"}},
		{name: "local server without key or model", cfg: openai.Config{BaseURL: "http://localhost:11434/v1"}},
		{name: "relative base URL", cfg: openai.Config{BaseURL: "localhost:11434/v1"}, wantErr: "invalid BaseURL"},
		{name: "unparsable base URL", cfg: openai.Config{BaseURL: "http://[::1"}, wantErr: "invalid BaseURL"},
		{name: "negative timeout", cfg: openai.Config{Timeout: -time.Second}, wantErr: "negative Timeout"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, err := openai.New(tc.cfg)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, "openai", p.Name())
		})
	}
}

func TestNoModelIsAClearError(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewServer(t, fake{}.Path(), llmtest.JSON(fake{}.Answer(llmtest.Answer{Text: "hi"})))
	p, err := openai.New(openai.Config{BaseURL: srv.URL})
	require.NoError(t, err)

	_, err = p.Complete(t.Context(), llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}})
	require.ErrorContains(t, err, "no model")
	require.Zero(t, srv.Count())
}

func TestAuthorizationHeader(t *testing.T) {
	// Not parallel: t.Setenv checks that OPENAI_API_KEY never stands in for an
	// empty configured key.
	t.Setenv("OPENAI_API_KEY", "from-the-environment")
	tests := []struct {
		name   string
		apiKey string
		want   string
	}{
		{name: "key is a bearer token", apiKey: "sk-test", want: "Bearer sk-test"},
		{name: "empty key sends no header", apiKey: "", want: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := llmtest.NewServer(t, fake{}.Path(), llmtest.JSON(fake{}.Answer(llmtest.Answer{Model: "m", Text: "hi"})))
			p, err := openai.New(openai.Config{BaseURL: srv.URL, APIKey: tc.apiKey, Model: "m"})
			require.NoError(t, err)
			_, err = p.Complete(t.Context(), llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}})
			require.NoError(t, err)
			require.Equal(t, tc.want, srv.Last(t).Header.Get("Authorization"))
		})
	}
}

func TestWireShape(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewServer(t, fake{}.Path(), llmtest.JSON(fake{}.Answer(llmtest.Answer{Model: "m", Text: "ok"})))
	p := newProvider(t, llmtest.Options{BaseURL: srv.URL, Model: "m", MaxRetries: 1})

	_, err := p.Complete(t.Context(), llm.Request{
		Messages: []llm.Message{
			{Role: llm.RoleSystem, Content: "sys"},
			{Role: llm.RoleUser, Content: "go"},
			{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{
				{ID: "c1", Name: "ls", Args: json.RawMessage(`{}`)},
				{ID: "c2", Name: "noargs"},
			}},
			{Role: llm.RoleTool, ToolCallID: "c1", Content: "a\nb"},
			{Role: llm.RoleTool, ToolCallID: "c2", Content: "failed", IsError: true},
		},
		Tools: []llm.ToolDef{{Name: "noargs", Description: "No parameters."}},
	})
	require.NoError(t, err)

	var body struct {
		Messages []map[string]any `json:"messages"`
		Tools    []map[string]any `json:"tools"`
		Max      *int             `json:"max_completion_tokens"`
	}
	require.NoError(t, json.Unmarshal(srv.Last(t).Body, &body))
	require.Nil(t, body.Max, "no max_completion_tokens when the request leaves it to the server")

	roles := make([]string, 0, len(body.Messages))
	for _, m := range body.Messages {
		roles = append(roles, m["role"].(string))
	}
	require.Equal(t, []string{"system", "user", "assistant", "tool", "tool"}, roles)

	calls := body.Messages[2]["tool_calls"].([]any)
	require.Len(t, calls, 2)
	second := calls[1].(map[string]any)
	require.Equal(t, "function", second["type"])
	require.Equal(t, "{}", second["function"].(map[string]any)["arguments"], "missing args are sent as an empty object")
	require.Equal(t, "c2", body.Messages[4]["tool_call_id"])

	require.Len(t, body.Tools, 1)
	params, err := json.Marshal(body.Tools[0]["function"].(map[string]any)["parameters"])
	require.NoError(t, err)
	require.JSONEq(t, `{"type":"object","properties":{}}`, string(params), "a tool without a schema takes no arguments")
}

func TestAnswerEdgeCases(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		body      string
		want      llm.Message
		malformed bool
	}{
		{
			name:      "no choices",
			body:      `{"id":"x","object":"chat.completion","model":"m","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":0}}`,
			malformed: true,
		},
		{
			name:      "JSON that is not an object",
			body:      `["choices"]`,
			malformed: true,
		},
		{
			name:      "custom tool call",
			body:      `{"model":"m","choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"custom","custom":{"name":"x","input":"y"}}]}}]}`,
			malformed: true,
		},
		{
			name: "refusal becomes the content",
			body: `{"model":"m","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":null,"refusal":"I can't help with that."}}]}`,
			want: llm.Message{Role: llm.RoleAssistant, Content: "I can't help with that."},
		},
		{
			name: "empty arguments and missing id from a local server",
			body: `{"model":"m","choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":"","tool_calls":[{"type":"function","function":{"name":"ls","arguments":""}}]}}]}`,
			want: llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "call_0", Name: "ls", Args: json.RawMessage(`{}`)}}},
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
			require.Equal(t, tc.want, resp.Message)
			require.Equal(t, "m", resp.Model)
		})
	}
}

func TestBadToolSchemaIsRejectedBeforeSending(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewServer(t, fake{}.Path(), llmtest.JSON(fake{}.Answer(llmtest.Answer{Text: "hi"})))
	p := newProvider(t, llmtest.Options{BaseURL: srv.URL, Model: "m", MaxRetries: 1})
	_, err := p.Complete(t.Context(), llm.Request{
		Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}},
		Tools:    []llm.ToolDef{{Name: "bad", Parameters: json.RawMessage(`["not","an","object"]`)}},
	})
	require.ErrorContains(t, err, `tool "bad"`)
	require.Zero(t, srv.Count())
}

// OpenAI's automatic prompt cache hits only a byte-identical prefix: the body
// of a session's turn n+1 must start with turn n's, up to the end of turn n's
// messages, and the same request must encode to the same bytes.
func TestSessionRequestsShareAPrefix(t *testing.T) {
	t.Parallel()
	tools := []llm.ToolDef{
		{Name: "read_file", Description: "Read.", Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"},"limit":{"type":"integer","maximum":100}},"required":["path"]}`)},
		{Name: "ls"},
	}
	turn1 := []llm.Message{
		{Role: llm.RoleSystem, Content: "You are terse."},
		{Role: llm.RoleUser, Content: "Read main.go."},
	}
	turn2 := append(append([]llm.Message(nil), turn1...),
		llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "c1", Name: "read_file", Args: json.RawMessage(`{"path": "main.go"}`)}}},
		llm.Message{Role: llm.RoleTool, ToolCallID: "c1", Content: "package main"},
	)
	turn3 := append(append([]llm.Message(nil), turn2...),
		llm.Message{Role: llm.RoleAssistant, Content: "It is empty."},
		llm.Message{Role: llm.RoleUser, Content: "Thanks."},
	)
	srv := llmtest.NewServer(t, fake{}.Path(), llmtest.JSON(fake{}.Answer(llmtest.Answer{Model: "m", Text: "ok"})))
	p := newProvider(t, llmtest.Options{BaseURL: srv.URL, Model: "m", MaxRetries: 1})
	send := func(msgs []llm.Message, maxTokens int) []byte {
		t.Helper()
		_, err := p.Complete(t.Context(), llm.Request{Messages: msgs, Tools: tools, MaxTokens: maxTokens})
		require.NoError(t, err)
		return srv.Last(t).Body
	}
	bodies := [][]byte{send(turn1, 0), send(turn2, 100), send(turn3, 0)}
	require.Equal(t, bodies[0], send(turn1, 0), "the same request encodes to the same bytes")

	for i := range len(bodies) - 1 {
		var req struct {
			Messages json.RawMessage `json:"messages"`
		}
		require.NoError(t, json.Unmarshal(bodies[i], &req))
		at := bytes.Index(bodies[i], req.Messages)
		require.Positive(t, at)
		// Up to the messages' closing bracket, which the next turn replaces
		// with a comma and its new messages.
		prefix := bodies[i][:at+len(req.Messages)-1]
		require.True(t, bytes.HasPrefix(bodies[i+1], prefix), "turn %d:\n%s\nturn %d:\n%s", i+1, bodies[i], i+2, bodies[i+1])
		require.Less(t, bytes.Index(bodies[i], []byte(`"tools"`)), at, "the tools are part of the shared prefix")
	}
}

func TestBadUsageIsMalformed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		usage string
	}{
		{name: "negative prompt tokens", usage: `{"prompt_tokens":-1,"completion_tokens":1}`},
		{name: "negative cached tokens", usage: `{"prompt_tokens":10,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":-2}}`},
		{name: "more cached than prompt tokens", usage: `{"prompt_tokens":10,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":11}}`},
		{name: "absurd completion tokens", usage: `{"prompt_tokens":10,"completion_tokens":9000000000000}`},
		{name: "beyond int64", usage: `{"prompt_tokens":99999999999999999999,"completion_tokens":1}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			body := `{"model":"m","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"hi"}}],"usage":` + tc.usage + `}`
			srv := llmtest.NewServer(t, fake{}.Path(), llmtest.JSON([]byte(body)))
			p := newProvider(t, llmtest.Options{BaseURL: srv.URL, Model: "m", MaxRetries: 1})
			_, err := p.Complete(t.Context(), llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}})
			require.ErrorIs(t, err, llm.ErrMalformed)
		})
	}
}
