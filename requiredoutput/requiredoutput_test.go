package requiredoutput

import (
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/templates"
)

func TestRequiredOutputRefusal(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	outside := t.TempDir()
	write := func(dir, name, body string) {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644))
	}
	write(ws, "short.md", "# Title\nHOST: one two three\n(laughs)\n")
	write(ws, "long.md", "[HOST]\none two three four five\n**Guest:** six seven eight\n")
	write(ws, "prose.md", "Many words here but no speaker at all in this file.")
	write(outside, "secret.md", "HOST: a b c d e f g h i j")
	require.NoError(t, os.Symlink(filepath.Join(outside, "secret.md"), filepath.Join(ws, "link.md")))
	require.NoError(t, os.Mkdir(filepath.Join(ws, "dir.md"), 0o755))
	// What run_shell can leave: none of it may block the check (a blocked open
	// kept the run "running" for good) or reach engine state.
	require.NoError(t, syscall.Mkfifo(filepath.Join(ws, "fifo.md"), 0o644))
	require.NoError(t, os.Symlink("fifo.md", filepath.Join(ws, "to-fifo.md")))
	require.NoError(t, os.Symlink("loop2.md", filepath.Join(ws, "loop1.md")))
	require.NoError(t, os.Symlink("loop1.md", filepath.Join(ws, "loop2.md")))
	write(ws, ".aetherium/script.md", "HOST: a b c d e f g h i j")
	require.NoError(t, os.Symlink(".aetherium", filepath.Join(ws, "meta")))
	sock, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(ws, "sock.md"), Net: "unix"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sock.Close() })
	tests := []struct {
		name string
		ro   *templates.RequiredOutput
		want string
	}{
		{"none", nil, ""},
		{"long enough", &templates.RequiredOutput{File: "long.md", MinSpokenWords: 8}, ""},
		{"exists is enough", &templates.RequiredOutput{File: "prose.md"}, ""},
		{"missing", &templates.RequiredOutput{File: "script.md", MinSpokenWords: 1}, "the required output script.md does not exist"},
		{"short", &templates.RequiredOutput{File: "short.md", MinSpokenWords: 10}, "short.md has 3 spoken words, and at least 10 are required"},
		{"prose does not count", &templates.RequiredOutput{File: "prose.md", MinSpokenWords: 1}, "prose.md has 0 spoken words"},
		{"path spelled otherwise", &templates.RequiredOutput{File: "./short.md", MinSpokenWords: 4}, "short.md has 3 spoken words"},
		{"a symlink out is not followed", &templates.RequiredOutput{File: "link.md", MinSpokenWords: 1}, "cannot be read"},
		{"a directory", &templates.RequiredOutput{File: "dir.md", MinSpokenWords: 1}, "not a regular file"},
		{"a fifo", &templates.RequiredOutput{File: "fifo.md", MinSpokenWords: 1}, "is a named pipe, not a regular file"},
		{"a symlink to a fifo", &templates.RequiredOutput{File: "to-fifo.md", MinSpokenWords: 1}, "is a named pipe, not a regular file"},
		{"a socket", &templates.RequiredOutput{File: "sock.md", MinSpokenWords: 1}, "is a socket, not a regular file"},
		{"a symlink loop", &templates.RequiredOutput{File: "loop1.md", MinSpokenWords: 1}, "symlink loop"},
		{"engine state through a symlink", &templates.RequiredOutput{File: "meta/script.md", MinSpokenWords: 1}, "reserved for the engine"},
		{"not a workspace path", &templates.RequiredOutput{File: "../x.md"}, "is not a workspace path"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			done := make(chan string, 1)
			go func() { done <- requiredOutputRefusal(ws, tc.ro) }()
			var got string
			select {
			case got = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("the required_output check blocked")
			}
			if tc.want == "" {
				require.Empty(t, got)
				return
			}
			require.Contains(t, got, tc.want)
			require.Contains(t, got, "Your answer is not accepted")
		})
	}
}
