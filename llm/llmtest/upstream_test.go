package llmtest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/llm/anthropic"
	"github.com/aetherium-engine/aetherium/llm/llmtest"
	"github.com/aetherium-engine/aetherium/llm/openai"
	"github.com/stretchr/testify/require"
)

var wires = []string{llmtest.WireOpenAI, llmtest.WireAnthropic}

// clock is a time the test moves, so windows are checked to the nanosecond
// however slow the machine.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func startUpstream(t *testing.T, cfg llmtest.UpstreamConfig) *llmtest.Upstream {
	t.Helper()
	u, err := llmtest.StartUpstream(cfg)
	require.NoError(t, err)
	t.Cleanup(u.Close)
	return u
}

func endpoint(wire string, u *llmtest.Upstream) string {
	if wire == llmtest.WireOpenAI {
		return u.URL + "/chat/completions"
	}
	return u.URL + "/v1/messages"
}

type answer struct {
	// sent is when the request was sent.
	sent   time.Time
	status int
	header http.Header
	body   map[string]any
	raw    []byte
}

func do(t *testing.T, method, url, body string) answer {
	t.Helper()
	return send(t, method, url, strings.NewReader(body))
}

func send(t *testing.T, method, url string, body io.Reader) answer {
	t.Helper()
	a, err := try(method, url, body)
	require.NoError(t, err)
	return a
}

// try is send for a goroutine other than the test's.
func try(method, url string, body io.Reader) (answer, error) {
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	sent := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, err
	}
	a := answer{sent: sent, status: resp.StatusCode, header: resp.Header, raw: raw}
	if err := json.Unmarshal(raw, &a.body); err != nil {
		return a, fmt.Errorf("answer %d is not JSON: %s", resp.StatusCode, raw)
	}
	return a, nil
}

// request is a minimal body of the wire's format: the prompt is messages
// alone (no system, no tools), so its tokens are ceil(len(messages)/4).
func request(wire, model, messages string, maxTokens int) string {
	body := `{"model":"` + model + `","messages":` + messages
	if maxTokens > 0 {
		key := "max_tokens"
		if wire == llmtest.WireOpenAI {
			key = "max_completion_tokens"
		}
		body += `,"` + key + `":` + strconv.Itoa(maxTokens)
	}
	return body + "}"
}

func userMessages(text string) string { return `[{"role":"user","content":"` + text + `"}]` }

func tokens(prompt string) int { return (len(prompt) + 3) / 4 }

// limits reads the vendor's rate-limit headers. Resets are durations: OpenAI
// sends them so, Anthropic sends times, read from now.
type limits struct {
	reqLimit, reqRemaining, tokLimit, tokRemaining int
	reqReset, tokReset                             time.Duration
}

func readLimits(t *testing.T, wire string, a answer, now time.Time) limits {
	t.Helper()
	h := a.header
	num := func(k string) int {
		v := h.Get(k)
		if v == "" {
			return -1
		}
		n, err := strconv.Atoi(v)
		require.NoError(t, err, k)
		return n
	}
	dur := func(k string) time.Duration {
		v := h.Get(k)
		if v == "" {
			return -1
		}
		if wire == llmtest.WireOpenAI {
			d, err := time.ParseDuration(v)
			require.NoError(t, err, k)
			return d
		}
		at, err := time.Parse(time.RFC3339, v)
		require.NoError(t, err, k)
		return at.Sub(now)
	}
	if wire == llmtest.WireOpenAI {
		return limits{
			reqLimit: num("x-ratelimit-limit-requests"), reqRemaining: num("x-ratelimit-remaining-requests"), reqReset: dur("x-ratelimit-reset-requests"),
			tokLimit: num("x-ratelimit-limit-tokens"), tokRemaining: num("x-ratelimit-remaining-tokens"), tokReset: dur("x-ratelimit-reset-tokens"),
		}
	}
	return limits{
		reqLimit: num("anthropic-ratelimit-requests-limit"), reqRemaining: num("anthropic-ratelimit-requests-remaining"), reqReset: dur("anthropic-ratelimit-requests-reset"),
		tokLimit: num("anthropic-ratelimit-tokens-limit"), tokRemaining: num("anthropic-ratelimit-tokens-remaining"), tokReset: dur("anthropic-ratelimit-tokens-reset"),
	}
}

// errorOf is the vendor error body's type and message.
func errorOf(t *testing.T, wire string, a answer) (typ, msg string) {
	t.Helper()
	e, ok := a.body["error"].(map[string]any)
	require.True(t, ok, "no error object: %s", a.raw)
	if wire == llmtest.WireAnthropic {
		require.Equal(t, "error", a.body["type"], "%s", a.raw)
	} else {
		require.Contains(t, e, "param", "%s", a.raw)
	}
	typ, _ = e["type"].(string)
	msg, _ = e["message"].(string)
	require.NotEmpty(t, msg, "%s", a.raw)
	return typ, msg
}

