package wire

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aetherium-engine/aetherium/llm"
	"github.com/stretchr/testify/require"
)

func TestBackoff(t *testing.T) {
	t.Parallel()
	soon := time.Now().Add(30 * time.Second).UTC().Format(http.TimeFormat)
	tests := []struct {
		name     string
		attempt  int
		header   map[string]string
		min, max time.Duration
	}{
		{name: "retry-after-ms wins", header: map[string]string{"Retry-After-Ms": "250", "Retry-After": "9"}, min: 250 * time.Millisecond, max: 250 * time.Millisecond},
		{name: "retry-after seconds", header: map[string]string{"Retry-After": "2"}, min: 2 * time.Second, max: 2 * time.Second},
		{name: "retry-after date", header: map[string]string{"Retry-After": soon}, min: 28 * time.Second, max: 30 * time.Second},
		{name: "retry-after beyond a minute is not waited for", header: map[string]string{"Retry-After": "3600"}, min: 375 * time.Millisecond, max: initialRetry},
		{name: "garbage falls back to the schedule", header: map[string]string{"Retry-After": "soon", "Retry-After-Ms": "-5"}, min: 375 * time.Millisecond, max: initialRetry},
		{name: "exponential", attempt: 2, min: 1500 * time.Millisecond, max: 2 * time.Second},
		{name: "capped", attempt: 10, min: 6 * time.Second, max: maxRetry},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := http.Header{}
			for k, v := range tc.header {
				h.Set(k, v)
			}
			d := backoff(tc.attempt, h)
			require.GreaterOrEqual(t, d, tc.min)
			require.LessOrEqual(t, d, tc.max)
		})
	}
}

