package knowledge_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/knowledge"
)

func write(t *testing.T, path, content string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
}

// Whatever path leads into a dot directory or out of the folder, nothing there is
// indexed: dot entries, links to .frame files and directories, links out, link
// loops, a dot directory reached through a/../.
func TestIndexFolderSkipsHostilePaths(t *testing.T) {
	t.Parallel()
	e := setup(t, knowledge.Config{})
	ctx := context.Background()
	ws := t.TempDir()
	outside := t.TempDir()
	secret := "capturedframesecret"
	write(t, filepath.Join(ws, ".frame", "cap.md"), "# Capture\n\n"+secret)
	write(t, filepath.Join(outside, "out.md"), "# Out\n\n"+secret)
	k := filepath.Join(ws, "knowledge")
	write(t, filepath.Join(k, "good.md"), "# Good\n\nordinary notes")
	write(t, filepath.Join(k, ".frame", "cap.md"), "# Capture\n\n"+secret)
	write(t, filepath.Join(k, ".hidden.md"), secret)
	write(t, filepath.Join(k, "sub", ".cache", "x.md"), secret)
	write(t, filepath.Join(k, "sub", "ok.md"), "# Ok\n\nnested notes")
	for link, target := range map[string]string{
		"to-frame.md":     "../.frame/cap.md",
		"to-frame-dir":    "../.frame",
		"to-inner-dot.md": ".frame/cap.md",
		"climb.md":        "sub/../../.frame/cap.md",
		"out.md":          filepath.Join(outside, "out.md"),
		"loop.md":         "loop.md",
		"alias.md":        "good.md", // a link inside, to a plain file: fine
	} {
		require.NoError(t, os.Symlink(target, filepath.Join(k, link)))
	}
	rep, err := knowledge.IndexFolder(ctx, e.kb, "p", ws)
	require.NoError(t, err)
	docs, err := e.kb.Docs(ctx, knowledge.Project("p"))
	require.NoError(t, err)
	var got []string
	for _, d := range docs {
		got = append(got, d.Path)
	}
	require.ElementsMatch(t, []string{"knowledge/alias.md", "knowledge/good.md", "knowledge/sub/ok.md"}, got)
	require.NotEmpty(t, rep.Skipped)
	require.Empty(t, e.search(t, knowledge.Scope{Project: "p"}, secret, 5))

	// A knowledge folder that is itself a link into a dot directory indexes
	// nothing and deletes nothing.
	ws2 := t.TempDir()
	write(t, filepath.Join(ws2, ".frame", "cap.md"), secret)
	require.NoError(t, os.Symlink(".frame", filepath.Join(ws2, "knowledge")))
	_, err = knowledge.IndexFolder(ctx, e.kb, "p", ws2)
	require.ErrorIs(t, err, knowledge.ErrHiddenPath)
	docs, err = e.kb.Docs(ctx, knowledge.Project("p"))
	require.NoError(t, err)
	require.Len(t, docs, 3)
}

// A knowledge/notes.md that is a symlink to a FIFO (or a FIFO, or a socket)
// once hung every later run start of the project in a blocking open: now it is
// skipped with its kind named and the rest of the folder is indexed.
func TestIndexFolderSkipsFIFOsAndSockets(t *testing.T) {
	t.Parallel()
	e := setup(t, knowledge.Config{})
	ctx := context.Background()
	ws := t.TempDir()
	k := filepath.Join(ws, "knowledge")
	write(t, filepath.Join(k, "good.md"), "# Good\n\nordinary notes")
	require.NoError(t, syscall.Mkfifo(filepath.Join(k, "pipe"), 0o644))
	require.NoError(t, os.Symlink("pipe", filepath.Join(k, "notes.md")))
	require.NoError(t, syscall.Mkfifo(filepath.Join(k, "fifo.md"), 0o644))
	sock, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(k, "sock.md"), Net: "unix"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sock.Close() })
	type result struct {
		rep knowledge.SyncReport
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := knowledge.IndexFolder(ctx, e.kb, "p", ws)
		done <- result{rep, err}
	}()
	var got result
	select {
	case got = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("IndexFolder blocked")
	}
	require.NoError(t, got.err)
	docs, err := e.kb.Docs(ctx, knowledge.Project("p"))
	require.NoError(t, err)
	require.Len(t, docs, 1)
	require.Equal(t, "knowledge/good.md", docs[0].Path)
	require.Len(t, got.rep.Skipped, 3, "%q", got.rep.Skipped)
	joined := strings.Join(got.rep.Skipped, "\n")
	require.Contains(t, joined, "named pipe")
	require.Contains(t, joined, "socket")
}

