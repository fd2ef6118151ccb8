package quality

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/confine"
	"github.com/aetherium-engine/aetherium/confine/confinetest"
)

// hostile runs check once per hostile file an agent can leave in the
// workspace (planted at rel), each in a fresh workspace holding also a plain
// ok.py; check runs under confinetest.Prompt, so a reader that blocks on a FIFO
// fails the test instead of hanging it.
func hostile(t *testing.T, rel string, check func(t *testing.T, ws string, k confinetest.Kind) string) {
	t.Helper()
	for _, k := range confinetest.Kinds {
		t.Run(string(k), func(t *testing.T) {
			t.Parallel()
			ws := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(ws, "ok.py"), []byte("print('ok')\n"), 0o644))
			confinetest.Plant(t, ws, rel, k)
			out := confinetest.Prompt(t, func() string { return check(t, ws, k) })
			require.NotContains(t, out, confinetest.Secret, "read outside the workspace")
		})
	}
}

func TestReviewFilesRefusesHostileFiles(t *testing.T) {
	t.Parallel()
	cfg := ReviewConfig{}.WithDefaults()
	t.Run("file", func(t *testing.T) {
		t.Parallel()
		hostile(t, "bad.py", func(t *testing.T, ws string, _ confinetest.Kind) string {
			files, err := reviewFiles(ws, "bad.py", cfg)
			require.Error(t, err)
			return fmt.Sprint(files, err)
		})
	})
	t.Run("in a directory", func(t *testing.T) {
		t.Parallel()
		hostile(t, "bad.py", func(t *testing.T, ws string, _ confinetest.Kind) string {
			// The hostile entry is skipped (or ends the review at its budget);
			// ok.py is still reviewed.
			files, err := reviewFiles(ws, ".", cfg)
			require.NoError(t, err)
			require.Len(t, files, 1)
			require.Equal(t, "ok.py", files[0].path)
			return fmt.Sprint(files)
		})
	})
}

func TestQualityReadersRefuseHostileFiles(t *testing.T) {
	t.Parallel()
	t.Run("readSmall", func(t *testing.T) {
		t.Parallel()
		hostile(t, "package.json", func(t *testing.T, ws string, k confinetest.Kind) string {
			r, err := openRoot(ws)
			require.NoError(t, err)
			defer r.Close()
			b, err := readSmall(r, "package.json")
			require.Error(t, err)
			if k == confinetest.FIFO {
				var ke *confine.KindError
				require.ErrorAs(t, err, &ke)
				require.Equal(t, "named pipe", ke.Kind)
			}
			return fmt.Sprint(string(b), err)
		})
	})
	t.Run("detect", func(t *testing.T) {
		t.Parallel()
		hostile(t, "package.json", func(t *testing.T, ws string, _ confinetest.Kind) string {
			got, err := detect(target{root: ws, rel: ".", dir: true})
			return fmt.Sprint(got, err)
		})
	})
	t.Run("hasESLintConfig", func(t *testing.T) {
		t.Parallel()
		hostile(t, "package.json", func(t *testing.T, ws string, _ confinetest.Kind) string {
			require.False(t, hasESLintConfig(target{root: ws, rel: ".", dir: true}))
			return ""
		})
	})
	t.Run("collect a file", func(t *testing.T) {
		t.Parallel()
		// No extension: collect opens the file for its shebang.
		hostile(t, "run", func(t *testing.T, ws string, _ confinetest.Kind) string {
			got, _, err := collect(target{root: ws, rel: "run", dir: false}, 100)
			return fmt.Sprint(got, err)
		})
	})
	t.Run("collect a directory", func(t *testing.T) {
		t.Parallel()
		hostile(t, "run", func(t *testing.T, ws string, _ confinetest.Kind) string {
			got, _, err := collect(target{root: ws, rel: ".", dir: true}, 100)
			require.NoError(t, err)
			require.Equal(t, map[lang][]string{langPython: {"ok.py"}}, got)
			return fmt.Sprint(got)
		})
	})
}
