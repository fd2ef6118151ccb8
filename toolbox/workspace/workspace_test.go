package workspace_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/toolbox/workspace"
	"github.com/aetherium-engine/aetherium/tools"
)

// env is a workspace with the tools registered on a router.
type env struct {
	t       *testing.T
	router  *tools.Router
	ws      string
	outside string
	session string
}

// setup returns a fresh workspace (and a sibling "outside" directory holding a
// secret) with the workspace tools; cfg edits the tools' config.
func setup(t *testing.T, cfg ...func(*workspace.Config)) *env {
	t.Helper()
	base := t.TempDir()
	e := &env{t: t, ws: filepath.Join(base, "ws"), outside: filepath.Join(base, "outside"), session: "session-1"}
	require.NoError(t, os.Mkdir(e.ws, 0o755))
	require.NoError(t, os.Mkdir(e.outside, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(e.outside, "secret.txt"), []byte("host secret\n"), 0o644))
	c := workspace.Config{MaxFileBytes: 4096}
	for _, f := range cfg {
		f(&c)
	}
	e.router = newRouter(c)
	return e
}

func newRouter(c workspace.Config) *tools.Router {
	reg := tools.NewRegistry()
	workspace.Register(reg, c)
	return tools.NewRouter(reg)
}

// caller is the writer agent in the session with id session.
func (e *env) caller(session string) *tools.Session {
	return &tools.Session{
		RunID: "run-1", SessionID: session, Agent: "writer", Role: "worker", Workspace: e.ws,
		Access: tools.Access{Groups: []string{"workspace"}, Tools: []string{"read_file", "write_file", "edit_file", "list_files", "search_files", "revert_file"}},
	}
}

// call runs a tool in the default session.
func (e *env) call(tool string, args any) (string, error) {
	return e.callIn(e.session, tool, args)
}

func (e *env) callIn(session, tool string, args any) (string, error) {
	raw, err := json.Marshal(args)
	require.NoError(e.t, err)
	res, err := e.router.Dispatch(context.Background(), tools.Call{ID: "c1", Name: tool, Args: raw, Session: e.caller(session)})
	return res.Content, err
}

func (e *env) must(tool string, args any) string {
	e.t.Helper()
	out, err := e.call(tool, args)
	require.NoError(e.t, err, "%s %v", tool, args)
	return out
}

func (e *env) file(rel string) string {
	e.t.Helper()
	b, err := os.ReadFile(filepath.Join(e.ws, rel))
	require.NoError(e.t, err)
	return string(b)
}

