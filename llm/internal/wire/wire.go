// Package wire is what the HTTP providers (openai, anthropic) share: their
// configuration's checks, one JSON POST — retrying blips on the vendors' SDKs'
// schedule but handing a rate limit or an overload back at once, for the
// caller to park — written against the wire rather than linked from the SDKs,
// the reading of both vendors' rate-limit headers, and the steps of a
// completion that do not depend on the vendor's format.
// The two SDKs were a third of the module's compile time (generated types for
// every endpoint) for one endpoint each.
package wire

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aetherium-engine/aetherium/llm"
)

// Defaults of both providers' Config.
const (
	DefaultMaxRetries = 3
	DefaultTimeout    = 120 * time.Second
	// MaxBody bounds an answer read into memory: a completion is kilobytes, a
	// misbehaving server's stream must not exhaust the worker.
	MaxBody = 32 << 20
	// maxMessage bounds an APIError's message: an HTML error page from a proxy
	// must not flood logs and run events.
	maxMessage = 512
	// Backoff between attempts at a blip (a 5xx other than 503 and 529, a
	// connection error) without a usable Retry-After: initialRetry doubled per
	// attempt up to maxRetry, less up to a quarter of jitter (the vendors'
	// SDKs' schedule). A Retry-After above maxRetryAfter is not waited for in a
	// worker slot.
	initialRetry  = 500 * time.Millisecond
	maxRetry      = 8 * time.Second
	maxRetryAfter = 60 * time.Second
)

// Settings are a provider Config's transport fields, checked and defaulted.
type Settings struct {
	BaseURL    *url.URL
	MaxRetries int
	Timeout    time.Duration
	Client     *http.Client
}

// Check validates the transport fields every HTTP provider's Config has and
// applies the defaults: baseURL must be an absolute http(s) URL; maxRetries 0 is
// DefaultMaxRetries and a negative value none; timeout (per attempt) 0 is
// DefaultTimeout. provider prefixes the errors ("openai: invalid BaseURL …").
func Check(provider, baseURL string, maxRetries int, timeout time.Duration, client *http.Client) (Settings, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return Settings{}, fmt.Errorf("%s: invalid BaseURL %q: %w", provider, baseURL, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return Settings{}, fmt.Errorf("%s: invalid BaseURL %q: want an absolute http(s) URL", provider, baseURL)
	}
	if timeout < 0 {
		return Settings{}, fmt.Errorf("%s: negative Timeout %s", provider, timeout)
	}
	switch {
	case maxRetries == 0:
		maxRetries = DefaultMaxRetries
	case maxRetries < 0:
		maxRetries = 0
	}
	return Settings{BaseURL: u, MaxRetries: maxRetries, Timeout: cmp.Or(timeout, DefaultTimeout), Client: cmp.Or(client, http.DefaultClient)}, nil
}

// Endpoint is the base URL with path appended ("chat/completions" to
// ".../v1"), keeping the base's query.
func (s Settings) Endpoint(path string) string {
	u := *s.BaseURL
	u.Path = strings.TrimSuffix(u.Path, "/") + "/" + strings.TrimPrefix(path, "/")
	u.RawPath = ""
	return u.String()
}

// Call is one POST of a provider.
type Call struct {
	// Provider names it in an APIError ("openai"); Op in errors ("openai: chat
	// completion").
	Provider, Op string
	URL          string
	// Header is added to Content-Type and Accept (credentials, API version).
	Header http.Header
	Body   any
}

