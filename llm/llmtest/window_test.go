package llmtest_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/llm/anthropic"
	"github.com/aetherium-engine/aetherium/llm/llmtest"
	"github.com/aetherium-engine/aetherium/llm/openai"
	llmtokens "github.com/aetherium-engine/aetherium/llm/tokens"
	"github.com/stretchr/testify/require"
)

// modelOf is a model of each wire's vendor, so that the fake counts with the
// vendor's counter (tiktoken for OpenAI's, the estimate for Anthropic's).
var modelOf = map[string]string{llmtest.WireOpenAI: "gpt-4o", llmtest.WireAnthropic: "claude-sonnet-4-5"}

// userTokens is what the fake counts for a body of one user message.
func userTokens(model, text string) int {
	return llmtokens.Request(llmtokens.ForModel(model), llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: text}}})
}

func TestUpstreamContextWindow(t *testing.T) {
	t.Parallel()
	text := strings.Repeat("the session grows with every turn ", 20)
	for _, wire := range wires {
		t.Run(wire, func(t *testing.T) {
			t.Parallel()
			model := modelOf[wire]
			in := userTokens(model, text)
			const maxTokens = 100
			tests := []struct {
				name      string
				window    int
				maxTokens int
				refused   bool
				message   string
			}{
				{name: "exactly full fits", window: in + maxTokens, maxTokens: maxTokens},
				{name: "one over is refused", window: in + maxTokens - 1, maxTokens: maxTokens, refused: true},
				{name: "input alone too long", window: in - 1, maxTokens: maxTokens, refused: true},
			}
			if wire == llmtest.WireOpenAI {
				tests = append(tests, struct {
					name      string
					window    int
					maxTokens int
					refused   bool
					message   string
				}{name: "no max_tokens: the messages alone", window: in - 1, refused: true})
			}
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					u := startUpstream(t, llmtest.UpstreamConfig{Wire: wire, ContextWindow: map[string]int{model: tc.window, "*": 1}})
					a := do(t, http.MethodPost, endpoint(wire, u), request(wire, model, userMessages(text), tc.maxTokens))
					s := u.Stats()
					require.Equal(t, in, s.Models[model].MaxInputTokens)
					if !tc.refused {
						require.Equal(t, http.StatusOK, a.status, "%s", a.raw)
						usage := a.body["usage"].(map[string]any)
						key := "input_tokens"
						if wire == llmtest.WireOpenAI {
							key = "prompt_tokens"
						}
						require.Equal(t, in, num(usage[key]), "the usage reports the count the window is enforced on")
						require.Zero(t, s.ContextLength)
						return
					}
					require.Equal(t, http.StatusBadRequest, a.status, "%s", a.raw)
					require.Equal(t, 1, s.ContextLength)
					require.Equal(t, 1, s.Models[model].ContextLength)
					require.Zero(t, s.Invalid)
					require.Equal(t, 1, s.Requests)
					require.Equal(t, []int{http.StatusBadRequest}, []int{s.Log[0].Status})
					var want string
					switch {
					case wire == llmtest.WireOpenAI && tc.maxTokens > 0:
						want = `{"error":{"message":"This model's maximum context length is ` + itoa(tc.window) + ` tokens. However, you requested ` + itoa(in+tc.maxTokens) + ` tokens (` + itoa(in) + ` in the messages, ` + itoa(tc.maxTokens) + ` in the completion). Please reduce the length of the messages or completion.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`
					case wire == llmtest.WireOpenAI:
						want = `{"error":{"message":"This model's maximum context length is ` + itoa(tc.window) + ` tokens. However, your messages resulted in ` + itoa(in) + ` tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`
					case in > tc.window:
						want = `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: ` + itoa(in) + ` tokens > ` + itoa(tc.window) + ` maximum"}}`
					default:
						want = `{"type":"error","error":{"type":"invalid_request_error","message":"input length and ` + "`max_tokens`" + ` exceed context limit: ` + itoa(in) + ` + ` + itoa(tc.maxTokens) + ` > ` + itoa(tc.window) + `, decrease input length or ` + "`max_tokens`" + ` and try again"}}`
					}
					require.JSONEq(t, want, string(a.raw))
				})
			}
		})
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestUpstreamContextWindowStar(t *testing.T) {
	t.Parallel()
	u := startUpstream(t, llmtest.UpstreamConfig{Wire: llmtest.WireAnthropic, ContextWindow: map[string]int{"*": 50, "big": 100000}})
	text := strings.Repeat("x", 300)
	require.Equal(t, http.StatusBadRequest, do(t, http.MethodPost, endpoint(llmtest.WireAnthropic, u), request(llmtest.WireAnthropic, "small", userMessages(text), 10)).status)
	require.Equal(t, http.StatusOK, do(t, http.MethodPost, endpoint(llmtest.WireAnthropic, u), request(llmtest.WireAnthropic, "big", userMessages(text), 10)).status)
	s := u.Stats()
	require.Equal(t, 1, s.Models["small"].ContextLength)
	require.Zero(t, s.Models["big"].ContextLength)
	require.Equal(t, 1, s.Answered)
}

func TestUpstreamContextWindowMustBePositive(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, -1} {
		_, err := llmtest.StartUpstream(llmtest.UpstreamConfig{Wire: llmtest.WireOpenAI, ContextWindow: map[string]int{"m": n}})
		require.ErrorContains(t, err, "not positive")
	}
}

