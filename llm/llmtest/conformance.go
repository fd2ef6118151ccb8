package llmtest

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/aetherium-engine/aetherium/llm"
	"github.com/stretchr/testify/require"
)

// Call is a tool call as a Fake renders it. Args is raw text rather than JSON so
// that a test can make the server send arguments that do not parse.
type Call struct {
	ID   string
	Name string
	Args string
}

// Answer is a successful model reply for a Fake to render.
type Answer struct {
	Model string
	Text  string
	Calls []Call
	// InputTokens are all the input tokens, as in llm.Usage: CachedInputTokens
	// and CacheWriteTokens are parts of them. A Fake renders them the way its
	// vendor counts (Anthropic's input_tokens leaves the cached parts out).
	InputTokens  int
	OutputTokens int
	// CachedInputTokens were read from the prompt cache.
	CachedInputTokens int
	// CacheWriteTokens were written to the prompt cache; a vendor without the
	// count drops it.
	CacheWriteTokens int
}

// ToolResult is a tool result found in a captured request.
type ToolResult struct {
	CallID  string
	Content string
	// IsError is nil when the wire format has no way to flag a failed call.
	IsError *bool
}

// Captured is the vendor-neutral reading of a request body a Fake received.
type Captured struct {
	Model     string
	System    string
	UserTexts []string
	MaxTokens int
	Tools     []llm.ToolDef
	// ToolCalls are the calls of assistant messages in the history, in order.
	ToolCalls   []llm.ToolCall
	ToolResults []ToolResult
}

// Fake speaks one vendor's wire format. Implementations should write the JSON by
// hand from the vendor's API reference rather than reuse the provider package's types, so the
// suite checks the provider against the wire and not against itself.
type Fake interface {
	// Path is the URL path the provider posts to, relative to the base URL it is
	// given.
	Path() string
	// Answer renders a successful reply.
	Answer(a Answer) []byte
	// Empty renders a well-formed reply with no text and no tool calls.
	Empty(model string) []byte
	// Error renders the vendor's error body for status.
	Error(status int, message string) []byte
	// Decode reads a request body the provider sent.
	Decode(body []byte) (Captured, error)
	// Limits renders the vendor's rate-limit headers for l, its resets counted
	// from now.
	Limits(l llm.RateLimits) http.Header
}

// Options configure the provider under test.
type Options struct {
	BaseURL    string
	Model      string
	MaxRetries int
	// HTTPClient is the provider's client when set (it adds headers to the
	// Server's answers).
	HTTPClient *http.Client
}

// NewProvider builds the provider under test. It must honour every field of opts.
type NewProvider func(t *testing.T, opts Options) llm.Provider

// Settings of the providers the suite builds.
const (
	DefaultModel = "conformance-model"
	MaxRetries   = 2
)

type conformanceCase struct {
	name    string
	req     llm.Request
	replies func(f Fake) []Reply
	// header is added to every answer when set.
	header func(f Fake) http.Header
	// cancelAfter cancels the call's context after this long when set.
	cancelAfter time.Duration
	check       func(t *testing.T, c checkCtx)
}

type checkCtx struct {
	fake     Fake
	provider llm.Provider
	srv      *Server
	resp     llm.Response
	err      error
	elapsed  time.Duration
}

func (c checkCtx) captured(t *testing.T) Captured {
	t.Helper()
	got, err := c.fake.Decode(c.srv.Last(t).Body)
	require.NoError(t, err, "decode request body")
	return got
}

func requireMalformed(t *testing.T, c checkCtx) {
	t.Helper()
	require.Error(t, c.err)
	t.Logf("error: %v", c.err)
	require.ErrorIs(t, c.err, llm.ErrMalformed)
	var apiErr *llm.APIError
	require.False(t, errors.As(c.err, &apiErr), "malformed answer reported as API error: %v", c.err)
	require.Equal(t, 1, c.srv.Count(), "a malformed answer must not be retried")
}

