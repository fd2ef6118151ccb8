package sandbox_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/sandbox/sandboxtest"
)

// familyCopy lays the image family's inputs out in a temporary tree shaped like
// the repository's (sandbox/images and deploy/images with its build.sh symlink),
// so a test can edit a package list without touching the real ones.
func familyCopy(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for _, dir := range []string{"sandbox/images", "deploy/images"} {
		require.NoError(t, os.MkdirAll(filepath.Join(root, dir), 0o755))
	}
	src, err := filepath.Abs("images")
	require.NoError(t, err)
	entries, err := os.ReadDir(src)
	require.NoError(t, err)
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(root, "sandbox/images", e.Name()), b, 0o755))
	}
	b, err := os.ReadFile("../deploy/images/deploy-base.packages")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(root, "deploy/images/deploy-base.packages"), b, 0o644))
	require.NoError(t, os.Symlink("../../sandbox/images/build.sh", filepath.Join(root, "deploy/images/build.sh")))
	return root
}

// familyHashes is what each image of the family would carry (build.sh --hash:
// nothing is built).
func familyHashes(t *testing.T, root string) map[string]string {
	t.Helper()
	hashes := map[string]string{}
	for name, script := range map[string]string{
		"base": "sandbox/images/build.sh", "browser": "sandbox/images/build.sh", "media": "sandbox/images/build.sh",
		"toolchain": "sandbox/images/build.sh", "deploy-base": "deploy/images/build.sh",
	} {
		out, err := exec.Command("bash", filepath.Join(root, script), "--hash", name).CombinedOutput()
		require.NoError(t, err, "%s --hash %s: %s", script, name, out)
		f := strings.Fields(string(out))
		require.Len(t, f, 3, "%s --hash %s: %s", script, name, out)
		require.Equal(t, name, f[0])
		require.Len(t, f[1], 16)
		hashes[name] = f[1]
	}
	return hashes
}

// A change to one member's package list rebuilds that member alone; a change to
// the base's rebuilds all of them; a comment rebuilds nothing.
func TestImageFamilyRebuildsWhatChanged(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		file    string // under the copy's root; the line is appended
		line    string
		rebuild []string
	}{
		{"a media package", "sandbox/images/media.packages", "flac", []string{"media"}},
		{"a browser package", "sandbox/images/browser.packages", "fonts-noto-core", []string{"browser"}},
		{"a deployment package", "deploy/images/deploy-base.packages", "curl", []string{"deploy-base"}},
		{"the toolchain hook", "sandbox/images/toolchain.extra.sh", "# another line", []string{"toolchain"}},
		{"a base package", "sandbox/images/base.packages", "tzdata", []string{"base", "browser", "media", "toolchain", "deploy-base"}},
		{"a comment", "sandbox/images/media.packages", "# not a package", nil},
		{"a package listed twice", "sandbox/images/media.packages", "sox", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := familyCopy(t)
			before := familyHashes(t, root)
			f, err := os.OpenFile(filepath.Join(root, tc.file), os.O_APPEND|os.O_WRONLY, 0)
			require.NoError(t, err)
			_, err = f.WriteString(tc.line + "\n")
			require.NoError(t, err)
			require.NoError(t, f.Close())
			after := familyHashes(t, root)
			var changed []string
			for _, name := range []string{"base", "browser", "media", "toolchain", "deploy-base"} {
				if before[name] != after[name] {
					changed = append(changed, name)
				}
			}
			require.Equal(t, tc.rebuild, changed)
		})
	}
}

// Every member of the built family is its base's layers plus its own: the engine
// stores the base once, and `docker history` shows it under each.
func TestImageFamilySharesOneBase(t *testing.T) {
	t.Parallel()
	type image struct {
		ID     string
		RootFS struct{ Layers []string }
		Config struct{ Labels map[string]string }
	}
	inspect := func(t *testing.T, ref string) image {
		t.Helper()
		out, err := exec.Command("docker", "image", "inspect", ref).Output()
		require.NoError(t, err, "docker image inspect %s", ref)
		var imgs []image
		require.NoError(t, json.Unmarshal(out, &imgs))
		require.Len(t, imgs, 1)
		return imgs[0]
	}
	members := map[string]string{}
	for _, name := range []string{"browser", "media", "toolchain"} {
		members[name] = sandboxtest.FamilyImage(t, name)
	}
	// The deployment's member builds through its own list (a no-op when current).
	out, err := exec.Command("bash", "../deploy/images/build.sh", "deploy-base").CombinedOutput()
	require.NoError(t, err, "%s", out)
	members["deploy-base"] = "aetherium-deploy-base:latest"

	base := inspect(t, "aetherium-base:latest")
	require.Equal(t, "base", base.Config.Labels["io.aetherium.image"])
	require.Len(t, base.RootFS.Layers, 1, "the base is one imported root filesystem")
	for name, ref := range members {
		img := inspect(t, ref)
		require.Equal(t, base.ID, img.Config.Labels["io.aetherium.image.base.id"], "%s was built on another base", name)
		require.Greater(t, len(img.RootFS.Layers), len(base.RootFS.Layers), name)
		require.Equal(t, base.RootFS.Layers, img.RootFS.Layers[:len(base.RootFS.Layers)], "%s does not sit on the base's layers", name)
		require.NotContains(t, img.Config.Labels["io.aetherium.image.packages"], "ca-certificates", "%s lists a base package", name)
	}
}
