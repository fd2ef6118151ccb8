package script_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/llm/script"
	"github.com/aetherium-engine/aetherium/templates"
	"github.com/aetherium-engine/aetherium/toolbox"
)

// FuzzScriptReplay parses screenplays the way they arrive — in a template file
// (YAML) or an inline team (JSON) — and replays every accepted one: each turn of
// each agent comes back as exactly the scripted message (its calls in order, with
// JSON arguments and distinct ids), and one turn past the end is ErrExhausted.
func FuzzScriptReplay(f *testing.F) {
	paths, err := filepath.Glob("../../templates/*.yaml")
	require.NoError(f, err)
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		require.NoError(f, err)
		f.Add(raw, false)
	}
	f.Add([]byte("name: t\nmodel: {provider: script}\nsupervisor: {name: s}\nscript:\n  agents:\n    s:\n      - calls: [{tool: reply, args: {message: hi, n: 1.5, list: [1, two, {k: v}]}}]\n      - say: done\n"), false)
	f.Add([]byte(`{"name":"t","model":{"provider":"script"},"supervisor":{"name":"s"},"script":{"agents":{"s":[{"calls":[{"tool":"reply"},{"tool":"todo","args":{"action":"read"}}]},{"say":"bye"}]}}}`), true)
	f.Add([]byte(`{"name":"t","model":{"provider":"script"},"supervisor":{"name":"s"},"script":{"agents":{"s":[{"say":"x","calls":[{"tool":"reply"}]}]}}}`), true)
	f.Add([]byte(`{"script":{"agents":{"s":[{"calls":[{"tool":""}]}]}}}`), true)
	reg, err := toolbox.New(toolbox.Deps{})
	require.NoError(f, err)
	f.Fuzz(func(t *testing.T, raw []byte, asJSON bool) {
		parse := templates.ParseYAML
		if asJSON {
			parse = templates.ParseJSON
		}
		tpl, err := parse(raw)
		if err != nil {
			return
		}
		if err := tpl.Validate(reg); err != nil {
			require.ErrorIs(t, err, templates.ErrInvalid)
			return
		}
		p := script.New(tpl.Script, 0)
		agents := make([]string, 0, len(tpl.Script.Agents))
		for a := range tpl.Script.Agents {
			agents = append(agents, a)
		}
		sort.Strings(agents)
		for _, agent := range agents {
			turns := tpl.Script.Agents[agent]
			msgs := []llm.Message{{Role: llm.RoleSystem, Content: "s"}, {Role: llm.RoleUser, Content: "u"}}
			for i, turn := range turns {
				resp, err := p.Complete(context.Background(), llm.Request{Agent: agent, Messages: msgs})
				require.NoError(t, err, "%s turn %d", agent, i+1)
				m := resp.Message
				require.Equal(t, llm.RoleAssistant, m.Role)
				require.Equal(t, turn.Say, m.Content)
				require.Len(t, m.ToolCalls, len(turn.Calls))
				ids := map[string]bool{}
				for j, c := range m.ToolCalls {
					require.Equal(t, turn.Calls[j].Tool, c.Name)
					require.True(t, json.Valid(c.Args), "args of %s: %s", c.Name, c.Args)
					var back map[string]any
					require.NoError(t, json.Unmarshal(c.Args, &back), "args must be a JSON object")
					require.False(t, ids[c.ID], "duplicate call id %s", c.ID)
					ids[c.ID] = true
				}
				require.Positive(t, resp.Usage.Total())
				// The conversation grows as the loop would grow it.
				msgs = append(msgs, m)
				for _, c := range m.ToolCalls {
					msgs = append(msgs, llm.Message{Role: llm.RoleTool, ToolCallID: c.ID, Name: c.Name, Content: "ok"})
				}
			}
			_, err := p.Complete(context.Background(), llm.Request{Agent: agent, Messages: msgs})
			require.True(t, errors.Is(err, script.ErrExhausted), "turn %d of %d: %v", len(turns)+1, len(turns), err)
		}
		_, err = p.Complete(context.Background(), llm.Request{Agent: fmt.Sprintf("not-%d-an-agent", len(agents))})
		require.ErrorIs(t, err, script.ErrExhausted)
	})
}
