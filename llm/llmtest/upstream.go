package llmtest

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/llm/tokens"
)

// Upstream wire formats.
const (
	WireOpenAI    = "openai"
	WireAnthropic = "anthropic"
)

// Defaults of an UpstreamConfig.
const (
	// DefaultUpstreamWindow is the rate-limit window: both vendors' limits are
	// per minute.
	DefaultUpstreamWindow = time.Minute
	// DefaultCacheMinTokens is the shortest prompt (OpenAI) or cached prefix
	// (Anthropic) the vendors cache.
	DefaultCacheMinTokens = 1024
	// UpstreamMaxBody is the largest request body accepted; a larger one is
	// answered 413, as the vendors answer an oversized request.
	UpstreamMaxBody = 32 << 20
	// upstreamCacheTTL is how long a cached prefix lives unused: Anthropic's
	// ephemeral cache and OpenAI's automatic one both keep about five minutes,
	// refreshed on every hit.
	upstreamCacheTTL = 5 * time.Minute
	// cacheBlockBytes is OpenAI's cache granularity (128 tokens) in bytes, by
	// the four-bytes-a-token rule.
	cacheBlockBytes = 128 * 4
	// cacheLookback is how many content blocks before a breakpoint Anthropic
	// looks back for an earlier cache hit.
	cacheLookback = 20
)

// UpstreamConfig configures a fake model API (see StartUpstream).
type UpstreamConfig struct {
	// Wire is WireOpenAI (POST {URL}/chat/completions, URL ending in /v1) or
	// WireAnthropic (POST {URL}/v1/messages).
	Wire string
	// RPM and TPM are the limits of one credential, shared by every model: 0 is
	// unlimited. They hold over an exact sliding Window: a request is refused
	// (429) when the requests accepted in the last Window number RPM, or when
	// their tokens plus its own would exceed TPM. A request counts as its input
	// tokens plus its max_tokens, or plus its answer's output tokens when it
	// names no max_tokens (the usage it is then billed); a refused request
	// counts for nothing.
	RPM, TPM int
	// Window defaults to DefaultUpstreamWindow.
	Window time.Duration
	// Overloaded maps a model to the status (529 or 503) every request for it
	// is answered with, with the vendor's overload body; it takes no share of
	// the limits.
	Overloaded map[string]int
	// Latency is slept before an accepted request is answered (the request
	// holds its connection meanwhile); refusals are answered at once, as the
	// vendors answer them.
	Latency time.Duration
	// Answer writes the answer of an accepted request; nil answers "done.". It
	// is called from many goroutines at once. For a request without max_tokens
	// it is called before the rate limits are checked (its output tokens count
	// toward TPM), so it may be called for a request that is then refused.
	Answer func(UpstreamRequest) UpstreamAnswer
	// CacheMinTokens is the prompt-cache threshold; default
	// DefaultCacheMinTokens.
	CacheMinTokens int
	// Now is the clock of the windows, the cache and the headers; nil is
	// time.Now. A test that drives it checks the windows exactly, whatever
	// the machine's load. Latency is slept in real time all the same.
	Now func() time.Time
	// ContextWindow maps a model to its context window in tokens; the key
	// "*" holds for every model without a key of its own. A request whose
	// input tokens plus its max_tokens exceed its model's window is refused
	// with the vendor's own context-length error (400). Setting it switches
	// the fake's input-token count from the four-bytes rule to llm/tokens
	// (see Upstream), so that the window is enforced on, and the usage
	// reports, the count a client can make with the same package.
	ContextWindow map[string]int
}

// UpstreamRequest is a request as an Answer function sees it.
type UpstreamRequest struct {
	Model string
	// Messages are the conversation with each message's text (its text parts
	// and tool results joined); Anthropic's system field is a first "system"
	// message.
	Messages []UpstreamMessage
	// Tools are the names of the tools offered.
	Tools []string
	// MaxTokens is the request's max_tokens (OpenAI: max_completion_tokens or
	// max_tokens); 0 when absent.
	MaxTokens int
	// Body is the request body as sent.
	Body []byte
}

// UpstreamMessage is one message of an UpstreamRequest.
type UpstreamMessage struct {
	Role, Text string
}

// UpstreamAnswer is what the fake answers: Text, a call of Tool with Args (a
// JSON object; "{}" when empty), or both. An answer of more output tokens
// than the request's max_tokens is cut to max_tokens, as the vendors cut it
// (finish_reason "length", stop_reason "max_tokens").
type UpstreamAnswer struct {
	Text string
	Tool string
	Args string
}

// UpstreamStats is what an Upstream saw.
type UpstreamStats struct {
	// Requests counts every request; Answered the 200s, RateLimited the 429s,
	// Overloaded the 529s and 503s, ContextLength the 400s refusing a request
	// too long for its model's ContextWindow, Invalid the other refused as
	// malformed (4xx) and those the fake could not answer (500).
	Requests, Answered, RateLimited, Overloaded, ContextLength, Invalid int
	// Models holds the counts and usage of each model asked.
	Models map[string]UpstreamModelStats
	// PeakConcurrency is the most requests in flight at once.
	PeakConcurrency int
	// PeakWindowRequests and PeakWindowTokens are the most requests, and the
	// most tokens (as counted for TPM), accepted within any one Window.
	PeakWindowRequests, PeakWindowTokens int
	// Log is every request in the order it was answered (it grows by one
	// entry a request, and Stats copies it).
	Log []UpstreamLogEntry
}

// UpstreamModelStats are one model's counts. Usage adds up the usage of its
// answers, InputTokens including the cached and cache-written ones.
type UpstreamModelStats struct {
	Answered, RateLimited, Overloaded, ContextLength int
	Usage                                            llm.Usage
	// MaxInputTokens is the largest input-token count of any well-formed
	// request for the model, refused or not: a client that manages its
	// context keeps it within the window less max_tokens.
	MaxInputTokens int
}

