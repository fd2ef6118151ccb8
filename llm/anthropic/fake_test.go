package anthropic_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/llm/llmtest"
)

// fake renders and reads the Messages API wire format as documented in the
// Anthropic API reference, independently of the provider package's own types.
type fake struct{}

var _ llmtest.Fake = fake{}

func (fake) Path() string { return "/v1/messages" }

// message renders an answer; in is the uncached input (input_tokens leaves the
// cache reads and writes out).
func message(model string, content []map[string]any, stop string, in, cacheRead, cacheWrite, out int) []byte {
	body, err := json.Marshal(map[string]any{
		"id":            "msg_test",
		"type":          "message",
		"role":          "assistant",
		"model":         model,
		"content":       content,
		"stop_reason":   stop,
		"stop_sequence": nil,
		"usage": map[string]any{
			"input_tokens":                in,
			"output_tokens":               out,
			"cache_creation_input_tokens": cacheWrite,
			"cache_read_input_tokens":     cacheRead,
		},
	})
	if err != nil {
		panic(err)
	}
	return body
}

func (fake) Answer(a llmtest.Answer) []byte {
	content := []map[string]any{}
	if a.Text != "" {
		content = append(content, map[string]any{"type": "text", "text": a.Text})
	}
	for _, c := range a.Calls {
		// input is a JSON value on this wire; arguments that do not parse as one
		// can only arrive as a string.
		var input any = json.RawMessage(c.Args)
		if !json.Valid([]byte(c.Args)) {
			input = c.Args
		}
		content = append(content, map[string]any{"type": "tool_use", "id": c.ID, "name": c.Name, "input": input})
	}
	stop := "end_turn"
	if len(a.Calls) > 0 {
		stop = "tool_use"
	}
	return message(a.Model, content, stop, a.InputTokens-a.CachedInputTokens-a.CacheWriteTokens, a.CachedInputTokens, a.CacheWriteTokens, a.OutputTokens)
}

func (fake) Empty(model string) []byte {
	return message(model, []map[string]any{}, "end_turn", 5, 0, 0, 0)
}

// Limits renders anthropic-ratelimit-* headers: resets are RFC 3339 instants.
func (fake) Limits(l llm.RateLimits) http.Header {
	now := time.Now()
	at := func(d time.Duration) []string { return []string{now.Add(d).UTC().Format(time.RFC3339)} }
	return http.Header{
		"Anthropic-Ratelimit-Requests-Limit":     {strconv.Itoa(l.RequestsLimit)},
		"Anthropic-Ratelimit-Requests-Remaining": {strconv.Itoa(l.RequestsRemaining)},
		"Anthropic-Ratelimit-Requests-Reset":     at(l.RequestsReset),
		"Anthropic-Ratelimit-Tokens-Limit":       {strconv.Itoa(l.TokensLimit)},
		"Anthropic-Ratelimit-Tokens-Remaining":   {strconv.Itoa(l.TokensRemaining)},
		"Anthropic-Ratelimit-Tokens-Reset":       at(l.TokensReset),
	}
}

func (fake) Error(status int, message string) []byte {
	typ := map[int]string{
		400: "invalid_request_error",
		401: "authentication_error",
		429: "rate_limit_error",
		529: "overloaded_error",
	}[status]
	if typ == "" {
		typ = "api_error"
	}
	body, err := json.Marshal(map[string]any{
		"type":  "error",
		"error": map[string]any{"type": typ, "message": message},
	})
	if err != nil {
		panic(err)
	}
	return body
}

type wireBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	IsError   *bool           `json:"is_error"`
	Content   json.RawMessage `json:"content"`
}

// blocks reads content, which is a string or an array of blocks.
func blocks(raw json.RawMessage) ([]wireBlock, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return []wireBlock{{Type: "text", Text: s}}, nil
	}
	var bs []wireBlock
	if err := json.Unmarshal(raw, &bs); err != nil {
		return nil, fmt.Errorf("content is neither string nor blocks: %s", raw)
	}
	return bs, nil
}

func joinText(bs []wireBlock) (string, error) {
	var b strings.Builder
	for _, blk := range bs {
		if blk.Type != "text" {
			return "", fmt.Errorf("unexpected %q block in text content", blk.Type)
		}
		b.WriteString(blk.Text)
	}
	return b.String(), nil
}

func (fake) Decode(body []byte) (llmtest.Captured, error) {
	var req struct {
		Model     string          `json:"model"`
		MaxTokens int             `json:"max_tokens"`
		System    json.RawMessage `json:"system"`
		Messages  []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
		Tools []struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			InputSchema json.RawMessage `json:"input_schema"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return llmtest.Captured{}, fmt.Errorf("decode messages request: %w", err)
	}
	got := llmtest.Captured{Model: req.Model, MaxTokens: req.MaxTokens}
	sys, err := blocks(req.System)
	if err != nil {
		return got, fmt.Errorf("system: %w", err)
	}
	if got.System, err = joinText(sys); err != nil {
		return got, fmt.Errorf("system: %w", err)
	}
	for _, t := range req.Tools {
		got.Tools = append(got.Tools, llm.ToolDef{Name: t.Name, Description: t.Description, Parameters: t.InputSchema})
	}
	for _, m := range req.Messages {
		bs, err := blocks(m.Content)
		if err != nil {
			return got, err
		}
		for _, b := range bs {
			switch {
			case m.Role == "user" && b.Type == "text":
				got.UserTexts = append(got.UserTexts, b.Text)
			case m.Role == "user" && b.Type == "tool_result":
				content, err := blocks(b.Content)
				if err != nil {
					return got, fmt.Errorf("tool_result %s: %w", b.ToolUseID, err)
				}
				text, err := joinText(content)
				if err != nil {
					return got, fmt.Errorf("tool_result %s: %w", b.ToolUseID, err)
				}
				isError := b.IsError != nil && *b.IsError
				got.ToolResults = append(got.ToolResults, llmtest.ToolResult{CallID: b.ToolUseID, Content: text, IsError: &isError})
			case m.Role == "assistant" && b.Type == "text":
			case m.Role == "assistant" && b.Type == "tool_use":
				got.ToolCalls = append(got.ToolCalls, llm.ToolCall{ID: b.ID, Name: b.Name, Args: b.Input})
			default:
				return got, fmt.Errorf("unexpected %q block in %q message", b.Type, m.Role)
			}
		}
	}
	return got, nil
}