func requireAPIError(t *testing.T, c checkCtx, status, attempts int, message string) *llm.APIError {
	t.Helper()
	require.Error(t, c.err)
	t.Logf("error: %v", c.err)
	var apiErr *llm.APIError
	require.ErrorAs(t, c.err, &apiErr)
	require.Equal(t, status, apiErr.Status)
	require.Equal(t, c.provider.Name(), apiErr.Provider)
	require.Contains(t, apiErr.Message, message)
	require.NotErrorIs(t, c.err, llm.ErrMalformed)
	require.Equal(t, attempts, c.srv.Count())
	return apiErr
}

// requireNotNow checks a "not now" answer: returned after one request, without
// waiting, as an APIError the caller can park on.
func requireNotNow(t *testing.T, c checkCtx, status int, message string) *llm.APIError {
	t.Helper()
	apiErr := requireAPIError(t, c, status, 1, message)
	require.True(t, apiErr.RateLimited())
	require.Less(t, c.elapsed, 2*time.Second)
	return apiErr
}

// testLimits are the rate limits the cases render; whole seconds, since
// Anthropic's resets are RFC 3339 instants.
var testLimits = llm.RateLimits{
	RequestsLimit: 50, RequestsRemaining: 0, RequestsReset: 30 * time.Second,
	TokensLimit: 80000, TokensRemaining: 12345, TokensReset: 2 * time.Minute,
}

// requireLimits compares limits with testLimits, resets to within the
// seconds a rendering in instants and the call take.
func requireLimits(t *testing.T, got *llm.RateLimits) {
	t.Helper()
	require.NotNil(t, got, "rate-limit headers were sent")
	want := testLimits
	require.Equal(t, []int{want.RequestsLimit, want.RequestsRemaining, want.TokensLimit, want.TokensRemaining},
		[]int{got.RequestsLimit, got.RequestsRemaining, got.TokensLimit, got.TokensRemaining})
	require.InDelta(t, want.RequestsReset, got.RequestsReset, float64(2*time.Second))
	require.InDelta(t, want.TokensReset, got.TokensReset, float64(2*time.Second))
}

// addHeader adds header to every answer of base.
type addHeader struct {
	base   http.RoundTripper
	header http.Header
}

func (a addHeader) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := a.base.RoundTrip(r)
	if err == nil {
		for k, vs := range a.header {
			resp.Header[http.CanonicalHeaderKey(k)] = vs
		}
	}
	return resp, err
}

// historyRequest is a conversation in the middle of a tool round trip.
func historyRequest() llm.Request {
	return llm.Request{
		Messages: []llm.Message{
			{Role: llm.RoleSystem, Content: "You are terse."},
			{Role: llm.RoleUser, Content: "Where is main defined?"},
			{Role: llm.RoleAssistant, Content: "Let me look.", ToolCalls: []llm.ToolCall{
				{ID: "call_a", Name: "read_file", Args: json.RawMessage(`{"path":"main.go"}`)},
				{ID: "call_b", Name: "grep", Args: json.RawMessage(`{"pattern":"func main","paths":["cmd","internal"],"limit":3}`)},
			}},
			{Role: llm.RoleTool, ToolCallID: "call_a", Name: "read_file", Content: "package main\n\nfunc main() {}\n"},
			{Role: llm.RoleTool, ToolCallID: "call_b", Name: "grep", Content: "permission denied: internal", IsError: true},
		},
		Tools:     testTools(),
		MaxTokens: 321,
	}
}

func testTools() []llm.ToolDef {
	return []llm.ToolDef{
		{
			Name:        "read_file",
			Description: "Read a file from the workspace.",
			Parameters:  json.RawMessage(`{"type":"object","properties":{"path":{"type":"string","description":"Relative path."}},"required":["path"],"additionalProperties":false}`),
		},
		{
			Name:        "grep",
			Description: "Search files for a pattern.",
			Parameters:  json.RawMessage(`{"type":"object","properties":{"pattern":{"type":"string"},"paths":{"type":"array","items":{"type":"string"}},"limit":{"type":"integer","minimum":1,"maximum":100}},"required":["pattern"]}`),
		},
	}
}

func simpleRequest() llm.Request {
	return llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "Say hello."}}}
}

