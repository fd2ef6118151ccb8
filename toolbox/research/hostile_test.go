package research

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/confine/confinetest"
)

// hostile runs check once per hostile file an agent can leave in the
// workspace (planted at rel), each in a fresh workspace holding also a plain
// ok.html; check runs under confinetest.Prompt, so a reader that blocks on a
// FIFO fails the test instead of hanging it, and its output must not hold the
// secret an outside symlink leads to.
func hostile(t *testing.T, rel string, check func(t *testing.T, ws string, k confinetest.Kind) string) {
	t.Helper()
	for _, k := range confinetest.Kinds {
		t.Run(string(k), func(t *testing.T) {
			t.Parallel()
			ws := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(ws, "ok.html"), []byte("<p>ok</p>"), 0o644))
			confinetest.Plant(t, ws, rel, k)
			out := confinetest.Prompt(t, func() string { return check(t, ws, k) })
			require.NotContains(t, out, confinetest.Secret, "read outside the workspace")
		})
	}
}

func TestPlayReadersRefuseHostileFiles(t *testing.T) {
	t.Parallel()
	t.Run("playTarget", func(t *testing.T) {
		t.Parallel()
		hostile(t, "bad.html", func(t *testing.T, ws string, k confinetest.Kind) string {
			target, rel, err := playTarget(ws, "bad.html")
			// The sparse file is a regular file: playTarget only checks it
			// exists; answer refuses to serve it.
			if k == confinetest.Sparse {
				require.NoError(t, err)
				require.Equal(t, "bad.html", rel)
			} else {
				require.Error(t, err)
			}
			return fmt.Sprint(target, rel, err)
		})
	})
	t.Run("answer", func(t *testing.T) {
		t.Parallel()
		hostile(t, "bad.html", func(t *testing.T, ws string, k confinetest.Kind) string {
			root, err := openPlayRoot(ws)
			require.NoError(t, err)
			defer root.Close()
			sv := &served{root: root, files: map[string]string{}}
			code, data, _ := sv.answer(PlayOrigin + "/bad.html")
			require.Equal(t, int64(404), code)
			code, ok, _ := sv.answer(PlayOrigin + "/ok.html")
			require.Equal(t, int64(200), code)
			require.Equal(t, "<p>ok</p>", string(ok))
			return string(data)
		})
	})
	t.Run("appFiles", func(t *testing.T) {
		t.Parallel()
		hostile(t, "site/bad.html", func(t *testing.T, ws string, k confinetest.Kind) string {
			root, err := openPlayRoot(ws)
			require.NoError(t, err)
			defer root.Close()
			sum := sha256.Sum256([]byte(confinetest.Secret))
			ok := sha256.Sum256([]byte("<p>ok</p>"))
			got := appFiles(root, map[string]string{"/bad.html": hex.EncodeToString(sum[:]), "/ok.html": hex.EncodeToString(ok[:])})
			require.Equal(t, map[string]string{"ok.html": hex.EncodeToString(ok[:])}, got)
			return fmt.Sprint(got)
		})
	})
}
