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
		{name: "429 is retried", status: 429, body: `{"error":{"message":"slow down"}}`, attempts: 3, message: "slow down"},
		{name: "529 overloaded is retried", status: 529, body: `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, attempts: 3, message: "Overloaded"},
		{name: "x-should-retry false stops a 503", status: 503, header: map[string]string{"X-Should-Retry": "false"}, attempts: 1},
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
			_, err = Post(t.Context(), s, Call{Provider: "p", Op: "p: op", URL: s.Endpoint("x"), Body: map[string]int{"a": 1}})
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
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	t.Cleanup(srv.Close)
	s, err := Check("p", srv.URL+"/v1/?k=1", 0, 0, nil)
	require.NoError(t, err)
	require.Equal(t, DefaultMaxRetries, s.MaxRetries)
	require.Equal(t, DefaultTimeout, s.Timeout)
	require.Equal(t, srv.URL+"/v1/chat/completions?k=1", s.Endpoint("chat/completions"))

	raw, err := Post(t.Context(), s, Call{Provider: "p", Op: "p: op", URL: s.Endpoint("chat/completions"), Header: http.Header{"X-Api-Key": {"k"}}, Body: map[string]int{"a": 1}})
	require.NoError(t, err)
	require.JSONEq(t, `{"ok":true}`, string(raw))
	require.Equal(t, "application/json", got.Header.Get("Content-Type"))
	require.Equal(t, "k", got.Header.Get("X-Api-Key"))

	big, err := Check("p", srv.URL+"/?big=1", -1, 0, nil)
	require.NoError(t, err)
	_, err = Post(t.Context(), big, Call{Provider: "p", Op: "p: op", URL: big.Endpoint("x"), Body: 1})
	require.ErrorIs(t, err, llm.ErrMalformed)
	require.ErrorContains(t, err, "larger than")
}

func TestPostStopsWaitingWhenTheContextEnds(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "30")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	t.Cleanup(srv.Close)
	s, err := Check("p", srv.URL, 5, 0, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	_, err = Post(ctx, s, Call{Provider: "p", Op: "p: op", URL: s.Endpoint("x"), Body: 1})
	require.True(t, errors.Is(err, context.DeadlineExceeded), "%v", err)
	var apiErr *llm.APIError
	require.ErrorAs(t, err, &apiErr, "the last answer is kept beside the cause")
	require.Equal(t, http.StatusTooManyRequests, apiErr.Status)
}
