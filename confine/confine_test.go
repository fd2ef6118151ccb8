package confine_test

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/confine"
)

// within runs f and fails the test if it has not returned by the deadline: a
// blocking open on a FIFO never returns, so a hang is a failure, not a timeout of
// the whole test binary.
func within[T any](t *testing.T, f func() T) T {
	t.Helper()
	done := make(chan T, 1)
	go func() { done <- f() }()
	select {
	case v := <-done:
		return v
	case <-time.After(10 * time.Second):
		t.Fatal("the call blocked (still running after 10s)")
	}
	var zero T
	return zero
}

// setup builds a hostile workspace: every kind of file run_shell can leave.
func setup(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	w := func(rel, content string) {
		p := filepath.Join(dir, rel)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}
	ln := func(target, rel string) { require.NoError(t, os.Symlink(target, filepath.Join(dir, rel))) }
	w("ok.txt", "hello")
	w("sub/deep/file.txt", "deep")
	w(".aetherium/state.json", `{"engine":true}`)
	w("name with\nnewline and spaces", "nl")
	w("-rf", "dash")
	w("ünï©ødé ☃.txt", "uni")
	w("...", "dots")
	w(`back\slash"quote'`, "bs")
	require.NoError(t, syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644))
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(dir, "sock"), Net: "unix"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	ln("/dev/zero", "zero")
	ln("fifo", "to-fifo")
	ln("loop-a", "loop-b")
	ln("loop-b", "loop-a")
	ln("self", "self")
	ln("../../../../etc/passwd", "escape")
	ln("sub/../..", "escape-dir")
	ln(".aetherium", "meta")
	ln(".aetherium/state.json", "state")
	ln("sub/../.aetherium", "meta2")
	ln("ok.txt", "link-ok")
	ln("sub/deep", "deeplink")
	ln("..", "sub/up")
	f, err := os.Create(filepath.Join(dir, "sparse"))
	require.NoError(t, err)
	require.NoError(t, f.Truncate(10<<30)) // 10 GiB, no blocks
	require.NoError(t, f.Close())
	return dir
}

