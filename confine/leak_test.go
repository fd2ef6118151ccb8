package confine_test

import (
	"io/fs"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/confine"
)

// TestNoDescriptorLeaks calls every Root method on names that resolve, names
// that are missing (the last component, or a parent), and hostile names, many
// times over, and counts the process's open descriptors before and after. A
// descriptor left open on a directory of a quota workspace keeps its mount busy:
// the project delete failed with "in use" when ReadFile of a missing document
// leaked its parent directory. Not parallel: it counts the whole process's
// descriptors.
func TestNoDescriptorLeaks(t *testing.T) {
	dir := setup(t)
	root, err := confine.OpenRoot(dir, confine.Config{MaxBytes: 1 << 20})
	require.NoError(t, err)
	defer root.Close()
	fds := func() int {
		es, err := os.ReadDir("/proc/self/fd")
		require.NoError(t, err)
		return len(es)
	}
	names := []string{"ok.txt", "sub/deep/file.txt", "missing.txt", "sub/missing.txt", "nope/missing.txt",
		"fifo", "sock", "loop-a", "self", "escape", "escape-dir", "meta", "state", "sparse", "sub/up/ok.txt", "deeplink/file.txt", "sub"}
	round := func() {
		for _, n := range names {
			if f, err := root.Open(n); err == nil {
				_ = f.Close()
			}
			_, _ = root.ReadFile(n)
			_, _ = root.Stat(n)
			_, _ = root.Lstat(n)
			_, _ = root.Resolve(n)
			_, _ = root.ReadDir(n)
			_ = root.WalkDir(n, func(string, fs.DirEntry, error) error { return nil })
			_, _ = fs.ReadFile(root.FS(), n)
		}
		_ = root.WriteFile("written.txt", []byte("x"), confine.WriteOptions{Perm: 0o644})
		_ = root.WriteFile("nope/written.txt", []byte("x"), confine.WriteOptions{Perm: 0o644})
		_ = root.MkdirAll("made/deeper", confine.WriteOptions{Perm: 0o755})
		if f, err := root.CreateExcl("excl.txt", 0o644); err == nil {
			_ = f.Close()
		}
		_ = root.Remove("excl.txt")
		_ = root.Remove("missing.txt")
	}
	round() // first use may open what stays open (none expected, but not counted)
	before := fds()
	for range 50 {
		round()
	}
	require.Equal(t, before, fds(), "descriptors left open by 50 rounds of every method")
}