func TestUpstreamRPMSlidingWindow(t *testing.T) {
	t.Parallel()
	const window = time.Second
	for _, wire := range wires {
		t.Run(wire, func(t *testing.T) {
			t.Parallel()
			clk := newClock()
			u := startUpstream(t, llmtest.UpstreamConfig{Wire: wire, RPM: 3, Window: window, Now: clk.Now})
			url, body := endpoint(wire, u), request(wire, "m", userMessages("hi"), 10)
			ok := func(remaining int, reset time.Duration) {
				t.Helper()
				a := do(t, http.MethodPost, url, body)
				require.Equal(t, http.StatusOK, a.status, "%s", a.raw)
				l := readLimits(t, wire, a, clk.Now())
				require.Equal(t, 3, l.reqLimit)
				require.Equal(t, remaining, l.reqRemaining)
				require.Equal(t, reset, l.reqReset, "until the oldest request leaves")
				require.Equal(t, -1, l.tokLimit, "no TPM, no token headers")
			}
			refused := func(wait time.Duration) {
				t.Helper()
				a := do(t, http.MethodPost, url, body)
				require.Equal(t, http.StatusTooManyRequests, a.status, "%s", a.raw)
				l := readLimits(t, wire, a, clk.Now())
				require.Equal(t, 0, l.reqRemaining)
				// Headers have millisecond precision.
				if wire == llmtest.WireOpenAI {
					require.Equal(t, wait.Round(time.Millisecond), l.reqReset)
				} else {
					require.InDelta(t, float64(wait), float64(l.reqReset), float64(time.Millisecond))
				}
				after, err := strconv.Atoi(a.header.Get("Retry-After"))
				require.NoError(t, err)
				require.Equal(t, int((wait+time.Second-1)/time.Second), after, "Retry-After is whole seconds, rounded up")
				typ, msg := errorOf(t, wire, a)
				if wire == llmtest.WireOpenAI {
					require.Equal(t, strconv.FormatInt((wait.Nanoseconds()+999_999)/1_000_000, 10), a.header.Get("Retry-After-Ms"))
					require.Equal(t, "requests", typ)
					require.Equal(t, "rate_limit_exceeded", a.body["error"].(map[string]any)["code"])
					require.Contains(t, msg, "Rate limit reached for m ")
					require.Contains(t, msg, "on requests per min (RPM): Limit 3, Used 3, Requested 1. Please try again in ")
				} else {
					require.Equal(t, "rate_limit_error", typ)
					require.Contains(t, msg, "3 requests per minute")
				}
			}

			ok(2, window)
			clk.Advance(400 * time.Millisecond)
			ok(1, 600*time.Millisecond)
			ok(0, 600*time.Millisecond)
			refused(600 * time.Millisecond)
			clk.Advance(600*time.Millisecond - time.Nanosecond)
			refused(time.Nanosecond)
			// A request leaves the window exactly Window after it was accepted,
			// and only it: the window slides, it is not reset.
			clk.Advance(time.Nanosecond)
			ok(0, 400*time.Millisecond)
			refused(400 * time.Millisecond)
			clk.Advance(400 * time.Millisecond)
			ok(1, 600*time.Millisecond)
			ok(0, 600*time.Millisecond)
			refused(600 * time.Millisecond)

			s := u.Stats()
			require.Equal(t, 10, s.Requests)
			require.Equal(t, 6, s.Answered)
			require.Equal(t, 4, s.RateLimited)
			require.Equal(t, 3, s.PeakWindowRequests)
			require.Equal(t, 6, s.Models["m"].Answered)
			require.Equal(t, 4, s.Models["m"].RateLimited)
		})
	}
}

// The windows pass in real time too: a refused client that waits as told is
// accepted.
func TestUpstreamRPMRealTime(t *testing.T) {
	t.Parallel()
	const window = 300 * time.Millisecond
	u := startUpstream(t, llmtest.UpstreamConfig{Wire: llmtest.WireOpenAI, RPM: 2, Window: window})
	url, body := endpoint(llmtest.WireOpenAI, u), request(llmtest.WireOpenAI, "m", userMessages("hi"), 10)
	start := time.Now()
	require.Equal(t, http.StatusOK, do(t, http.MethodPost, url, body).status)
	require.Equal(t, http.StatusOK, do(t, http.MethodPost, url, body).status)
	a := do(t, http.MethodPost, url, body)
	if time.Since(start) >= window {
		t.Skipf("the machine took %s for three requests, more than the window", time.Since(start))
	}
	require.Equal(t, http.StatusTooManyRequests, a.status, "%s", a.raw)
	ms, err := strconv.Atoi(a.header.Get("Retry-After-Ms"))
	require.NoError(t, err)
	require.Positive(t, ms)
	require.LessOrEqual(t, time.Duration(ms)*time.Millisecond, window)
	time.Sleep(time.Duration(ms) * time.Millisecond)
	require.Equal(t, http.StatusOK, do(t, http.MethodPost, url, body).status)
}