// UpstreamLogEntry is one request: when it was answered, the model it named
// ("" when unreadable) and the status it got (499 when the client left before
// its answer).
type UpstreamLogEntry struct {
	Time   time.Time
	Model  string
	Status int
}

// Upstream is a fake OpenAI or Anthropic API on loopback, with the vendors'
// rate limits, overloads, context windows, prompt caching and usage, for tests
// and benchmarks that must not reach a real provider.
//
// Without a ContextWindow, tokens are counted without a tokenizer, by one
// rule a caller can reproduce: a request's input tokens are the bytes of its
// prompt, compacted JSON, over four, rounded up. The prompt is the request body's "tools" field, then
// "system" (Anthropic), then "messages", each compacted and concatenated, with
// Anthropic's cache_control markers removed (they are not prompt). Output
// tokens are the bytes of the answer's text and tool arguments over four,
// rounded up, at least 1.
//
// With a ContextWindow, input tokens are counted with llm/tokens instead: the
// request as the fake parses it (messages with their text, tool calls and
// tool results, Anthropic's system as a first message, the tools' names,
// descriptions and schemas) becomes an llm.Request whose tokens.Request, with
// tokens.ForModel of its model, is its input. That count is enforced against
// the window, reported as the usage's input tokens and counted toward TPM; the
// prompt cache still works on the prompt's bytes as described below, and its cached and
// cache-write counts are those bytes' share of the input. A refused request is
// answered as the vendor answers it: OpenAI's 400 context_length_exceeded
// ("This model's maximum context length is N tokens. However, you requested
// M tokens (I in the messages, K in the completion). …", or "your messages
// resulted in I tokens" without max_tokens), Anthropic's 400
// invalid_request_error "prompt is too long: I tokens > N maximum" when the
// input alone is too long, else "input length and `max_tokens` exceed context
// limit: I + K > N, …".
//
// Prompt caching follows the vendors. OpenAI caches every prompt of at least
// CacheMinTokens: a later request for the same model reports as cached_tokens
// the longest prefix of its prompt seen before, in whole 128-token (512-byte)
// blocks, when that is at least CacheMinTokens. Anthropic caches only up to
// cache_control breakpoints (on tools, system blocks and message content
// blocks, in that order): each breakpoint's prefix of at least CacheMinTokens
// is written; a request reads the longest prefix written before that ends at a
// block boundary no more than 20 blocks before one of its breakpoints, and
// writes the rest up to its last breakpoint. Cache entries expire five minutes
// after their last use.
//
// Every answer to a well-formed request carries the vendor's rate-limit
// headers for each limit set (none for a limit of 0): the limit, what remains
// after this request, and the reset, which is when the oldest request in the
// window leaves it and frees its share (OpenAI: a duration such as "1.2s";
// Anthropic: an RFC 3339 time with milliseconds). A 429 adds Retry-After, in
// whole seconds rounded up, and for OpenAI retry-after-ms: how long until the
// request would fit. Anthropic's separate input- and output-token limits are
// not simulated, so only its tokens-* headers are sent. Streaming is not
// simulated either: a request with "stream": true is answered 400.
type Upstream struct {
	// URL is the base URL to give the client (…/v1 for OpenAI).
	URL string

	cfg  UpstreamConfig
	path string
	srv  *http.Server
	done chan struct{}
	// handlers lets Close wait for answers in progress, so Stats after Close
	// is final.
	handlers sync.WaitGroup

	mu       sync.Mutex
	closed   bool
	inflight int
	// accepted are the requests accepted within the last Window, oldest
	// first. Dropping its head shrinks its capacity, so append moves the live
	// part to a new array once in a while instead of growing the old one.
	accepted   []admission
	windowToks int
	cache      map[string]map[[sha256.Size]byte]time.Time
	nextSweep  time.Time
	seq        int
	stats      UpstreamStats
}

type admission struct {
	at     time.Time
	tokens int
}

// StartUpstream starts a fake on 127.0.0.1 with a free port.
func StartUpstream(cfg UpstreamConfig) (*Upstream, error) {
	u := &Upstream{cfg: cfg, done: make(chan struct{}), cache: map[string]map[[sha256.Size]byte]time.Time{}}
	switch cfg.Wire {
	case WireOpenAI:
		u.path = "/v1/chat/completions"
	case WireAnthropic:
		u.path = "/v1/messages"
	default:
		return nil, fmt.Errorf("llmtest: unknown upstream wire %q (want %q or %q)", cfg.Wire, WireOpenAI, WireAnthropic)
	}
	if cfg.RPM < 0 || cfg.TPM < 0 || cfg.Window < 0 || cfg.Latency < 0 || cfg.CacheMinTokens < 0 {
		return nil, errors.New("llmtest: negative upstream limit")
	}
	for model, n := range cfg.ContextWindow {
		if n <= 0 {
			return nil, fmt.Errorf("llmtest: context window %d for %q is not positive", n, model)
		}
	}
	for model, status := range cfg.Overloaded {
		if status < 500 {
			return nil, fmt.Errorf("llmtest: overload status %d for %q is not a 5xx", status, model)
		}
	}
	u.cfg.Window = cmp.Or(cfg.Window, DefaultUpstreamWindow)
	if u.cfg.Now == nil {
		u.cfg.Now = time.Now
	}
	u.cfg.CacheMinTokens = cmp.Or(cfg.CacheMinTokens, DefaultCacheMinTokens)
	u.stats.Models = map[string]UpstreamModelStats{}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("llmtest: listen: %w", err)
	}
	u.URL = "http://" + ln.Addr().String()
	if cfg.Wire == WireOpenAI {
		u.URL += "/v1"
	}
	u.srv = &http.Server{Handler: http.HandlerFunc(u.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = u.srv.Serve(ln) }()
	return u, nil
}

