// Package anthropic is the llm.Provider for the Anthropic Messages API.
package anthropic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/llm/internal/wire"
)

// Defaults applied by New and Complete.
const (
	DefaultBaseURL    = "https://api.anthropic.com"
	DefaultMaxRetries = wire.DefaultMaxRetries
	DefaultTimeout    = wire.DefaultTimeout
	// DefaultModel is the model of a deployment that names none (llm.anthropic.model).
	DefaultModel = "claude-sonnet-4-5"
	// DefaultMaxTokens caps an answer when the request leaves it at 0; the API
	// has no default of its own and rejects a request without max_tokens.
	DefaultMaxTokens = 4096
	// APIVersion is the anthropic-version header every request carries.
	APIVersion = "2023-06-01"
	// DefaultPromptCache is Config.PromptCache when left unset: on. An agent's
	// session resends the same tools, system prompt and growing history every
	// turn; a cache write costs 1.25× the input price (the 5-minute cache) and
	// every read of it 0.1×, so a prefix read once more than pays for its write.
	DefaultPromptCache = true
)

const providerName = "anthropic"

// Config configures a Provider.
type Config struct {
	// BaseURL is the API root the client appends "v1/messages" to. Default
	// DefaultBaseURL.
	BaseURL string `yaml:"base_url"`
	// APIKey authenticates the calls. Required for the default BaseURL; may be
	// empty for a gateway or proxy that authenticates on its own. The
	// environment (ANTHROPIC_API_KEY) is never consulted: the Config is the only
	// source of credentials.
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
	// PromptCache marks the stable parts of every request as prompt-cache
	// breakpoints (cache_control "ephemeral"): the tool definitions, the system
	// prompt and the conversation so far. Unset means DefaultPromptCache (on);
	// the price of cache writes and reads is documented there.
	PromptCache *bool `yaml:"prompt_cache"`
}

// Provider calls the Messages API.
type Provider struct {
	client wire.Client
	cache  bool
}

var _ llm.Provider = (*Provider)(nil)

// New checks cfg, applies defaults and builds a Provider.
func New(cfg Config) (*Provider, error) {
	baseURL := strings.TrimSpace(cfg.BaseURL)
	if baseURL == "" {
		if cfg.APIKey == "" {
			return nil, errors.New("anthropic: APIKey is required for " + DefaultBaseURL)
		}
		baseURL = DefaultBaseURL
	}
	s, err := wire.Check(providerName, baseURL, cfg.MaxRetries, cfg.Timeout, cfg.HTTPClient)
	if err != nil {
		return nil, err
	}
	h := http.Header{}
	h.Set("Anthropic-Version", APIVersion)
	if cfg.APIKey != "" {
		h.Set("X-Api-Key", cfg.APIKey)
	}
	cache := DefaultPromptCache
	if cfg.PromptCache != nil {
		cache = *cfg.PromptCache
	}
	return &Provider{client: wire.Client{
		Provider: providerName, Op: "anthropic: messages", Path: "v1/messages",
		Settings: s, Header: h, Model: strings.TrimSpace(cfg.Model),
	}, cache: cache}, nil
}

// Name implements llm.Provider.
func (p *Provider) Name() string { return providerName }

// Complete implements llm.Provider.
func (p *Provider) Complete(ctx context.Context, req llm.Request) (llm.Response, error) {
	build := func(model string, req llm.Request) (messagesRequest, error) {
		params, err := buildParams(model, req)
		if err == nil && p.cache {
			markCache(&params)
		}
		return params, err
	}
	return wire.Complete(ctx, p.client, req, build, parseMessage)
}

// The request body of the Messages API, as much of it as the loop uses.
type messagesRequest struct {
	Model     string      `json:"model"`
	MaxTokens int         `json:"max_tokens"`
	System    []block     `json:"system,omitempty"`
	Messages  []message   `json:"messages"`
	Tools     []toolParam `json:"tools,omitempty"`
}

type message struct {
	Role    string  `json:"role"`
	Content []block `json:"content"`
}