// Through the providers: a conversation with a system prompt, tools, a tool
// call and its result. The client's own count (llmtokens.Request over the
// llm.Request) is never below the fake's, so a client that keeps its count
// within the window is never refused; past the window the providers return
// llm.ErrContextLength with the *APIError behind it.
func TestUpstreamContextWindowClients(t *testing.T) {
	t.Parallel()
	newProvider := map[string]func(t *testing.T, url string) llm.Provider{
		llmtest.WireOpenAI: func(t *testing.T, url string) llm.Provider {
			p, err := openai.New(openai.Config{BaseURL: url, Model: modelOf[llmtest.WireOpenAI], MaxRetries: 2})
			require.NoError(t, err)
			return p
		},
		llmtest.WireAnthropic: func(t *testing.T, url string) llm.Provider {
			p, err := anthropic.New(anthropic.Config{BaseURL: url, Model: modelOf[llmtest.WireAnthropic], MaxRetries: 2})
			require.NoError(t, err)
			return p
		},
	}
	for _, wire := range wires {
		t.Run(wire, func(t *testing.T) {
			t.Parallel()
			model := modelOf[wire]
			const window, maxTokens = 2000, 200
			u := startUpstream(t, llmtest.UpstreamConfig{Wire: wire, ContextWindow: map[string]int{"*": window}})
			p := newProvider[wire](t, u.URL)
			ctx := context.Background()
			req := llm.Request{MaxTokens: maxTokens,
				Tools: []llm.ToolDef{
					{Name: "read_file", Description: "Reads a file of the workspace.", Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`)},
					{Name: "now", Description: "The time."},
				},
				Messages: []llm.Message{
					{Role: llm.RoleSystem, Content: "You are a careful engineer."},
					{Role: llm.RoleUser, Content: "Read a.txt and b.txt."},
					{Role: llm.RoleAssistant, Content: "Reading.", ToolCalls: []llm.ToolCall{
						{ID: "c1", Name: "read_file", Args: json.RawMessage(`{"path": "a.txt"}`)},
						{ID: "c2", Name: "read_file", Args: json.RawMessage(`{"path": "b.txt"}`)},
					}},
					{Role: llm.RoleTool, ToolCallID: "c1", Name: "read_file", Content: "alpha"},
					{Role: llm.RoleTool, ToolCallID: "c2", Name: "read_file", Content: "beta", IsError: true},
				}}
			var cal llmtokens.Calibrator
			for turn := 0; ; turn++ {
				estimate := cal.Estimate(model, req)
				if estimate+maxTokens > window {
					break
				}
				resp, err := p.Complete(ctx, req)
				require.NoError(t, err, "turn %d: the client's count %d fits", turn, estimate)
				require.LessOrEqual(t, resp.Usage.InputTokens, llmtokens.Request(nil, llm.Request{Model: model, Messages: req.Messages, Tools: req.Tools}),
					"the client never counts below the fake")
				cal.Observe(model, llmtokens.Request(nil, llm.Request{Model: model, Messages: req.Messages, Tools: req.Tools}), resp.Usage.InputTokens)
				req.Messages = append(req.Messages, resp.Message, llm.Message{Role: llm.RoleUser, Content: strings.Repeat("more words for the window ", 10)})
			}
			s := u.Stats()
			require.Zero(t, s.ContextLength, "a client that counts first is never refused")
			require.LessOrEqual(t, s.Models[model].MaxInputTokens+maxTokens, window)
			require.Greater(t, s.Answered, 3, "the session grew over several turns")
			t.Logf("%d turns, largest input %d of a %d window, scale %.3f", s.Answered, s.Models[model].MaxInputTokens, window, cal.Scale(model))

			// Sent anyway, the request is refused with the vendor's error.
			_, err := p.Complete(ctx, req)
			require.ErrorIs(t, err, llm.ErrContextLength)
			require.False(t, errors.Is(err, llm.ErrRateLimited))
			var apiErr *llm.APIError
			require.ErrorAs(t, err, &apiErr)
			require.Equal(t, http.StatusBadRequest, apiErr.Status)
			require.False(t, apiErr.RateLimited())
			require.False(t, apiErr.Overloaded())
			s = u.Stats()
			require.Equal(t, 1, s.ContextLength, "refused once, not retried")
		})
	}
}

// With a window, the cache's counts are the cached bytes' share of the
// counted input: never more than it (the clients refuse such usage).
func TestUpstreamContextWindowCacheCounts(t *testing.T) {
	t.Parallel()
	for _, wire := range wires {
		t.Run(wire, func(t *testing.T) {
			t.Parallel()
			model := modelOf[wire]
			u := startUpstream(t, llmtest.UpstreamConfig{Wire: wire, CacheMinTokens: 64, ContextWindow: map[string]int{"*": 1 << 20}})
			var p llm.Provider
			var err error
			if wire == llmtest.WireOpenAI {
				p, err = openai.New(openai.Config{BaseURL: u.URL, Model: model, MaxRetries: -1})
			} else {
				p, err = anthropic.New(anthropic.Config{BaseURL: u.URL, Model: model, MaxRetries: -1})
			}
			require.NoError(t, err)
			req := llm.Request{MaxTokens: 50, Messages: []llm.Message{
				{Role: llm.RoleSystem, Content: strings.Repeat("A long and stable system prompt. ", 200)},
				{Role: llm.RoleUser, Content: "first question"},
			}}
			first, err := p.Complete(context.Background(), req)
			require.NoError(t, err)
			req.Messages = append(req.Messages, first.Message, llm.Message{Role: llm.RoleUser, Content: "second question"})
			second, err := p.Complete(context.Background(), req)
			require.NoError(t, err)
			want := llmtokens.Request(nil, llm.Request{Model: model, Messages: req.Messages})
			require.LessOrEqual(t, second.Usage.InputTokens, want)
			require.Positive(t, second.Usage.CachedInputTokens, "the second turn reads the first's prefix")
			require.LessOrEqual(t, second.Usage.CachedInputTokens+second.Usage.CacheWriteTokens, second.Usage.InputTokens)
		})
	}
}