func TestUpstreamTPM(t *testing.T) {
	t.Parallel()
	msgs := userMessages(strings.Repeat("x", 400))
	in := tokens(msgs)
	tests := []struct {
		name      string
		wire      string
		maxTokens int
		// admit is what one request counts for TPM.
		admit int
	}{
		{name: "openai with max tokens", wire: llmtest.WireOpenAI, maxTokens: 50, admit: in + 50},
		// Without max_tokens the answer's output is what counts: "done." is 2 tokens.
		{name: "openai without max tokens", wire: llmtest.WireOpenAI, admit: in + 2},
		{name: "anthropic", wire: llmtest.WireAnthropic, maxTokens: 50, admit: in + 50},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tpm := 2*tc.admit + tc.admit/2
			clk := newClock()
			u := startUpstream(t, llmtest.UpstreamConfig{Wire: tc.wire, TPM: tpm, Now: clk.Now})
			url, body := endpoint(tc.wire, u), request(tc.wire, "m", msgs, tc.maxTokens)
			for i := 1; i <= 2; i++ {
				a := do(t, http.MethodPost, url, body)
				require.Equal(t, http.StatusOK, a.status, "%s", a.raw)
				l := readLimits(t, tc.wire, a, clk.Now())
				require.Equal(t, tpm, l.tokLimit)
				require.Equal(t, tpm-i*tc.admit, l.tokRemaining)
				require.Equal(t, time.Minute-time.Duration(i-1)*10*time.Second, l.tokReset, "the reset counts down to the oldest request leaving")
				require.Equal(t, -1, l.reqLimit, "no RPM, no request headers")
				clk.Advance(10 * time.Second)
			}

			// The third does not fit until the first has left, 40 s on.
			a := do(t, http.MethodPost, url, body)
			require.Equal(t, http.StatusTooManyRequests, a.status, "%s", a.raw)
			require.Equal(t, "40", a.header.Get("Retry-After"))
			typ, msg := errorOf(t, tc.wire, a)
			if tc.wire == llmtest.WireOpenAI {
				require.Equal(t, "tokens", typ)
				require.Contains(t, msg, fmt.Sprintf("on tokens per min (TPM): Limit %d, Used %d, Requested %d.", tpm, 2*tc.admit, tc.admit))
			} else {
				require.Equal(t, "rate_limit_error", typ)
				require.Contains(t, msg, "tokens per minute")
			}
			clk.Advance(40*time.Second - time.Nanosecond)
			require.Equal(t, http.StatusTooManyRequests, do(t, http.MethodPost, url, body).status)
			clk.Advance(time.Nanosecond)
			require.Equal(t, http.StatusOK, do(t, http.MethodPost, url, body).status)
			clk.Advance(time.Minute)

			s := u.Stats()
			require.Equal(t, 3, s.Answered)
			require.Equal(t, 2, s.RateLimited)
			require.Equal(t, 2*tc.admit, s.PeakWindowTokens)
			usage := s.Models["m"].Usage
			require.Equal(t, 3*in, usage.InputTokens)
			require.Equal(t, 3*2, usage.OutputTokens)
			if tc.maxTokens == 0 {
				require.Equal(t, usage.Total()*2/3, s.PeakWindowTokens, "without max_tokens the window counts the usage billed")
			}
		})
	}

	t.Run("a request larger than TPM is always refused", func(t *testing.T) {
		t.Parallel()
		u := startUpstream(t, llmtest.UpstreamConfig{Wire: llmtest.WireOpenAI, TPM: 100})
		a := do(t, http.MethodPost, endpoint(llmtest.WireOpenAI, u), request(llmtest.WireOpenAI, "m", userMessages("hi"), 200))
		require.Equal(t, http.StatusTooManyRequests, a.status, "%s", a.raw)
		require.NotEmpty(t, a.header.Get("Retry-After"))
		require.Zero(t, u.Stats().PeakWindowTokens)
	})
}

func TestUpstreamOverloaded(t *testing.T) {
	t.Parallel()
	tests := []struct {
		wire, typ, msg string
		status         int
	}{
		{wire: llmtest.WireAnthropic, status: llm.StatusOverloaded, typ: "overloaded_error", msg: "Overloaded"},
		{wire: llmtest.WireOpenAI, status: http.StatusServiceUnavailable, typ: "server_error", msg: "The server is overloaded or not ready yet."},
	}
	for _, tc := range tests {
		t.Run(tc.wire, func(t *testing.T) {
			t.Parallel()
			u := startUpstream(t, llmtest.UpstreamConfig{Wire: tc.wire, RPM: 1, Overloaded: map[string]int{"big": tc.status}})
			url := endpoint(tc.wire, u)
			for range 2 {
				a := do(t, http.MethodPost, url, request(tc.wire, "big", userMessages("hi"), 10))
				require.Equal(t, tc.status, a.status, "%s", a.raw)
				typ, msg := errorOf(t, tc.wire, a)
				require.Equal(t, tc.typ, typ)
				require.Equal(t, tc.msg, msg)
				l := readLimits(t, tc.wire, a, time.Now())
				require.Equal(t, 1, l.reqLimit, "an overload carries the limits too")
				require.Equal(t, 1, l.reqRemaining)
				id := a.header.Get("x-request-id")
				if tc.wire == llmtest.WireAnthropic {
					id = a.header.Get("request-id")
				}
				require.True(t, strings.HasPrefix(id, "req_"), "request id %q", id)
			}
			// Overloads took no share of the RPM of 1.
			a := do(t, http.MethodPost, url, request(tc.wire, "small", userMessages("hi"), 10))
			require.Equal(t, http.StatusOK, a.status, "%s", a.raw)

			s := u.Stats()
			require.Equal(t, 2, s.Overloaded)
			require.Equal(t, 2, s.Models["big"].Overloaded)
			require.Zero(t, s.Models["big"].Answered)
			require.Equal(t, 1, s.Models["small"].Answered)
		})
	}
}