// Close stops the server, cutting short the Latency of answers in progress,
// and waits for their handlers. It may be called more than once.
func (u *Upstream) Close() {
	u.mu.Lock()
	if u.closed {
		u.mu.Unlock()
		return
	}
	u.closed = true
	u.mu.Unlock()
	close(u.done)
	_ = u.srv.Close()
	u.handlers.Wait()
}

// Stats returns a copy of what the fake saw so far.
func (u *Upstream) Stats() UpstreamStats {
	u.mu.Lock()
	defer u.mu.Unlock()
	s := u.stats
	s.Models = make(map[string]UpstreamModelStats, len(u.stats.Models))
	for k, v := range u.stats.Models {
		s.Models[k] = v
	}
	s.Log = append([]UpstreamLogEntry(nil), u.stats.Log...)
	return s
}

// upstreamCall is a parsed request.
type upstreamCall struct {
	req UpstreamRequest
	// prompt is the canonical prompt the tokens are counted on; boundaries
	// are Anthropic's content-block ends in it.
	prompt     []byte
	boundaries []boundary
	// input is the input tokens the call counts for: promptTokens, or its
	// llm/tokens count when the fake has a ContextWindow.
	input, promptTokens int
}

type boundary struct {
	end        int
	breakpoint bool
}

// limitState is the window as a request found it, for the headers.
type limitState struct {
	requestsRemaining, tokensRemaining int
	// reset is how long until the oldest accepted request leaves the window
	// and frees its share.
	reset time.Duration
}

// refusal is why a request is refused.
type refusal struct {
	tokens    bool
	used, ask int
	wait      time.Duration
}

func (u *Upstream) serve(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	if u.closed {
		u.mu.Unlock()
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	// Added under the lock that Close takes first, so no Add races its Wait.
	u.handlers.Add(1)
	defer u.handlers.Done()
	u.inflight++
	u.stats.PeakConcurrency = max(u.stats.PeakConcurrency, u.inflight)
	u.mu.Unlock()
	defer func() {
		u.mu.Lock()
		u.inflight--
		u.mu.Unlock()
	}()

	w.Header().Set("Content-Type", "application/json")
	u.requestID(w)
	if r.URL.Path != u.path {
		u.fail(w, "", http.StatusNotFound, "not_found_error", fmt.Sprintf("Invalid URL (%s %s)", r.Method, r.URL.Path))
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		u.fail(w, "", http.StatusMethodNotAllowed, "invalid_request_error", fmt.Sprintf("Invalid method for URL (%s %s)", r.Method, r.URL.Path))
		return
	}
	const tooLarge = "Request exceeds the maximum allowed number of bytes."
	// A declared length is refused before reading, as the vendors' front ends
	// do; a chunked body is cut off at the limit.
	if r.ContentLength > UpstreamMaxBody {
		u.fail(w, "", http.StatusRequestEntityTooLarge, "request_too_large", tooLarge)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, UpstreamMaxBody))
	if err != nil {
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			u.fail(w, "", http.StatusRequestEntityTooLarge, "request_too_large", tooLarge)
			return
		}
		u.fail(w, "", http.StatusBadRequest, "invalid_request_error", "could not read the request body: "+err.Error())
		return
	}
	call, err := u.parse(body)
	if err != nil {
		u.fail(w, call.req.Model, http.StatusBadRequest, "invalid_request_error", err.Error())
		return
	}
	model := call.req.Model
	u.seen(model, call.input)

	if status, ok := u.cfg.Overloaded[model]; ok {
		state, _ := u.admit(0, false)
		u.limitHeaders(w, state)
		u.overloaded(w, model, status)
		return
	}
	// The vendors refuse a request too long for the window when they read
	// it, before it takes a share of the rate limits.
	if window := u.window(model); window > 0 && call.input+call.req.MaxTokens > window {
		u.tooLong(w, model, window, call.input, call.req.MaxTokens)
		return
	}

	var ans *UpstreamAnswer
	admit := call.input + call.req.MaxTokens
	if call.req.MaxTokens == 0 {
		a := u.answer(call.req)
		ans = &a
		admit = call.input + outputTokens(a)
	}
	state, refused := u.admit(admit, true)
	u.limitHeaders(w, state)
	if refused != nil {
		u.rateLimited(w, model, *refused)
		return
	}

	if u.cfg.Latency > 0 {
		t := time.NewTimer(u.cfg.Latency)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			u.record(model, 499, nil)
			return
		case <-u.done:
			t.Stop()
			u.record(model, 499, nil)
			return
		}
	}
	if ans == nil {
		a := u.answer(call.req)
		ans = &a
	}
	if u.cfg.Wire == WireAnthropic && ans.Tool != "" && !json.Valid([]byte(cmp.Or(ans.Args, "{}"))) {
		u.fail(w, model, http.StatusInternalServerError, "api_error", "llmtest: the Answer's tool arguments are not JSON")
		return
	}
	usage := u.cached(model, call)
	usage.OutputTokens = outputTokens(*ans)
	cut := call.req.MaxTokens > 0 && usage.OutputTokens > call.req.MaxTokens
	if cut {
		*ans = cutAnswer(*ans, call.req.MaxTokens*4)
		usage.OutputTokens = call.req.MaxTokens
	}
	u.record(model, http.StatusOK, &usage)
	u.write(w, http.StatusOK, u.render(model, *ans, usage, cut))
}

