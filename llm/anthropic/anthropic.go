// Package anthropic is the llm.Provider for the Anthropic Messages API.
package anthropic

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/param"

	"github.com/aetherium-engine/aetherium/llm"
)

// Defaults applied by New and Complete.
const (
	DefaultBaseURL    = "https://api.anthropic.com"
	DefaultMaxRetries = 3
	DefaultTimeout    = 120 * time.Second
	// DefaultModel is the model of a deployment that names none (llm.anthropic.model).
	DefaultModel = "claude-sonnet-4-5"
	// DefaultMaxTokens caps an answer when the request leaves it at 0; the API
	// has no default of its own and rejects a request without max_tokens.
	DefaultMaxTokens = 4096
)

const providerName = "anthropic"

// Config configures a Provider.
type Config struct {
	// BaseURL is the API root the client appends "v1/messages" to. Default
	// DefaultBaseURL.
	BaseURL string `yaml:"base_url"`
	// APIKey authenticates the calls. Required for the default BaseURL; may be
	// empty for a gateway or proxy that authenticates on its own. The SDK's
	// environment and profile-file credential chain is never consulted, so the
	// Config is the only source of credentials.
	APIKey string `yaml:"api_key"`
	// Model is the default model. Required unless every Request names one.
	Model string `yaml:"model"`
	// MaxRetries is how often a connection error, 408, 409, 429 or 5xx is retried
	// with the SDK's exponential backoff (which honours Retry-After). 0 means
	// DefaultMaxRetries (3); a negative value disables retries.
	MaxRetries int `yaml:"max_retries"`
	// Timeout bounds each attempt, not the whole call (the context does that).
	// 0 means DefaultTimeout (120s).
	Timeout time.Duration `yaml:"timeout"`
	// HTTPClient replaces the SDK's default client, e.g. for proxies or tests.
	HTTPClient *http.Client `yaml:"-"`
}

// Provider calls the Messages API.
type Provider struct {
	client sdk.Client
	model  string
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
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("anthropic: invalid BaseURL %q: %w", baseURL, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("anthropic: invalid BaseURL %q: want an absolute http(s) URL", baseURL)
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("anthropic: negative Timeout %s", cfg.Timeout)
	}
	retries := cfg.MaxRetries
	switch {
	case retries == 0:
		retries = DefaultMaxRetries
	case retries < 0:
		retries = 0
	}

	opts := []option.RequestOption{
		option.WithoutEnvironmentDefaults(),
		option.WithBaseURL(baseURL),
		option.WithMaxRetries(retries),
		// Also keeps the SDK from refusing large max_tokens without streaming: it
		// only estimates a timeout of its own when none is set.
		option.WithRequestTimeout(cmp.Or(cfg.Timeout, DefaultTimeout)),
	}
	if cfg.APIKey != "" {
		opts = append(opts, option.WithAPIKey(cfg.APIKey))
	}
	if cfg.HTTPClient != nil {
		opts = append(opts, option.WithHTTPClient(cfg.HTTPClient))
	}
	return &Provider{client: sdk.NewClient(opts...), model: strings.TrimSpace(cfg.Model)}, nil
}

// Name implements llm.Provider.
func (p *Provider) Name() string { return providerName }

// Complete implements llm.Provider.
func (p *Provider) Complete(ctx context.Context, req llm.Request) (llm.Response, error) {
	model := cmp.Or(strings.TrimSpace(req.Model), p.model)
	if model == "" {
		return llm.Response{}, errors.New("anthropic: no model: set Config.Model or Request.Model")
	}
	params, err := buildParams(model, req)
	if err != nil {
		return llm.Response{}, fmt.Errorf("anthropic: build request: %w", err)
	}

	// The raw body is decoded here rather than by the SDK so that a body which is
	// not JSON (or not JSON-typed) is reported as ErrMalformed, not as an opaque
	// SDK decode error. httpResp keeps the status of error answers whose body the
	// SDK cannot parse into an *sdk.Error.
	var raw []byte
	var httpResp *http.Response
	_, err = p.client.Messages.New(ctx, params,
		option.WithResponseBodyInto(&raw),
		option.WithResponseInto(&httpResp),
	)
	if err != nil {
		return llm.Response{}, classify(ctx, err, httpResp)
	}
	resp, err := parseMessage(raw)
	if err != nil {
		return llm.Response{}, err
	}
	resp.Model = cmp.Or(resp.Model, model)
	return resp, nil
}