// openAIBody is a Chat Completions request whose prompt is its messages.
func openAIBody(t *testing.T, model string, texts ...string) (body string, prompt []byte) {
	t.Helper()
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	msgs := []msg{{Role: "system", Content: texts[0]}}
	for _, text := range texts[1:] {
		msgs = append(msgs, msg{Role: "user", Content: text})
	}
	prompt, err := json.Marshal(msgs)
	require.NoError(t, err)
	return request(llmtest.WireOpenAI, model, string(prompt), 0), prompt
}

func usageOf(t *testing.T, a answer) map[string]any {
	t.Helper()
	require.Equal(t, http.StatusOK, a.status, "%s", a.raw)
	u, ok := a.body["usage"].(map[string]any)
	require.True(t, ok, "%s", a.raw)
	return u
}

func num(v any) int {
	f, _ := v.(float64)
	return int(f)
}

func TestUpstreamOpenAICache(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("You are a careful agent. ", 240) // 6000 bytes
	tests := []struct {
		name string
		// first primes the cache; then is the request measured.
		first, then []string
		firstModel  string
		// cached is a function of the two prompts' common prefix.
		cached func(common int) int
	}{
		{
			name:  "a repeated long prefix is cached in whole 128-token blocks",
			first: []string{long, "first question"}, then: []string{long, "a second, different question"},
			cached: func(common int) int { return common / 512 * 128 },
		},
		{
			name:  "a repeated whole prompt",
			first: []string{long, "same"}, then: []string{long, "same"},
			cached: func(common int) int { return common / 512 * 128 },
		},
		{
			name:  "a short prompt is not cached",
			first: []string{"be brief", "q"}, then: []string{"be brief", "q"},
			cached: func(int) int { return 0 },
		},
		{
			name:  "a prefix shorter than the minimum is not cached",
			first: []string{long[:3000], "one"}, then: []string{long[:3000] + strings.Repeat("y", 3000), "two"},
			cached: func(int) int { return 0 },
		},
		{
			name:  "the cache is per model",
			first: []string{long, "q"}, firstModel: "other", then: []string{long, "q"},
			cached: func(int) int { return 0 },
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			u := startUpstream(t, llmtest.UpstreamConfig{Wire: llmtest.WireOpenAI})
			url := endpoint(llmtest.WireOpenAI, u)
			firstBody, firstPrompt := openAIBody(t, cmpOr(tc.firstModel, "m"), tc.first...)
			usage := usageOf(t, do(t, http.MethodPost, url, firstBody))
			require.Zero(t, num(usage["prompt_tokens_details"].(map[string]any)["cached_tokens"]), "nothing is cached before")
			require.Equal(t, tokens(string(firstPrompt)), num(usage["prompt_tokens"]))

			body, prompt := openAIBody(t, "m", tc.then...)
			usage = usageOf(t, do(t, http.MethodPost, url, body))
			common := 0
			for common < min(len(prompt), len(firstPrompt)) && prompt[common] == firstPrompt[common] {
				common++
			}
			want := tc.cached(common)
			require.Equal(t, want, num(usage["prompt_tokens_details"].(map[string]any)["cached_tokens"]))
			require.Equal(t, tokens(string(prompt)), num(usage["prompt_tokens"]), "prompt_tokens include the cached ones")
			require.Equal(t, num(usage["prompt_tokens"])+num(usage["completion_tokens"]), num(usage["total_tokens"]))
			if want > 0 {
				require.GreaterOrEqual(t, want, llmtest.DefaultCacheMinTokens)
			}
			require.Equal(t, want, u.Stats().Models["m"].Usage.CachedInputTokens)
		})
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func TestUpstreamAnthropicCache(t *testing.T) {
	t.Parallel()
	const cc = `,"cache_control":{"type":"ephemeral"}`
	long := strings.Repeat("Read the files before you answer. ", 150) // 5100 bytes
	sysBlock := `[{"type":"text","text":"` + long + `"`
	anth := func(system, messages string) string {
		body := `{"model":"m","max_tokens":100`
		if system != "" {
			body += `,"system":` + system
		}
		return body + `,"messages":` + messages + `}`
	}
	type want struct{ input, write, read int }
	tests := []struct {
		name          string
		first, second string
		// prompt is the second request's prompt without cache_control, the
		// prefixes those up to the blocks read and written.
		prompt, read, written string
	}{
		{
			name:    "a system breakpoint is written then read",
			first:   anth(sysBlock+cc+`}]`, userMessages("hi")),
			second:  anth(sysBlock+cc+`}]`, userMessages("another question")),
			prompt:  sysBlock + `}]` + userMessages("another question"),
			read:    sysBlock + `}`,
			written: sysBlock + `}`,
		},
		{
			name:    "cache_control first in its block",
			first:   anth(`[{"cache_control":{"type":"ephemeral"},"type":"text","text":"`+long+`"}]`, userMessages("hi")),
			second:  anth(`[{"cache_control":{"type":"ephemeral"},"type":"text","text":"`+long+`"}]`, userMessages("there")),
			prompt:  sysBlock + `}]` + userMessages("there"),
			read:    sysBlock + `}`,
			written: sysBlock + `}`,
		},
		{
			name:   "a breakpoint before the minimum caches nothing",
			first:  anth(`[{"type":"text","text":"short"`+cc+`}]`, userMessages("hi")),
			second: anth(`[{"type":"text","text":"short"`+cc+`}]`, userMessages("hi")),
			prompt: `[{"type":"text","text":"short"}]` + userMessages("hi"),
		},
		{
			name:   "no breakpoint, no cache",
			first:  anth(sysBlock+`}]`, userMessages("hi")),
			second: anth(sysBlock+`}]`, userMessages("hi")),
			prompt: sysBlock + `}]` + userMessages("hi"),
		},
		{
			name:  "a moving breakpoint reads the earlier turn and writes the new one",
			first: anth("", `[{"role":"user","content":[{"type":"text","text":"`+long+`"`+cc+`}]}]`),
			second: anth("", `[{"role":"user","content":[{"type":"text","text":"`+long+`"}]},{"role":"assistant","content":"ok"},`+
				`{"role":"user","content":[{"type":"text","text":"more"`+cc+`}]}]`),
			prompt: `[{"role":"user","content":[{"type":"text","text":"` + long + `"}]},{"role":"assistant","content":"ok"},` +
				`{"role":"user","content":[{"type":"text","text":"more"}]}]`,
			read: `[{"role":"user","content":[{"type":"text","text":"` + long + `"}`,
			written: `[{"role":"user","content":[{"type":"text","text":"` + long + `"}]},{"role":"assistant","content":"ok"},` +
				`{"role":"user","content":[{"type":"text","text":"more"}`,
		},
		{
			name:    "tools come first in the prefix",
			first:   `{"model":"m","max_tokens":9,"tools":[{"name":"read","input_schema":{"type":"object","description":"` + long + `"}` + cc + `}],"messages":[{"role":"user","content":"a"}]}`,
			second:  `{"model":"m","max_tokens":9,"tools":[{"name":"read","input_schema":{"type":"object","description":"` + long + `"}` + cc + `}],"system":"be brief","messages":[{"role":"user","content":"b"}]}`,
			prompt:  `[{"name":"read","input_schema":{"type":"object","description":"` + long + `"}}]"be brief"[{"role":"user","content":"b"}]`,
			read:    `[{"name":"read","input_schema":{"type":"object","description":"` + long + `"}}`,
			written: `[{"name":"read","input_schema":{"type":"object","description":"` + long + `"}}`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			u := startUpstream(t, llmtest.UpstreamConfig{Wire: llmtest.WireAnthropic})
			url := endpoint(llmtest.WireAnthropic, u)
			first := usageOf(t, do(t, http.MethodPost, url, tc.first))
			require.Zero(t, num(first["cache_read_input_tokens"]), "nothing is cached before")
			second := usageOf(t, do(t, http.MethodPost, url, tc.second))

			total := tokens(tc.prompt)
			var w want
			if tc.read != "" {
				w.read = tokens(tc.read)
			}
			if tc.written != "" {
				w.write = tokens(tc.written) - w.read
			}
			w.input = total - w.read - w.write
			got := want{input: num(second["input_tokens"]), write: num(second["cache_creation_input_tokens"]), read: num(second["cache_read_input_tokens"])}
			require.Equal(t, w, got)
			if tc.read != "" && tc.read == tc.written {
				require.Equal(t, w.read, num(first["cache_creation_input_tokens"]), "the first request wrote what the second read")
			}

			s := u.Stats().Models["m"].Usage
			require.Equal(t, num(first["input_tokens"])+num(first["cache_creation_input_tokens"])+num(first["cache_read_input_tokens"])+total, s.InputTokens,
				"the stats' input tokens include the cached ones")
			require.Equal(t, w.read+num(first["cache_read_input_tokens"]), s.CachedInputTokens)
			require.Equal(t, w.write+num(first["cache_creation_input_tokens"]), s.CacheWriteTokens)
		})
	}
}

