package device

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/confine/confinetest"
	"github.com/aetherium-engine/aetherium/device/fps"
)

// The files a run brings back into .frame/ (recording, log, captures) are
// opened through confine: a hostile file under the name is refused promptly,
// nothing outside is read.
func TestCapturedFilesRefuseHostileFiles(t *testing.T) {
	t.Parallel()
	for _, k := range confinetest.Kinds {
		t.Run(string(k), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			confinetest.Plant(t, dir, "f", k)
			p := dir + "/f"
			out := confinetest.Prompt(t, func() string {
				f, err := openCaptured(p)
				require.Error(t, err)
				_, aerr := analyzeFile(p, fps.Options{})
				require.Error(t, aerr)
				require.False(t, crashed(p, "com.x"))
				_, derr := decodeCapture(p)
				require.Error(t, derr)
				return fmt.Sprint(f, err, aerr, derr)
			})
			require.NotContains(t, out, confinetest.Secret)
		})
	}
}
