// Package llm is the one interface every model provider implements, and the message
// shapes the agent loop persists. Providers: script (deterministic screenplay),
// openai (any OpenAI-compatible server), anthropic.
package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
}

// Usage counts tokens of one call.
type Usage struct {
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
}

// Total is input plus output tokens.
func (u Usage) Total() int { return u.InputTokens + u.OutputTokens }

// Response is the model's answer: one assistant message.
type Response struct {
	Message Message
	Usage   Usage
	Model   string
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
}

func (e *APIError) Error() string {
	return fmt.Sprintf("llm %s: HTTP %d: %s", e.Provider, e.Status, e.Message)
}

// ModelConfig selects a provider and model for a team or a node.
type ModelConfig struct {
	Provider string `yaml:"provider" json:"provider"`
	Model    string `yaml:"model,omitempty" json:"model,omitempty"`
	// MaxTokens caps each answer; 0 means the provider default.
	MaxTokens int `yaml:"max_tokens,omitempty" json:"max_tokens,omitempty"`
}