func TestIndexFolderMirrorsTheFolder(t *testing.T) {
	t.Parallel()
	e := setup(t, knowledge.Config{})
	ctx := context.Background()
	ws := t.TempDir()
	k := filepath.Join(ws, "knowledge")
	write(t, filepath.Join(k, "a.md"), "# A\n\nfirst")
	write(t, filepath.Join(k, "b.md"), "# B\n\nsecond")
	write(t, filepath.Join(k, "notes.txt"), "not markdown")
	for _, step := range []struct {
		change                             func()
		files, indexed, unchanged, deleted int
	}{
		{func() {}, 2, 2, 0, 0},
		{func() {}, 2, 0, 2, 0},
		{func() { write(t, filepath.Join(k, "a.md"), "# A\n\nchanged") }, 2, 1, 1, 0},
		{func() { require.NoError(t, os.Remove(filepath.Join(k, "b.md"))) }, 1, 0, 1, 1},
		{func() { require.NoError(t, os.RemoveAll(k)) }, 0, 0, 0, 1},
	} {
		step.change()
		rep, err := knowledge.IndexFolder(ctx, e.kb, "p", ws)
		require.NoError(t, err)
		require.Equal(t, []int{step.files, step.indexed, step.unchanged, step.deleted}, []int{rep.Files, rep.Indexed, rep.Unchanged, rep.Deleted})
	}
}

func TestIndexPacks(t *testing.T) {
	t.Parallel()
	e := setup(t, knowledge.Config{})
	ctx := context.Background()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "ops", "pager.md"), "# Pager\n\nThe pager rotates weekly.")
	write(t, filepath.Join(dir, "de", "pack.yaml"), "language: german\n")
	write(t, filepath.Join(dir, "de", "haus.md"), "# Häuser\n\nDie Häuser wurden renoviert.")
	write(t, filepath.Join(dir, ".git", "x.md"), "not a pack")
	reps, err := knowledge.IndexPacks(ctx, e.kb, dir)
	require.NoError(t, err)
	require.Len(t, reps, 2)
	st, err := e.kb.Stats(ctx)
	require.NoError(t, err)
	langs := map[string]string{}
	for _, s := range st.Sources {
		langs[s.Source.String()] = s.Language
	}
	require.Equal(t, map[string]string{"pack:de": "german", "pack:ops": "english"}, langs)

	reps, err = knowledge.IndexPacks(ctx, e.kb, dir)
	require.NoError(t, err)
	for _, r := range reps {
		require.Zero(t, r.Indexed, "unchanged packs are not indexed again")
	}
	write(t, filepath.Join(dir, "Bad Name", "x.md"), "x")
	_, err = knowledge.IndexPacks(ctx, e.kb, dir)
	require.ErrorContains(t, err, "Bad Name")
	reps, err = knowledge.IndexPacks(ctx, e.kb, filepath.Join(dir, "missing"))
	require.NoError(t, err)
	require.Empty(t, reps)
}

// The packs shipped in the repository index cleanly and answer their questions.
func TestShippedPacks(t *testing.T) {
	t.Parallel()
	e := setup(t, knowledge.Config{})
	ctx := context.Background()
	reps, err := knowledge.IndexPacks(ctx, e.kb, "packs")
	require.NoError(t, err)
	require.Len(t, reps, 2)
	scope := knowledge.Scope{Packs: []string{"fleet-operations", "go-engineering"}}
	for q, want := range map[string]string{
		"what happens when the circuit breaker trips": "failures.md",
		"is .frame indexed":                           "knowledge-and-memory.md",
		"how long does an approval wait":              "permission-gate.md",
		"sentinel errors":                             "errors.md",
		"workspace quota exceeded":                    "workspace.md",
	} {
		got := e.search(t, scope, q, 3)
		require.NotEmpty(t, got, q)
		require.Equal(t, want, got[0].Path, "%s: %v", q, paths(got))
	}
}