func TestUpstreamMaxTokensCutsTheAnswer(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("word ", 80) // 400 bytes: 100 tokens
	tests := []struct {
		name, wire, stop, text string
		maxTokens, output      int
	}{
		{name: "openai cut", wire: llmtest.WireOpenAI, maxTokens: 10, output: 10, stop: "length", text: long[:40]},
		{name: "openai within", wire: llmtest.WireOpenAI, maxTokens: 100, output: 100, stop: "stop", text: long},
		{name: "anthropic cut", wire: llmtest.WireAnthropic, maxTokens: 10, output: 10, stop: "max_tokens", text: long[:40]},
		{name: "anthropic within", wire: llmtest.WireAnthropic, maxTokens: 200, output: 100, stop: "end_turn", text: long},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			u := startUpstream(t, llmtest.UpstreamConfig{Wire: tc.wire, Answer: func(llmtest.UpstreamRequest) llmtest.UpstreamAnswer {
				return llmtest.UpstreamAnswer{Text: long}
			}})
			a := do(t, http.MethodPost, endpoint(tc.wire, u), request(tc.wire, "m", userMessages("talk"), tc.maxTokens))
			usage := usageOf(t, a)
			var text, stop string
			if tc.wire == llmtest.WireOpenAI {
				require.Equal(t, tc.output, num(usage["completion_tokens"]))
				choice := a.body["choices"].([]any)[0].(map[string]any)
				stop = choice["finish_reason"].(string)
				text = choice["message"].(map[string]any)["content"].(string)
			} else {
				require.Equal(t, tc.output, num(usage["output_tokens"]))
				stop = a.body["stop_reason"].(string)
				text = a.body["content"].([]any)[0].(map[string]any)["text"].(string)
			}
			require.Equal(t, tc.stop, stop)
			require.Equal(t, tc.text, text)
			require.Equal(t, tc.output, u.Stats().Models["m"].Usage.OutputTokens)
		})
	}
}

