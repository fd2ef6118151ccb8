// Package openai is the llm.Provider for the OpenAI Chat Completions API and the
// many servers that copy it (Ollama, vLLM, llama.cpp, LM Studio, gateways).
package openai

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/llm/internal/wire"
)

// Defaults applied by New.
const (
	DefaultBaseURL    = "https://api.openai.com/v1"
	DefaultMaxRetries = wire.DefaultMaxRetries
	DefaultTimeout    = wire.DefaultTimeout
	// DefaultModel is the model of a deployment that names none (llm.openai.model).
	DefaultModel = "gpt-4o-mini"
)

const providerName = "openai"

// Config configures a Provider.
type Config struct {
	// BaseURL is the API root the client appends "chat/completions" to, e.g.
	// "http://localhost:11434/v1" for Ollama. Default DefaultBaseURL.
	BaseURL string `yaml:"base_url"`
	// APIKey is sent as a bearer token. It may be empty for local servers that
	// need no authentication; OPENAI_API_KEY from the environment is never used
	// in its place, so a key cannot leak to a server it was not meant for.
	APIKey string `yaml:"api_key"`
	// Model is the default model. Required unless every Request names one.
	Model string `yaml:"model"`
	// MaxRetries is how often a connection error, 408, 409 or 5xx other than
	// 503 and 529 is retried with a short exponential backoff that honours
	// Retry-After. 0 means DefaultMaxRetries (3); a negative value disables
	// retries. A 429, 503 or 529 is never retried: it is returned at once as an
	// *llm.APIError with the server's RetryAfter, for the caller to park the
	// step.
	MaxRetries int `yaml:"max_retries"`
	// Timeout bounds each attempt, not the whole call (the context does that).
	// 0 means DefaultTimeout (120s).
	Timeout time.Duration `yaml:"timeout"`
	// HTTPClient replaces http.DefaultClient, e.g. for proxies or tests.
	HTTPClient *http.Client `yaml:"-"`
}

// Provider calls a Chat Completions endpoint.
type Provider struct {
	client wire.Client
}

var _ llm.Provider = (*Provider)(nil)

// New checks cfg, applies defaults and builds a Provider.
func New(cfg Config) (*Provider, error) {
	s, err := wire.Check(providerName, cmp.Or(strings.TrimSpace(cfg.BaseURL), DefaultBaseURL), cfg.MaxRetries, cfg.Timeout, cfg.HTTPClient)
	if err != nil {
		return nil, err
	}
	h := http.Header{}
	// OPENAI_API_KEY is never read: an empty key sends no credentials.
	if cfg.APIKey != "" {
		h.Set("Authorization", "Bearer "+cfg.APIKey)
	}
	return &Provider{client: wire.Client{
		Provider: providerName, Op: "openai: chat completion", Path: "chat/completions",
		Settings: s, Header: h, Model: strings.TrimSpace(cfg.Model),
	}}, nil
}

// Name implements llm.Provider.
func (p *Provider) Name() string { return providerName }

// Complete implements llm.Provider.
func (p *Provider) Complete(ctx context.Context, req llm.Request) (llm.Response, error) {
	return wire.Complete(ctx, p.client, req, buildParams, parseCompletion)
}

// The request body of Chat Completions, as much of it as the loop uses.
//
// OpenAI caches a prompt's prefix automatically, and only a byte-identical one
// hits. Its server renders the tools ahead of the messages whatever the JSON
// says, but gateways and self-hosted servers with prefix caches (vLLM, llama.cpp)
// may key on the body, so the body is laid out in the order the prompt grows:
// the fields that stay the same for a whole session (model, tools — in the
// Request's order, schemas byte for byte) first, then the messages oldest
// first, and what may change per call after them. Encoding a struct keeps its
// field order, so turn n+1's body starts with turn n's up to the end of turn
// n's messages. Nothing per call (a timestamp, a random id) may be added ahead
// of the messages.
type chatRequest struct {
	Model    string        `json:"model"`
	Tools    []chatTool    `json:"tools,omitempty"`
	Messages []chatMessage `json:"messages"`
	// max_tokens is rejected by OpenAI's reasoning models; servers that only
	// know the old field ignore this one, which fails safe (no cap) rather than
	// failing the call.
	MaxCompletionTokens int `json:"max_completion_tokens,omitempty"`
}

type chatMessage struct {
	Role string `json:"role"`
	// Content is a pointer so that an assistant turn with only tool calls can
	// omit it, while a bare assistant turn still sends "".
	Content    *string    `json:"content,omitempty"`
	ToolCalls  []toolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
}

type toolCall struct {
	ID       string `json:"id,omitempty"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type chatTool struct {
	Type     string   `json:"type"`
	Function function `json:"function"`
}

type function struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters"`
}