// cutAnswer is a stopped at n bytes, as a vendor stops at max_tokens: the
// text cut, then the tool arguments (no longer JSON, as the vendors send
// them).
func cutAnswer(a UpstreamAnswer, n int) UpstreamAnswer {
	if len(a.Text) >= n {
		return UpstreamAnswer{Text: strings.ToValidUTF8(a.Text[:n], "")}
	}
	n -= len(a.Text)
	a.Args = cmp.Or(strings.TrimSpace(a.Args), "{}")
	if a.Tool != "" && len(a.Args) > n {
		a.Args = strings.ToValidUTF8(a.Args[:n], "")
	}
	return a
}

func (u *Upstream) now() time.Time { return u.cfg.Now() }

func (u *Upstream) answer(req UpstreamRequest) UpstreamAnswer {
	if u.cfg.Answer == nil {
		return UpstreamAnswer{Text: "done."}
	}
	return u.cfg.Answer(req)
}

func outputTokens(a UpstreamAnswer) int {
	args := a.Args
	if a.Tool != "" && strings.TrimSpace(args) == "" {
		args = "{}"
	}
	return max(1, ceilQuarter(len(a.Text)+len(args)))
}

func ceilQuarter(n int) int { return (n + 3) / 4 }

// admit checks a request of tokens against the window and, when it fits and
// count is set, counts it in.
func (u *Upstream) admit(tokens int, count bool) (limitState, *refusal) {
	u.mu.Lock()
	defer u.mu.Unlock()
	now := u.now()
	window := u.cfg.Window
	drop := 0
	for drop < len(u.accepted) && now.Sub(u.accepted[drop].at) >= window {
		u.windowToks -= u.accepted[drop].tokens
		drop++
	}
	u.accepted = u.accepted[drop:]

	var ref *refusal
	switch n := len(u.accepted); {
	case !count:
	case u.cfg.RPM > 0 && n >= u.cfg.RPM:
		ref = &refusal{used: n, ask: 1, wait: u.accepted[n-u.cfg.RPM].at.Add(window).Sub(now)}
	case u.cfg.TPM > 0 && u.windowToks+tokens > u.cfg.TPM:
		ref = &refusal{tokens: true, used: u.windowToks, ask: tokens, wait: window}
		if tokens <= u.cfg.TPM {
			// The wait is until enough of the oldest requests have left.
			free := u.windowToks + tokens - u.cfg.TPM
			for _, a := range u.accepted {
				free -= a.tokens
				if free <= 0 {
					ref.wait = a.at.Add(window).Sub(now)
					break
				}
			}
		}
	default:
		u.accepted = append(u.accepted, admission{at: now, tokens: tokens})
		u.windowToks += tokens
		// Every window's count is at most that of the window ending at its
		// last accepted request, so the peak over these instants is exact.
		u.stats.PeakWindowRequests = max(u.stats.PeakWindowRequests, len(u.accepted))
		u.stats.PeakWindowTokens = max(u.stats.PeakWindowTokens, u.windowToks)
	}
	st := limitState{requestsRemaining: u.cfg.RPM - len(u.accepted), tokensRemaining: u.cfg.TPM - u.windowToks}
	if len(u.accepted) > 0 {
		st.reset = u.accepted[0].at.Add(window).Sub(now)
	}
	return st, ref
}

// window is model's context window, 0 for none.
func (u *Upstream) window(model string) int {
	if n, ok := u.cfg.ContextWindow[model]; ok {
		return n
	}
	return u.cfg.ContextWindow["*"]
}

// seen records a well-formed request's input tokens.
func (u *Upstream) seen(model string, input int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	ms := u.stats.Models[model]
	ms.MaxInputTokens = max(ms.MaxInputTokens, input)
	u.stats.Models[model] = ms
}

// tooLong answers a request of input tokens and max_tokens maxTokens that
// does not fit window, with the vendor's error.
func (u *Upstream) tooLong(w http.ResponseWriter, model string, window, input, maxTokens int) {
	u.mu.Lock()
	u.stats.Requests++
	u.stats.ContextLength++
	u.stats.Log = append(u.stats.Log, UpstreamLogEntry{Time: u.now(), Model: model, Status: http.StatusBadRequest})
	ms := u.stats.Models[model]
	ms.ContextLength++
	u.stats.Models[model] = ms
	u.mu.Unlock()
	if u.cfg.Wire == WireOpenAI {
		msg := fmt.Sprintf("This model's maximum context length is %d tokens. However, your messages resulted in %d tokens. Please reduce the length of the messages.", window, input)
		if maxTokens > 0 {
			msg = fmt.Sprintf("This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion). Please reduce the length of the messages or completion.",
				window, input+maxTokens, input, maxTokens)
		}
		body := openAIError(msg, "invalid_request_error", "context_length_exceeded")
		// OpenAI names the field at fault; only this error has one here.
		body["error"]["param"] = "messages"
		u.write(w, http.StatusBadRequest, body)
		return
	}
	msg := fmt.Sprintf("prompt is too long: %d tokens > %d maximum", input, window)
	if input <= window {
		msg = fmt.Sprintf("input length and `max_tokens` exceed context limit: %d + %d > %d, decrease input length or `max_tokens` and try again", input, maxTokens, window)
	}
	u.write(w, http.StatusBadRequest, anthropicError("invalid_request_error", msg))
}

