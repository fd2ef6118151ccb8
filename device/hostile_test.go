package device_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/confine/confinetest"
	"github.com/aetherium-engine/aetherium/device"
	"github.com/aetherium-engine/aetherium/device/steam-frame/sim"
)

// hostile runs check once per hostile file an agent can leave in the workspace,
// planted at rel in a fresh setup; check runs under confinetest.Prompt, so a
// reader that blocks on a FIFO fails the test instead of hanging it, and its
// output must not hold the secret an outside symlink leads to.
func hostile(t *testing.T, rel string, check func(t *testing.T, d *device.Driver, ws string) string) {
	t.Helper()
	for _, k := range confinetest.Kinds {
		t.Run(string(k), func(t *testing.T) {
			t.Parallel()
			d, h, ws := setup(t, sim.Scenario{})
			confinetest.Plant(t, ws, rel, k)
			out := confinetest.Prompt(t, func() string { return check(t, d, ws) })
			require.NotContains(t, out, confinetest.Secret, "read outside the workspace")
			untouched(t, h)
		})
	}
}

func TestHostReadersRefuseHostileFiles(t *testing.T) {
	t.Parallel()
	t.Run("frame_install's APK", func(t *testing.T) {
		t.Parallel()
		hostile(t, "build/bad.apk", func(t *testing.T, d *device.Driver, ws string) string {
			res, err := d.Install(context.Background(), caller, ws, "build/bad.apk", "")
			require.ErrorIs(t, err, device.ErrInvalidArg)
			return fmt.Sprint(res, err)
		})
	})
	t.Run("the last installed package", func(t *testing.T) {
		t.Parallel()
		hostile(t, filepath.Join(device.FrameDir, "installed.json"), func(t *testing.T, d *device.Driver, ws string) string {
			res, err := d.Run(context.Background(), caller, ws, device.RunOptions{})
			require.ErrorIs(t, err, device.ErrNoPackage)
			return fmt.Sprint(res, err)
		})
	})
	t.Run("a capture in the contact sheet", func(t *testing.T) {
		t.Parallel()
		hostile(t, filepath.Join(device.FrameDir, "runs", "r", "0001.png"), func(t *testing.T, _ *device.Driver, ws string) string {
			n, err := device.ContactSheet(filepath.Join(t.TempDir(), "sheet.png"), []string{filepath.Join(ws, device.FrameDir, "runs", "r", "0001.png")})
			require.ErrorContains(t, err, "none of 1 captures decodes")
			return fmt.Sprint(n, err)
		})
	})
}
