package api_test

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/fleettest"
)

// setupShipped starts an API whose templates directory ships "alpha" (a file whose
// team calls itself "beta") and "broken" (a file that does not parse).
func setupShipped(t *testing.T) *fleettest.Fleet {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "alpha.yaml"), []byte("name: beta\nmodel: {provider: script}\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "broken.yaml"), []byte("name: [\n"), 0o644))
	return fleettest.Start(t, fleettest.Options{NoWorker: true, Configure: func(c *config.Config) { c.Templates = dir }})
}

func inlineTeam(name string) map[string]any {
	return map[string]any{
		"name":       name,
		"model":      map[string]any{"provider": "script"},
		"supervisor": map[string]any{"name": "boss", "prompt": "p", "mcp_servers": []string{"orchestration"}},
		"workers":    []map[string]any{{"name": "writer", "prompt": "w", "mcp_servers": []string{"workspace"}}},
		"script": map[string]any{"agents": map[string]any{
			"boss": []map[string]any{{"calls": []map[string]any{{"tool": "reply", "args": map[string]any{"message": "done"}}}}},
		}},
	}
}

func TestInlineTeamCannotTakeAShippedTemplatesName(t *testing.T) {
	t.Parallel()
	f := setupShipped(t)
	cases := []struct {
		name, team, owner string
	}{
		{"file name", "alpha", "alpha"},
		{"template's own name", "beta", "alpha"},
		{"other case and spaces", " Beta ", "alpha"},
		{"unparseable template keeps its file name", "broken", "broken"},
		{"free name", "alpha-2", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out struct{ Error, Field string }
			code, raw := f.Do("POST", "/api/orchestrator/run", map[string]any{"prompt": "x", "team": inlineTeam(tc.team)}, &out)
			if tc.owner == "" {
				require.Equal(t, http.StatusAccepted, code, string(raw))
				return
			}
			require.Equal(t, http.StatusBadRequest, code, string(raw))
			require.Equal(t, "team", out.Field)
			require.Contains(t, out.Error, `belongs to the shipped template "`+tc.owner+`"`)
			require.Contains(t, out.Error, "run-from-template")
		})
	}
}