func (u *Upstream) record(model string, status int, usage *llm.Usage) {
	u.mu.Lock()
	defer u.mu.Unlock()
	s := &u.stats
	s.Requests++
	s.Log = append(s.Log, UpstreamLogEntry{Time: u.now(), Model: model, Status: status})
	ms := s.Models[model]
	switch {
	case status == http.StatusOK:
		s.Answered++
		ms.Answered++
		ms.Usage.InputTokens += usage.InputTokens
		ms.Usage.OutputTokens += usage.OutputTokens
		ms.Usage.CachedInputTokens += usage.CachedInputTokens
		ms.Usage.CacheWriteTokens += usage.CacheWriteTokens
	case status == http.StatusTooManyRequests:
		s.RateLimited++
		ms.RateLimited++
	case status >= 500 && status != http.StatusInternalServerError:
		s.Overloaded++
		ms.Overloaded++
	case status != 499:
		s.Invalid++
		return
	}
	if model != "" {
		s.Models[model] = ms
	}
}

// cached is the usage of a call's input, split by the prompt cache, which it
// updates.
func (u *Upstream) cached(model string, call upstreamCall) llm.Usage {
	usage := u.cachedBytes(model, call)
	if call.input != call.promptTokens {
		// The cache's counts are of the prompt's bytes: their share of the
		// counted input, rounded down so that they never exceed it.
		share := func(n int) int { return int(int64(n) * int64(call.input) / int64(max(call.promptTokens, 1))) }
		usage.CachedInputTokens, usage.CacheWriteTokens = share(usage.CachedInputTokens), share(usage.CacheWriteTokens)
		usage.InputTokens = call.input
	}
	return usage
}

// cachedBytes is cached by the four-bytes rule.
func (u *Upstream) cachedBytes(model string, call upstreamCall) llm.Usage {
	usage := llm.Usage{InputTokens: call.promptTokens}
	minBytes := u.cfg.CacheMinTokens * 4
	now := u.now()
	u.mu.Lock()
	defer u.mu.Unlock()
	// Expired entries are also dropped now and then, so a long benchmark of
	// distinct prompts does not keep them all.
	if now.After(u.nextSweep) {
		for _, st := range u.cache {
			for k, exp := range st {
				if now.After(exp) {
					delete(st, k)
				}
			}
		}
		u.nextSweep = now.Add(upstreamCacheTTL)
	}
	store := u.cache[model]
	if store == nil {
		store = map[[sha256.Size]byte]time.Time{}
		u.cache[model] = store
	}
	hit := func(k [sha256.Size]byte) bool {
		exp, ok := store[k]
		if ok && now.After(exp) {
			delete(store, k)
			return false
		}
		return ok
	}

	if u.cfg.Wire == WireOpenAI {
		keys := prefixKeys(call.prompt, blockEnds(len(call.prompt)))
		for i := len(keys) - 1; i >= 0; i-- {
			if n := (i + 1) * cacheBlockBytes; n >= minBytes && hit(keys[i]) {
				usage.CachedInputTokens = n / 4
				break
			}
		}
		if len(call.prompt) >= minBytes {
			for _, k := range keys {
				store[k] = now.Add(upstreamCacheTTL)
			}
		}
		return usage
	}

	last := -1
	ends := make([]int, len(call.boundaries))
	for i, b := range call.boundaries {
		ends[i] = b.end
		if b.breakpoint {
			last = i
		}
	}
	if last < 0 {
		return usage
	}
	keys := prefixKeys(call.prompt, ends[:last+1])
	// A boundary is looked up when a breakpoint follows within the lookback.
	read, nextBreakpoint := -1, -1
	for i := last; i >= 0; i-- {
		if call.boundaries[i].breakpoint {
			nextBreakpoint = i
		}
		if nextBreakpoint-i < cacheLookback && ends[i] >= minBytes && hit(keys[i]) {
			read = i
			break
		}
	}
	readTokens := 0
	if read >= 0 {
		readTokens = ceilQuarter(ends[read])
		store[keys[read]] = now.Add(upstreamCacheTTL)
	}
	if ends[last] >= minBytes {
		usage.CacheWriteTokens = ceilQuarter(ends[last]) - readTokens
	}
	for i := 0; i <= last; i++ {
		if call.boundaries[i].breakpoint && ends[i] >= minBytes {
			store[keys[i]] = now.Add(upstreamCacheTTL)
		}
	}
	usage.CachedInputTokens = readTokens
	return usage
}

// blockEnds are the ends of the whole 512-byte blocks of n bytes.
func blockEnds(n int) []int {
	ends := make([]int, 0, n/cacheBlockBytes)
	for e := cacheBlockBytes; e <= n; e += cacheBlockBytes {
		ends = append(ends, e)
	}
	return ends
}

// prefixKeys are the hashes of b[:e] for each of the increasing ends, in one
// pass over b.
func prefixKeys(b []byte, ends []int) [][sha256.Size]byte {
	h := sha256.New()
	keys := make([][sha256.Size]byte, len(ends))
	at := 0
	for i, e := range ends {
		h.Write(b[at:e])
		at = e
		copy(keys[i][:], h.Sum(nil))
	}
	return keys
}

func (u *Upstream) requestID(w http.ResponseWriter) {
	u.mu.Lock()
	u.seq++
	n := u.seq
	u.mu.Unlock()
	id := fmt.Sprintf("req_%024x", n)
	if u.cfg.Wire == WireOpenAI {
		w.Header().Set("X-Request-Id", id)
	} else {
		w.Header().Set("Request-Id", id)
	}
}

func (u *Upstream) nextID(prefix string) string {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.seq++
	return fmt.Sprintf("%s%024x", prefix, u.seq)
}