func classify(ctx context.Context, err error, httpResp *http.Response) error {
	var se *llm.SDKError
	if sdkErr := (*sdk.Error)(nil); errors.As(err, &sdkErr) {
		se = &llm.SDKError{Status: sdkErr.StatusCode, Message: sdkErr.Message, RawJSON: sdkErr.RawJSON(), Response: sdkErr.Response}
	}
	return llm.CallError(ctx, "anthropic: messages", providerName, err, se, httpResp)
}

func buildParams(model string, req llm.Request) (sdk.MessageNewParams, error) {
	params := sdk.MessageNewParams{Model: model, MaxTokens: DefaultMaxTokens}
	if req.MaxTokens > 0 {
		params.MaxTokens = int64(req.MaxTokens)
	}
	for i, m := range req.Messages {
		switch m.Role {
		case llm.RoleSystem:
			// The API takes instructions only in the top-level system field, and
			// rejects empty text blocks.
			if m.Content != "" {
				params.System = append(params.System, sdk.TextBlockParam{Text: m.Content})
			}
		case llm.RoleUser:
			// Empty text blocks are rejected by the API.
			if m.Content != "" {
				params.Messages = appendUser(params.Messages, sdk.NewTextBlock(m.Content))
			}
		case llm.RoleAssistant:
			var blocks []sdk.ContentBlockParamUnion
			if m.Content != "" {
				blocks = append(blocks, sdk.NewTextBlock(m.Content))
			}
			for _, tc := range m.ToolCalls {
				args := bytes.TrimSpace(tc.Args)
				if len(args) == 0 {
					args = []byte("{}")
				}
				if !json.Valid(args) {
					return params, fmt.Errorf("message %d: tool call %q: arguments are not JSON", i, tc.ID)
				}
				blocks = append(blocks, sdk.NewToolUseBlock(tc.ID, json.RawMessage(args), tc.Name))
			}
			// An assistant turn with nothing in it carries no information and the
			// API rejects empty content.
			if len(blocks) > 0 {
				params.Messages = append(params.Messages, sdk.NewAssistantMessage(blocks...))
			}
		case llm.RoleTool:
			if m.ToolCallID == "" {
				return params, fmt.Errorf("message %d: tool message without tool_call_id", i)
			}
			result := sdk.ToolResultBlockParam{ToolUseID: m.ToolCallID}
			if m.IsError {
				result.IsError = sdk.Bool(true)
			}
			if m.Content != "" {
				result.Content = []sdk.ToolResultBlockParamContentUnion{{OfText: &sdk.TextBlockParam{Text: m.Content}}}
			}
			params.Messages = appendUser(params.Messages, sdk.ContentBlockParamUnion{OfToolResult: &result})
		default:
			return params, fmt.Errorf("message %d: unknown role %q", i, m.Role)
		}
	}
	for _, t := range req.Tools {
		tool, err := convertTool(t)
		if err != nil {
			return params, err
		}
		params.Tools = append(params.Tools, tool)
	}
	return params, nil
}

// appendUser adds blocks to a trailing user message instead of starting a new
// one: the API wants all results of one assistant turn in a single user message,
// with tool_result blocks ahead of any text.
func appendUser(msgs []sdk.MessageParam, blocks ...sdk.ContentBlockParamUnion) []sdk.MessageParam {
	if n := len(msgs); n > 0 && msgs[n-1].OfUser != nil {
		msgs[n-1].OfUser.Content = append(msgs[n-1].OfUser.Content, blocks...)
		return msgs
	}
	return append(msgs, sdk.NewUserMessage(blocks...))
}

