// Package openai is the llm.Provider for the OpenAI Chat Completions API and the
// many servers that copy it (Ollama, vLLM, llama.cpp, LM Studio, gateways).
package openai

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aetherium-engine/aetherium/llm"
	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// Defaults applied by New.
const (
	DefaultBaseURL    = "https://api.openai.com/v1"
	DefaultMaxRetries = 3
	DefaultTimeout    = 120 * time.Second
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

// Provider calls a Chat Completions endpoint.
type Provider struct {
	client sdk.Client
	model  string
}

var _ llm.Provider = (*Provider)(nil)

// New checks cfg, applies defaults and builds a Provider.
func New(cfg Config) (*Provider, error) {
	baseURL := cmp.Or(strings.TrimSpace(cfg.BaseURL), DefaultBaseURL)
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("openai: invalid BaseURL %q: %w", baseURL, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("openai: invalid BaseURL %q: want an absolute http(s) URL", baseURL)
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("openai: negative Timeout %s", cfg.Timeout)
	}
	retries := cfg.MaxRetries
	switch {
	case retries == 0:
		retries = DefaultMaxRetries
	case retries < 0:
		retries = 0
	}
	timeout := cmp.Or(cfg.Timeout, DefaultTimeout)

	opts := []option.RequestOption{
		option.WithBaseURL(baseURL),
		// Set even when empty: it overrides OPENAI_API_KEY, which NewClient reads
		// from the environment.
		option.WithAPIKey(cfg.APIKey),
		option.WithMaxRetries(retries),
		option.WithRequestTimeout(timeout),
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
		return llm.Response{}, errors.New("openai: no model: set Config.Model or Request.Model")
	}
	params, err := buildParams(model, req)
	if err != nil {
		return llm.Response{}, fmt.Errorf("openai: build request: %w", err)
	}

	// The raw body is decoded here rather than by the SDK so that a body which is
	// not JSON (or not JSON-typed) is reported as ErrMalformed, not as an opaque
	// SDK decode error. httpResp keeps the status of error answers whose body the
	// SDK cannot parse into an *sdk.Error.
	var raw []byte
	var httpResp *http.Response
	_, err = p.client.Chat.Completions.New(ctx, params,
		option.WithResponseBodyInto(&raw),
		option.WithResponseInto(&httpResp),
	)
	if err != nil {
		return llm.Response{}, classify(ctx, err, httpResp)
	}
	resp, err := parseCompletion(raw)
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
	return llm.CallError(ctx, "openai: chat completion", providerName, err, se, httpResp)
}

func buildParams(model string, req llm.Request) (sdk.ChatCompletionNewParams, error) {
	params := sdk.ChatCompletionNewParams{Model: model}
	for i, m := range req.Messages {
		msg, err := convertMessage(m)
		if err != nil {
			return params, fmt.Errorf("message %d: %w", i, err)
		}
		params.Messages = append(params.Messages, msg)
	}
	for _, t := range req.Tools {
		tool, err := convertTool(t)
		if err != nil {
			return params, err
		}
		params.Tools = append(params.Tools, tool)
	}
	if req.MaxTokens > 0 {
		// max_tokens is rejected by OpenAI's reasoning models; servers that only
		// know the old field ignore this one, which fails safe (no cap) rather
		// than failing the call.
		params.MaxCompletionTokens = sdk.Int(int64(req.MaxTokens))
	}
	return params, nil
}

func convertMessage(m llm.Message) (sdk.ChatCompletionMessageParamUnion, error) {
	switch m.Role {
	case llm.RoleSystem:
		return sdk.SystemMessage(m.Content), nil
	case llm.RoleUser:
		return sdk.UserMessage(m.Content), nil
	case llm.RoleAssistant:
		var asst sdk.ChatCompletionAssistantMessageParam
		// Content may be omitted only when there are tool calls; an empty string
		// keeps a bare assistant turn valid.
		if m.Content != "" || len(m.ToolCalls) == 0 {
			asst.Content.OfString = sdk.String(m.Content)
		}
		for _, tc := range m.ToolCalls {
			args := bytes.TrimSpace(tc.Args)
			if len(args) == 0 {
				args = []byte("{}")
			}
			asst.ToolCalls = append(asst.ToolCalls, sdk.ChatCompletionMessageToolCallUnionParam{
				OfFunction: &sdk.ChatCompletionMessageFunctionToolCallParam{
					ID: tc.ID,
					Function: sdk.ChatCompletionMessageFunctionToolCallFunctionParam{
						Name:      tc.Name,
						Arguments: string(args),
					},
				},
			})
		}
		return sdk.ChatCompletionMessageParamUnion{OfAssistant: &asst}, nil
	case llm.RoleTool:
		if m.ToolCallID == "" {
			return sdk.ChatCompletionMessageParamUnion{}, errors.New("tool message without tool_call_id")
		}
		// Chat Completions has no error flag on tool results; the content itself
		// has to tell the model the call failed.
		return sdk.ToolMessage(m.Content, m.ToolCallID), nil
	default:
		return sdk.ChatCompletionMessageParamUnion{}, fmt.Errorf("unknown role %q", m.Role)
	}
}

func convertTool(t llm.ToolDef) (sdk.ChatCompletionToolUnionParam, error) {
	if t.Name == "" {
		return sdk.ChatCompletionToolUnionParam{}, errors.New("tool without a name")
	}
	schema := sdk.FunctionParameters{"type": "object", "properties": map[string]any{}}
	if raw := bytes.TrimSpace(t.Parameters); len(raw) > 0 && !bytes.Equal(raw, []byte("null")) {
		// Values stay raw so the schema reaches the server byte for byte; decoding
		// them would turn numbers into float64 (or, with UseNumber, into strings
		// once the SDK's encoder sees json.Number).
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
			return sdk.ChatCompletionToolUnionParam{}, fmt.Errorf("tool %q: parameters must be a JSON schema object", t.Name)
		}
		schema = make(sdk.FunctionParameters, len(fields))
		for k, v := range fields {
			schema[k] = v
		}
	}
	def := sdk.FunctionDefinitionParam{Name: t.Name, Parameters: schema}
	if t.Description != "" {
		def.Description = sdk.String(t.Description)
	}
	return sdk.ChatCompletionFunctionTool(def), nil
}

