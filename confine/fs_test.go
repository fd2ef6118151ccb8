package confine_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/confine"
	"github.com/aetherium-engine/aetherium/confine/confinetest"
)

// Root.FS is a well-behaved fs.FS over plain files, and refuses every hostile
// file promptly: fs.ReadFile and fs.WalkDir through it never block, follow a
// symlink out or read a file over the cap.
func TestFS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "a", "b"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a", "b", "c.txt"), []byte("c"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "top.txt"), []byte("top"), 0o644))
	r, err := confine.OpenRoot(dir, confine.Config{MaxBytes: 1 << 20})
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	require.NoError(t, fstest.TestFS(r.FS(), "a/b/c.txt", "top.txt"))

	for _, k := range confinetest.Kinds {
		t.Run(string(k), func(t *testing.T) {
			t.Parallel()
			confinetest.Plant(t, dir, "hostile/"+string(k), k)
			fsys := r.FS()
			name := "hostile/" + string(k)
			err := confinetest.Prompt(t, func() error {
				b, err := fs.ReadFile(fsys, name)
				require.NotContains(t, string(b), confinetest.Secret)
				return err
			})
			require.Error(t, err)
			if k == confinetest.FIFO {
				var ke *confine.KindError
				require.ErrorAs(t, err, &ke)
				require.Equal(t, "named pipe", ke.Kind)
			}
			f, err := fsys.Open(name)
			if err == nil {
				_ = f.Close()
			}
			require.Error(t, err)
		})
	}
}