func TestUpstreamMaxTokensCutsAToolCall(t *testing.T) {
	t.Parallel()
	args := `{"path":"` + strings.Repeat("a", 100) + `"}`
	answer := func(llmtest.UpstreamRequest) llmtest.UpstreamAnswer {
		return llmtest.UpstreamAnswer{Text: "ok", Tool: "read", Args: args}
	}
	for _, wire := range wires {
		t.Run(wire, func(t *testing.T) {
			t.Parallel()
			u := startUpstream(t, llmtest.UpstreamConfig{Wire: wire, Answer: answer})
			a := do(t, http.MethodPost, endpoint(wire, u), request(wire, "m", userMessages("read"), 5))
			require.Equal(t, http.StatusOK, a.status, "%s", a.raw)
			if wire == llmtest.WireOpenAI {
				choice := a.body["choices"].([]any)[0].(map[string]any)
				require.Equal(t, "length", choice["finish_reason"])
				call := choice["message"].(map[string]any)["tool_calls"].([]any)[0].(map[string]any)
				require.Equal(t, args[:5*4-len("ok")], call["function"].(map[string]any)["arguments"], "the arguments as far as 5 tokens go")
				return
			}
			require.Equal(t, "max_tokens", a.body["stop_reason"])
			content := a.body["content"].([]any)
			require.Len(t, content, 2)
			require.Equal(t, map[string]any{}, content[1].(map[string]any)["input"])
		})
	}
}

func TestUpstreamConcurrency(t *testing.T) {
	t.Parallel()
	const clients, latency = 6, 100 * time.Millisecond
	// Without max_tokens Answer is called before the latency: it holds every
	// request until all are in flight, however slowly they come.
	var arrived sync.WaitGroup
	arrived.Add(clients)
	all := make(chan struct{})
	go func() { arrived.Wait(); close(all) }()
	u := startUpstream(t, llmtest.UpstreamConfig{Wire: llmtest.WireOpenAI, Latency: latency, Answer: func(llmtest.UpstreamRequest) llmtest.UpstreamAnswer {
		arrived.Done()
		select {
		case <-all:
		case <-time.After(10 * time.Second):
		}
		return llmtest.UpstreamAnswer{Text: "done."}
	}})
	url, body := endpoint(llmtest.WireOpenAI, u), request(llmtest.WireOpenAI, "m", userMessages("hi"), 0)
	var wg sync.WaitGroup
	answers := make([]answer, clients)
	errs := make([]error, clients)
	for i := range clients {
		wg.Go(func() { answers[i], errs[i] = try(http.MethodPost, url, strings.NewReader(body)) })
	}
	wg.Wait()
	var released time.Time
	for i, a := range answers {
		require.NoError(t, errs[i])
		require.Equal(t, http.StatusOK, a.status, "%s", a.raw)
		if a.sent.After(released) {
			released = a.sent
		}
	}
	require.GreaterOrEqual(t, time.Since(released), latency, "every answer waited the latency after the last request came")
	s := u.Stats()
	require.Equal(t, clients, s.PeakConcurrency)
	require.Equal(t, clients, s.Answered)
}

func TestUpstreamCloseCutsLatency(t *testing.T) {
	t.Parallel()
	u, err := llmtest.StartUpstream(llmtest.UpstreamConfig{Wire: llmtest.WireAnthropic, Latency: time.Minute})
	require.NoError(t, err)
	errc := make(chan error, 1)
	go func() {
		resp, err := http.Post(u.URL+"/v1/messages", "application/json", strings.NewReader(request(llmtest.WireAnthropic, "m", userMessages("hi"), 10)))
		if err == nil {
			_ = resp.Body.Close()
			err = errors.New(resp.Status)
		}
		errc <- err
	}()
	require.Eventually(t, func() bool { return u.Stats().PeakConcurrency == 1 }, 2*time.Second, 5*time.Millisecond)
	start := time.Now()
	u.Close()
	u.Close()
	require.Less(t, time.Since(start), 2*time.Second)
	<-errc
	s := u.Stats()
	require.Zero(t, s.Answered)
	require.Equal(t, []int{499}, []int{s.Log[0].Status}, "the request was cut short")
}