func TestPostRetries(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		status   int
		header   map[string]string
		body     string
		attempts int32
		message  string
	}{
		{name: "429 is returned at once", status: 429, body: `{"error":{"message":"slow down"}}`, attempts: 1, message: "slow down"},
		{name: "529 overloaded is returned at once", status: 529, body: `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, attempts: 1, message: "Overloaded"},
		{name: "503 is returned at once", status: 503, attempts: 1, message: "Service Unavailable"},
		{name: "x-should-retry true does not retry a 429", status: 429, header: map[string]string{"X-Should-Retry": "true"}, attempts: 1},
		{name: "x-should-retry true does not retry a 529", status: 529, header: map[string]string{"X-Should-Retry": "true"}, attempts: 1},
		{name: "500 is retried", status: 500, body: `{"error":{"message":"oops"}}`, attempts: 3, message: "oops"},
		{name: "408 is retried", status: 408, attempts: 3},
		{name: "409 is retried", status: 409, attempts: 3},
		{name: "x-should-retry false stops a 500", status: 500, header: map[string]string{"X-Should-Retry": "false"}, attempts: 1},
		{name: "x-should-retry true retries a 400", status: 400, header: map[string]string{"X-Should-Retry": "true"}, attempts: 3},
		{name: "401 is not retried", status: 401, body: `{"error":{"message":"bad key"}}`, attempts: 1, message: "bad key"},
		{name: "an HTML page is the message, bounded", status: 502, body: "<html>" + strings.Repeat("x", 4000), attempts: 3, message: "<html>xxx"},
		{name: "an empty body says the status", status: 504, attempts: 3, message: "Gateway Timeout"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var n atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n.Add(1)
				w.Header().Set("Retry-After-Ms", "1")
				for k, v := range tc.header {
					w.Header().Set(k, v)
				}
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
			}))
			t.Cleanup(srv.Close)
			s, err := Check("p", srv.URL, 2, 0, nil)
			require.NoError(t, err)
			_, _, err = Post(t.Context(), s, Call{Provider: "p", Op: "p: op", URL: s.Endpoint("x"), Body: map[string]int{"a": 1}})
			var apiErr *llm.APIError
			require.ErrorAs(t, err, &apiErr)
			require.Equal(t, tc.status, apiErr.Status)
			require.Contains(t, apiErr.Message, tc.message)
			require.LessOrEqual(t, len(apiErr.Message), maxMessage+len("…"))
			require.Equal(t, tc.attempts, n.Load())
		})
	}
}

func TestPostSendsJSONAndBoundsTheAnswer(t *testing.T) {
	t.Parallel()
	var got *http.Request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Clone(context.Background())
		if r.URL.Query().Get("big") != "" {
			_, _ = w.Write([]byte(`{"a":"` + strings.Repeat("x", MaxBody) + `"}`))
			return
		}
		w.Header().Set("X-Answer", "yes")
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	t.Cleanup(srv.Close)
	s, err := Check("p", srv.URL+"/v1/?k=1", 0, 0, nil)
	require.NoError(t, err)
	require.Equal(t, DefaultMaxRetries, s.MaxRetries)
	require.Equal(t, DefaultTimeout, s.Timeout)
	require.Equal(t, srv.URL+"/v1/chat/completions?k=1", s.Endpoint("chat/completions"))

	raw, header, err := Post(t.Context(), s, Call{Provider: "p", Op: "p: op", URL: s.Endpoint("chat/completions"), Header: http.Header{"X-Api-Key": {"k"}}, Body: map[string]int{"a": 1}})
	require.NoError(t, err)
	require.JSONEq(t, `{"ok":true}`, string(raw))
	require.Equal(t, "yes", header.Get("X-Answer"), "the answer's headers are returned")
	require.Equal(t, "application/json", got.Header.Get("Content-Type"))
	require.Equal(t, "k", got.Header.Get("X-Api-Key"))

	big, err := Check("p", srv.URL+"/?big=1", -1, 0, nil)
	require.NoError(t, err)
	_, _, err = Post(t.Context(), big, Call{Provider: "p", Op: "p: op", URL: big.Endpoint("x"), Body: 1})
	require.ErrorIs(t, err, llm.ErrMalformed)
	require.ErrorContains(t, err, "larger than")
}

func TestPostStopsWaitingWhenTheContextEnds(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "30")
		w.WriteHeader(http.StatusBadGateway)
	}))
	t.Cleanup(srv.Close)
	s, err := Check("p", srv.URL, 5, 0, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	_, _, err = Post(ctx, s, Call{Provider: "p", Op: "p: op", URL: s.Endpoint("x"), Body: 1})
	require.True(t, errors.Is(err, context.DeadlineExceeded), "%v", err)
	var apiErr *llm.APIError
	require.ErrorAs(t, err, &apiErr, "the last answer is kept beside the cause")
	require.Equal(t, http.StatusBadGateway, apiErr.Status)
}

// A "not now" must cost the caller one round trip, however long the server
// asks to wait and whatever retries the Settings allow: the step is parked
// with the server's wait and limits, not slept on.
func TestPostReturnsNotNowAtOnce(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		status     int
		header     map[string]string
		retryAfter time.Duration
		limits     *llm.RateLimits
	}{
		{
			name: "429 with OpenAI limits", status: 429,
			header: map[string]string{
				"Retry-After": "20", "X-Ratelimit-Limit-Requests": "500", "X-Ratelimit-Remaining-Requests": "0",
				"X-Ratelimit-Reset-Requests": "1m30.5s", "X-Ratelimit-Limit-Tokens": "30000",
				"X-Ratelimit-Remaining-Tokens": "12", "X-Ratelimit-Reset-Tokens": "20ms",
			},
			retryAfter: 20 * time.Second,
			limits: &llm.RateLimits{
				RequestsLimit: 500, RequestsRemaining: 0, RequestsReset: 90*time.Second + 500*time.Millisecond,
				TokensLimit: 30000, TokensRemaining: 12, TokensReset: 20 * time.Millisecond,
			},
		},
		{name: "529 with retry-after-ms", status: 529, header: map[string]string{"Retry-After-Ms": "1500", "Retry-After": "9"}, retryAfter: 1500 * time.Millisecond},
		{name: "503 asking for a day is not believed", status: 503, header: map[string]string{"Retry-After": "86400"}},
		{name: "429 without retry-after", status: 429},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var n atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n.Add(1)
				for k, v := range tc.header {
					w.Header().Set(k, v)
				}
				w.WriteHeader(tc.status)
			}))
			t.Cleanup(srv.Close)
			s, err := Check("p", srv.URL, 5, 0, nil)
			require.NoError(t, err)
			start := time.Now()
			_, _, err = Post(t.Context(), s, Call{Provider: "p", Op: "p: op", URL: s.Endpoint("x"), Body: 1})
			require.Less(t, time.Since(start), 5*time.Second, "nothing is slept on")
			var apiErr *llm.APIError
			require.ErrorAs(t, err, &apiErr)
			require.Equal(t, tc.status, apiErr.Status)
			require.True(t, apiErr.RateLimited())
			require.Equal(t, tc.retryAfter, apiErr.RetryAfter)
			require.Equal(t, tc.limits, apiErr.Limits)
			require.Equal(t, int32(1), n.Load())
		})
	}
}

func TestCompleteNamesTheProviderAndItsLimits(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Ratelimit-Remaining-Requests", "41")
		_, _ = w.Write([]byte(`{"text":"hi","in":3,"out":2}`))
	}))
	t.Cleanup(srv.Close)
	s, err := Check("p", srv.URL, 0, 0, nil)
	require.NoError(t, err)
	type answer struct {
		Text    string `json:"text"`
		In, Out int
	}
	resp, err := Complete(t.Context(), Client{Provider: "p", Op: "p: op", Path: "x", Settings: s, Model: "m"}, llm.Request{},
		func(model string, _ llm.Request) (map[string]string, error) {
			return map[string]string{"model": model}, nil
		},
		func(a answer) (llm.Response, error) {
			return llm.Response{Message: llm.Message{Role: llm.RoleAssistant, Content: a.Text}, Usage: llm.Usage{InputTokens: a.In, OutputTokens: a.Out}}, nil
		})
	require.NoError(t, err)
	require.Equal(t, "p", resp.Provider)
	require.Equal(t, "m", resp.Model)
	require.Equal(t, &llm.RateLimits{RequestsLimit: -1, RequestsRemaining: 41, TokensLimit: -1, TokensRemaining: -1}, resp.Limits)
}

func TestCompleteRejectsBadUsage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		usage     llm.Usage
		malformed bool
	}{
		{name: "plain", usage: llm.Usage{InputTokens: 10, OutputTokens: 2}},
		{name: "cached within input", usage: llm.Usage{InputTokens: 10, OutputTokens: 2, CachedInputTokens: 6, CacheWriteTokens: 4}},
		{name: "negative input", usage: llm.Usage{InputTokens: -1}, malformed: true},
		{name: "negative output", usage: llm.Usage{InputTokens: 1, OutputTokens: -5}, malformed: true},
		{name: "absurd input", usage: llm.Usage{InputTokens: MaxUsageTokens + 1}, malformed: true},
		{name: "more cached than input", usage: llm.Usage{InputTokens: 10, CachedInputTokens: 11}, malformed: true},
		{name: "negative cache write", usage: llm.Usage{InputTokens: 10, CacheWriteTokens: -1}, malformed: true},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{}`))
	}))
	t.Cleanup(srv.Close)
	s, err := Check("p", srv.URL, 0, 0, nil)
	require.NoError(t, err)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Complete(t.Context(), Client{Provider: "p", Op: "p: op", Path: "x", Settings: s, Model: "m"}, llm.Request{},
				func(string, llm.Request) (int, error) { return 1, nil },
				func(struct{}) (llm.Response, error) {
					return llm.Response{Message: llm.Message{Role: llm.RoleAssistant, Content: "ok"}, Usage: tc.usage}, nil
				})
			if tc.malformed {
				require.ErrorIs(t, err, llm.ErrMalformed)
				return
			}
			require.NoError(t, err)
		})
	}
}

