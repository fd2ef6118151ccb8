package knowledge_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/confine/confinetest"
	kb "github.com/aetherium-engine/aetherium/knowledge"
)

// write_knowledge reads the document already under a slug's name to tell the
// agent's own from a person's: a FIFO, socket, symlink loop, symlink out of the
// workspace or 10 GiB sparse file there is refused promptly (the name counts
// as taken: the document goes to the next variant), and nothing outside is
// read.
func TestWriteRefusesHostileFiles(t *testing.T) {
	t.Parallel()
	f := setup(t, kb.Config{}, nil)
	for _, k := range confinetest.Kinds {
		t.Run(string(k), func(t *testing.T) {
			t.Parallel()
			ws := t.TempDir()
			confinetest.Plant(t, ws, "knowledge/runbook.md", k)
			type result struct {
				out string
				err error
			}
			res := confinetest.Prompt(t, func() result {
				out, err := f.call(t, session(ws, "p-"+filepath.Base(ws)), "write_knowledge", map[string]any{"title": "Runbook", "content": "steps"})
				return result{out, err}
			})
			require.NoError(t, res.err)
			require.Contains(t, res.out, "knowledge/runbook-2.md")
			require.NotContains(t, res.out, confinetest.Secret, "read outside the workspace")
			b, err := os.ReadFile(filepath.Join(ws, "knowledge", "runbook-2.md"))
			require.NoError(t, err)
			require.Contains(t, string(b), "steps")
			_, err = os.Lstat(filepath.Join(ws, "knowledge", "runbook.md"))
			require.NoError(t, err, "the hostile file is left in place")
		})
	}
}