func TestUpstreamPeakWindow(t *testing.T) {
	t.Parallel()
	clk := newClock()
	u := startUpstream(t, llmtest.UpstreamConfig{Wire: llmtest.WireAnthropic, Window: time.Second, Now: clk.Now})
	msgs := userMessages("count me")
	url, body := endpoint(llmtest.WireAnthropic, u), request(llmtest.WireAnthropic, "m", msgs, 10)
	send := func() {
		t.Helper()
		a := do(t, http.MethodPost, url, body)
		require.Equal(t, http.StatusOK, a.status, "%s", a.raw)
		require.Empty(t, a.header.Get("anthropic-ratelimit-requests-limit"), "no limit, no header")
		require.NotEmpty(t, a.header.Get("request-id"))
	}
	// One every 400 ms: a window of one second never holds more than three.
	for range 5 {
		send()
		clk.Advance(400 * time.Millisecond)
	}
	s := u.Stats()
	require.Equal(t, 3, s.PeakWindowRequests)
	require.Equal(t, 3*(tokens(msgs)+10), s.PeakWindowTokens, "input plus max_tokens each")
	// At 2.0 s the one of 0.8 s has left, exactly: three again, then four.
	send()
	require.Equal(t, 3, u.Stats().PeakWindowRequests)
	send()
	s = u.Stats()
	require.Equal(t, 4, s.PeakWindowRequests)
	require.Equal(t, 4*(tokens(msgs)+10), s.PeakWindowTokens)
	require.Equal(t, 7, s.Answered)
	require.Len(t, s.Log, 7)
	for i, e := range s.Log {
		require.Equal(t, "m", e.Model)
		require.Equal(t, http.StatusOK, e.Status)
		if i > 0 {
			require.False(t, e.Time.Before(s.Log[i-1].Time))
		}
	}
}