func convertTool(t llm.ToolDef) (sdk.ToolUnionParam, error) {
	if t.Name == "" {
		return sdk.ToolUnionParam{}, errors.New("tool without a name")
	}
	schema := json.RawMessage(`{"type":"object","properties":{}}`)
	if raw := bytes.TrimSpace(t.Parameters); len(raw) > 0 && !bytes.Equal(raw, []byte("null")) {
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
			return sdk.ToolUnionParam{}, fmt.Errorf("tool %q: parameters must be a JSON schema object", t.Name)
		}
		schema = json.RawMessage(raw)
	}
	tool := sdk.ToolParam{
		Name: t.Name,
		// Sent verbatim: the typed schema param knows only type, properties and
		// required, and rebuilding the rest as extra fields gains nothing.
		InputSchema: param.Override[sdk.ToolInputSchemaParam](schema),
	}
	if t.Description != "" {
		tool.Description = sdk.String(t.Description)
	}
	return sdk.ToolUnionParam{OfTool: &tool}, nil
}

func parseMessage(raw []byte) (llm.Response, error) {
	raw = bytes.TrimSpace(raw)
	if !json.Valid(raw) || len(raw) == 0 || raw[0] != '{' {
		return llm.Response{}, fmt.Errorf("anthropic: answer is not a JSON object: %q: %w", snippet(raw), llm.ErrMalformed)
	}
	var m sdk.Message
	if err := json.Unmarshal(raw, &m); err != nil {
		return llm.Response{}, fmt.Errorf("anthropic: decode answer: %v: %w", err, llm.ErrMalformed)
	}
	msg := llm.Message{Role: llm.RoleAssistant}
	var text strings.Builder
	for i, block := range m.Content {
		switch block.Type {
		case "text":
			// Consecutive text blocks (split by citations, say) are one run of prose.
			text.WriteString(block.Text)
		case "tool_use":
			call, err := convertToolUse(block)
			if err != nil {
				return llm.Response{}, fmt.Errorf("anthropic: content block %d: %w: %w", i, err, llm.ErrMalformed)
			}
			msg.ToolCalls = append(msg.ToolCalls, call)
		default:
			// Thinking and server-side tool blocks are not part of the
			// conversation the agent loop keeps.
		}
	}
	msg.Content = text.String()

	switch {
	case m.StopReason == sdk.StopReasonToolUse && len(msg.ToolCalls) == 0:
		return llm.Response{}, fmt.Errorf("anthropic: stop_reason tool_use without a tool_use block: %w", llm.ErrMalformed)
	case m.StopReason == sdk.StopReasonMaxTokens && len(msg.ToolCalls) > 0:
		// The last tool call was cut off mid-arguments; running it would act on
		// a partial request.
		return llm.Response{}, fmt.Errorf("anthropic: answer hit max_tokens inside a tool call: %w", llm.ErrMalformed)
	case strings.TrimSpace(msg.Content) == "" && len(msg.ToolCalls) == 0:
		return llm.Response{}, fmt.Errorf("anthropic: empty answer (stop_reason %q): %w", m.StopReason, llm.ErrMalformed)
	}

	u := m.Usage
	return llm.Response{
		Message: msg,
		Usage: llm.Usage{
			// input_tokens excludes prompt-cache reads and writes, which are
			// still tokens the call consumed.
			InputTokens:  int(u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens),
			OutputTokens: int(u.OutputTokens),
		},
		Model: m.Model,
	}, nil
}

func convertToolUse(block sdk.ContentBlockUnion) (llm.ToolCall, error) {
	if block.ID == "" || block.Name == "" {
		return llm.ToolCall{}, errors.New("tool_use block without id or name")
	}
	args := bytes.TrimSpace(block.Input)
	if len(args) == 0 {
		args = []byte("{}")
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(args, &obj); err != nil || obj == nil {
		return llm.ToolCall{}, fmt.Errorf("%s: input is not a JSON object: %q", block.Name, snippet(args))
	}
	return llm.ToolCall{ID: block.ID, Name: block.Name, Args: json.RawMessage(bytes.Clone(args))}, nil
}

func snippet(b []byte) string {
	const limit = 120
	if len(b) > limit {
		return string(b[:limit]) + "…"
	}
	return string(b)
}
