package device

import (
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/confine"
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

// The saves a run pulls into .frame/ are copied back through confine: a
// hostile entry is skipped (the oversized file is an error) promptly, and
// nothing outside is copied.
func TestCopyTreeRefusesHostileFiles(t *testing.T) {
	t.Parallel()
	for _, k := range confinetest.Kinds {
		t.Run(string(k), func(t *testing.T) {
			t.Parallel()
			from, to := t.TempDir(), t.TempDir()+"/copy"
			require.NoError(t, os.WriteFile(from+"/ok.sav", []byte("ok"), 0o644))
			confinetest.Plant(t, from, "slot/bad.sav", k)
			err := confinetest.Prompt(t, func() error { return copyTree(from, to) })
			if k == confinetest.Sparse {
				require.ErrorIs(t, err, confine.ErrTooLarge)
				return
			}
			require.NoError(t, err)
			b, err := os.ReadFile(to + "/ok.sav")
			require.NoError(t, err)
			require.Equal(t, "ok", string(b))
			_, err = os.Lstat(to + "/slot/bad.sav")
			require.ErrorIs(t, err, os.ErrNotExist, "a hostile entry is not copied")
		})
	}
}

// The engine's records in .frame/ are written through confine. A hostile file
// the agent planted under a record's name is refused promptly (a regular one,
// however large, is replaced); one planted under the name the old code wrote
// its temporary file to (installed.json.tmp: a FIFO there blocked the host's
// open for good, a symlink there led the write out) is irrelevant now. No
// symlink ever leads the write out.
func TestWriteJSONRefusesHostileFiles(t *testing.T) {
	t.Parallel()
	for _, at := range []string{"installed.json", "installed.json.tmp"} {
		for _, k := range confinetest.Kinds {
			t.Run(at+"/"+string(k), func(t *testing.T) {
				t.Parallel()
				ws := t.TempDir()
				confinetest.Plant(t, ws, FrameDir+"/"+at, k)
				var target string
				if k == confinetest.Outside {
					var err error
					target, err = os.Readlink(ws + "/" + FrameDir + "/" + at)
					require.NoError(t, err)
				}
				err := confinetest.Prompt(t, func() error { return writeJSON(ws, map[string]string{"package": "com.x"}, "installed.json") })
				if target != "" {
					b, rerr := os.ReadFile(target)
					require.NoError(t, rerr)
					require.Equal(t, confinetest.Secret, string(b), "the file outside is untouched")
				}
				if k != confinetest.Sparse && at == "installed.json" {
					require.Error(t, err)
					return
				}
				require.NoError(t, err)
				b, rerr := os.ReadFile(ws + "/" + FrameDir + "/installed.json")
				require.NoError(t, rerr)
				require.Contains(t, string(b), "com.x")
			})
		}
	}
}