func parseCompletion(raw []byte) (llm.Response, error) {
	raw = bytes.TrimSpace(raw)
	if !json.Valid(raw) || len(raw) == 0 || raw[0] != '{' {
		return llm.Response{}, fmt.Errorf("openai: answer is not a JSON object: %q: %w", snippet(raw), llm.ErrMalformed)
	}
	var cc sdk.ChatCompletion
	if err := json.Unmarshal(raw, &cc); err != nil {
		return llm.Response{}, fmt.Errorf("openai: decode answer: %v: %w", err, llm.ErrMalformed)
	}
	if len(cc.Choices) == 0 {
		return llm.Response{}, fmt.Errorf("openai: answer has no choices: %w", llm.ErrMalformed)
	}
	choice := cc.Choices[0]
	msg := llm.Message{Role: llm.RoleAssistant, Content: choice.Message.Content}
	if msg.Content == "" {
		// A refusal is still an answer the agent can act on.
		msg.Content = choice.Message.Refusal
	}
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
	return llm.Response{
		Message: msg,
		Usage: llm.Usage{
			InputTokens:  int(cc.Usage.PromptTokens),
			OutputTokens: int(cc.Usage.CompletionTokens),
		},
		Model: cc.Model,
	}, nil
}

func convertToolCall(i int, tc sdk.ChatCompletionMessageToolCallUnion) (llm.ToolCall, error) {
	if tc.Type != "" && tc.Type != "function" {
		return llm.ToolCall{}, fmt.Errorf("unsupported tool call type %q", tc.Type)
	}
	if tc.Function.Name == "" {
		return llm.ToolCall{}, errors.New("tool call without a function name")
	}
	args := strings.TrimSpace(tc.Function.Arguments)
	if args == "" {
		// Some servers send "" for a call without parameters.
		args = "{}"
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(args), &obj); err != nil || obj == nil {
		return llm.ToolCall{}, fmt.Errorf("%s: arguments are not a JSON object: %q", tc.Function.Name, snippet([]byte(args)))
	}
	// Some OpenAI-compatible servers omit ids; the agent loop still needs one to
	// pair the result with the call.
	id := cmp.Or(tc.ID, "call_"+strconv.Itoa(i))
	return llm.ToolCall{ID: id, Name: tc.Function.Name, Args: json.RawMessage(args)}, nil
}

func snippet(b []byte) string {
	const limit = 120
	if len(b) > limit {
		return string(b[:limit]) + "…"
	}
	return string(b)
}
