package wsquota

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

// e2fsprogs returns mkfs.ext4's path (e2fsck and dumpe2fs sit beside it), failing
// (CI=true) or skipping without it.
func e2fsprogs(t *testing.T) string {
	t.Helper()
	bin, err := lookMkfs(DefaultMkfs)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("e2fsprogs: %v (CI=true: required)", err)
		}
		t.Skip("e2fsprogs:", err)
	}
	return bin
}

// fsck runs e2fsck -fn (check everything, change nothing) and fails on any finding.
func fsck(t *testing.T, bin, image string) {
	t.Helper()
	out, err := exec.Command(filepath.Join(filepath.Dir(bin), "e2fsck"), "-fn", image).CombinedOutput()
	require.NoError(t, err, "e2fsck -fn %s:\n%s", image, out)
}

// fsIDs reads an image's UUID and hash seed the way e2fsprogs reports them.
func fsIDs(t *testing.T, bin, image string) (uuid, seed string) {
	t.Helper()
	out, err := exec.Command(filepath.Join(filepath.Dir(bin), "dumpe2fs"), "-h", image).CombinedOutput()
	require.NoError(t, err, "%s", out)
	u := regexp.MustCompile(`(?m)^Filesystem UUID:\s+(\S+)$`).FindSubmatch(out)
	s := regexp.MustCompile(`(?m)^Directory Hash Seed:\s+(\S+)$`).FindSubmatch(out)
	require.NotNil(t, u, "%s", out)
	require.NotNil(t, s, "%s", out)
	return string(u[1]), string(s[1])
}

func TestTemplateImagesAreCleanFilesystemsOfTheirOwn(t *testing.T) {
	t.Parallel()
	bin := e2fsprogs(t)
	// 16 MiB gets 1 KiB blocks (superblock backups in block 8193, …), 1 GiB 4 KiB
	// blocks and several backups.
	for _, size := range []int64{16 << 20, 1 << 30} {
		t.Run(HumanBytes(size), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			tmpl, err := makeTemplate(context.Background(), bin, dir, size)
			require.NoError(t, err)
			require.GreaterOrEqual(t, len(tmpl.supers), 2, "the primary superblock and at least one backup")
			leftovers, err := filepath.Glob(filepath.Join(dir, "*"))
			require.NoError(t, err)
			require.Empty(t, leftovers, "the template's file is removed")

			seen := map[string]bool{}
			for i := range 3 {
				image := filepath.Join(dir, "img"+string(rune('a'+i)))
				f, err := os.Create(image)
				require.NoError(t, err)
				require.NoError(t, tmpl.writeTo(f, newUUID(), newUUID()))
				require.NoError(t, f.Close())
				fi, err := os.Stat(image)
				require.NoError(t, err)
				require.Equal(t, size, fi.Size())
				fsck(t, bin, image)
				uuid, seed := fsIDs(t, bin, image)
				require.False(t, seen[uuid], "UUID %s given twice", uuid)
				require.False(t, seen[seed], "hash seed %s given twice", seed)
				seen[uuid], seen[seed] = true, true
				// Every backup carries the new identity with a valid checksum: read
				// back, the image has as many superblock copies as the template.
				back, err := readTemplate(image)
				require.NoError(t, err)
				require.Equal(t, len(tmpl.supers), len(back.supers), "superblock copies with the new UUID and a valid checksum")
				for _, c := range back.supers {
					require.Equal(t, back.supers[0].sb[sbUUID:sbUUID+16], c.sb[sbUUID:sbUUID+16])
					require.False(t, bytes.Equal(c.sb[sbUUID:sbUUID+16], tmpl.supers[0].sb[sbUUID:sbUUID+16]))
				}
			}
		})
	}
}

func TestTemplatesThisPackageCannotCopyAreRefused(t *testing.T) {
	t.Parallel()
	bin := e2fsprogs(t)
	cases := []struct {
		name string
		make func(t *testing.T, path string)
		want string
	}{
		{"checksums seeded by the UUID", func(t *testing.T, path string) {
			require.NoError(t, mkfs(context.Background(), bin, path, "-O", "^metadata_csum_seed"))
		}, "no metadata_csum_seed"},
		{"no metadata checksums", func(t *testing.T, path string) {
			require.NoError(t, mkfs(context.Background(), bin, path, "-O", "^metadata_csum,uninit_bg"))
		}, "no metadata_csum"},
		{"not a filesystem", func(t *testing.T, path string) {
			require.NoError(t, os.WriteFile(path, bytes.Repeat([]byte("x"), 4096), 0o600))
		}, "no ext4 superblock"},
		{"a corrupt superblock", func(t *testing.T, path string) {
			require.NoError(t, mkfs(context.Background(), bin, path, "-O", "metadata_csum_seed"))
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			require.NoError(t, err)
			_, err = f.WriteAt([]byte("corrupt"), sbPrimary+0x78) // the volume name, under the checksum
			require.NoError(t, err)
			require.NoError(t, f.Close())
		}, "has checksum"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "img")
			require.NoError(t, os.WriteFile(path, nil, 0o600))
			require.NoError(t, os.Truncate(path, 16<<20))
			c.make(t, path)
			_, err := readTemplate(path)
			require.ErrorIs(t, err, ErrTemplate)
			require.ErrorContains(t, err, c.want)
		})
	}
}