// block is a content block of any type the loop sends: text, tool_use,
// tool_result (whose content is text blocks).
type block struct {
	Type      string          `json:"type"`
	Text      string          `json:"text,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	IsError   bool            `json:"is_error,omitempty"`
	Content   []block         `json:"content,omitempty"`
	// CacheControl makes the block a prompt-cache breakpoint.
	CacheControl *cacheControl `json:"cache_control,omitempty"`
}

type toolParam struct {
	Name         string          `json:"name"`
	Description  string          `json:"description,omitempty"`
	InputSchema  json.RawMessage `json:"input_schema"`
	CacheControl *cacheControl   `json:"cache_control,omitempty"`
}

type cacheControl struct {
	Type string `json:"type"`
}

// ephemeral is the API's one cache type (a 5-minute cache, refreshed by each
// read).
var ephemeral = &cacheControl{Type: "ephemeral"}

// markCache sets the prompt-cache breakpoints of a request, at most the four
// the API allows. A breakpoint caches the whole prompt up to it (tools, then
// system, then messages), so:
//   - the last tool caches every tool definition;
//   - the last system block caches the system prompt;
//   - the last block of the last user message (the newest text or tool
//     results) caches the conversation so far, which the next turn resends
//     unchanged and extends;
//   - the last block of the user message before it is where the previous turn
//     put its breakpoint: the API looks for an earlier cache entry only some
//     twenty blocks back from a breakpoint, and a turn with many parallel tool
//     calls adds more than that, so this one reads last turn's entry exactly.
//
// A prefix shorter than the model's minimum (about a thousand tokens) is not
// cached, at no cost.
func markCache(params *messagesRequest) {
	if n := len(params.Tools); n > 0 {
		params.Tools[n-1].CacheControl = ephemeral
	}
	if n := len(params.System); n > 0 {
		params.System[n-1].CacheControl = ephemeral
	}
	marked := 0
	for i := len(params.Messages) - 1; i >= 0 && marked < 2; i-- {
		m := &params.Messages[i]
		if m.Role != "user" || len(m.Content) == 0 {
			continue
		}
		m.Content[len(m.Content)-1].CacheControl = ephemeral
		marked++
	}
}

// answer is the Messages API's answer, as much of it as the loop reads.
type answer struct {
	Model      string `json:"model"`
	StopReason string `json:"stop_reason"`
	Content    []struct {
		Type  string          `json:"type"`
		Text  string          `json:"text"`
		ID    string          `json:"id"`
		Name  string          `json:"name"`
		Input json.RawMessage `json:"input"`
	} `json:"content"`
	Usage struct {
		InputTokens              int `json:"input_tokens"`
		CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
		CacheReadInputTokens     int `json:"cache_read_input_tokens"`
		OutputTokens             int `json:"output_tokens"`
	} `json:"usage"`
}

func buildParams(model string, req llm.Request) (messagesRequest, error) {
	params := messagesRequest{Model: model, MaxTokens: DefaultMaxTokens}
	if req.MaxTokens > 0 {
		params.MaxTokens = req.MaxTokens
	}
	for i, m := range req.Messages {
		switch m.Role {
		case llm.RoleSystem:
			// The API takes instructions only in the top-level system field, and
			// rejects empty text blocks.
			if m.Content != "" {
				params.System = append(params.System, block{Type: "text", Text: m.Content})
			}
		case llm.RoleUser:
			// Empty text blocks are rejected by the API.
			if m.Content != "" {
				params.Messages = appendUser(params.Messages, block{Type: "text", Text: m.Content})
			}
		case llm.RoleAssistant:
			var blocks []block
			if m.Content != "" {
				blocks = append(blocks, block{Type: "text", Text: m.Content})
			}
			for _, tc := range m.ToolCalls {
				args := wire.Args(tc.Args)
				if !json.Valid(args) {
					return params, fmt.Errorf("message %d: tool call %q: arguments are not JSON", i, tc.ID)
				}
				blocks = append(blocks, block{Type: "tool_use", ID: tc.ID, Name: tc.Name, Input: json.RawMessage(args)})
			}
			// An assistant turn with nothing in it carries no information and the
			// API rejects empty content.
			if len(blocks) > 0 {
				params.Messages = append(params.Messages, message{Role: "assistant", Content: blocks})
			}
		case llm.RoleTool:
			if m.ToolCallID == "" {
				return params, fmt.Errorf("message %d: tool message without tool_call_id", i)
			}
			result := block{Type: "tool_result", ToolUseID: m.ToolCallID, IsError: m.IsError}
			if m.Content != "" {
				result.Content = []block{{Type: "text", Text: m.Content}}
			}
			params.Messages = appendUser(params.Messages, result)
		default:
			return params, fmt.Errorf("message %d: unknown role %q", i, m.Role)
		}
	}
	tools, err := wire.Tools(req.Tools, func(t llm.ToolDef, schema json.RawMessage) toolParam {
		return toolParam{Name: t.Name, Description: t.Description, InputSchema: schema}
	})
	params.Tools = tools
	return params, err
}

// appendUser adds blocks to a trailing user message instead of starting a new
// one: the API wants all results of one assistant turn in a single user message,
// with tool_result blocks ahead of any text.
func appendUser(msgs []message, blocks ...block) []message {
	if n := len(msgs); n > 0 && msgs[n-1].Role == "user" {
		msgs[n-1].Content = append(msgs[n-1].Content, blocks...)
		return msgs
	}
	return append(msgs, message{Role: "user", Content: blocks})
}

func parseMessage(m answer) (llm.Response, error) {
	msg := llm.Message{Role: llm.RoleAssistant}
	var text strings.Builder
	for i, b := range m.Content {
		switch b.Type {
		case "text":
			// Consecutive text blocks (split by citations, say) are one run of prose.
			text.WriteString(b.Text)
		case "tool_use":
			if b.ID == "" || b.Name == "" {
				return llm.Response{}, fmt.Errorf("anthropic: content block %d: tool_use block without id or name: %w", i, llm.ErrMalformed)
			}
			args := wire.Args(b.Input)
			if !wire.IsObject(args) {
				return llm.Response{}, fmt.Errorf("anthropic: content block %d: %s: input is not a JSON object: %q: %w", i, b.Name, wire.Snippet(args), llm.ErrMalformed)
			}
			msg.ToolCalls = append(msg.ToolCalls, llm.ToolCall{ID: b.ID, Name: b.Name, Args: json.RawMessage(args)})
		default:
			// Thinking and server-side tool blocks are not part of the
			// conversation the agent loop keeps.
		}
	}
	msg.Content = text.String()

	switch {
	case m.StopReason == "tool_use" && len(msg.ToolCalls) == 0:
		return llm.Response{}, fmt.Errorf("anthropic: stop_reason tool_use without a tool_use block: %w", llm.ErrMalformed)
	case m.StopReason == "max_tokens" && len(msg.ToolCalls) > 0:
		// The last tool call was cut off mid-arguments; running it would act on
		// a partial request.
		return llm.Response{}, fmt.Errorf("anthropic: answer hit max_tokens inside a tool call: %w", llm.ErrMalformed)
	case strings.TrimSpace(msg.Content) == "" && len(msg.ToolCalls) == 0:
		return llm.Response{}, fmt.Errorf("anthropic: empty answer (stop_reason %q): %w", m.StopReason, llm.ErrMalformed)
	}

	u := m.Usage
	// Checked before the sum, which a hostile count could overflow.
	if err := wire.UsageCounts(u.InputTokens, u.CacheCreationInputTokens, u.CacheReadInputTokens, u.OutputTokens); err != nil {
		return llm.Response{}, fmt.Errorf("anthropic: %w", err)
	}
	return llm.Response{
		Message: msg,
		Usage: llm.Usage{
			// input_tokens excludes prompt-cache reads and writes, which are
			// still tokens the call consumed.
			InputTokens:       u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens,
			OutputTokens:      u.OutputTokens,
			CachedInputTokens: u.CacheReadInputTokens,
			CacheWriteTokens:  u.CacheCreationInputTokens,
		},
		Model: m.Model,
	}, nil
}