func conformanceCases() []conformanceCase {
	textAnswer := func(f Fake) []Reply {
		return []Reply{JSON(f.Answer(Answer{Model: "served-model", Text: "Hello there.", InputTokens: 12, OutputTokens: 5}))}
	}
	return []conformanceCase{
		{
			name:    "plain text answer",
			req:     simpleRequest(),
			replies: textAnswer,
			check: func(t *testing.T, c checkCtx) {
				require.NoError(t, c.err)
				require.Equal(t, llm.Response{
					Message:  llm.Message{Role: llm.RoleAssistant, Content: "Hello there."},
					Usage:    llm.Usage{InputTokens: 12, OutputTokens: 5},
					Model:    "served-model",
					Provider: c.provider.Name(),
				}, c.resp)
				require.Equal(t, 1, c.srv.Count())
				got := c.captured(t)
				require.Equal(t, DefaultModel, got.Model)
				require.Equal(t, []string{"Say hello."}, got.UserTexts)
			},
		},
		{
			name: "request model overrides the default",
			req: llm.Request{
				Model:    "override-model",
				Messages: []llm.Message{{Role: llm.RoleUser, Content: "Say hello."}},
			},
			replies: textAnswer,
			check: func(t *testing.T, c checkCtx) {
				require.NoError(t, c.err)
				require.Equal(t, "override-model", c.captured(t).Model)
			},
		},
		{
			name: "two tool calls round-trip",
			req:  llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "Where is main?"}}, Tools: testTools()},
			replies: func(f Fake) []Reply {
				return []Reply{JSON(f.Answer(Answer{
					Model: "served-model",
					Text:  "Let me look.",
					Calls: []Call{
						{ID: "call_1", Name: "read_file", Args: `{"path":"main.go"}`},
						{ID: "call_2", Name: "grep", Args: `{"pattern":"func main","paths":["cmd","internal"],"limit":3}`},
					},
					InputTokens:  40,
					OutputTokens: 22,
				}))}
			},
			check: func(t *testing.T, c checkCtx) {
				require.NoError(t, c.err)
				msg := c.resp.Message
				require.Equal(t, llm.RoleAssistant, msg.Role)
				require.Equal(t, "Let me look.", msg.Content)
				require.Len(t, msg.ToolCalls, 2)
				require.Equal(t, "call_1", msg.ToolCalls[0].ID)
				require.Equal(t, "read_file", msg.ToolCalls[0].Name)
				require.JSONEq(t, `{"path":"main.go"}`, string(msg.ToolCalls[0].Args))
				require.Equal(t, "call_2", msg.ToolCalls[1].ID)
				require.Equal(t, "grep", msg.ToolCalls[1].Name)
				require.JSONEq(t, `{"pattern":"func main","paths":["cmd","internal"],"limit":3}`, string(msg.ToolCalls[1].Args))
				require.Equal(t, llm.Usage{InputTokens: 40, OutputTokens: 22}, c.resp.Usage)
			},
		},
		{
			name: "request carries tool schemas and prior tool results",
			req:  historyRequest(),
			replies: func(f Fake) []Reply {
				return []Reply{JSON(f.Answer(Answer{Model: "served-model", Text: "main is in main.go.", InputTokens: 90, OutputTokens: 8}))}
			},
			check: func(t *testing.T, c checkCtx) {
				require.NoError(t, c.err)
				require.Equal(t, "main is in main.go.", c.resp.Message.Content)
				got := c.captured(t)
				want := historyRequest()

				require.Equal(t, DefaultModel, got.Model)
				require.Equal(t, "You are terse.", got.System)
				require.Equal(t, []string{"Where is main defined?"}, got.UserTexts)
				require.Equal(t, 321, got.MaxTokens)

				require.Len(t, got.Tools, len(want.Tools))
				for i, tool := range want.Tools {
					require.Equal(t, tool.Name, got.Tools[i].Name)
					require.Equal(t, tool.Description, got.Tools[i].Description)
					require.JSONEq(t, string(tool.Parameters), string(got.Tools[i].Parameters), "schema of %s", tool.Name)
				}

				wantCalls := want.Messages[2].ToolCalls
				require.Len(t, got.ToolCalls, len(wantCalls))
				for i, call := range wantCalls {
					require.Equal(t, call.ID, got.ToolCalls[i].ID)
					require.Equal(t, call.Name, got.ToolCalls[i].Name)
					require.JSONEq(t, string(call.Args), string(got.ToolCalls[i].Args))
				}

				require.Len(t, got.ToolResults, 2)
				for i, m := range want.Messages[3:] {
					require.Equal(t, m.ToolCallID, got.ToolResults[i].CallID)
					require.Equal(t, m.Content, got.ToolResults[i].Content)
					if got.ToolResults[i].IsError != nil {
						require.Equal(t, m.IsError, *got.ToolResults[i].IsError, "is_error of %s", m.ToolCallID)
					}
				}
			},
		},
		{
			name:    "rate-limit headers are read on a 200",
			req:     simpleRequest(),
			replies: textAnswer,
			header:  func(f Fake) http.Header { return f.Limits(testLimits) },
			check: func(t *testing.T, c checkCtx) {
				require.NoError(t, c.err)
				requireLimits(t, c.resp.Limits)
			},
		},
		{
			name: "cached input tokens are read",
			req:  simpleRequest(),
			replies: func(f Fake) []Reply {
				return []Reply{JSON(f.Answer(Answer{Model: "served-model", Text: "Hello again.", InputTokens: 2048, CachedInputTokens: 1920, OutputTokens: 6}))}
			},
			check: func(t *testing.T, c checkCtx) {
				require.NoError(t, c.err)
				require.Equal(t, llm.Usage{InputTokens: 2048, CachedInputTokens: 1920, OutputTokens: 6}, c.resp.Usage)
			},
		},
		{
			name: "negative usage is malformed",
			req:  simpleRequest(),
			replies: func(f Fake) []Reply {
				return []Reply{JSON(f.Answer(Answer{Model: "served-model", Text: "Hello.", InputTokens: 3, OutputTokens: -4}))}
			},
			check: requireMalformed,
		},
		{
			name: "429 is returned at once with its wait and limits",
			req:  simpleRequest(),
			replies: func(f Fake) []Reply {
				return []Reply{
					Status(http.StatusTooManyRequests, f.Error(http.StatusTooManyRequests, "slow down")),
					JSON(f.Answer(Answer{Model: "served-model", Text: "Too late.", InputTokens: 3, OutputTokens: 4})),
				}
			},
			header: func(f Fake) http.Header {
				h := f.Limits(testLimits)
				h.Set("Retry-After-Ms", "7000")
				return h
			},
			check: func(t *testing.T, c checkCtx) {
				apiErr := requireNotNow(t, c, http.StatusTooManyRequests, "slow down")
				require.Equal(t, 7*time.Second, apiErr.RetryAfter)
				requireLimits(t, apiErr.Limits)
			},
		},
		{
			name: "529 overloaded is returned at once",
			req:  simpleRequest(),
			replies: func(f Fake) []Reply {
				return []Reply{Status(llm.StatusOverloaded, f.Error(llm.StatusOverloaded, "Overloaded"))}
			},
			header: func(Fake) http.Header { return http.Header{"Retry-After": {"3"}, "Retry-After-Ms": {"soon"}} },
			check: func(t *testing.T, c checkCtx) {
				apiErr := requireNotNow(t, c, llm.StatusOverloaded, "Overloaded")
				require.True(t, apiErr.Overloaded())
				require.Equal(t, 3*time.Second, apiErr.RetryAfter)
			},
		},
		{
			name: "503 with a non-JSON body is returned at once as an API error",
			req:  simpleRequest(),
			replies: func(Fake) []Reply {
				return []Reply{{Status: http.StatusServiceUnavailable, ContentType: "text/plain", Body: []byte("upstream connect error")}}
			},
			check: func(t *testing.T, c checkCtx) {
				requireNotNow(t, c, http.StatusServiceUnavailable, "upstream connect error")
			},
		},
		{
			name: "500 then 200 is retried",
			req:  simpleRequest(),
			replies: func(f Fake) []Reply {
				return []Reply{
					Status(http.StatusInternalServerError, f.Error(http.StatusInternalServerError, "blip")),
					JSON(f.Answer(Answer{Model: "served-model", Text: "Hello after retry.", InputTokens: 3, OutputTokens: 4})),
				}
			},
			check: func(t *testing.T, c checkCtx) {
				require.NoError(t, c.err)
				require.Equal(t, "Hello after retry.", c.resp.Message.Content)
				require.Equal(t, 2, c.srv.Count())
			},
		},
		{
			name: "500 every time ends in an API error after all retries",
			req:  simpleRequest(),
			replies: func(f Fake) []Reply {
				return []Reply{Status(http.StatusInternalServerError, f.Error(http.StatusInternalServerError, "the kettle boiled over"))}
			},
			check: func(t *testing.T, c checkCtx) {
				requireAPIError(t, c, http.StatusInternalServerError, MaxRetries+1, "the kettle boiled over")
			},
		},
		{
			name: "400 is not retried",
			req:  simpleRequest(),
			replies: func(f Fake) []Reply {
				return []Reply{Status(http.StatusBadRequest, f.Error(http.StatusBadRequest, "messages: field required"))}
			},
			check: func(t *testing.T, c checkCtx) {
				requireAPIError(t, c, http.StatusBadRequest, 1, "messages: field required")
			},
		},
		{
			name: "garbage JSON body is malformed",
			req:  simpleRequest(),
			replies: func(Fake) []Reply {
				return []Reply{{Body: []byte(`{"choices": [ this is not json`)}}
			},
			check: requireMalformed,
		},
		{
			name: "non-JSON body is malformed",
			req:  simpleRequest(),
			replies: func(Fake) []Reply {
				return []Reply{{ContentType: "text/html", Body: []byte("<html>gateway says hi</html>")}}
			},
			check: requireMalformed,
		},
		{
			name: "empty answer is malformed",
			req:  simpleRequest(),
			replies: func(f Fake) []Reply {
				return []Reply{JSON(f.Empty("served-model"))}
			},
			check: requireMalformed,
		},
		{
			name: "tool call with non-JSON arguments is malformed",
			req:  simpleRequest(),
			replies: func(f Fake) []Reply {
				return []Reply{JSON(f.Answer(Answer{Model: "served-model", Calls: []Call{
					{ID: "call_1", Name: "read_file", Args: `{"path": "main.go"`},
				}}))}
			},
			check: requireMalformed,
		},
		{
			name: "tool call with arguments that are not an object is malformed",
			req:  simpleRequest(),
			replies: func(f Fake) []Reply {
				return []Reply{JSON(f.Answer(Answer{Model: "served-model", Calls: []Call{
					{ID: "call_1", Name: "read_file", Args: `["main.go"]`},
				}}))}
			},
			check: requireMalformed,
		},
		{
			name:        "context cancellation returns promptly",
			req:         simpleRequest(),
			replies:     func(Fake) []Reply { return []Reply{{Block: true}} },
			cancelAfter: 50 * time.Millisecond,
			check: func(t *testing.T, c checkCtx) {
				require.ErrorIs(t, c.err, context.Canceled)
				require.NotErrorIs(t, c.err, llm.ErrMalformed)
				var apiErr *llm.APIError
				require.False(t, errors.As(c.err, &apiErr))
				require.Less(t, c.elapsed, 2*time.Second)
				require.Equal(t, 1, c.srv.Count())
			},
		},
	}
}

// RunConformance runs the shared table of behaviours against the provider that
// newProvider builds, with fake serving the vendor's wire format.
func RunConformance(t *testing.T, fake Fake, newProvider NewProvider) {
	t.Helper()
	for _, tc := range conformanceCases() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := NewServer(t, fake.Path(), tc.replies(fake)...)
			opts := Options{BaseURL: srv.URL, Model: DefaultModel, MaxRetries: MaxRetries}
			if tc.header != nil {
				opts.HTTPClient = &http.Client{Transport: addHeader{base: http.DefaultTransport, header: tc.header(fake)}}
			}
			p := newProvider(t, opts)
			require.NotEmpty(t, p.Name())

			// The deadline only guards against a hung test; no case should get near it.
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			if tc.cancelAfter > 0 {
				var stop context.CancelFunc
				ctx, stop = context.WithCancel(ctx)
				timer := time.AfterFunc(tc.cancelAfter, stop)
				defer timer.Stop()
				defer stop()
			}

			start := time.Now()
			resp, err := p.Complete(ctx, tc.req)
			tc.check(t, checkCtx{
				fake:     fake,
				provider: p,
				srv:      srv,
				resp:     resp,
				err:      err,
				elapsed:  time.Since(start),
			})
		})
	}
}
