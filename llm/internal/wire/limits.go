package wire

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/aetherium-engine/aetherium/llm"
)

const (
	// MaxWait bounds every wait read from a provider's headers: a Retry-After
	// beyond it is ignored, a rate-limit reset beyond it is clamped to it. A
	// hostile or broken server must not park a step for a day.
	MaxWait = time.Hour
	// maxCount bounds a rate-limit count: a larger one is treated as garbled,
	// so that the governor's arithmetic on it cannot overflow. The largest real
	// limits (tokens per day) are a few billions.
	maxCount = 1_000_000_000_000
)

// The rate-limit headers of both vendors. OpenAI's resets are durations
// ("6m0s"); Anthropic's are RFC 3339 instants.
const (
	openAIPrefix    = "X-Ratelimit-"
	anthropicPrefix = "Anthropic-Ratelimit-"
)

var limitHeaders = func() []string {
	var names []string
	for _, kind := range []string{"requests", "tokens"} {
		for _, field := range []string{"limit", "remaining", "reset"} {
			names = append(names, openAIPrefix+field+"-"+kind)
		}
	}
	for _, kind := range []string{"requests", "tokens", "input-tokens", "output-tokens"} {
		for _, field := range []string{"limit", "remaining", "reset"} {
			names = append(names, anthropicPrefix+kind+"-"+field)
		}
	}
	for i, n := range names {
		names[i] = http.CanonicalHeaderKey(n)
	}
	return names
}()

// ParseLimits reads the rate-limit headers of an answer of either vendor,
// relative to the current time (Anthropic's resets are instants). It is nil
// when h has none of them.
func ParseLimits(h http.Header) *llm.RateLimits { return parseLimits(h, time.Now()) }

// bucket is one limit as the headers describe it.
type bucket struct {
	sent             bool
	limit, remaining int
	reset            time.Duration
}

// parseLimits is ParseLimits at now. A count that is missing, negative, not an
// integer or absurd is -1; a reset that is missing, garbled or in the past is
// 0, and one beyond MaxWait is MaxWait. OpenAI's headers win over Anthropic's
// when a gateway sends both. Anthropic's tokens-* headers are its tightest
// token limit; when only its input-tokens-* and output-tokens-* are sent, the
// one with fewer tokens remaining stands for both (the call is held back by
// whichever runs out first).
func parseLimits(h http.Header, now time.Time) *llm.RateLimits {
	found := false
	for _, name := range limitHeaders {
		if len(h[name]) > 0 {
			found = true
			break
		}
	}
	if !found {
		return nil
	}
	requests := first(openAIBucket(h, "requests"), anthropicBucket(h, "requests", now))
	tokens := first(openAIBucket(h, "tokens"), anthropicBucket(h, "tokens", now),
		tighter(anthropicBucket(h, "input-tokens", now), anthropicBucket(h, "output-tokens", now)))
	return &llm.RateLimits{
		RequestsLimit: requests.limit, RequestsRemaining: requests.remaining, RequestsReset: requests.reset,
		TokensLimit: tokens.limit, TokensRemaining: tokens.remaining, TokensReset: tokens.reset,
	}
}

func openAIBucket(h http.Header, kind string) bucket {
	get := func(field string) string { return header(h, openAIPrefix+field+"-"+kind) }
	limit, remaining, reset := get("Limit"), get("Remaining"), get("Reset")
	return bucket{
		sent:  limit != "" || remaining != "" || reset != "",
		limit: count(limit), remaining: count(remaining), reset: resetIn(reset),
	}
}

func anthropicBucket(h http.Header, kind string, now time.Time) bucket {
	get := func(field string) string { return header(h, anthropicPrefix+kind+"-"+field) }
	limit, remaining, reset := get("Limit"), get("Remaining"), get("Reset")
	return bucket{
		sent:  limit != "" || remaining != "" || reset != "",
		limit: count(limit), remaining: count(remaining), reset: resetAt(reset, now),
	}
}

// header is the first value of name, trimmed: a repeated header is not joined
// (a join is no number).
func header(h http.Header, name string) string {
	return strings.TrimSpace(h.Get(name))
}

// first is the first bucket that was sent, else an unknown one.
func first(bs ...bucket) bucket {
	for _, b := range bs {
		if b.sent {
			return b
		}
	}
	return bucket{limit: -1, remaining: -1}
}

// tighter is the bucket with fewer tokens remaining; one whose remaining count
// is unknown loses to one that has it.
func tighter(a, b bucket) bucket {
	switch {
	case !a.sent || (b.sent && a.remaining < 0):
		return b
	case !b.sent || b.remaining < 0:
		return a
	case b.remaining < a.remaining:
		return b
	}
	return a
}

// count is a non-negative integer header, -1 when it is anything else.
func count(v string) int {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > maxCount {
		return -1
	}
	return int(n)
}

// resetIn is an OpenAI reset, a Go duration ("1m30.5s", "20ms", "0s"); a bare
// number is taken as seconds, as some compatible servers send it.
func resetIn(v string) time.Duration {
	if v == "" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		s, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0
		}
		return clampSeconds(s)
	}
	return clamp(d)
}

// resetAt is an Anthropic reset, an RFC 3339 instant, as the time from now
// until it.
func resetAt(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	at, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return 0
	}
	// Sub saturates instead of overflowing for instants centuries away.
	return clamp(at.Sub(now))
}

// clamp bounds a reset to [0, MaxWait]: a reset in the past is due now.
func clamp(d time.Duration) time.Duration {
	return min(max(d, 0), MaxWait)
}

// clampSeconds is clamp for a float count of seconds, checked before the
// conversion: a float beyond int64 (or NaN) has no defined Duration.
func clampSeconds(s float64) time.Duration {
	switch {
	case math.IsNaN(s) || s <= 0:
		return 0
	case s >= MaxWait.Seconds():
		return MaxWait
	}
	return time.Duration(s * float64(time.Second))
}

// retryAfter is the server's retry-after-ms, else its Retry-After (seconds or
// an HTTP date), relative to now; 0 when neither is a wait within MaxWait.
// Unlike a reset, an absurd Retry-After is ignored rather than clamped: it
// says nothing about when the provider will answer.
func retryAfter(h http.Header, now time.Time) time.Duration {
	if ms, err := strconv.ParseFloat(header(h, "Retry-After-Ms"), 64); err == nil {
		if d, ok := within(ms / 1000); ok {
			return d
		}
	}
	v := header(h, "Retry-After")
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		d, _ := within(s)
		return d
	}
	if at, err := http.ParseTime(v); err == nil {
		if d := at.Sub(now); d > 0 && d <= MaxWait {
			return d
		}
	}
	return 0
}

// within is s seconds as a Duration when it is in (0, MaxWait].
func within(s float64) (time.Duration, bool) {
	if !(s > 0 && s <= MaxWait.Seconds()) {
		return 0, false
	}
	return time.Duration(s * float64(time.Second)), true
}
