package worker

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/llm"
)

// checkHistory refuses the histories a replay cannot walk.
func TestCheckHistory(t *testing.T) {
	t.Parallel()
	sys, task := llm.Message{Role: llm.RoleSystem, Content: "s"}, llm.Message{Role: llm.RoleUser, Content: "t"}
	ask := llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "a", Name: "read_file"}, {ID: "b", Name: "write_file"}}}
	res := func(id string) llm.Message { return llm.Message{Role: llm.RoleTool, ToolCallID: id, Content: "ok"} }
	tests := []struct {
		name string
		msgs []llm.Message
		err  string
	}{
		{"a whole history", []llm.Message{sys, task, ask, res("a"), res("b"), {Role: llm.RoleAssistant, Content: "done"}}, ""},
		{"calls not answered yet", []llm.Message{sys, task, ask, res("a")}, ""},
		{"an answer to no call", []llm.Message{sys, task, ask, res("z")}, `call "z", which the model message before it did not make`},
		{"an answer before any call", []llm.Message{sys, task, res("a")}, `call "a"`},
		{"an answer to an earlier message's call", []llm.Message{sys, task, ask, res("a"), res("b"), {Role: llm.RoleAssistant, Content: "x", ToolCalls: []llm.ToolCall{{ID: "c", Name: "x"}}}, res("a")}, `call "a"`},
		{"answered twice", []llm.Message{sys, task, ask, res("a"), res("a")}, "answered twice"},
		{"a repeated call id", []llm.Message{sys, task, {Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "a", Name: "x"}, {ID: "a", Name: "y"}}}}, "repeats"},
		{"an unknown role", []llm.Message{sys, task, {Role: "oracle"}}, "unknown role"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := checkHistory(tc.msgs)
			if tc.err == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.err)
		})
	}
}
