// Package llm is the one interface every model provider implements, and the message
// shapes the agent loop persists. Providers: script (deterministic screenplay),
// openai (any OpenAI-compatible server), anthropic.
package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Role of a message in a conversation.
type Role string

// Conversation roles.
const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Message is one entry of a conversation, persisted as JSON in the session.
type Message struct {
	Role    Role   `json:"role"`
	Content string `json:"content,omitempty"`
	// ToolCalls are the calls an assistant message asks for.
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// ToolCallID and Name identify the call a tool message answers.
	ToolCallID string `json:"tool_call_id,omitempty"`
	Name       string `json:"name,omitempty"`
	// IsError marks a tool message that reports a failed or refused call.
	IsError bool `json:"is_error,omitempty"`
	// Provenance is what the content carries from elsewhere: a delegation's task
	// or result, a teammate's message, recalled memory. The worker sets it, never
	// the model, and no provider sees it; it is saved with the history, from which
	// the session's label is derived (the flow rules).
	Provenance *Provenance `json:"provenance,omitempty"`
	// Refused marks a tool message answering a call that was refused before it
	// ran (the gate, the worker's caps): it holds none of the tool's output, so
	// the call read nothing (the flow rules). Set by the worker.
	Refused bool `json:"refused,omitempty"`
	// Compacted, set by the worker on the summary a compaction put in place of
	// older turns, tells what the summary stands for. No provider sees it.
	Compacted *Compacted `json:"compacted,omitempty"`
}

// Compacted is what a compaction's summary stands for.
type Compacted struct {
	// Messages and Answers count the messages, and of them the model's answers,
	// the summary replaced (those of earlier summaries included).
	Messages int `json:"messages"`
	Answers  int `json:"answers"`
	// Mail are the ids of the teammates' messages among them: a step that
	// shows mail skips those already in the context, summarized ones included.
	Mail []string `json:"mail,omitempty"`
}

// Answers is how many model answers msgs hold, those a compaction summarized
// included: a replayed model (the script) picks its next turn by it.
func Answers(msgs []Message) int {
	n := 0
	for _, m := range msgs {
		if m.Role == RoleAssistant {
			n++
		}
		if m.Compacted != nil {
			n += m.Compacted.Answers
		}
	}
	return n
}

// Provenance names the private and untrusted sources behind a message's content.
type Provenance struct {
	Private   []string `json:"private,omitempty"`
	Untrusted []string `json:"untrusted,omitempty"`
}

// ToolCall is one function call requested by the model.
type ToolCall struct {
	ID   string          `json:"id"`
	Name string          `json:"name"`
	Args json.RawMessage `json:"args"`
}

// ToolDef is a tool as shown to the model: name, description and JSON schema.
type ToolDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// Request is one model call.
type Request struct {
	// Model overrides the provider's default model when set.
	Model string
	// Agent names the calling agent (the script provider keys its screenplay on it).
	Agent    string
	Messages []Message
	Tools    []ToolDef
	// MaxTokens caps the answer; 0 means the provider default.
	MaxTokens int
	// Team and Principal are who the call is made for: the governor gives each
	// a share of a provider's limits. No provider sends them.
	Team, Principal string
	// Purpose is PurposeSummary for a compaction's summary request (the
	// engine's own, not a turn of the agent); empty for a turn. No provider
	// sends it: the script model answers a summary by condensing.
	Purpose string
}

// PurposeSummary marks a compaction's summary request.
const PurposeSummary = "summary"

// Usage counts tokens of one call.
type Usage struct {
	// InputTokens are all the tokens the call sent, cached ones included (OpenAI's
	// prompt_tokens; Anthropic's input_tokens plus its two cache counts).
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
	// CachedInputTokens of InputTokens were read from the provider's prompt cache
	// (OpenAI prompt_tokens_details.cached_tokens, Anthropic
	// cache_read_input_tokens): billed at the cached-input price.
	CachedInputTokens int `json:"cached_input_tokens,omitempty"`
	// CacheWriteTokens of InputTokens were written to the prompt cache (Anthropic
	// cache_creation_input_tokens): billed at the cache-write price.
	CacheWriteTokens int `json:"cache_write_tokens,omitempty"`
}

// Total is input plus output tokens.
func (u Usage) Total() int { return u.InputTokens + u.OutputTokens }

// Response is the model's answer: one assistant message.
type Response struct {
	Message Message
	Usage   Usage
	// Model is the model that answered (the server's name for it when it gives
	// one); Provider the provider it was asked on. A fallback chain sets both
	// to the link that answered.
	Model    string
	Provider string
	// Fallback is set when a fallback of the team's model answered (the
	// overloaded ones before it are skipped).
	Fallback bool
	// Limits are the rate-limit headers of the answer, when the provider sent
	// any: the governor learns the provider's view from them.
	Limits *RateLimits
	// Cost is what the call cost by the fleet's price table (the metering
	// middleware sets it); Priced is false when the table has no price for
	// Model, and Cost is then 0.
	Cost   Money
	Priced bool
}

// Money is an amount in picodollars (10⁻¹² USD). A price per million tokens in
// microdollars is the price of one token in picodollars, so a call's cost is
// tokens × price in integers: costs add up without drift. An int64 holds
// about 9.2 million dollars.
type Money int64