// Post sends c.Body as JSON and returns the 2xx answer's body and headers.
//
// A provider's "not now" — 429 (a rate limit), 503 or 529 (overloaded) — is
// returned at once, never retried or waited for here: the caller parks the
// agent's step and the task runs again later, so a worker slot is not held
// asleep for a limit that may last minutes. Its *llm.APIError carries the
// server's RetryAfter (retry-after-ms, else Retry-After; ignored beyond
// MaxWait) and the answer's rate-limit headers (Limits), as every APIError
// does.
//
// The other transient failures — a connection error, 408, 409 and the other
// 5xx — are blips: they are tried again up to s.MaxRetries times (the
// server's x-should-retry overrides that), after the server's retry-after
// when it is within a minute, else after a short exponential backoff. A
// context that ends first keeps its cause (errors.Is sees context.Canceled);
// an HTTP failure is an *llm.APIError with a bounded message.
func Post(ctx context.Context, s Settings, c Call) ([]byte, http.Header, error) {
	body, err := json.Marshal(c.Body)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: encode request: %w", c.Op, err)
	}
	for attempt := 0; ; attempt++ {
		raw, status, header, err := s.attempt(ctx, c, body)
		if err == nil && status < 300 {
			return raw, header, nil
		}
		if ctxErr := ctx.Err(); ctxErr != nil {
			if err == nil || !errors.Is(err, ctxErr) {
				err = fmt.Errorf("%w (%v)", ctxErr, cmp.Or(err, errors.New(http.StatusText(status))))
			}
			return nil, nil, fmt.Errorf("%s: %w", c.Op, err)
		}
		if err == nil {
			apiErr := newAPIError(c.Provider, status, errorMessage(raw))
			apiErr.ContextLength = contextLength(status, raw)
			now := time.Now()
			apiErr.RetryAfter = retryAfter(header, now)
			apiErr.Limits = parseLimits(header, now)
			err = apiErr
		}
		// The same request cannot fit the window on a second try, whatever
		// x-should-retry says.
		if attempt >= s.MaxRetries || !retryable(status, header) || errors.Is(err, llm.ErrContextLength) {
			return nil, nil, fmt.Errorf("%s: %w", c.Op, err)
		}
		t := time.NewTimer(backoff(attempt, header))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, nil, fmt.Errorf("%s: %w (%w)", c.Op, ctx.Err(), err)
		case <-t.C:
		}
	}
}

// attempt is one request: its body and status, or a transport error (status 0).
func (s Settings) attempt(ctx context.Context, c Call, body []byte) ([]byte, int, http.Header, error) {
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL, bytes.NewReader(body))
	if err != nil {
		return nil, 0, nil, err
	}
	for k, vs := range c.Header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := s.Client.Do(req)
	if err != nil {
		return nil, 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, MaxBody+1))
	if err != nil {
		return nil, 0, nil, fmt.Errorf("read answer (HTTP %d): %w", resp.StatusCode, err)
	}
	if len(raw) > MaxBody {
		return nil, 0, nil, fmt.Errorf("answer larger than %d bytes (HTTP %d): %w", MaxBody, resp.StatusCode, llm.ErrMalformed)
	}
	return raw, resp.StatusCode, resp.Header, nil
}

// notNow reports the statuses that mean "ask again later" rather than "this
// attempt failed": a rate limit or an overload. They are the caller's to
// schedule.
func notNow(status int) bool {
	return status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable || status == llm.StatusOverloaded
}

// retryable: a transport failure (status 0) or a blip the vendors retry,
// unless the server says otherwise. A "not now" never is, even with
// x-should-retry: true — the vendors' SDKs would sleep on it in the caller's
// goroutine, but here the caller parks the step and frees the worker slot,
// which a retry in place would hold for as long as the limit lasts.
func retryable(status int, h http.Header) bool {
	if notNow(status) {
		return false
	}
	switch h.Get("X-Should-Retry") {
	case "true":
		return true
	case "false":
		return false
	}
	return status == 0 || status == http.StatusRequestTimeout || status == http.StatusConflict || status >= 500
}

// backoff is the wait before attempt+1: the server's retry-after-ms or
// Retry-After when within maxRetryAfter, else exponential.
func backoff(attempt int, h http.Header) time.Duration {
	if d := retryAfter(h, time.Now()); d > 0 && d <= maxRetryAfter {
		return d
	}
	d := min(initialRetry<<attempt, maxRetry)
	return d - time.Duration(rand.Float64()*0.25*float64(d))
}