func TestUpstreamMalformed(t *testing.T) {
	t.Parallel()
	huge := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", llmtest.UpstreamMaxBody) + `"}]}`
	tests := []struct {
		name, method, path, body string
		// only is the one wire a case is for: a vendor's own rule, or a
		// path of the fake's that does not depend on the wire.
		only    string
		chunked bool
		status  int
	}{
		{name: "not POST", method: http.MethodGet, status: http.StatusMethodNotAllowed},
		{name: "unknown path", method: http.MethodPost, path: "/v1/models/x", body: `{}`, status: http.StatusNotFound},
		{name: "not JSON", method: http.MethodPost, body: `model=m`, status: http.StatusBadRequest},
		{name: "a JSON array", method: http.MethodPost, body: `[]`, status: http.StatusBadRequest},
		{name: "no model", method: http.MethodPost, body: `{"max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, status: http.StatusBadRequest},
		{name: "no messages", method: http.MethodPost, body: `{"model":"m","max_tokens":5}`, status: http.StatusBadRequest},
		{name: "empty messages", method: http.MethodPost, body: `{"model":"m","max_tokens":5,"messages":[]}`, status: http.StatusBadRequest},
		{name: "a message without a role", method: http.MethodPost, body: `{"model":"m","max_tokens":5,"messages":[{"content":"hi"}]}`, status: http.StatusBadRequest},
		{name: "streaming", method: http.MethodPost, body: `{"model":"m","max_tokens":5,"stream":true,"messages":[{"role":"user","content":"hi"}]}`, status: http.StatusBadRequest},
		{name: "negative max_tokens", method: http.MethodPost, body: `{"model":"m","max_tokens":-1,"messages":[{"role":"user","content":"hi"}]}`, status: http.StatusBadRequest},
		{name: "anthropic requires max_tokens", only: llmtest.WireAnthropic, method: http.MethodPost, body: `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, status: http.StatusBadRequest},
		{name: "too large", method: http.MethodPost, body: huge, status: http.StatusRequestEntityTooLarge},
		{name: "too large, chunked", method: http.MethodPost, body: huge, chunked: true, only: llmtest.WireOpenAI, status: http.StatusRequestEntityTooLarge},
	}
	for _, wire := range wires {
		t.Run(wire, func(t *testing.T) {
			t.Parallel()
			u := startUpstream(t, llmtest.UpstreamConfig{Wire: wire})
			invalid := 0
			for _, tc := range tests {
				if tc.only != "" && tc.only != wire {
					continue
				}
				url := endpoint(wire, u)
				if tc.path != "" {
					url = strings.TrimSuffix(u.URL, "/v1") + tc.path
				}
				var a answer
				if tc.chunked {
					// A reader of unknown length is sent chunked.
					a = send(t, tc.method, url, io.MultiReader(strings.NewReader(tc.body)))
				} else {
					a = do(t, tc.method, url, tc.body)
				}
				require.Equal(t, tc.status, a.status, "%s: %s", tc.name, a.raw)
				typ, _ := errorOf(t, wire, a)
				if wire == llmtest.WireOpenAI {
					require.Equal(t, "invalid_request_error", typ, tc.name)
				} else {
					require.NotEmpty(t, typ, tc.name)
				}
				invalid++
			}
			s := u.Stats()
			require.Equal(t, invalid, s.Invalid)
			require.Equal(t, invalid, s.Requests)
			require.Zero(t, s.Answered)
			require.Empty(t, s.Models, "no malformed request is a model's")
		})
	}
}

func TestStartUpstreamRejectsBadConfig(t *testing.T) {
	t.Parallel()
	for _, cfg := range []llmtest.UpstreamConfig{
		{Wire: "gemini"},
		{Wire: llmtest.WireOpenAI, RPM: -1},
		{Wire: llmtest.WireOpenAI, Overloaded: map[string]int{"m": 429}},
	} {
		_, err := llmtest.StartUpstream(cfg)
		require.Error(t, err, "%+v", cfg)
	}
}

// The HTTP providers parse the fake's answers: it speaks their wire.
func TestUpstreamClients(t *testing.T) {
	t.Parallel()
	newProvider := map[string]func(t *testing.T, url string) llm.Provider{
		llmtest.WireOpenAI: func(t *testing.T, url string) llm.Provider {
			p, err := openai.New(openai.Config{BaseURL: url, Model: "gpt-test", MaxRetries: -1})
			require.NoError(t, err)
			return p
		},
		llmtest.WireAnthropic: func(t *testing.T, url string) llm.Provider {
			p, err := anthropic.New(anthropic.Config{BaseURL: url, Model: "claude-test", MaxRetries: -1})
			require.NoError(t, err)
			return p
		},
	}
	for _, wire := range wires {
		t.Run(wire, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			var seen []llmtest.UpstreamRequest
			u := startUpstream(t, llmtest.UpstreamConfig{Wire: wire, RPM: 2, Answer: func(r llmtest.UpstreamRequest) llmtest.UpstreamAnswer {
				mu.Lock()
				seen = append(seen, r)
				mu.Unlock()
				if last := r.Messages[len(r.Messages)-1]; last.Text == "call" {
					return llmtest.UpstreamAnswer{Text: "reading", Tool: "read", Args: `{"path":"a.txt"}`}
				}
				return llmtest.UpstreamAnswer{Text: "the answer"}
			}})
			p := newProvider[wire](t, u.URL)
			ctx := context.Background()
			tools := []llm.ToolDef{{Name: "read", Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}}}`)}}

			resp, err := p.Complete(ctx, llm.Request{MaxTokens: 64, Tools: tools, Messages: []llm.Message{
				{Role: llm.RoleSystem, Content: "be brief"}, {Role: llm.RoleUser, Content: "call"},
			}})
			require.NoError(t, err)
			require.Equal(t, "reading", resp.Message.Content)
			require.Len(t, resp.Message.ToolCalls, 1)
			call := resp.Message.ToolCalls[0]
			require.Equal(t, "read", call.Name)
			require.NotEmpty(t, call.ID)
			require.JSONEq(t, `{"path":"a.txt"}`, string(call.Args))
			require.Equal(t, (len("reading")+len(`{"path":"a.txt"}`)+3)/4, resp.Usage.OutputTokens)

			resp2, err := p.Complete(ctx, llm.Request{MaxTokens: 64, Tools: tools, Messages: []llm.Message{
				{Role: llm.RoleSystem, Content: "be brief"}, {Role: llm.RoleUser, Content: "call"}, resp.Message,
				{Role: llm.RoleTool, ToolCallID: call.ID, Content: "file text"},
			}})
			require.NoError(t, err)
			require.Equal(t, "the answer", resp2.Message.Content)
			require.Empty(t, resp2.Message.ToolCalls)
			require.NotEmpty(t, resp2.Model)

			mu.Lock()
			require.Len(t, seen, 2)
			require.Equal(t, []string{"read"}, seen[0].Tools)
			require.Equal(t, 64, seen[0].MaxTokens)
			require.Equal(t, llmtest.UpstreamMessage{Role: "system", Text: "be brief"}, seen[0].Messages[0])
			require.Contains(t, seen[1].Messages[len(seen[1].Messages)-1].Text, "file text", "a tool result's text is its message's")
			require.True(t, bytes.Contains(seen[1].Body, []byte(`"messages"`)))
			mu.Unlock()

			// The fake's usage is what the client reads, and what the stats add up.
			s := u.Stats()
			model := resp.Model
			require.Equal(t, resp.Usage.InputTokens+resp2.Usage.InputTokens, s.Models[model].Usage.InputTokens)
			require.Equal(t, resp.Usage.OutputTokens+resp2.Usage.OutputTokens, s.Models[model].Usage.OutputTokens)

			// The third request in the window is refused; the client returns the 429.
			_, err = p.Complete(ctx, llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}})
			var apiErr *llm.APIError
			require.ErrorAs(t, err, &apiErr)
			require.Equal(t, http.StatusTooManyRequests, apiErr.Status)
			require.True(t, apiErr.RateLimited())
		})
	}
}
