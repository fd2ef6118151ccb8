package llmtest_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/llm/anthropic"
	"github.com/aetherium-engine/aetherium/llm/llmtest"
	"github.com/aetherium-engine/aetherium/llm/openai"
)

// TestPromptCacheShare measures the share of a session's input tokens read
// from the prompt cache, turn after turn, against the fake speaking each
// vendor's caching rules: Anthropic's explicit breakpoints (which the client
// sets unless PromptCache is off) and OpenAI's automatic prefix cache (which
// needs the client's bodies to keep a byte-identical prefix).
func TestPromptCacheShare(t *testing.T) {
	t.Parallel()
	off := false
	tests := []struct {
		name     string
		wire     string
		client   func(url string) (llm.Provider, error)
		minShare float64
		maxShare float64
	}{
		{name: "anthropic with breakpoints", wire: llmtest.WireAnthropic, minShare: 0.6, maxShare: 1, client: func(url string) (llm.Provider, error) {
			return anthropic.New(anthropic.Config{BaseURL: url, APIKey: "k", Model: "claude-test", MaxRetries: -1})
		}},
		{name: "anthropic with prompt_cache off", wire: llmtest.WireAnthropic, minShare: 0, maxShare: 0, client: func(url string) (llm.Provider, error) {
			return anthropic.New(anthropic.Config{BaseURL: url, APIKey: "k", Model: "claude-test", MaxRetries: -1, PromptCache: &off})
		}},
		{name: "openai automatic prefix", wire: llmtest.WireOpenAI, minShare: 0.6, maxShare: 1, client: func(url string) (llm.Provider, error) {
			return openai.New(openai.Config{BaseURL: url, APIKey: "k", Model: "gpt-test", MaxRetries: -1})
		}},
	}
	system := "You are a careful engineer. " + strings.Repeat("Follow the house rules for code, tests and reviews. ", 120)
	tools := []llm.ToolDef{
		{Name: "read_file", Description: strings.Repeat("Reads a file of the workspace. ", 20), Parameters: []byte(`{"type":"object","properties":{"path":{"type":"string"}}}`)},
		{Name: "write_file", Description: strings.Repeat("Writes a file of the workspace. ", 20), Parameters: []byte(`{"type":"object","properties":{"path":{"type":"string"},"content":{"type":"string"}}}`)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			u, err := llmtest.StartUpstream(llmtest.UpstreamConfig{Wire: tc.wire, Answer: func(r llmtest.UpstreamRequest) llmtest.UpstreamAnswer {
				return llmtest.UpstreamAnswer{Tool: "read_file", Args: fmt.Sprintf(`{"path":"f%d.go"}`, len(r.Messages))}
			}})
			require.NoError(t, err)
			t.Cleanup(u.Close)
			p, err := tc.client(u.URL)
			require.NoError(t, err)
			msgs := []llm.Message{{Role: llm.RoleSystem, Content: system}, {Role: llm.RoleUser, Content: "Fix the failing test."}}
			var input, cached int
			for turn := range 12 {
				resp, err := p.Complete(context.Background(), llm.Request{Messages: msgs, Tools: tools, MaxTokens: 256})
				require.NoError(t, err, "turn %d", turn)
				input += resp.Usage.InputTokens
				cached += resp.Usage.CachedInputTokens
				msgs = append(msgs, resp.Message)
				for _, c := range resp.Message.ToolCalls {
					msgs = append(msgs, llm.Message{Role: llm.RoleTool, ToolCallID: c.ID, Name: c.Name, Content: strings.Repeat("package main // line\n", 40)})
				}
			}
			share := float64(cached) / float64(input)
			t.Logf("%s: %d of %d input tokens cached (%.0f%%)", tc.name, cached, input, 100*share)
			require.GreaterOrEqual(t, share, tc.minShare)
			require.LessOrEqual(t, share, tc.maxShare)
			var fake llm.Usage
			for _, m := range u.Stats().Models {
				fake.InputTokens += m.Usage.InputTokens
				fake.CachedInputTokens += m.Usage.CachedInputTokens
			}
			require.Equal(t, input, fake.InputTokens, "the client reads the usage the fake reports")
			require.Equal(t, cached, fake.CachedInputTokens)
		})
	}
}
