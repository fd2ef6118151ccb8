package wire

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aetherium-engine/aetherium/llm"
	"github.com/stretchr/testify/require"
)

var testNow = time.Date(2026, 12, 6, 8, 0, 0, 0, time.UTC)

func headerOf(kv map[string]string) http.Header {
	h := http.Header{}
	for k, v := range kv {
		h.Set(k, v)
	}
	return h
}

// unknown is a RateLimits with nothing known, for cases to fill in.
func unknown() llm.RateLimits {
	return llm.RateLimits{RequestsLimit: -1, RequestsRemaining: -1, TokensLimit: -1, TokensRemaining: -1}
}

func TestParseLimits(t *testing.T) {
	t.Parallel()
	at := func(d time.Duration) string { return testNow.Add(d).Format(time.RFC3339) }
	with := func(f func(l *llm.RateLimits)) *llm.RateLimits {
		l := unknown()
		f(&l)
		return &l
	}
	tests := []struct {
		name   string
		header map[string]string
		want   *llm.RateLimits
	}{
		{name: "no rate-limit header", header: map[string]string{"Content-Type": "application/json", "X-Ratelimit": "5"}},
		{
			name: "OpenAI",
			header: map[string]string{
				"x-ratelimit-limit-requests": "10000", "x-ratelimit-remaining-requests": "9999", "x-ratelimit-reset-requests": "6m0s",
				"x-ratelimit-limit-tokens": "2000000", "x-ratelimit-remaining-tokens": "1999000", "x-ratelimit-reset-tokens": "1m30.5s",
			},
			want: &llm.RateLimits{
				RequestsLimit: 10000, RequestsRemaining: 9999, RequestsReset: 6 * time.Minute,
				TokensLimit: 2000000, TokensRemaining: 1999000, TokensReset: 90500 * time.Millisecond,
			},
		},
		{
			name:   "OpenAI zero and millisecond resets",
			header: map[string]string{"x-ratelimit-reset-requests": "0s", "x-ratelimit-reset-tokens": "20ms"},
			want:   with(func(l *llm.RateLimits) { l.TokensReset = 20 * time.Millisecond }),
		},
		{
			name:   "a bare number of seconds",
			header: map[string]string{"x-ratelimit-reset-tokens": "2.5"},
			want:   with(func(l *llm.RateLimits) { l.TokensReset = 2500 * time.Millisecond }),
		},
		{
			name: "Anthropic",
			header: map[string]string{
				"anthropic-ratelimit-requests-limit": "50", "anthropic-ratelimit-requests-remaining": "49", "anthropic-ratelimit-requests-reset": at(time.Second),
				"anthropic-ratelimit-tokens-limit": "80000", "anthropic-ratelimit-tokens-remaining": "70000", "anthropic-ratelimit-tokens-reset": at(45 * time.Second),
				"anthropic-ratelimit-input-tokens-remaining": "1",
			},
			want: &llm.RateLimits{
				RequestsLimit: 50, RequestsRemaining: 49, RequestsReset: time.Second,
				TokensLimit: 80000, TokensRemaining: 70000, TokensReset: 45 * time.Second,
			},
		},
		{
			name: "Anthropic input and output only: the tighter stands",
			header: map[string]string{
				"anthropic-ratelimit-input-tokens-limit": "400000", "anthropic-ratelimit-input-tokens-remaining": "300000", "anthropic-ratelimit-input-tokens-reset": at(10 * time.Second),
				"anthropic-ratelimit-output-tokens-limit": "80000", "anthropic-ratelimit-output-tokens-remaining": "5000", "anthropic-ratelimit-output-tokens-reset": at(50 * time.Second),
			},
			want: with(func(l *llm.RateLimits) { l.TokensLimit, l.TokensRemaining, l.TokensReset = 80000, 5000, 50*time.Second }),
		},
		{
			name: "Anthropic output garbled: input stands",
			header: map[string]string{
				"anthropic-ratelimit-input-tokens-remaining": "300000", "anthropic-ratelimit-output-tokens-remaining": "lots",
			},
			want: with(func(l *llm.RateLimits) { l.TokensRemaining = 300000 }),
		},
		{
			name:   "OpenAI wins over Anthropic",
			header: map[string]string{"x-ratelimit-remaining-requests": "7", "anthropic-ratelimit-requests-remaining": "9"},
			want:   with(func(l *llm.RateLimits) { l.RequestsRemaining = 7 }),
		},
		{
			name: "garbage counts are unknown",
			header: map[string]string{
				"x-ratelimit-limit-requests": "-5", "x-ratelimit-remaining-requests": "ten",
				"x-ratelimit-limit-tokens": "99999999999999999999999", "x-ratelimit-remaining-tokens": "1e6",
			},
			want: with(func(*llm.RateLimits) {}),
		},
		{
			name: "garbage resets are unknown",
			header: map[string]string{
				"x-ratelimit-reset-requests": "-3s", "x-ratelimit-reset-tokens": "soon",
				"anthropic-ratelimit-requests-reset": "tomorrow",
			},
			want: with(func(*llm.RateLimits) {}),
		},
		{
			name: "far resets are clamped to an hour",
			header: map[string]string{
				"x-ratelimit-reset-requests": "2562047h", "x-ratelimit-reset-tokens": "1e300",
			},
			want: with(func(l *llm.RateLimits) { l.RequestsReset, l.TokensReset = MaxWait, MaxWait }),
		},
		{
			name: "Anthropic resets in the past are due, far ones clamped",
			header: map[string]string{
				"anthropic-ratelimit-requests-reset": at(-time.Minute), "anthropic-ratelimit-tokens-reset": "9999-12-31T23:59:59Z",
			},
			want: with(func(l *llm.RateLimits) { l.TokensReset = MaxWait }),
		},
		{
			name:   "overflowing durations are unknown",
			header: map[string]string{"x-ratelimit-reset-requests": "9223372036854775808ns"},
			want:   with(func(*llm.RateLimits) {}),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, parseLimits(headerOf(tc.header), testNow))
		})
	}
}