func TestPostMarksContextLength(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		status int
		header map[string]string
		body   string
		want   bool
	}{
		{
			name: "OpenAI context_length_exceeded", status: 400, want: true,
			body: `{"error":{"message":"This model's maximum context length is 8192 tokens. However, you requested 8554 tokens (7554 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`,
		},
		{
			name: "OpenAI's code alone", status: 400, want: true,
			body: `{"error":{"message":"Your input exceeds the limit.","type":"invalid_request_error","param":"input","code":"context_length_exceeded"}}`,
		},
		{
			name: "a compatible server's message without the code", status: 400, want: true,
			body: `{"error":{"message":"This model's maximum context length is 131072 tokens. However, you requested 131134 tokens (122942 in the messages, 8192 in the completion).","type":"invalid_request_error","param":null,"code":"invalid_request_error"}}`,
		},
		{
			name: "Anthropic prompt is too long", status: 400, want: true,
			body: `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208310 tokens > 200000 maximum"}}`,
		},
		{
			name: "Anthropic input and max_tokens", status: 400, want: true,
			body: "{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"input length and `max_tokens` exceed context limit: 199759 + 8192 > 200000, decrease input length or `max_tokens` and try again\"}}",
		},
		{
			name: "x-should-retry does not retry it", status: 400, header: map[string]string{"X-Should-Retry": "true"}, want: true,
			body: `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 9 tokens > 8 maximum"}}`,
		},
		{
			name: "another 400 is not", status: 400,
			body: `{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: 10000 > 4096, which is the maximum allowed number of output tokens"}}`,
		},
		{name: "a 413 is not (bytes, not tokens)", status: 413, body: `{"error":{"type":"request_too_large","message":"Request exceeds the maximum allowed number of bytes."}}`},
		{name: "a 429 is not", status: 429, body: `{"error":{"message":"maximum context length","code":"rate_limit_exceeded"}}`},
		{name: "a 500 mentioning it is not", status: 500, body: `{"error":{"message":"prompt is too long"}}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var n atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n.Add(1)
				w.Header().Set("Retry-After-Ms", "1")
				for k, v := range tc.header {
					w.Header().Set(k, v)
				}
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
			}))
			t.Cleanup(srv.Close)
			s, err := Check("p", srv.URL, 2, 0, nil)
			require.NoError(t, err)
			_, _, err = Post(t.Context(), s, Call{Provider: "p", Op: "p: op", URL: s.Endpoint("x"), Body: 1})
			require.Equal(t, tc.want, errors.Is(err, llm.ErrContextLength), "%v", err)
			var apiErr *llm.APIError
			require.ErrorAs(t, err, &apiErr, "the APIError stays reachable")
			require.Equal(t, tc.want, apiErr.ContextLength)
			require.False(t, errors.Is(err, llm.ErrRateLimited))
			if tc.want {
				require.False(t, apiErr.RateLimited())
				require.False(t, apiErr.Overloaded())
				require.Equal(t, int32(1), n.Load(), "never retried")
			}
		})
	}
}