// chatCompletion is the answer, as much of it as the loop reads.
type chatCompletion struct {
	Model   string `json:"model"`
	Choices []struct {
		FinishReason string `json:"finish_reason"`
		Message      struct {
			Content   *string    `json:"content"`
			Refusal   *string    `json:"refusal"`
			ToolCalls []toolCall `json:"tool_calls"`
		} `json:"message"`
	} `json:"choices"`
	Usage struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		PromptTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

func buildParams(model string, req llm.Request) (chatRequest, error) {
	params := chatRequest{Model: model, MaxCompletionTokens: max(req.MaxTokens, 0)}
	for i, m := range req.Messages {
		msg, err := convertMessage(m)
		if err != nil {
			return params, fmt.Errorf("message %d: %w", i, err)
		}
		params.Messages = append(params.Messages, msg)
	}
	tools, err := wire.Tools(req.Tools, func(t llm.ToolDef, schema json.RawMessage) chatTool {
		return chatTool{Type: "function", Function: function{Name: t.Name, Description: t.Description, Parameters: schema}}
	})
	params.Tools = tools
	return params, err
}

func convertMessage(m llm.Message) (chatMessage, error) {
	switch m.Role {
	case llm.RoleSystem, llm.RoleUser:
		return chatMessage{Role: string(m.Role), Content: &m.Content}, nil
	case llm.RoleAssistant:
		asst := chatMessage{Role: string(llm.RoleAssistant)}
		// Content may be omitted only when there are tool calls; an empty string
		// keeps a bare assistant turn valid.
		if m.Content != "" || len(m.ToolCalls) == 0 {
			asst.Content = &m.Content
		}
		for _, tc := range m.ToolCalls {
			call := toolCall{ID: tc.ID, Type: "function"}
			call.Function.Name, call.Function.Arguments = tc.Name, string(wire.Args(tc.Args))
			asst.ToolCalls = append(asst.ToolCalls, call)
		}
		return asst, nil
	case llm.RoleTool:
		if m.ToolCallID == "" {
			return chatMessage{}, errors.New("tool message without tool_call_id")
		}
		// Chat Completions has no error flag on tool results; the content itself
		// has to tell the model the call failed.
		return chatMessage{Role: string(llm.RoleTool), Content: &m.Content, ToolCallID: m.ToolCallID}, nil
	default:
		return chatMessage{}, fmt.Errorf("unknown role %q", m.Role)
	}
}

func parseCompletion(cc chatCompletion) (llm.Response, error) {
	if len(cc.Choices) == 0 {
		return llm.Response{}, fmt.Errorf("openai: answer has no choices: %w", llm.ErrMalformed)
	}
	choice := cc.Choices[0]
	// A refusal is still an answer the agent can act on.
	msg := llm.Message{Role: llm.RoleAssistant, Content: cmp.Or(deref(choice.Message.Content), deref(choice.Message.Refusal))}
	for i, tc := range choice.Message.ToolCalls {
		call, err := convertToolCall(i, tc)
		if err != nil {
			return llm.Response{}, fmt.Errorf("openai: tool call %d: %w: %w", i, err, llm.ErrMalformed)
		}
		msg.ToolCalls = append(msg.ToolCalls, call)
	}
	if strings.TrimSpace(msg.Content) == "" && len(msg.ToolCalls) == 0 {
		return llm.Response{}, fmt.Errorf("openai: empty answer (finish_reason %q): %w", choice.FinishReason, llm.ErrMalformed)
	}
	u := cc.Usage
	return llm.Response{
		Message: msg,
		// prompt_tokens already counts the cached ones; wire.Complete checks the
		// counts are sane.
		Usage: llm.Usage{
			InputTokens:       u.PromptTokens,
			OutputTokens:      u.CompletionTokens,
			CachedInputTokens: u.PromptTokensDetails.CachedTokens,
		},
		Model: cc.Model,
	}, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func convertToolCall(i int, tc toolCall) (llm.ToolCall, error) {
	if tc.Type != "" && tc.Type != "function" {
		return llm.ToolCall{}, fmt.Errorf("unsupported tool call type %q", tc.Type)
	}
	if tc.Function.Name == "" {
		return llm.ToolCall{}, errors.New("tool call without a function name")
	}
	args := wire.Args([]byte(tc.Function.Arguments))
	if !wire.IsObject(args) {
		return llm.ToolCall{}, fmt.Errorf("%s: arguments are not a JSON object: %q", tc.Function.Name, wire.Snippet(args))
	}
	// Some OpenAI-compatible servers omit ids; the agent loop still needs one to
	// pair the result with the call.
	id := cmp.Or(tc.ID, "call_"+strconv.Itoa(i))
	return llm.ToolCall{ID: id, Name: tc.Function.Name, Args: json.RawMessage(args)}, nil
}