// limitHeaders are the vendor's rate-limit headers for the window a request
// found; a limit of 0 (none) has none.
func (u *Upstream) limitHeaders(w http.ResponseWriter, st limitState) {
	h := w.Header()
	reset := max(st.reset, 0)
	resetAt := u.now().Add(reset).UTC().Format("2006-01-02T15:04:05.000Z07:00")
	set := func(kind string, limit, remaining int) {
		if limit == 0 {
			return
		}
		remaining = max(remaining, 0)
		if u.cfg.Wire == WireOpenAI {
			h.Set("X-Ratelimit-Limit-"+kind, strconv.Itoa(limit))
			h.Set("X-Ratelimit-Remaining-"+kind, strconv.Itoa(remaining))
			h.Set("X-Ratelimit-Reset-"+kind, reset.Round(time.Millisecond).String())
			return
		}
		h.Set("Anthropic-Ratelimit-"+kind+"-Limit", strconv.Itoa(limit))
		h.Set("Anthropic-Ratelimit-"+kind+"-Remaining", strconv.Itoa(remaining))
		h.Set("Anthropic-Ratelimit-"+kind+"-Reset", resetAt)
	}
	set("Requests", u.cfg.RPM, st.requestsRemaining)
	set("Tokens", u.cfg.TPM, st.tokensRemaining)
}

func (u *Upstream) rateLimited(w http.ResponseWriter, model string, ref refusal) {
	wait := max(ref.wait, time.Millisecond)
	w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
	kind, unit, limit := "requests", "requests per min (RPM)", u.cfg.RPM
	if ref.tokens {
		kind, unit, limit = "tokens", "tokens per min (TPM)", u.cfg.TPM
	}
	u.record(model, http.StatusTooManyRequests, nil)
	if u.cfg.Wire == WireOpenAI {
		w.Header().Set("Retry-After-Ms", strconv.FormatInt(int64(math.Ceil(float64(wait)/float64(time.Millisecond))), 10))
		msg := fmt.Sprintf("Rate limit reached for %s in organization org-llmtest on %s: Limit %d, Used %d, Requested %d. Please try again in %s. Visit https://platform.openai.com/account/rate-limits to learn more.",
			model, unit, limit, ref.used, ref.ask, wait.Round(time.Millisecond))
		u.write(w, http.StatusTooManyRequests, openAIError(msg, kind, "rate_limit_exceeded"))
		return
	}
	what := "requests per minute"
	if ref.tokens {
		what = "tokens per minute"
	}
	msg := fmt.Sprintf("This request would exceed the rate limit for your organization of %d %s. For details, refer to: https://docs.claude.com/en/api/rate-limits. You can see the response headers for current usage. Please reduce the prompt length or the maximum tokens requested, or try again later.", limit, what)
	u.write(w, http.StatusTooManyRequests, anthropicError("rate_limit_error", msg))
}

func (u *Upstream) overloaded(w http.ResponseWriter, model string, status int) {
	u.record(model, status, nil)
	if u.cfg.Wire == WireOpenAI {
		u.write(w, status, openAIError("The server is overloaded or not ready yet.", "server_error", ""))
		return
	}
	u.write(w, status, anthropicError("overloaded_error", "Overloaded"))
}

// fail answers a request the fake cannot serve; typ is Anthropic's error type
// (OpenAI calls every client error invalid_request_error).
func (u *Upstream) fail(w http.ResponseWriter, model string, status int, typ, msg string) {
	u.record(model, status, nil)
	if u.cfg.Wire == WireOpenAI {
		oType := "invalid_request_error"
		if status >= 500 {
			oType = "server_error"
		}
		u.write(w, status, openAIError(msg, oType, ""))
		return
	}
	u.write(w, status, anthropicError(typ, msg))
}

func openAIError(msg, typ, code string) map[string]map[string]any {
	var c any
	if code != "" {
		c = code
	}
	return map[string]map[string]any{"error": {"message": msg, "type": typ, "param": nil, "code": c}}
}

func anthropicError(typ, msg string) any {
	return map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}}
}

func (u *Upstream) write(w http.ResponseWriter, status int, body any) {
	raw, err := json.Marshal(body)
	if err != nil {
		status, raw = http.StatusInternalServerError, []byte(`{"error":{"message":"llmtest: encode answer"}}`)
	}
	w.WriteHeader(status)
	_, _ = w.Write(raw)
}

// render is the vendor's answer body; cut is an answer stopped by max_tokens.
func (u *Upstream) render(model string, a UpstreamAnswer, usage llm.Usage, cut bool) any {
	args := cmp.Or(strings.TrimSpace(a.Args), "{}")
	if cut {
		// OpenAI sends the arguments as far as they got; Anthropic's input is
		// an object even when the call was cut short.
		args = a.Args
		if u.cfg.Wire == WireAnthropic && !json.Valid([]byte(args)) {
			args = "{}"
		}
	}
	if u.cfg.Wire == WireOpenAI {
		msg := map[string]any{"role": "assistant", "content": nil, "refusal": nil}
		if a.Text != "" || a.Tool == "" {
			msg["content"] = a.Text
		}
		finish := "stop"
		if a.Tool != "" {
			finish = "tool_calls"
		}
		if cut {
			finish = "length"
		}
		if a.Tool != "" {
			msg["tool_calls"] = []any{map[string]any{
				"id": u.nextID("call_"), "type": "function",
				"function": map[string]any{"name": a.Tool, "arguments": args},
			}}
		}
		return map[string]any{
			"id": u.nextID("chatcmpl-"), "object": "chat.completion", "created": u.now().Unix(), "model": model,
			"choices": []any{map[string]any{"index": 0, "message": msg, "logprobs": nil, "finish_reason": finish}},
			"usage": map[string]any{
				"prompt_tokens": usage.InputTokens, "completion_tokens": usage.OutputTokens,
				"total_tokens":          usage.InputTokens + usage.OutputTokens,
				"prompt_tokens_details": map[string]any{"cached_tokens": usage.CachedInputTokens, "audio_tokens": 0},
			},
		}
	}
	var content []any
	if a.Text != "" || a.Tool == "" {
		content = append(content, map[string]any{"type": "text", "text": a.Text})
	}
	stop := "end_turn"
	if a.Tool != "" {
		stop = "tool_use"
	}
	if cut {
		stop = "max_tokens"
	}
	if a.Tool != "" {
		content = append(content, map[string]any{"type": "tool_use", "id": u.nextID("toolu_"), "name": a.Tool, "input": json.RawMessage(args)})
	}
	return map[string]any{
		"id": u.nextID("msg_"), "type": "message", "role": "assistant", "model": model,
		"content": content, "stop_reason": stop, "stop_sequence": nil,
		"usage": map[string]any{
			"input_tokens":                usage.InputTokens - usage.CachedInputTokens - usage.CacheWriteTokens,
			"cache_creation_input_tokens": usage.CacheWriteTokens,
			"cache_read_input_tokens":     usage.CachedInputTokens,
			"output_tokens":               usage.OutputTokens,
		},
	}
}

