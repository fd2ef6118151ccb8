package workspace

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/tools"
)

// editErrors are the kinds of failure applyEdit may report; anything else (or a
// panic) is a bug.
var editErrors = []error{ErrNoMatch, ErrAmbiguous, ErrOutweigh, ErrBadRange, ErrNeedSearch, ErrNoChange, fs.ErrNotExist}

// FuzzApplyEdit drives the edit algorithm with arbitrary file contents, searches,
// replacements and line ranges. Beyond "no panic", it checks the rules the tool
// documents: creation, the whole-file rewrite, a unique exact match, and that every
// refusal is one of the documented kinds.
func FuzzApplyEdit(f *testing.F) {
	seeds := []struct {
		content        string
		exists         bool
		search, repl   string
		start, endLine int
	}{
		{"one\ntwo\nthree\n", true, "two", "2", 0, 0},
		{"a  b\na b\n", true, "a b", "X", 0, 0},
		{"x = 1\ny = 1\n", true, "= 1", "= 10", 0, 0},
		{"}\n}\n}\n", true, "}", "}\n\nfunc f() {}\n", 0, 0},
		{"package main\n\nfunc main() {\n\tif ok {\n\t\treturn\n\t}\n}\n", true, "if ok {\n  return\n}", "if ok {\n  log()\n}", 0, 0},
		{"one\r\ntwo\r\n", true, "one\ntwo", "1\n2", 0, 0},
		{"", false, "", "new\n", 0, 0},
		{"", false, "x", "y", 0, 0},
		{"one\ntwo\nthree\n", true, "", "X", 2, 3},
		{"one\ntwo\nthree\n", true, "", "all", 1, 99},
		{"a\nb", true, "", "c", 3, 0},
		{"one\ntwo\n", true, "", "x", 7, 0},
		{"one\ntwo\n", true, "", "x", 2, 1},
		{"one\ntwo\n", true, "two", "two", 0, 0},
		{"keep\n  drop me\nkeep\n", true, "drop   me", "", 0, 0},
		{"αβγ\nδεζ\n", true, "βγ δ", "-", 0, 0},
		{"\n\n\n", true, " ", "x", 0, -1},
	}
	for _, s := range seeds {
		f.Add(s.content, s.exists, s.search, s.repl, s.start, s.endLine)
	}
	f.Fuzz(func(t *testing.T, content string, exists bool, search, repl string, start, end int) {
		if len(content) > 1<<16 || len(search) > 1<<12 || len(repl) > 1<<12 {
			t.Skip("bounded sizes keep the fuzzer fast")
		}
		if !exists {
			content = ""
		}
		e := edit{Path: "f.txt", Search: search, Replace: repl, StartLine: start, EndLine: end}
		out, summary, err := applyEdit(content, exists, e)
		if err != nil {
			known := false
			for _, k := range editErrors {
				known = known || errors.Is(err, k)
			}
			require.True(t, known, "undocumented failure: %v", err)
			require.NotEmpty(t, err.Error())
			return
		}
		require.NotEmpty(t, summary)
		ranged := start > 0 || end > 0
		switch {
		case !exists:
			require.Equal(t, repl, out, "an empty search creates the file with replace")
		case ranged && search == "" && start <= 1 && end >= splitLines(content).n():
			require.Equal(t, repl, out, "start_line 1 to the end rewrites the whole file")
		case !ranged && search != "" && strings.Count(content, search) == 1 && lineBreak(content) == "\n":
			require.Equal(t, strings.Replace(content, search, repl, 1), out, "a unique exact match is replaced in place")
		case !ranged && search == "":
			require.Empty(t, content, "an empty search succeeds only on an empty file")
			require.Equal(t, repl, out)
		}
	})
}

// FuzzEditFileArgs sends arbitrary argument objects to edit_file through the router,
// the way a model's call arrives. Whatever the arguments, the call either fails
// with an error or changes files inside the workspace only: the sibling directory
// and its secret stay untouched, and no file grows past the size limit.
func FuzzEditFileArgs(f *testing.F) {
	for _, s := range []string{
		`{"path":"notes.txt","search":"hello","replace":"bye"}`,
		`{"path":"notes.txt","search":"","replace":"all new","start_line":1,"end_line":2}`,
		`{"path":"new/dir/file.md","search":"","replace":"created"}`,
		`{"path":"../outside/secret.txt","search":"host","replace":"guest"}`,
		`{"path":"/etc/passwd","search":"root","replace":"x"}`,
		`{"path":"notes.txt/../../outside/secret.txt","search":"","replace":"x","start_line":1,"end_line":1}`,
		`{"path":"notes.txt","search":"l","replace":"LLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLL"}`,
		`{"path":".","search":"","replace":"x"}`,
		`{"path":"notes.txt","search":"hello","replace":"x","start_line":-3}`,
		`{"path":"notes.txt","search":1}`,
		`{"path":"notes.txt","extra":true}`,
		`{"search":"x"}`,
		`[1,2,3]`,
		`null`,
		`"notes.txt"`,
		`{"path":"notes.txt\u0000.txt","search":"","replace":"x"}`,
		`{"path":"notes.txt","search":"hello\nworld","replace":"hi","start_line":1,"end_line":1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) > 1<<14 {
			t.Skip("bounded sizes keep the fuzzer fast")
		}
		base := t.TempDir()
		ws, outside := filepath.Join(base, "ws"), filepath.Join(base, "outside")
		require.NoError(t, os.Mkdir(ws, 0o755))
		require.NoError(t, os.Mkdir(outside, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(outside, "secret.txt"), []byte("host secret\n"), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(ws, "notes.txt"), []byte("hello\nworld\n"), 0o644))
		const limit = 4096
		reg := tools.NewRegistry()
		Register(reg, Config{MaxFileBytes: limit})
		ctx, caller := context.Background(), &tools.Session{
			RunID: "run-1", SessionID: "s1", Agent: "writer", Role: "worker", Workspace: ws,
			Access: tools.Access{Groups: []string{"workspace"}, Tools: []string{"edit_file"}},
		}
		res, err := tools.NewRouter(reg).Dispatch(ctx, tools.Call{Session: caller, ID: "c1", Name: "edit_file", Args: json.RawMessage(raw)})
		if err != nil {
			require.Empty(t, res.Content)
		} else {
			require.NotEmpty(t, res.Content)
		}
		secret, err := os.ReadFile(filepath.Join(outside, "secret.txt"))
		require.NoError(t, err)
		require.Equal(t, "host secret\n", string(secret), "a file outside the workspace changed")
		ents, err := os.ReadDir(outside)
		require.NoError(t, err)
		require.Len(t, ents, 1, "a file appeared outside the workspace")
		ents, err = os.ReadDir(base)
		require.NoError(t, err)
		require.Len(t, ents, 2, "a file appeared next to the workspace")
		require.NoError(t, filepath.WalkDir(ws, func(p string, d fs.DirEntry, err error) error {
			require.NoError(t, err)
			if d.IsDir() && d.Name() == InternalDir {
				return filepath.SkipDir // snapshots: the tool's own bookkeeping
			}
			if d.Type().IsRegular() {
				info, err := d.Info()
				require.NoError(t, err)
				require.LessOrEqual(t, info.Size(), int64(limit), "%s is over the size limit", p)
			}
			return nil
		}))
	})
}