func TestParseLimitsTakesTheFirstOfRepeatedHeaders(t *testing.T) {
	t.Parallel()
	h := http.Header{}
	h.Add("X-Ratelimit-Remaining-Requests", "3")
	for range 10000 {
		h.Add("X-Ratelimit-Remaining-Requests", "999")
	}
	l := parseLimits(h, testNow)
	require.NotNil(t, l)
	require.Equal(t, 3, l.RequestsRemaining)
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		header map[string]string
		want   time.Duration
	}{
		{name: "none"},
		{name: "retry-after-ms wins", header: map[string]string{"Retry-After-Ms": "250", "Retry-After": "9"}, want: 250 * time.Millisecond},
		{name: "garbage retry-after-ms falls back to Retry-After", header: map[string]string{"Retry-After-Ms": "NaN", "Retry-After": "9"}, want: 9 * time.Second},
		{name: "seconds", header: map[string]string{"Retry-After": "2"}, want: 2 * time.Second},
		{name: "fractional seconds", header: map[string]string{"Retry-After": "0.5"}, want: 500 * time.Millisecond},
		{name: "HTTP date", header: map[string]string{"Retry-After": testNow.Add(30 * time.Second).Format(http.TimeFormat)}, want: 30 * time.Second},
		{name: "HTTP date in the past", header: map[string]string{"Retry-After": testNow.Add(-time.Hour).Format(http.TimeFormat)}},
		{name: "HTTP date beyond an hour", header: map[string]string{"Retry-After": testNow.Add(2 * time.Hour).Format(http.TimeFormat)}},
		{name: "an hour is believed", header: map[string]string{"Retry-After": "3600"}, want: time.Hour},
		{name: "beyond an hour is not", header: map[string]string{"Retry-After": "3601"}},
		{name: "negative", header: map[string]string{"Retry-After": "-5", "Retry-After-Ms": "-5"}},
		{name: "huge", header: map[string]string{"Retry-After-Ms": "1e308", "Retry-After": "99999999999999999999"}},
		{name: "infinite", header: map[string]string{"Retry-After-Ms": "+Inf", "Retry-After": "Inf"}},
		{name: "words", header: map[string]string{"Retry-After": "soon"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, retryAfter(headerOf(tc.header), testNow))
		})
	}
}

// FuzzParseLimits feeds header lines ("name: value") and one value set on
// every rate-limit and retry header: nothing panics, every reset and
// Retry-After is a wait within [0, MaxWait], every count at least -1.
func FuzzParseLimits(f *testing.F) {
	f.Add("x-ratelimit-reset-requests: 1m30.5s\nx-ratelimit-remaining-tokens: 12", "6m0s")
	f.Add("anthropic-ratelimit-tokens-reset: 2026-12-06T08:00:30Z", "2026-12-06T08:00:30Z")
	f.Add("anthropic-ratelimit-input-tokens-remaining: 5\nanthropic-ratelimit-output-tokens-remaining: -1", "18446744073709551616")
	f.Add("retry-after: Sun, 06 Dec 2026 08:00:30 GMT", "-9223372036854775808ns")
	f.Add("x-ratelimit-reset-tokens: 1e308", "NaN")
	f.Add("", "0s")
	f.Fuzz(func(t *testing.T, lines, value string) {
		h := http.Header{}
		for line := range strings.SplitSeq(lines, "\n") {
			name, v, _ := strings.Cut(line, ":")
			h.Add(strings.TrimSpace(name), v)
		}
		for _, name := range limitHeaders {
			h.Add(name, value)
		}
		h.Add("Retry-After", value)
		h.Add("Retry-After-Ms", value)
		if d := retryAfter(h, testNow); d < 0 || d > MaxWait {
			t.Fatalf("Retry-After %v outside [0, %v]", d, MaxWait)
		}
		l := parseLimits(h, testNow)
		require.NotNil(t, l, "every rate-limit header was sent")
		for _, d := range []time.Duration{l.RequestsReset, l.TokensReset} {
			if d < 0 || d > MaxWait {
				t.Fatalf("reset %v outside [0, %v]: %+v", d, MaxWait, l)
			}
		}
		for _, n := range []int{l.RequestsLimit, l.RequestsRemaining, l.TokensLimit, l.TokensRemaining} {
			if n < -1 {
				t.Fatalf("count %d below -1: %+v", n, l)
			}
		}
	})
}