// cacheControl matches a compact cache_control member: a key never appears
// after `,"` or `{"` inside a JSON string, where the quote is escaped.
var (
	cacheControlAfter  = regexp.MustCompile(`,"cache_control":\{[^{}]*\}`)
	cacheControlBefore = regexp.MustCompile(`\{"cache_control":\{[^{}]*\},?`)
)

// parse reads a request body the way the vendor validates it. The call's
// req.Model is set as soon as it is known, for the log.
func (u *Upstream) parse(body []byte) (upstreamCall, error) {
	var call upstreamCall
	call.req.Body = body
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil || top == nil {
		return call, errors.New("could not parse the JSON body of your request: the body must be a JSON object")
	}
	if raw, ok := top["model"]; ok {
		_ = json.Unmarshal(raw, &call.req.Model)
	}
	if call.req.Model == "" {
		return call, errors.New("model: Field required (you must provide a model parameter)")
	}
	var msgs []json.RawMessage
	if raw, ok := top["messages"]; !ok || json.Unmarshal(raw, &msgs) != nil || len(msgs) == 0 {
		return call, errors.New("messages: Field required (a non-empty array of messages)")
	}
	var stream bool
	if raw, ok := top["stream"]; ok && json.Unmarshal(raw, &stream) == nil && stream {
		return call, errors.New("stream: llmtest.Upstream answers only whole messages")
	}
	maxKey := "max_tokens"
	if u.cfg.Wire == WireOpenAI {
		if _, ok := top["max_completion_tokens"]; ok {
			maxKey = "max_completion_tokens"
		}
	}
	if raw, ok := top[maxKey]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &call.req.MaxTokens); err != nil || call.req.MaxTokens < 1 {
			return call, fmt.Errorf("%s: must be a positive integer", maxKey)
		}
	} else if u.cfg.Wire == WireAnthropic {
		return call, errors.New("max_tokens: Field required")
	}

	var prompt bytes.Buffer
	// Each part is added with the offsets of its elements, for Anthropic's
	// block boundaries.
	addArray := func(raw json.RawMessage, nested bool) error {
		if u.cfg.Wire == WireAnthropic {
			return u.addAnthropic(&call, &prompt, raw, nested)
		}
		var c bytes.Buffer
		if err := json.Compact(&c, raw); err != nil {
			return err
		}
		prompt.Write(c.Bytes())
		return nil
	}
	if raw, ok := top["tools"]; ok {
		var tools []struct {
			Name     string `json:"name"`
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		if err := json.Unmarshal(raw, &tools); err != nil {
			return call, errors.New("tools: must be an array of tools")
		}
		for _, t := range tools {
			call.req.Tools = append(call.req.Tools, cmp.Or(t.Function.Name, t.Name))
		}
		if err := addArray(raw, false); err != nil {
			return call, err
		}
	}
	if raw, ok := top["system"]; ok && u.cfg.Wire == WireAnthropic {
		text, err := contentText(raw)
		if err != nil {
			return call, errors.New("system: must be a string or an array of text blocks")
		}
		call.req.Messages = append(call.req.Messages, UpstreamMessage{Role: "system", Text: text})
		if err := addArray(raw, false); err != nil {
			return call, err
		}
	}
	for i, raw := range msgs {
		var m struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		}
		if err := json.Unmarshal(raw, &m); err != nil || m.Role == "" {
			return call, fmt.Errorf("messages.%d: must be an object with a role", i)
		}
		text, err := contentText(m.Content)
		if err != nil {
			return call, fmt.Errorf("messages.%d.content: %v", i, err)
		}
		call.req.Messages = append(call.req.Messages, UpstreamMessage{Role: m.Role, Text: text})
	}
	if err := addArray(top["messages"], true); err != nil {
		return call, err
	}
	call.prompt = prompt.Bytes()
	call.promptTokens = ceilQuarter(len(call.prompt))
	call.input = call.promptTokens
	if len(u.cfg.ContextWindow) > 0 {
		call.input = tokens.Request(tokens.ForModel(call.req.Model), u.llmRequest(top))
	}
	return call, nil
}