// errorMessage is the message of a vendor error body: both put it at
// error.message ({"error":{"message":…}}; Anthropic adds "type":"error"). A
// body without one is shown as it is (a proxy's text or HTML page).
func errorMessage(raw []byte) string {
	var body struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(raw, &body) == nil && body.Error.Message != "" {
		return body.Error.Message
	}
	return string(raw)
}

// contextLength reports whether an error answer is the vendor's refusal of a
// request too long for the model's window. Both vendors answer it 400 with an
// invalid_request_error: OpenAI with code context_length_exceeded (older
// servers and compatible ones, vLLM and DeepSeek among them, only with the
// message "This model's maximum context length is …"), Anthropic with "prompt
// is too long: N tokens > M maximum" or, when max_tokens tips it over, "input
// length and `max_tokens` exceed context limit: I + K > M". The messages are
// matched too because gateways re-wrap bodies and keep the text, not the code.
// 413 is not one: it is the body's bytes, not its tokens.
func contextLength(status int, raw []byte) bool {
	if status != http.StatusBadRequest {
		return false
	}
	var body struct {
		Error struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    any    `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(raw, &body) == nil && body.Error.Code == "context_length_exceeded" {
		return true
	}
	msg := strings.ToLower(errorMessage(raw))
	for _, s := range []string{
		"maximum context length",
		"context_length_exceeded",
		"prompt is too long",
		"exceed context limit",
		"exceeds the context window",
	} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

func newAPIError(provider string, status int, msg string) *llm.APIError {
	msg = strings.TrimSpace(msg)
	if len(msg) > maxMessage {
		msg = strings.ToValidUTF8(msg[:maxMessage], "") + "…"
	}
	if msg == "" {
		msg = cmp.Or(http.StatusText(status), "status "+strconv.Itoa(status))
	}
	return &llm.APIError{Provider: provider, Status: status, Message: msg}
}

// Object checks that raw is one JSON object before it is decoded: a gateway's
// HTML page or a JSON array is a malformed answer, not a decode error.
func Object(provider string, raw []byte) ([]byte, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' || !json.Valid(raw) {
		return nil, fmt.Errorf("%s: answer is not a JSON object: %q: %w", provider, Snippet(raw), llm.ErrMalformed)
	}
	return raw, nil
}

// Snippet is the start of b for an error message.
func Snippet(b []byte) string {
	const limit = 120
	if len(b) > limit {
		return string(b[:limit]) + "…"
	}
	return string(b)
}

// Client is what a provider keeps between calls. The providers differ only in
// the body they send and the answer they read, which Complete takes as
// functions.
type Client struct {
	// Provider prefixes errors ("openai"); Op names the call in them ("openai:
	// chat completion"); Path is the endpoint below the base URL.
	Provider, Op, Path string
	Settings           Settings
	// Header carries the credentials and API version of every request.
	Header http.Header
	// Model is the default for a Request that names none.
	Model string
}

// Complete is llm.Provider.Complete for c: build writes the request body for the
// model to ask (the Request's, else c.Model), parse reads the decoded answer.
// An answer that is not a JSON object, does not decode into A, or counts
// negative or absurd usage is llm.ErrMalformed; one that names no model is
// credited to the model asked. The Response names c.Provider and carries the
// answer's rate-limit headers (Limits, nil without any).
func Complete[B, A any](ctx context.Context, c Client, req llm.Request, build func(model string, req llm.Request) (B, error), parse func(answer A) (llm.Response, error)) (llm.Response, error) {
	model := cmp.Or(strings.TrimSpace(req.Model), c.Model)
	if model == "" {
		return llm.Response{}, fmt.Errorf("%s: no model: set Config.Model or Request.Model", c.Provider)
	}
	params, err := build(model, req)
	if err != nil {
		return llm.Response{}, fmt.Errorf("%s: build request: %w", c.Provider, err)
	}
	raw, header, err := Post(ctx, c.Settings, Call{
		Provider: c.Provider, Op: c.Op,
		URL: c.Settings.Endpoint(c.Path), Header: c.Header, Body: params,
	})
	if err != nil {
		return llm.Response{}, err
	}
	raw, err = Object(c.Provider, raw)
	if err != nil {
		return llm.Response{}, err
	}
	var answer A
	if err := json.Unmarshal(raw, &answer); err != nil {
		return llm.Response{}, fmt.Errorf("%s: decode answer: %v: %w", c.Provider, err, llm.ErrMalformed)
	}
	resp, err := parse(answer)
	if err != nil {
		return llm.Response{}, err
	}
	if err := checkUsage(resp.Usage); err != nil {
		return llm.Response{}, fmt.Errorf("%s: %w", c.Provider, err)
	}
	resp.Model = cmp.Or(resp.Model, model)
	resp.Provider = c.Provider
	// A success's limits matter as much as a refusal's: they let the governor
	// slow down before the provider says 429.
	resp.Limits = ParseLimits(header)
	return resp, nil
}

// MaxUsageTokens bounds each token count of an answer's usage. No model reads
// or writes a hundred million tokens in one call; a larger count is a broken
// server's, and billing it would corrupt the fleet's metering.
const MaxUsageTokens = 100_000_000

// UsageCounts checks raw token counts of an answer before they are added up:
// each in [0, MaxUsageTokens], so that a sum cannot overflow.
func UsageCounts(counts ...int) error {
	for _, n := range counts {
		if n < 0 || n > MaxUsageTokens {
			return fmt.Errorf("usage count %d outside [0, %d]: %w", n, MaxUsageTokens, llm.ErrMalformed)
		}
	}
	return nil
}

// checkUsage: counts within bounds, and the cached and cache-write parts of
// the input not more than the input (the price of the rest would be
// negative).
func checkUsage(u llm.Usage) error {
	if err := UsageCounts(u.InputTokens, u.OutputTokens, u.CachedInputTokens, u.CacheWriteTokens); err != nil {
		return err
	}
	if u.CachedInputTokens+u.CacheWriteTokens > u.InputTokens {
		return fmt.Errorf("usage: %d cached and %d cache-write tokens of %d input tokens: %w",
			u.CachedInputTokens, u.CacheWriteTokens, u.InputTokens, llm.ErrMalformed)
	}
	return nil
}

// Tools converts a Request's tools with convert, after checking each one's name
// and parameters. A tool without parameters gets the empty object schema both
// APIs require; parameters are sent byte for byte, since decoding the schema
// would turn its numbers into float64.
func Tools[T any](defs []llm.ToolDef, convert func(t llm.ToolDef, schema json.RawMessage) T) ([]T, error) {
	var tools []T
	for _, t := range defs {
		if t.Name == "" {
			return nil, errors.New("tool without a name")
		}
		schema := json.RawMessage(`{"type":"object","properties":{}}`)
		if raw := bytes.TrimSpace(t.Parameters); len(raw) > 0 && !bytes.Equal(raw, []byte("null")) {
			if !IsObject(raw) {
				return nil, fmt.Errorf("tool %q: parameters must be a JSON schema object", t.Name)
			}
			schema = json.RawMessage(raw)
		}
		tools = append(tools, convert(t, schema))
	}
	return tools, nil
}

// Args are a tool call's arguments with "{}" for none: some servers send "" for
// a call without parameters, and neither API accepts an empty value.
func Args(b []byte) []byte {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return []byte("{}")
	}
	return b
}

// IsObject reports whether b is one JSON object, what tool arguments and
// parameter schemas must be ("null" decodes without error but is not one).
func IsObject(b []byte) bool {
	var obj map[string]json.RawMessage
	return json.Unmarshal(b, &obj) == nil && obj != nil
}
