package qa

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/confine/confinetest"
)

// The QA rule re-reads the files a play_test served: a played file replaced by
// a FIFO, socket, symlink loop, symlink out of the workspace or 10 GiB sparse
// file is reported changed promptly, and nothing outside is read (the secret's
// hash never matches).
func TestChangedFilesRefusesHostileFiles(t *testing.T) {
	t.Parallel()
	secret := sha256.Sum256([]byte(confinetest.Secret))
	for _, k := range confinetest.Kinds {
		t.Run(string(k), func(t *testing.T) {
			t.Parallel()
			ws := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(ws, "ok.html"), []byte("ok"), 0o644))
			ok := sha256.Sum256([]byte("ok"))
			confinetest.Plant(t, ws, "index.html", k)
			got := confinetest.Prompt(t, func() []string {
				return changedFiles(ws, map[string]string{"index.html": hex.EncodeToString(secret[:]), "ok.html": hex.EncodeToString(ok[:])})
			})
			require.Len(t, got, 1)
			require.True(t, strings.HasPrefix(got[0], "index.html"), got[0])
			require.NotContains(t, got[0], confinetest.Secret)
		})
	}
}
