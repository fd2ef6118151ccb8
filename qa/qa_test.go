package qa

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/templates"
	"github.com/aetherium-engine/aetherium/tools"
)

func TestQARefusal(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	page := []byte("<button>ok</button>")
	require.NoError(t, os.WriteFile(filepath.Join(ws, "index.html"), page, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(ws, "about.html"), []byte("v2"), 0o644))
	sum := func(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
	playMsgs := func(pg string, files map[string]string, isErr bool) []llm.Message {
		raw, _ := json.Marshal(map[string]any{"page": pg, "url": "http://workspace.play/" + pg, "files": files})
		return []llm.Message{
			{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "c1", Name: "play_test"}}},
			{Role: llm.RoleTool, ToolCallID: "c1", Name: "play_test", Content: string(raw), IsError: isErr},
		}
	}
	cases := []struct {
		name   string
		msgs   []llm.Message
		answer string
		want   string
	}{
		{"no verdict", nil, "all done", ""},
		{"not played", nil, "VERDICT index.html PASS works", "play_test has not been run on index.html as it stands now"},
		{"played as it stands", playMsgs("index.html", map[string]string{"index.html": sum(page)}, false), "VERDICT index.html PASS works", ""},
		{"played, path spelled otherwise", playMsgs("index.html", map[string]string{"index.html": sum(page)}, false), "**VERDICT ./index.html FAIL** broken", ""},
		{"changed since", playMsgs("about.html", map[string]string{"about.html": sum([]byte("v1"))}, false), "VERDICT about.html PASS", "about.html changed since play_test played it (about.html)"},
		{"a failed play does not count", playMsgs("index.html", map[string]string{"index.html": sum(page)}, true), "VERDICT index.html PASS", "has not been run on index.html"},
		{"one of two not played", playMsgs("index.html", map[string]string{"index.html": sum(page)}, false), "VERDICT index.html PASS\nVERDICT about.html FAIL", "has not been run on about.html"},
		{"a file gone", playMsgs("index.html", map[string]string{"index.html": sum(page), "app.js": sum([]byte("x"))}, false), "VERDICT index.html PASS", "app.js is gone"},
		{"a URL page played", playMsgs("http://localhost:8000/", nil, false), "VERDICT http://localhost:8000/ PASS", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := qaRefusal(ws, tc.msgs, tc.answer)
			if tc.want == "" {
				require.Empty(t, got)
				return
			}
			require.Contains(t, got, tc.want)
		})
	}
	require.True(t, isQA(templates.Node{QA: true}, tools.Access{}))
	require.True(t, isQA(templates.Node{}, tools.Access{Tools: []string{"read_file", "play_test"}}))
	require.False(t, isQA(templates.Node{}, tools.Access{Tools: []string{"read_file"}}))
}
