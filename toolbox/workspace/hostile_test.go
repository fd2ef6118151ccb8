package workspace_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/confine/confinetest"
)

// hostile runs call once per hostile file an agent can leave in the workspace
// (planted at rel in a fresh workspace also holding src/ok.txt); call runs
// under confinetest.Prompt, so a tool that blocks on a FIFO fails the test
// instead of hanging it, and its output must not hold the secret an outside
// symlink leads to.
func hostile(t *testing.T, rel string, check func(t *testing.T, e *env, k confinetest.Kind) string) {
	t.Helper()
	for _, k := range confinetest.Kinds {
		t.Run(string(k), func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			e.put("src/ok.txt", "ok line\n")
			confinetest.Plant(t, e.ws, rel, k)
			out := confinetest.Prompt(t, func() string { return check(t, e, k) })
			require.NotContains(t, out, confinetest.Secret, "read outside the workspace")
		})
	}
}

func TestSearchRefusesHostileFiles(t *testing.T) {
	t.Parallel()
	t.Run("a walked entry", func(t *testing.T) {
		t.Parallel()
		hostile(t, "src/bad.txt", func(t *testing.T, e *env, _ confinetest.Kind) string {
			out, err := e.call("search_files", map[string]any{"query": "line|" + confinetest.Secret, "regex": true})
			require.NoError(t, err)
			require.Contains(t, out, "src/ok.txt:1: ok line")
			names, err := e.call("search_files", map[string]any{"pattern": "*.txt"})
			require.NoError(t, err)
			return out + names
		})
	})
	t.Run("the search path", func(t *testing.T) {
		t.Parallel()
		hostile(t, "src/bad.txt", func(t *testing.T, e *env, _ confinetest.Kind) string {
			out, err := e.call("search_files", map[string]any{"path": "src/bad.txt", "query": "x"})
			require.Error(t, err)
			return fmt.Sprint(out, err)
		})
	})
}

// revert_file reads the session's snapshot from the engine's directory: a
// hostile file in its place is an error, promptly.
func TestRevertRefusesAHostileSnapshot(t *testing.T) {
	t.Parallel()
	hash := func(s string) string { sum := sha256.Sum256([]byte(s)); return hex.EncodeToString(sum[:16]) }
	hostile(t, path.Join(".aetherium", "snapshots", hash("session-1"), hash("src/ok.txt")+".json"), func(t *testing.T, e *env, _ confinetest.Kind) string {
		out, err := e.call("revert_file", map[string]any{"path": "src/ok.txt"})
		require.Error(t, err)
		return fmt.Sprint(out, err)
	})
}
