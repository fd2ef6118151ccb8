package openai_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/llm/llmtest"
)

// fake renders and reads the Chat Completions wire format as documented in the
// OpenAI API reference, independently of the provider package's own types.
type fake struct{}

var _ llmtest.Fake = fake{}

func (fake) Path() string { return "/chat/completions" }

type wireToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type wireMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCalls  []wireToolCall  `json:"tool_calls,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
}

func completion(model string, content any, calls []wireToolCall, finish string, in, cached, out int) []byte {
	msg := map[string]any{"role": "assistant", "content": content, "refusal": nil}
	if len(calls) > 0 {
		msg["tool_calls"] = calls
	}
	body, err := json.Marshal(map[string]any{
		"id":      "chatcmpl-test",
		"object":  "chat.completion",
		"created": 1700000000,
		"model":   model,
		"choices": []any{map[string]any{
			"index":         0,
			"message":       msg,
			"logprobs":      nil,
			"finish_reason": finish,
		}},
		"usage": map[string]any{
			"prompt_tokens":     in,
			"completion_tokens": out,
			"total_tokens":      in + out,
			// cached_tokens are part of prompt_tokens.
			"prompt_tokens_details":     map[string]any{"cached_tokens": cached, "audio_tokens": 0},
			"completion_tokens_details": map[string]any{"reasoning_tokens": 0},
		},
	})
	if err != nil {
		panic(err)
	}
	return body
}

func (fake) Answer(a llmtest.Answer) []byte {
	var content any // null when the model only calls tools, as OpenAI sends it
	if a.Text != "" {
		content = a.Text
	}
	var calls []wireToolCall
	for _, c := range a.Calls {
		var tc wireToolCall
		tc.ID, tc.Type = c.ID, "function"
		tc.Function.Name, tc.Function.Arguments = c.Name, c.Args
		calls = append(calls, tc)
	}
	finish := "stop"
	if len(calls) > 0 {
		finish = "tool_calls"
	}
	// OpenAI has no count of cache writes: CacheWriteTokens is dropped.
	return completion(a.Model, content, calls, finish, a.InputTokens, a.CachedInputTokens, a.OutputTokens)
}

func (fake) Empty(model string) []byte { return completion(model, "", nil, "stop", 5, 0, 0) }

// Limits renders x-ratelimit-* headers: resets are durations ("1m30s").
func (fake) Limits(l llm.RateLimits) http.Header {
	return http.Header{
		"X-Ratelimit-Limit-Requests":     {strconv.Itoa(l.RequestsLimit)},
		"X-Ratelimit-Remaining-Requests": {strconv.Itoa(l.RequestsRemaining)},
		"X-Ratelimit-Reset-Requests":     {l.RequestsReset.String()},
		"X-Ratelimit-Limit-Tokens":       {strconv.Itoa(l.TokensLimit)},
		"X-Ratelimit-Remaining-Tokens":   {strconv.Itoa(l.TokensRemaining)},
		"X-Ratelimit-Reset-Tokens":       {l.TokensReset.String()},
	}
}

func (fake) Error(status int, message string) []byte {
	typ := "server_error"
	if status < 500 {
		typ = "invalid_request_error"
	}
	body, err := json.Marshal(map[string]any{"error": map[string]any{
		"message": message, "type": typ, "param": nil, "code": nil,
	}})
	if err != nil {
		panic(err)
	}
	return body
}

// text reads message content, which is a string or an array of text parts.
func text(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", fmt.Errorf("content is neither string nor parts: %s", raw)
	}
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

func (fake) Decode(body []byte) (llmtest.Captured, error) {
	var req struct {
		Model               string        `json:"model"`
		Messages            []wireMessage `json:"messages"`
		MaxCompletionTokens int           `json:"max_completion_tokens"`
		MaxTokens           int           `json:"max_tokens"`
		Tools               []struct {
			Type     string `json:"type"`
			Function struct {
				Name        string          `json:"name"`
				Description string          `json:"description"`
				Parameters  json.RawMessage `json:"parameters"`
			} `json:"function"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return llmtest.Captured{}, fmt.Errorf("decode chat completion request: %w", err)
	}
	got := llmtest.Captured{Model: req.Model, MaxTokens: max(req.MaxCompletionTokens, req.MaxTokens)}
	for _, t := range req.Tools {
		if t.Type != "function" {
			return got, fmt.Errorf("tool %q has type %q", t.Function.Name, t.Type)
		}
		got.Tools = append(got.Tools, llm.ToolDef{Name: t.Function.Name, Description: t.Function.Description, Parameters: t.Function.Parameters})
	}
	for _, m := range req.Messages {
		content, err := text(m.Content)
		if err != nil {
			return got, err
		}
		switch m.Role {
		case "system", "developer":
			got.System += content
		case "user":
			got.UserTexts = append(got.UserTexts, content)
		case "assistant":
			for _, tc := range m.ToolCalls {
				if tc.Type != "function" {
					return got, fmt.Errorf("assistant tool call %q has type %q", tc.ID, tc.Type)
				}
				got.ToolCalls = append(got.ToolCalls, llm.ToolCall{ID: tc.ID, Name: tc.Function.Name, Args: json.RawMessage(tc.Function.Arguments)})
			}
		case "tool":
			if m.ToolCallID == "" {
				return got, errors.New("tool message without tool_call_id")
			}
			got.ToolResults = append(got.ToolResults, llmtest.ToolResult{CallID: m.ToolCallID, Content: content})
		default:
			return got, fmt.Errorf("unknown role %q", m.Role)
		}
	}
	return got, nil
}
