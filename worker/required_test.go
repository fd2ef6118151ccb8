package worker

import (
	"os"
	"path/filepath"
	"testing"

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
		{"not a workspace path", &templates.RequiredOutput{File: "../x.md"}, "is not a workspace path"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := requiredOutputRefusal(ws, tc.ro)
			if tc.want == "" {
				require.Empty(t, got)
				return
			}
			require.Contains(t, got, tc.want)
			require.Contains(t, got, "Your answer is not accepted")
		})
	}
}