func TestOpen(t *testing.T) {
	t.Parallel()
	dir := setup(t)
	root, err := confine.OpenRoot(dir, confine.Config{MaxBytes: 1 << 20})
	require.NoError(t, err)
	t.Cleanup(func() { _ = root.Close() })
	for _, c := range []struct {
		name, rel string
		want      string // content on success
		err       error
		kind      string // KindError.Kind when err is ErrNotRegular
	}{
		{name: "regular", rel: "ok.txt", want: "hello"},
		{name: "nested", rel: "sub/deep/file.txt", want: "deep"},
		{name: "sandbox view", rel: "/workspace/ok.txt", want: "hello"},
		{name: "symlink inside", rel: "link-ok", want: "hello"},
		{name: "directory symlink inside", rel: "deeplink/file.txt", want: "deep"},
		{name: "up and back inside", rel: "sub/up/ok.txt", want: "hello"},
		{name: "newline and spaces", rel: "name with\nnewline and spaces", want: "nl"},
		{name: "leading dash", rel: "-rf", want: "dash"},
		{name: "unicode", rel: "ünï©ødé ☃.txt", want: "uni"},
		{name: "three dots", rel: "...", want: "dots"},
		{name: "quotes and backslash", rel: `back\slash"quote'`, want: "bs"},
		{name: "fifo", rel: "fifo", err: confine.ErrNotRegular, kind: "named pipe"},
		{name: "symlink to fifo", rel: "to-fifo", err: confine.ErrNotRegular, kind: "named pipe"},
		{name: "unix socket", rel: "sock", err: confine.ErrNotRegular, kind: "socket"},
		{name: "symlink to /dev/zero", rel: "zero", err: confine.ErrOutside},
		{name: "symlink loop", rel: "loop-a", err: confine.ErrLoop},
		{name: "self loop", rel: "self", err: confine.ErrLoop},
		{name: "symlink escaping", rel: "escape", err: confine.ErrOutside},
		{name: "directory symlink escaping", rel: "escape-dir/etc/passwd", err: confine.ErrOutside},
		{name: "dotdot", rel: "../etc/passwd", err: confine.ErrOutside},
		{name: "absolute", rel: "/etc/passwd", err: confine.ErrOutside},
		{name: "engine state by name", rel: ".aetherium/state.json", err: confine.ErrReserved},
		{name: "engine state through a directory symlink", rel: "meta/state.json", err: confine.ErrReserved},
		{name: "engine state through a file symlink", rel: "state", err: confine.ErrReserved},
		{name: "engine state through dotdot in a symlink", rel: "meta2/state.json", err: confine.ErrReserved},
		{name: "engine state through dotdot", rel: "sub/../.aetherium/state.json", err: confine.ErrReserved},
		{name: "10 GiB sparse file", rel: "sparse", err: confine.ErrTooLarge},
		{name: "directory", rel: "sub", err: confine.ErrNotRegular, kind: "directory"},
		{name: "the root", rel: ".", err: confine.ErrNotRegular, kind: "directory"},
		{name: "missing", rel: "nope.txt", err: fs.ErrNotExist},
		{name: "through a file", rel: "ok.txt/x", err: syscall.ENOTDIR},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			type result struct {
				b   []byte
				err error
			}
			got := within(t, func() result { b, err := root.ReadFile(c.rel); return result{b, err} })
			if c.err == nil {
				require.NoError(t, got.err)
				require.Equal(t, c.want, string(got.b))
				return
			}
			require.ErrorIs(t, got.err, c.err)
			if c.kind != "" {
				var ke *confine.KindError
				require.ErrorAs(t, got.err, &ke)
				require.Equal(t, c.kind, ke.Kind)
				require.Contains(t, got.err.Error(), c.kind)
			}
			// Stat never opens, so it must not block either, and it keeps the
			// confinement: outside and reserved paths fail the same way.
			serr := within(t, func() error { _, err := root.Stat(c.rel); return err })
			if errors.Is(c.err, confine.ErrOutside) || errors.Is(c.err, confine.ErrReserved) || errors.Is(c.err, confine.ErrLoop) {
				require.ErrorIs(t, serr, c.err)
			}
		})
	}
}
func TestSparseFileStreamsBounded(t *testing.T) {
	t.Parallel()
	dir := setup(t)
	root, err := confine.OpenRoot(dir, confine.Config{MaxBytes: 20 << 30})
	require.NoError(t, err)
	t.Cleanup(func() { _ = root.Close() })
	f, err := root.Open("sparse")
	require.NoError(t, err)
	defer f.Close()
	require.Equal(t, int64(10<<30), f.Info.Size())
	// ReadFile under a cap smaller than the file refuses it without reading it.
	small, err := confine.OpenRoot(dir, confine.Config{MaxBytes: 4 << 10})
	require.NoError(t, err)
	defer small.Close()
	_, err = small.ReadFile("sparse")
	require.ErrorIs(t, err, confine.ErrTooLarge)
	require.Contains(t, err.Error(), "10737418240 bytes")
}