func (e *env) put(rel, content string) {
	e.t.Helper()
	p := filepath.Join(e.ws, rel)
	require.NoError(e.t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(e.t, os.WriteFile(p, []byte(content), 0o644))
}

func TestHostilePaths(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.put("inside.txt", "fine\n")
	e.put("big.txt", strings.Repeat("x", 5000))
	require.NoError(t, os.Symlink(e.outside, filepath.Join(e.ws, "link-out")))
	require.NoError(t, os.Symlink("/etc/passwd", filepath.Join(e.ws, "pw")))
	require.NoError(t, os.Symlink("../outside/secret.txt", filepath.Join(e.ws, "rel-out")))
	require.NoError(t, os.Symlink(filepath.Join(e.ws, "inside.txt"), filepath.Join(e.ws, "abs-link")))
	require.NoError(t, os.Symlink("loop2", filepath.Join(e.ws, "loop1")))
	require.NoError(t, os.Symlink("loop1", filepath.Join(e.ws, "loop2")))
	require.NoError(t, os.Symlink("/dev/null", filepath.Join(e.ws, "devnull")))
	require.NoError(t, syscall.Mkfifo(filepath.Join(e.ws, "fifo"), 0o644))
	sock, err := net.Listen("unix", filepath.Join(e.ws, "sock"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = sock.Close() })
	if os.Geteuid() == 0 {
		// A real character device inside the workspace (same numbers as /dev/null).
		require.NoError(t, syscall.Mknod(filepath.Join(e.ws, "chardev"), syscall.S_IFCHR|0o666, 1<<8|3))
	}
	snapshotDir := filepath.Join(e.ws, workspace.InternalDir, "snapshots")
	require.NoError(t, os.MkdirAll(snapshotDir, 0o700))

	hostile := []string{
		"",
		"../outside/secret.txt",
		"./../outside/secret.txt",
		"a/../../outside/secret.txt",
		"../../../../../../../../etc/passwd",
		"/etc/passwd",
		"/workspace/../outside/secret.txt",
		"file\x00.txt",
		"line\nbreak.txt",
		"tab\there",
		"link-out/secret.txt",
		"link-out/new.txt",
		"link-out",
		"pw",
		"rel-out",
		"abs-link",
		"loop1",
		"devnull",
		"fifo",
		"sock",
		"chardev",
		".aetherium/snapshots/forged.json",
		"./.aetherium/x",
		strings.Repeat("a/", 600) + "x",
	}
	require.GreaterOrEqual(t, len(hostile), 15)
	for _, p := range hostile {
		if p == "chardev" && os.Geteuid() != 0 {
			continue
		}
		_, err := e.call("read_file", map[string]any{"path": p})
		require.Error(t, err, "read_file %q", p)
		_, err = e.call("write_file", map[string]any{"path": p, "content": "pwned\n"})
		require.Error(t, err, "write_file %q", p)
		_, err = e.call("edit_file", map[string]any{"path": p, "search": "", "replace": "pwned\n"})
		require.Error(t, err, "edit_file %q", p)
		_, err = e.call("revert_file", map[string]any{"path": p})
		require.Error(t, err, "revert_file %q", p)
	}
	// Over-size: refused for reads, and for writes that would exceed the limit.
	_, err = e.call("read_file", map[string]any{"path": "big.txt"})
	require.ErrorIs(t, err, workspace.ErrTooLarge)
	_, err = e.call("write_file", map[string]any{"path": "huge.txt", "content": strings.Repeat("y", 5000)})
	require.ErrorIs(t, err, workspace.ErrTooLarge)
	require.NoFileExists(t, filepath.Join(e.ws, "huge.txt"))

	// Errors say why.
	_, err = e.call("read_file", map[string]any{"path": "../outside/secret.txt"})
	require.ErrorIs(t, err, workspace.ErrOutside)
	_, err = e.call("read_file", map[string]any{"path": "link-out/secret.txt"})
	require.ErrorIs(t, err, workspace.ErrOutside)
	_, err = e.call("write_file", map[string]any{"path": "link-out/new.txt", "content": "x"})
	require.ErrorIs(t, err, workspace.ErrOutside)
	_, err = e.call("read_file", map[string]any{"path": "fifo"})
	require.ErrorIs(t, err, workspace.ErrNotRegular)
	_, err = e.call("read_file", map[string]any{"path": ".aetherium/snapshots/x"})
	require.ErrorIs(t, err, workspace.ErrReserved)

	// Nothing outside changed and nothing was planted there or in the snapshots.
	b, err := os.ReadFile(filepath.Join(e.outside, "secret.txt"))
	require.NoError(t, err)
	require.Equal(t, "host secret\n", string(b))
	entries, err := os.ReadDir(e.outside)
	require.NoError(t, err)
	require.Len(t, entries, 1)
	entries, err = os.ReadDir(snapshotDir)
	require.NoError(t, err)
	require.Empty(t, entries)
	fi, err := os.Lstat(filepath.Join(e.ws, "fifo"))
	require.NoError(t, err)
	require.NotZero(t, fi.Mode()&fs.ModeNamedPipe, "the fifo was not replaced")

	// Paths that look odd but stay inside are fine.
	require.Equal(t, "fine\n", e.must("read_file", map[string]any{"path": "/workspace/inside.txt"}))
	require.Equal(t, "fine\n", e.must("read_file", map[string]any{"path": "sub/../inside.txt"}))
	require.NoError(t, os.Mkdir(filepath.Join(e.ws, "real"), 0o755))
	require.NoError(t, os.Symlink("real", filepath.Join(e.ws, "inner-link")))
	e.must("write_file", map[string]any{"path": "inner-link/through.txt", "content": "ok\n"})
	require.Equal(t, "ok\n", e.file("real/through.txt"))
}

// .aetherium is refused after resolution, not by name only: a symlink run_shell
// made (meta -> .aetherium) once let write_file forge engine state.
func TestEngineStateThroughASymlink(t *testing.T) {
	t.Parallel()
	e := setup(t)
	require.NoError(t, os.MkdirAll(filepath.Join(e.ws, ".aetherium", "snapshots"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(e.ws, ".aetherium", "state.json"), []byte("{}"), 0o644))
	require.NoError(t, os.Symlink(".aetherium", filepath.Join(e.ws, "meta")))
	require.NoError(t, os.Symlink("sub/../.aetherium/state.json", filepath.Join(e.ws, "state")))
	require.NoError(t, os.Mkdir(filepath.Join(e.ws, "sub"), 0o755))
	for _, p := range []string{"meta/x", "meta/snapshots/forged.json", "meta/new/dir/x", "state"} {
		_, err := e.call("write_file", map[string]any{"path": p, "content": "forged\n"})
		require.ErrorIs(t, err, workspace.ErrReserved, "write_file %q", p)
		_, err = e.call("read_file", map[string]any{"path": p})
		require.Error(t, err, "read_file %q", p)
		_, err = e.call("edit_file", map[string]any{"path": p, "search": "", "replace": "forged\n"})
		require.Error(t, err, "edit_file %q", p)
	}
	_, err := e.call("read_file", map[string]any{"path": "state"})
	require.ErrorIs(t, err, workspace.ErrReserved)
	var got []string
	require.NoError(t, filepath.WalkDir(filepath.Join(e.ws, ".aetherium"), func(p string, _ fs.DirEntry, err error) error {
		got = append(got, filepath.Base(p))
		return err
	}))
	require.ElementsMatch(t, []string{".aetherium", "snapshots", "state.json"}, got, "nothing was written into engine state")
	b, err := os.ReadFile(filepath.Join(e.ws, ".aetherium", "state.json"))
	require.NoError(t, err)
	require.Equal(t, "{}", string(b))
}

func TestResolve(t *testing.T) {
	t.Parallel()
	e := setup(t)
	require.NoError(t, os.Symlink(e.outside, filepath.Join(e.ws, "link-out")))
	require.NoError(t, syscall.Mkfifo(filepath.Join(e.ws, "fifo"), 0o644))
	real, err := filepath.EvalSymlinks(e.ws)
	require.NoError(t, err)
	got, err := workspace.Resolve(e.ws, "new/dir/file.txt")
	require.NoError(t, err)
	require.Equal(t, filepath.Join(real, "new/dir/file.txt"), got)
	for _, p := range []string{"../x", "/etc", "link-out/secret.txt", "link-out/new/deeper", "fifo", ".aetherium", "a\x00"} {
		_, err := workspace.Resolve(e.ws, p)
		require.Error(t, err, p)
	}
}

func TestReadAndWrite(t *testing.T) {
	t.Parallel()
	e := setup(t)
	out := e.must("write_file", map[string]any{"path": "docs/a/notes.md", "content": "l1\nl2\nl3\nl4\n"})
	require.Contains(t, out, "created docs/a/notes.md")
	require.Equal(t, "l1\nl2\nl3\nl4\n", e.must("read_file", map[string]any{"path": "docs/a/notes.md"}))
	require.Equal(t, "l2\nl3\n", e.must("read_file", map[string]any{"path": "docs/a/notes.md", "start_line": 2, "end_line": 3}))
	require.Equal(t, "l4\n", e.must("read_file", map[string]any{"path": "docs/a/notes.md", "start_line": 4, "end_line": 40}))
	_, err := e.call("read_file", map[string]any{"path": "docs/a/notes.md", "start_line": 9})
	require.ErrorIs(t, err, workspace.ErrBadRange)
	_, err = e.call("read_file", map[string]any{"path": "docs"})
	require.ErrorContains(t, err, "is a directory")
	_, err = e.call("read_file", map[string]any{"path": "nope.txt"})
	require.ErrorIs(t, err, fs.ErrNotExist)

	// Overwriting keeps the file's permissions and leaves no temporary file.
	e.put("run.sh", "#!/bin/sh\necho hi\n")
	require.NoError(t, os.Chmod(filepath.Join(e.ws, "run.sh"), 0o750))
	require.Contains(t, e.must("write_file", map[string]any{"path": "run.sh", "content": "#!/bin/sh\necho hello\n"}), "overwrote")
	fi, err := os.Stat(filepath.Join(e.ws, "run.sh"))
	require.NoError(t, err)
	require.Equal(t, fs.FileMode(0o750), fi.Mode().Perm())
	entries, err := os.ReadDir(e.ws)
	require.NoError(t, err)
	for _, en := range entries {
		require.NotContains(t, en.Name(), ".tmp-")
	}
}

func TestWriteShrinkGuard(t *testing.T) {
	t.Parallel()
	e := setup(t)
	long := strings.Repeat("important line\n", 100) // 1500 bytes
	e.must("write_file", map[string]any{"path": "big.txt", "content": long})
	_, err := e.call("write_file", map[string]any{"path": "big.txt", "content": "// rest unchanged\n"})
	require.ErrorContains(t, err, "refused to shrink")
	require.ErrorContains(t, err, "start_line 1 and end_line 100")
	require.Equal(t, long, e.file("big.txt"))
	// The whole-file form has no shrink guard in the way.
	e.must("edit_file", map[string]any{"path": "big.txt", "search": "", "replace": "short\n", "start_line": 1, "end_line": 100})
	require.Equal(t, "short\n", e.file("big.txt"))
	// Growing, or shrinking by less than half, is fine.
	e.must("write_file", map[string]any{"path": "big.txt", "content": long})
	e.must("write_file", map[string]any{"path": "big.txt", "content": long[:900]})
}

func TestEditThroughTheTool(t *testing.T) {
	t.Parallel()
	e := setup(t)
	out := e.must("edit_file", map[string]any{"path": "src/app.py", "search": "", "replace": "def main():\n    print('hi')\n"})
	require.Contains(t, out, "created src/app.py")
	out = e.must("edit_file", map[string]any{"path": "src/app.py", "search": "print('hi')", "replace": "print('hello')"})
	require.Contains(t, out, "1 exact match at line 2")
	require.Equal(t, "def main():\n    print('hello')\n", e.file("src/app.py"))
	_, err := e.call("edit_file", map[string]any{"path": "src/app.py", "search": "print('helo')", "replace": "x"})
	require.ErrorIs(t, err, workspace.ErrNoMatch)
	require.ErrorContains(t, err, "nearest line is 2")
	_, err = e.call("edit_file", map[string]any{"path": "src/app.py", "search": "x", "replace": strings.Repeat("y", 5000)})
	require.Error(t, err)
	_, err = e.call("edit_file", map[string]any{"path": "src/app.py", "replace": "x", "unknown": 1})
	require.ErrorIs(t, err, tools.ErrInvalidArgs)
}

func TestConcurrentEditsDoNotLoseUpdates(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.put("log.txt", "END\n")
	var wg sync.WaitGroup
	errs := make([]error, 20)
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = e.call("edit_file", map[string]any{"path": "log.txt", "search": "END", "replace": fmt.Sprintf("entry-%d\nEND", i)})
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	got := e.file("log.txt")
	for i := range 20 {
		require.Contains(t, got, fmt.Sprintf("entry-%d\n", i))
	}
	require.True(t, strings.HasSuffix(got, "END\n"))
}

func TestRevert(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.put("keep.txt", "original\n")
	require.NoError(t, os.Chmod(filepath.Join(e.ws, "keep.txt"), 0o640))

	// Several edits in one session revert to the state before the first.
	e.must("edit_file", map[string]any{"path": "keep.txt", "search": "original", "replace": "first edit"})
	e.must("write_file", map[string]any{"path": "keep.txt", "content": "second edit\n"})
	e.must("edit_file", map[string]any{"path": "new.txt", "search": "", "replace": "brand new\n"})

	// Another session has nothing of its own to revert.
	_, err := e.callIn("session-2", "revert_file", map[string]any{"path": "keep.txt"})
	require.ErrorIs(t, err, workspace.ErrNoSnapshot)

	// Snapshots are on disk: a different process (a new registry) reverts them.
	other := &env{t: t, router: newRouter(workspace.Config{}), ws: e.ws, session: e.session}
	out, err := other.call("revert_file", map[string]any{"path": "keep.txt"})
	require.NoError(t, err)
	require.Contains(t, out, "before this session's first edit")
	require.Equal(t, "original\n", e.file("keep.txt"))
	fi, err := os.Stat(filepath.Join(e.ws, "keep.txt"))
	require.NoError(t, err)
	require.Equal(t, fs.FileMode(0o640), fi.Mode().Perm())

	out = e.must("revert_file", map[string]any{"path": "new.txt"})
	require.Contains(t, out, "removed it")
	require.NoFileExists(t, filepath.Join(e.ws, "new.txt"))

	// Reverted: nothing left to revert, until the next edit.
	_, err = e.call("revert_file", map[string]any{"path": "keep.txt"})
	require.ErrorIs(t, err, workspace.ErrNoSnapshot)
	e.must("edit_file", map[string]any{"path": "keep.txt", "search": "original", "replace": "again"})
	e.must("revert_file", map[string]any{"path": "keep.txt"})
	require.Equal(t, "original\n", e.file("keep.txt"))

	// A file deleted behind the tools' back comes back.
	e.must("edit_file", map[string]any{"path": "keep.txt", "search": "original", "replace": "changed"})
	require.NoError(t, os.Remove(filepath.Join(e.ws, "keep.txt")))
	e.must("revert_file", map[string]any{"path": "keep.txt"})
	require.Equal(t, "original\n", e.file("keep.txt"))

	// ForgetSession drops the session's snapshots.
	e.must("edit_file", map[string]any{"path": "keep.txt", "search": "original", "replace": "forgotten"})
	require.NoError(t, workspace.ForgetSession(e.ws, e.session))
	_, err = e.call("revert_file", map[string]any{"path": "keep.txt"})
	require.ErrorIs(t, err, workspace.ErrNoSnapshot)
}

func TestListFiles(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.put("README.md", "# hi\n")
	e.put("src/main.go", "package main\n")
	e.put("src/pkg/deep/x.go", "package deep\n")
	e.put(".env", "SECRET=1\n")
	e.put(".frame/capture.bin", "frames")
	e.must("write_file", map[string]any{"path": "README.md", "content": "# hello\n"}) // makes a snapshot

	out := e.must("list_files", map[string]any{})
	require.Equal(t, "./\n  README.md  (8 B)\n  src/\n    main.go  (13 B)\n    pkg/\n      deep/\n        x.go  (13 B)\n[3 files, 3 directories shown]", out)

	out = e.must("list_files", map[string]any{"max_depth": 1})
	require.Contains(t, out, "  src/ …\n")
	require.NotContains(t, out, "main.go")

	out = e.must("list_files", map[string]any{"show_hidden": true})
	require.Contains(t, out, ".env")
	require.Contains(t, out, ".frame/")
	require.NotContains(t, out, workspace.InternalDir, "the engine's directory is never listed")

	out = e.must("list_files", map[string]any{"path": "src/pkg"})
	require.True(t, strings.HasPrefix(out, "src/pkg/\n  deep/\n"), out)

	_, err := e.call("list_files", map[string]any{"path": "../"})
	require.ErrorIs(t, err, workspace.ErrOutside)
	_, err = e.call("list_files", map[string]any{"path": "README.md"})
	require.ErrorContains(t, err, "not a directory")

	capped := setup(t, func(c *workspace.Config) { c.MaxListEntries = 5 })
	for i := range 20 {
		capped.put(fmt.Sprintf("f%02d.txt", i), "x")
	}
	out = capped.must("list_files", map[string]any{})
	require.Contains(t, out, "listing capped at 5 entries")
	require.Equal(t, 5, strings.Count(out, ".txt"))
}

func TestSearchFiles(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.put("src/main.go", "package main\n\nfunc main() {\n\tfmt.Println(\"Hello\")\n}\n")
	e.put("src/util/strings.go", "package util\n// hello helper\nfunc Hello() string { return \"hello\" }\n")
	e.put("docs/guide.md", "Say hello to the team.\n")
	e.put(".frame/log.txt", "hello from a capture\n")
	e.put(".git/config", "hello = git\n")
	e.put("bin/blob.bin", "hello\x00binary")
	e.must("write_file", map[string]any{"path": "docs/guide.md", "content": "Say hi to the team.\n"}) // snapshot holds "hello"

	out := e.must("search_files", map[string]any{"pattern": "*.go"})
	require.Equal(t, "src/main.go\nsrc/util/strings.go\n[2 files]", out)
	out = e.must("search_files", map[string]any{"pattern": "src/*.go"})
	require.Equal(t, "src/main.go\n[1 files]", out)
	out = e.must("search_files", map[string]any{"pattern": "src/**/*.go"})
	require.Contains(t, out, "src/util/strings.go")

	out = e.must("search_files", map[string]any{"query": "hello"})
	require.Equal(t, "src/util/strings.go:2: // hello helper\nsrc/util/strings.go:3: func Hello() string { return \"hello\" }\n[2 matching lines in 1 files]", out,
		"dot directories, binaries and snapshots are skipped")
	out = e.must("search_files", map[string]any{"query": "hello", "ignore_case": true, "pattern": "*.go"})
	require.Contains(t, out, "src/main.go:4:")
	require.Contains(t, out, "[3 matching lines in 2 files]")
	out = e.must("search_files", map[string]any{"query": `func \w+\(\)`, "regex": true})
	require.Contains(t, out, "src/main.go:3: func main() {")
	require.Contains(t, out, "src/util/strings.go:3:")
	out = e.must("search_files", map[string]any{"query": "hello", "path": ".frame"})
	require.Contains(t, out, ".frame/log.txt:1:", "an explicit dot directory is searched")
	out = e.must("search_files", map[string]any{"query": "zebra"})
	require.Equal(t, "no lines match", out)

	out = e.must("search_files", map[string]any{"query": "e", "max_results": 2})
	require.Contains(t, out, "results capped at 2")

	_, err := e.call("search_files", map[string]any{})
	require.Error(t, err)
	_, err = e.call("search_files", map[string]any{"query": "(", "regex": true})
	require.ErrorContains(t, err, "not a valid regular expression")
	_, err = e.call("search_files", map[string]any{"pattern": "[", "query": "x"})
	require.Error(t, err)
	_, err = e.call("search_files", map[string]any{"query": "x", "path": "../outside"})
	require.ErrorIs(t, err, workspace.ErrOutside)

	// Read-only: searching changed nothing.
	require.Equal(t, "Say hi to the team.\n", e.file("docs/guide.md"))
}

func TestOwnerReceivesWrittenFiles(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("CI runs as root: handing files to the sandbox user must be tested")
		}
		t.Skip("needs root to chown")
	}
	e := setup(t, func(c *workspace.Config) { c.Owner = &workspace.Owner{UID: 12345, GID: 23456} })
	e.must("write_file", map[string]any{"path": "new/dir/file.txt", "content": "x\n"})
	e.must("edit_file", map[string]any{"path": "edited.txt", "search": "", "replace": "y\n"})
	for _, p := range []string{"new", "new/dir", "new/dir/file.txt", "edited.txt"} {
		fi, err := os.Lstat(filepath.Join(e.ws, p))
		require.NoError(t, err)
		st := fi.Sys().(*syscall.Stat_t)
		require.Equal(t, uint32(12345), st.Uid, p)
		require.Equal(t, uint32(23456), st.Gid, p)
	}
	// The engine's own snapshot directory stays root's.
	fi, err := os.Lstat(filepath.Join(e.ws, workspace.InternalDir))
	require.NoError(t, err)
	require.Equal(t, uint32(0), fi.Sys().(*syscall.Stat_t).Uid)
}

func TestNoSession(t *testing.T) {
	t.Parallel()
	reg := tools.NewRegistry()
	workspace.Register(reg, workspace.Config{})
	spec, ok := reg.Spec("read_file")
	require.True(t, ok)
	require.Equal(t, tools.Standard, spec.Tier)
	ctx, caller := context.Background(), &tools.Session{Access: tools.Access{Tools: []string{"read_file"}}}
	_, err := tools.NewRouter(reg).Dispatch(ctx, tools.Call{Session: caller, Name: "read_file", Args: json.RawMessage(`{"path":"a"}`)})
	require.ErrorContains(t, err, "no workspace")
}