// llmRequest is a well-formed request body as an llm.Request, for llm/tokens
// to count: each wire message one Message (Anthropic's system a first one,
// its tool_use blocks the ToolCalls, its tool results' text the content),
// and the tools with their schemas. Parts that do not decode are left out:
// parse has already refused a body without the fields it needs.
func (u *Upstream) llmRequest(top map[string]json.RawMessage) llm.Request {
	var req llm.Request
	_ = json.Unmarshal(top["model"], &req.Model)
	var tools []struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		InputSchema json.RawMessage `json:"input_schema"`
		Function    struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
		} `json:"function"`
	}
	_ = json.Unmarshal(top["tools"], &tools)
	for _, t := range tools {
		if u.cfg.Wire == WireOpenAI {
			req.Tools = append(req.Tools, llm.ToolDef{Name: t.Function.Name, Description: t.Function.Description, Parameters: t.Function.Parameters})
			continue
		}
		req.Tools = append(req.Tools, llm.ToolDef{Name: t.Name, Description: t.Description, Parameters: t.InputSchema})
	}
	if raw, ok := top["system"]; ok && u.cfg.Wire == WireAnthropic {
		text, _ := contentText(raw)
		req.Messages = append(req.Messages, llm.Message{Role: llm.RoleSystem, Content: text})
	}
	var msgs []struct {
		Role      string          `json:"role"`
		Content   json.RawMessage `json:"content"`
		Name      string          `json:"name"`
		ToolCalls []struct {
			Function struct {
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	}
	_ = json.Unmarshal(top["messages"], &msgs)
	for _, m := range msgs {
		text, _ := contentText(m.Content)
		msg := llm.Message{Role: llm.Role(m.Role), Content: text, Name: m.Name}
		for _, tc := range m.ToolCalls {
			msg.ToolCalls = append(msg.ToolCalls, llm.ToolCall{Name: tc.Function.Name, Args: json.RawMessage(tc.Function.Arguments)})
		}
		var blocks []struct {
			Type  string          `json:"type"`
			Name  string          `json:"name"`
			Input json.RawMessage `json:"input"`
		}
		if json.Unmarshal(m.Content, &blocks) == nil {
			for _, b := range blocks {
				if b.Type == "tool_use" {
					msg.ToolCalls = append(msg.ToolCalls, llm.ToolCall{Name: b.Name, Args: b.Input})
				}
			}
		}
		req.Messages = append(req.Messages, msg)
	}
	return req
}

// contentText is the text of a message's content: a string, or blocks whose
// text (and tool results' content) is joined.
func contentText(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var blocks []struct {
		Text    string          `json:"text"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return "", errors.New("must be a string or an array of content blocks")
	}
	var b strings.Builder
	for _, bl := range blocks {
		b.WriteString(bl.Text)
		if t, err := contentText(bl.Content); err == nil {
			b.WriteString(t)
		}
	}
	return b.String(), nil
}

// addAnthropic appends an Anthropic prompt part (tools, system or messages)
// to prompt, compacted and without cache_control, recording where each of its
// content blocks ends and whether it carries a breakpoint. For messages
// (nested) the blocks are those of each message's content; a message or
// system given as a string is one block.
func (u *Upstream) addAnthropic(call *upstreamCall, prompt *bytes.Buffer, raw json.RawMessage, nested bool) error {
	var c bytes.Buffer
	if err := json.Compact(&c, raw); err != nil {
		return err
	}
	base := prompt.Len()
	stripped := stripCacheControl(c.Bytes())
	prompt.Write(stripped)
	if stripped[0] != '[' {
		call.boundaries = append(call.boundaries, boundary{end: prompt.Len()})
		return nil
	}
	orig, _, err := elements(c.Bytes())
	if err != nil {
		return err
	}
	elems, ends, err := elements(stripped)
	if err != nil || len(elems) != len(orig) {
		return errors.New("malformed content")
	}
	for i := range elems {
		if !nested {
			call.boundaries = append(call.boundaries, boundary{end: base + ends[i], breakpoint: hasCacheControl(orig[i])})
			continue
		}
		var om struct {
			Content json.RawMessage `json:"content"`
		}
		if json.Unmarshal(orig[i], &om) != nil {
			return errors.New("malformed message")
		}
		start := base + ends[i] - len(elems[i])
		cStart, cRaw, ok := member(elems[i], "content")
		if !ok || len(cRaw) == 0 || cRaw[0] != '[' {
			call.boundaries = append(call.boundaries, boundary{end: base + ends[i]})
			continue
		}
		oBlocks, _, err1 := elements(om.Content)
		blocks, bEnds, err2 := elements(cRaw)
		if err1 != nil || err2 != nil || len(oBlocks) != len(blocks) {
			return errors.New("malformed message content")
		}
		for j := range blocks {
			call.boundaries = append(call.boundaries, boundary{end: start + cStart + bEnds[j], breakpoint: hasCacheControl(oBlocks[j])})
		}
	}
	return nil
}

func stripCacheControl(b []byte) []byte {
	b = cacheControlAfter.ReplaceAll(b, nil)
	return cacheControlBefore.ReplaceAll(b, []byte("{"))
}

func hasCacheControl(raw json.RawMessage) bool {
	var b struct {
		CacheControl json.RawMessage `json:"cache_control"`
	}
	return json.Unmarshal(raw, &b) == nil && len(b.CacheControl) > 0 && string(b.CacheControl) != "null"
}

// elements splits a compact JSON array into its elements and where each ends.
func elements(arr []byte) ([]json.RawMessage, []int, error) {
	dec := json.NewDecoder(bytes.NewReader(arr))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
		return nil, nil, errors.New("not an array")
	}
	var elems []json.RawMessage
	var ends []int
	for dec.More() {
		var e json.RawMessage
		if err := dec.Decode(&e); err != nil {
			return nil, nil, err
		}
		elems = append(elems, e)
		ends = append(ends, int(dec.InputOffset()))
	}
	return elems, ends, nil
}

// member finds key in a compact JSON object: where its value starts, and the
// value.
func member(obj []byte, key string) (int, json.RawMessage, bool) {
	dec := json.NewDecoder(bytes.NewReader(obj))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return 0, nil, false
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return 0, nil, false
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return 0, nil, false
		}
		if k == key {
			end := int(dec.InputOffset())
			return end - len(v), v, true
		}
	}
	return 0, nil, false
}