func TestWalkDir(t *testing.T) {
	t.Parallel()
	dir := setup(t)
	root, err := confine.OpenRoot(dir, confine.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = root.Close() })
	kinds := map[string]string{}
	err = within(t, func() error {
		return root.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
			require.NoError(t, err)
			kinds[p] = confine.Kind(d.Type())
			return nil
		})
	})
	require.NoError(t, err)
	require.Equal(t, "directory", kinds["."])
	require.Equal(t, "regular file", kinds["sub/deep/file.txt"])
	require.Equal(t, "named pipe", kinds["fifo"])
	require.Equal(t, "socket", kinds["sock"])
	require.Equal(t, "symlink", kinds["meta"])
	require.Equal(t, "symlink", kinds["loop-a"])
	require.Equal(t, "symlink", kinds["sub/up"])
	require.Equal(t, "regular file", kinds["name with\nnewline and spaces"])
	for p := range kinds {
		require.NotContains(t, p, ".aetherium", "engine state is never walked")
		require.NotContains(t, p, "meta/", "symlinks are never followed")
		require.NotContains(t, p, "sub/up/", "symlinks are never followed")
	}
	// Info is the lstat, so a walk can read sizes without opening anything.
	fi, err := func() (fs.FileInfo, error) {
		var out fs.FileInfo
		err := root.WalkDir("sub", func(p string, d fs.DirEntry, err error) error {
			if p == "sub/deep/file.txt" {
				out, err = d.Info()
			}
			return err
		})
		return out, err
	}()
	require.NoError(t, err)
	require.Equal(t, int64(4), fi.Size())
	// The start of a walk is resolved like any path.
	for rel, want := range map[string]error{"meta": confine.ErrReserved, "escape-dir": confine.ErrOutside, "loop-a": confine.ErrLoop} {
		err := root.WalkDir(rel, func(_ string, _ fs.DirEntry, err error) error { return err })
		require.ErrorIs(t, err, want, rel)
	}
	// A walk can start below a symlinked directory inside the root.
	var names []string
	require.NoError(t, root.WalkDir("deeplink", func(p string, d fs.DirEntry, err error) error {
		names = append(names, p)
		return err
	}))
	sort.Strings(names)
	require.Equal(t, []string{"sub/deep", "sub/deep/file.txt"}, names)
}

func TestWrite(t *testing.T) {
	t.Parallel()
	dir := setup(t)
	root, err := confine.OpenRoot(dir, confine.Config{MaxBytes: 1 << 20})
	require.NoError(t, err)
	t.Cleanup(func() { _ = root.Close() })
	for _, c := range []struct {
		name, rel string
		err       error
		lands     string // where the content lands, relative to dir
	}{
		{name: "new file", rel: "new.txt", lands: "new.txt"},
		{name: "replace", rel: "ok.txt", lands: "ok.txt"},
		{name: "through a symlink inside", rel: "link-ok", lands: "ok.txt"},
		{name: "into engine state through a directory symlink", rel: "meta/x", err: confine.ErrReserved},
		{name: "over engine state through a file symlink", rel: "state", err: confine.ErrReserved},
		{name: "into engine state by name", rel: ".aetherium/x", err: confine.ErrReserved},
		{name: "out of the root", rel: "escape-dir/x", err: confine.ErrOutside},
		{name: "over a fifo", rel: "fifo", err: confine.ErrNotRegular},
		{name: "over a directory", rel: "sub", err: confine.ErrNotRegular},
		{name: "through a loop", rel: "loop-a", err: confine.ErrLoop},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := within(t, func() error { return root.WriteFile(c.rel, []byte(c.name), confine.WriteOptions{Perm: 0o644}) })
			if c.err != nil {
				require.ErrorIs(t, err, c.err)
				return
			}
			require.NoError(t, err)
			b, err := os.ReadFile(filepath.Join(dir, c.lands))
			require.NoError(t, err)
			require.Equal(t, c.name, string(b))
		})
	}
	require.ErrorIs(t, root.MkdirAll("meta/sub", confine.WriteOptions{}), confine.ErrReserved)
	require.NoError(t, root.MkdirAll("a/b/c", confine.WriteOptions{}))
	require.DirExists(t, filepath.Join(dir, "a/b/c"))
	require.ErrorIs(t, root.WriteFile("big", make([]byte, 2<<20), confine.WriteOptions{}), confine.ErrTooLarge)
	entries, err := os.ReadDir(filepath.Join(dir, ".aetherium"))
	require.NoError(t, err)
	require.Len(t, entries, 1, "nothing was written into engine state")
}