// Dollars is m in dollars, for display and Prometheus (never for sums).
func (m Money) Dollars() float64 { return float64(m) / 1e12 }

// String is m in dollars with six decimals ("$0.001234").
func (m Money) String() string { return fmt.Sprintf("$%.6f", m.Dollars()) }

// RateLimits is what a provider's rate-limit headers said about a credential's
// limits (OpenAI x-ratelimit-*, Anthropic anthropic-ratelimit-*). A field the
// provider did not send (or sent garbled) is -1 for counts and 0 for resets.
type RateLimits struct {
	RequestsLimit, RequestsRemaining int
	// RequestsReset is how long until the request limit is full again.
	RequestsReset                time.Duration
	TokensLimit, TokensRemaining int
	TokensReset                  time.Duration
}

// Provider is a model API.
type Provider interface {
	// Name is the provider key used in templates ("script", "openai", "anthropic").
	Name() string
	Complete(ctx context.Context, req Request) (Response, error)
}

// ErrMalformed reports a model answer that cannot be used (garbage, empty, bad JSON in
// tool arguments). The agent loop counts it toward the circuit breaker.
var ErrMalformed = errors.New("llm: malformed model response")

// ErrExhausted reports a provider with no answer left for an agent: the script
// provider's screenplay has no more turns for it. The agent loop fails the run
// (reason script_exhausted) instead of retrying. Its text is kept as it was when
// only the script provider had it, since run errors carry it.
var ErrExhausted = errors.New("script exhausted")

// APIError is a non-success answer from a provider's HTTP API after retries.
type APIError struct {
	Provider string
	Status   int
	Message  string
	// RetryAfter is the server's retry-after-ms or Retry-After, when it sent a
	// valid one; 0 otherwise.
	RetryAfter time.Duration
	// Limits are the answer's rate-limit headers, when it had any.
	Limits *RateLimits
	// ContextLength marks the provider's refusal of a request too long for
	// the model's context window (input plus max_tokens): the error then
	// matches ErrContextLength.
	ContextLength bool
}

func (e *APIError) Error() string {
	return fmt.Sprintf("llm %s: HTTP %d: %s", e.Provider, e.Status, e.Message)
}

// Is makes an APIError marked ContextLength match ErrContextLength.
func (e *APIError) Is(target error) bool { return target == ErrContextLength && e.ContextLength }

// StatusOverloaded is Anthropic's "overloaded" status (529), which OpenAI-
// compatible gateways also use.
const StatusOverloaded = 529

// RateLimited reports a provider's "not now" answer: 429 (a rate limit), 503 or
// 529 (overloaded). The HTTP providers return these at once, without waiting in
// the caller's goroutine: the agent loop parks the step instead.
func (e *APIError) RateLimited() bool {
	return e.Status == http.StatusTooManyRequests || e.Status == http.StatusServiceUnavailable || e.Status == StatusOverloaded
}

// Overloaded reports a provider-side failure a fallback model may not share:
// 529, 503 and the other 5xx. A 4xx (the request's fault or the credential's
// limit) is not one.
func (e *APIError) Overloaded() bool {
	return e.Status >= 500
}

// ErrRateLimited is what a WaitError wraps: matched with errors.Is.
var ErrRateLimited = errors.New("rate limited")

// ErrContextLength matches (errors.Is) a provider's refusal of a request that
// does not fit the model's context window: OpenAI's context_length_exceeded,
// Anthropic's "prompt is too long" and "input length and `max_tokens` exceed
// context limit". Asking again cannot help, so it is neither retried nor a
// rate limit: the caller compacts the session, or lowers max_tokens, and asks
// anew. The *APIError stays reachable with errors.As.
var ErrContextLength = errors.New("context length exceeded")

// WaitError is a model call that was not made, or not answered, because a
// limit holds it back: the fleet's governor (no slot before After) or the
// provider (a 429 or an overload, Cause). The agent loop snoozes the step
// until After; it is never a failure of the step on its own.
type WaitError struct {
	// After is how long to wait before asking again.
	After time.Duration
	// Limit names what holds the call back ("openai/gpt-4o rpm", "HTTP 429").
	Limit string
	// Cause is the provider's answer, when it was one.
	Cause error
}

func (e *WaitError) Error() string {
	if e.Cause != nil {
		return fmt.Sprintf("rate limited by %s for %s: %v", e.Limit, e.After, e.Cause)
	}
	return fmt.Sprintf("rate limited by %s for %s", e.Limit, e.After)
}

// Is makes every WaitError match ErrRateLimited.
func (e *WaitError) Is(target error) bool { return target == ErrRateLimited }

func (e *WaitError) Unwrap() error { return e.Cause }

// ModelConfig selects a provider and model for a team or a node.
type ModelConfig struct {
	Provider string `yaml:"provider" json:"provider"`
	Model    string `yaml:"model,omitempty" json:"model,omitempty"`
	// MaxTokens caps each answer; 0 means the provider default.
	MaxTokens int `yaml:"max_tokens,omitempty" json:"max_tokens,omitempty"`
	// Fallback are asked in order when this model is overloaded or fails with a
	// 5xx (never on a 4xx): each a provider and model, without fallbacks of its
	// own.
	Fallback []ModelConfig `yaml:"fallback,omitempty" json:"fallback,omitempty"`
}
