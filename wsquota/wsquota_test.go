package wsquota_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/aetherium-engine/aetherium/wsquota"
	"github.com/aetherium-engine/aetherium/wsquota/wsquotatest"
)

const testQuota = 16 << 20

func TestParseSize(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		want wsquota.Size
		bad  bool
	}{
		{in: "0", want: 0},
		{in: "1048576", want: 1 << 20},
		{in: "1GiB", want: 1 << 30},
		{in: "512MiB", want: 512 << 20},
		{in: "512mib", want: 512 << 20},
		{in: "16M", want: 16 << 20},
		{in: "1.5G", want: 3 << 29},
		{in: "2 GiB", want: 2 << 30},
		{in: "1GB", want: 1e9},
		{in: "100KB", want: 1e5},
		{in: "7B", want: 7},
		{in: "", bad: true},
		{in: "-1GiB", bad: true},
		{in: "1 gallon", bad: true},
		{in: "GiB", bad: true},
		{in: "1e30GiB", bad: true},
	}
	for _, c := range cases {
		got, err := wsquota.ParseSize(c.in)
		if c.bad {
			require.Error(t, err, c.in)
			continue
		}
		require.NoError(t, err, c.in)
		require.Equal(t, c.want, got, c.in)
	}
}

func TestParseMinFree(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in    string
		want  wsquota.MinFree
		total int64
		of    int64
		bad   bool
	}{
		{in: "5%", want: wsquota.MinFree{Percent: 5}, total: 1000, of: 50},
		{in: "0.5 %", want: wsquota.MinFree{Percent: 0.5}, total: 1000, of: 5},
		{in: "2GiB", want: wsquota.MinFree{Bytes: 2 << 30}, total: 1 << 40, of: 2 << 30},
		{in: "0", want: wsquota.MinFree{}, total: 1000, of: 0},
		{in: "100%", bad: true},
		{in: "-1%", bad: true},
		{in: "lots", bad: true},
	}
	for _, c := range cases {
		got, err := wsquota.ParseMinFree(c.in)
		if c.bad {
			require.Error(t, err, c.in)
			continue
		}
		require.NoError(t, err, c.in)
		require.Equal(t, c.want, got, c.in)
		require.Equal(t, c.of, got.Of(c.total), c.in)
	}
}

func TestConfigYAMLAndValidate(t *testing.T) {
	t.Parallel()
	var c wsquota.Config
	require.NoError(t, yaml.Unmarshal([]byte("workspace_quota: 512MiB\nworkspace_min_free: 3%\nworkspace_unmount_after: 2m\n"), &c))
	require.Equal(t, wsquota.Config{Quota: 512 << 20, MinFree: wsquota.MinFree{Percent: 3}, UnmountAfter: 2 * time.Minute}, c)
	require.NoError(t, c.Validate())

	d := wsquota.Defaults()
	require.Equal(t, wsquota.DefaultSpares, d.Spares)
	require.Equal(t, wsquota.DefaultQuota, d.Quota)
	require.Equal(t, wsquota.DefaultMinFree, d.MinFree)
	require.Equal(t, wsquota.DefaultUnmountAfter, d.UnmountAfter)
	require.NoError(t, d.Validate())
	require.NoError(t, wsquota.Config{}.Validate(), "the zero config is quotas off")

	cases := []struct {
		c    wsquota.Config
		want string
	}{
		{wsquota.Config{Quota: 1 << 20}, "workspace_quota (AETHERIUM_WORKSPACE_QUOTA): 1.0 MiB is below the minimum 8.0 MiB"},
		{wsquota.Config{MinFree: wsquota.MinFree{Percent: 100}}, "workspace_min_free"},
		{wsquota.Config{UnmountAfter: -time.Second}, "workspace_unmount_after"},
		{wsquota.Config{Spares: -1}, "workspace_spares"},
	}
	for _, tc := range cases {
		require.ErrorContains(t, tc.c.Validate(), tc.want)
	}
}

// manager returns a Manager on a fresh root whose mounts are all gone at cleanup.
func manager(t *testing.T, cfg wsquota.Config) *wsquota.Manager {
	t.Helper()
	wsquotatest.Require(t)
	if cfg.Quota == 0 {
		cfg.Quota = testQuota
	}
	m, err := wsquota.New(wsquotatest.Root(t), cfg)
	require.NoError(t, err)
	t.Cleanup(m.Close) // runs before the root's unmount and removal
	return m
}

type mountEntry struct {
	root, point, fstype, source, options string
}

// mountsAt returns the mount table entries whose mount point is dir.
func mountsAt(t *testing.T, dir string) []mountEntry {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	require.NoError(t, err)
	defer f.Close()
	var out []mountEntry
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		require.True(t, ok)
		a, b := strings.Fields(pre), strings.Fields(post)
		if a[4] == dir {
			out = append(out, mountEntry{root: a[3], point: a[4], options: a[5], fstype: b[0], source: b[1]})
		}
	}
	return out
}

func TestOpenMountsAQuotaFilesystem(t *testing.T) {
	t.Parallel()
	m := manager(t, wsquota.Config{})
	ctx := context.Background()
	dir, err := m.Open(ctx, "run-1")
	require.NoError(t, err)
	require.Equal(t, filepath.Join(m.Root(), "run-1"), dir)

	mounts := mountsAt(t, dir)
	require.Len(t, mounts, 1)
	require.Equal(t, "ext4", mounts[0].fstype)
	require.Equal(t, "/", mounts[0].root, "the workspace is a filesystem's root")
	require.True(t, strings.HasPrefix(mounts[0].source, "/dev/loop"), mounts[0].source)
	require.Contains(t, mounts[0].options, "nosuid")
	require.Contains(t, mounts[0].options, "nodev")

	fi, err := os.Stat(m.Image("run-1"))
	require.NoError(t, err)
	require.EqualValues(t, testQuota, fi.Size(), "the image is exactly the quota")
	require.Less(t, fi.Sys().(*syscall.Stat_t).Blocks*512, int64(4<<20), "the image is sparse")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries, "a new workspace is empty (no lost+found)")

	require.NoError(t, os.WriteFile(filepath.Join(dir, "a.txt"), []byte("hello"), 0o644))
	again, err := m.Open(ctx, "run-1")
	require.NoError(t, err)
	require.Equal(t, dir, again)
	require.Len(t, mountsAt(t, dir), 1, "a second Open mounts nothing more")
	b, err := os.ReadFile(filepath.Join(again, "a.txt"))
	require.NoError(t, err)
	require.Equal(t, "hello", string(b))

	ids, err := m.Mounted()
	require.NoError(t, err)
	require.Equal(t, []string{"run-1"}, ids)
	for path, mode := range map[string]os.FileMode{m.Root(): 0o755, filepath.Dir(m.Image("run-1")): 0o700} {
		fi, err := os.Stat(path)
		require.NoError(t, err)
		require.Equal(t, mode, fi.Mode().Perm(), path)
	}

	u, ok := wsquota.UsageOf(dir)
	require.True(t, ok)
	require.EqualValues(t, testQuota, u.Limit)
	require.Positive(t, u.Used, "ext4's own metadata counts")
	require.Less(t, u.Used, int64(testQuota/4))
	require.False(t, u.Full())
}

// spares lists the ready images under m's root.
func spares(t *testing.T, m *wsquota.Manager) []string {
	t.Helper()
	got, err := filepath.Glob(filepath.Join(m.Root(), wsquota.ImagesDir, wsquota.SparesDir, "*.ext4"))
	require.NoError(t, err)
	return got
}

func TestNewWorkspacesComeFromSpareImages(t *testing.T) {
	t.Parallel()
	m := manager(t, wsquota.Config{Spares: 2})
	ctx := context.Background()
	require.Empty(t, spares(t, m), "nothing is made before the first workspace")
	_, err := m.Open(ctx, "first")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(spares(t, m)) == 2 }, 10*time.Second, 5*time.Millisecond, "the first new workspace starts the refill")

	ready := spares(t, m)
	dir, err := m.Open(ctx, "second")
	require.NoError(t, err)
	fi, err := os.Stat(m.Image("second"))
	require.NoError(t, err)
	// The refill may have made the next spare already (a copy of the template takes
	// well under a millisecond): what shows the spare was taken is that one of the
	// ready ones is gone, renamed into place.
	var gone []string
	for _, p := range ready {
		if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
			gone = append(gone, p)
		}
	}
	require.Len(t, gone, 1, "the second workspace took one spare")
	require.EqualValues(t, testQuota, fi.Size())
	// A workspace from a spare is like any other: mounted, empty, under its quota.
	require.Len(t, mountsAt(t, dir), 1)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries, "no lost+found")
	err = os.WriteFile(filepath.Join(dir, "big"), make([]byte, 2*testQuota), 0o644)
	require.ErrorIs(t, wsquota.Explain(dir, err), wsquota.ErrExceeded)
	require.Eventually(t, func() bool { return len(spares(t, m)) == 2 }, 10*time.Second, 5*time.Millisecond, "refilled")

	// After the quota changed, a spare of the old size is never used: it is removed
	// and the workspace gets an image of the new size.
	bigger, err := wsquota.New(m.Root(), wsquota.Config{Quota: 2 * testQuota, Spares: 1})
	require.NoError(t, err)
	t.Cleanup(bigger.Close)
	_, err = bigger.Open(ctx, "third")
	require.NoError(t, err)
	fi, err = os.Stat(bigger.Image("third"))
	require.NoError(t, err)
	require.EqualValues(t, 2*testQuota, fi.Size())
	require.Eventually(t, func() bool {
		got := spares(t, bigger)
		if len(got) != 1 {
			return false
		}
		fi, err := os.Stat(got[0])
		return err == nil && fi.Size() == 2*testQuota
	}, 10*time.Second, 5*time.Millisecond, "the old-size spares were removed, one of the new size made")

	// Close waits for the refill under way and stops it: nothing more is made.
	m.Close()
	bigger.Close()
	n := len(spares(t, m))
	time.Sleep(50 * time.Millisecond)
	require.Len(t, spares(t, m), n)
	tmp, err := filepath.Glob(filepath.Join(m.Root(), wsquota.ImagesDir, wsquota.SparesDir, "*.tmp"))
	require.NoError(t, err)
	require.Empty(t, tmp, "no half-made spare after Close")
}

func TestOpenIsSafeConcurrently(t *testing.T) {
	t.Parallel()
	m := manager(t, wsquota.Config{})
	ctx := context.Background()
	ids := []string{"a", "b", "c"}
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := range 30 {
		wg.Go(func() {
			id := ids[i%len(ids)]
			dir, err := m.Open(ctx, id)
			if err == nil {
				err = os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%d", i)), []byte("x"), 0o644)
			}
			errs <- err
		})
	}
	// A second Manager on the same root stands in for another worker process.
	other, err := wsquota.New(m.Root(), m.Config())
	require.NoError(t, err)
	for _, id := range ids {
		wg.Go(func() { _, err := other.Open(ctx, id); errs <- err })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for _, id := range ids {
		require.Len(t, mountsAt(t, m.Dir(id)), 1, "workspace %s is mounted once", id)
		entries, err := os.ReadDir(m.Dir(id))
		require.NoError(t, err)
		require.Len(t, entries, 10, "every writer wrote into the one mounted filesystem")
	}
}

func TestWritePastQuotaIsTheQuotaError(t *testing.T) {
	t.Parallel()
	m := manager(t, wsquota.Config{})
	dir, err := m.Open(context.Background(), "big")
	require.NoError(t, err)

	f, err := os.Create(filepath.Join(dir, "big.bin"))
	require.NoError(t, err)
	chunk := make([]byte, 1<<20)
	var werr error
	for range 2 * testQuota / len(chunk) {
		if _, werr = f.Write(chunk); werr != nil {
			break
		}
	}
	if werr == nil {
		werr = f.Sync()
	}
	_ = f.Close()
	require.ErrorIs(t, werr, syscall.ENOSPC)

	err = wsquota.Explain(dir, fmt.Errorf("write_file: write big.bin: %w", werr))
	require.ErrorIs(t, err, wsquota.ErrExceeded)
	require.ErrorIs(t, err, syscall.ENOSPC, "the writer's error is kept")
	// ext4 keeps back about a MiB it never hands out: "15.1 MiB of 16.0 MiB".
	require.Regexp(t, `^workspace quota exceeded: 1[56]\.\d MiB of 16\.0 MiB \(write_file: write big.bin: .*no space left on device\)$`, err.Error())

	u, ok := wsquota.UsageOf(dir)
	require.True(t, ok)
	require.True(t, u.Full())
	require.LessOrEqual(t, u.Used, int64(testQuota))
	fi, err := os.Stat(m.Image("big"))
	require.NoError(t, err)
	require.LessOrEqual(t, fi.Sys().(*syscall.Stat_t).Blocks*512, int64(testQuota), "the host disk holds no more than the quota")

	commands := []struct {
		output string
		exit   int
		quota  bool
	}{
		{"dd: error writing 'x': No space left on device\n", 1, true},
		{"cp: Disk quota exceeded\n", 0, true},
		{"head: standard output: I/O error\n", 1, true}, // busybox hides the errno
		{"all fine\n", 0, false},
	}
	for _, c := range commands {
		qe, ok := wsquota.ExplainCommand(dir, c.output, c.exit)
		require.Equal(t, c.quota, ok, c.output)
		if ok {
			require.Regexp(t, `^workspace quota exceeded: 1[56]\.\d MiB of 16\.0 MiB$`, qe.Error())
		}
	}

	// Freeing space works, and then a full /tmp is not the workspace's quota.
	require.NoError(t, os.Remove(filepath.Join(dir, "big.bin")))
	_, ok = wsquota.ExplainCommand(dir, "No space left on device", 1)
	require.False(t, ok)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "small"), []byte("x"), 0o644))

	// Not a quota workspace: the error stays as it was.
	plain := t.TempDir()
	require.Equal(t, werr, wsquota.Explain(plain, werr))
	other := errors.New("permission denied")
	require.Equal(t, other, wsquota.Explain(dir, other))
}

func TestRunningOutOfInodesIsTheQuotaError(t *testing.T) {
	t.Parallel()
	m := manager(t, wsquota.Config{})
	dir, err := m.Open(context.Background(), "many")
	require.NoError(t, err)
	var werr error
	for i := range 100000 {
		if werr = os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%06d", i)), nil, 0o644); werr != nil {
			break
		}
	}
	require.ErrorIs(t, werr, syscall.ENOSPC)
	err = wsquota.Explain(dir, werr)
	require.ErrorIs(t, err, wsquota.ErrExceeded)
	require.Regexp(t, `^workspace quota exceeded: (\d+) of (\d+) files`, err.Error())
}

func TestUnmountKeepsFilesAndOpenRemounts(t *testing.T) {
	t.Parallel()
	m := manager(t, wsquota.Config{})
	ctx := context.Background()
	dir, err := m.Open(ctx, "keep")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "kept.txt"), []byte("still here"), 0o644))

	// Busy: a process has its working directory there.
	busy := exec.Command("sleep", "60")
	busy.Dir = dir
	require.NoError(t, busy.Start())
	require.ErrorContains(t, m.Unmount(ctx, "keep"), "in use")
	require.NoError(t, busy.Process.Kill())
	_ = busy.Wait()

	require.NoError(t, m.Unmount(ctx, "keep"))
	require.Empty(t, mountsAt(t, dir))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries, "unmounted, the mount point is an empty directory")
	require.NoError(t, m.Unmount(ctx, "keep"), "unmounting twice is fine")

	dir, err = m.Open(ctx, "keep")
	require.NoError(t, err)
	b, err := os.ReadFile(filepath.Join(dir, "kept.txt"))
	require.NoError(t, err)
	require.Equal(t, "still here", string(b))
}

func TestSweepUnmountsOnlyIdleWorkspaces(t *testing.T) {
	t.Parallel()
	m := manager(t, wsquota.Config{})
	ctx := context.Background()
	for _, id := range []string{"done", "live"} {
		_, err := m.Open(ctx, id)
		require.NoError(t, err)
	}
	var asked []string
	var mu sync.Mutex
	swept, err := m.Sweep(ctx, func(_ context.Context, id string) bool {
		mu.Lock()
		asked = append(asked, id)
		mu.Unlock()
		return id == "done"
	})
	require.NoError(t, err)
	require.Equal(t, []string{"done"}, swept)
	require.ElementsMatch(t, []string{"done", "live"}, asked)
	ids, err := m.Mounted()
	require.NoError(t, err)
	require.Equal(t, []string{"live"}, ids)
}

func TestUnmountAllLeavesNoMountOrLoopDevice(t *testing.T) {
	t.Parallel()
	wsquotatest.Require(t)
	root := t.TempDir()
	m, err := wsquota.New(root, wsquota.Config{Quota: testQuota})
	require.NoError(t, err)
	for _, id := range []string{"x", "y"} {
		_, err := m.Open(context.Background(), id)
		require.NoError(t, err)
	}
	require.NoError(t, wsquota.UnmountAll(root))
	ids, err := m.Mounted()
	require.NoError(t, err)
	require.Empty(t, ids)
	require.Eventually(t, func() bool {
		files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
		for _, f := range files {
			if b, _ := os.ReadFile(f); strings.HasPrefix(string(b), root+"/") {
				return false
			}
		}
		return true
	}, 5*time.Second, 20*time.Millisecond, "every loop device on the images detached")
}

func TestFreeDiskGuard(t *testing.T) {
	t.Parallel()
	m := manager(t, wsquota.Config{})
	ctx := context.Background()
	_, err := m.Open(ctx, "existing")
	require.NoError(t, err)
	require.NoError(t, m.CheckFree(), "the default guard passes on this disk")

	// A second manager on the same root whose guard no disk can satisfy.
	full, err := wsquota.New(m.Root(), wsquota.Config{Quota: testQuota, MinFree: wsquota.MinFree{Bytes: 1 << 60}})
	require.NoError(t, err)
	err = full.CheckFree()
	require.ErrorIs(t, err, wsquota.ErrDiskFull)
	require.Regexp(t, `^workspaces disk nearly full: [\d.]+ [KMGT]iB free of [\d.]+ [KMGT]iB at `+m.Root()+`, below workspace_min_free 1024\.0 PiB`, err.Error())

	_, err = full.Open(ctx, "new")
	require.ErrorIs(t, err, wsquota.ErrDiskFull, "a new workspace is refused")
	_, statErr := os.Stat(full.Image("new"))
	require.ErrorIs(t, statErr, os.ErrNotExist)
	dir, err := full.Open(ctx, "existing")
	require.NoError(t, err, "an existing workspace goes on")
	require.Equal(t, m.Dir("existing"), dir)

	// Percentages, and a root that does not exist yet is measured where it will be.
	pct, err := wsquota.New(filepath.Join(m.Root(), "not", "yet"), wsquota.Config{MinFree: wsquota.MinFree{Percent: 99.99}})
	require.NoError(t, err)
	require.ErrorIs(t, pct.CheckFree(), wsquota.ErrDiskFull)
	off, err := wsquota.New(m.Root(), wsquota.Config{})
	require.NoError(t, err)
	require.NoError(t, off.CheckFree(), "min free 0 is off")
}

func TestOpenRefusesWhatItCannotDo(t *testing.T) {
	t.Parallel()
	m := manager(t, wsquota.Config{})
	ctx := context.Background()
	for _, id := range []string{"", ".images", "../x", "a/b", ".hidden"} {
		_, err := m.Open(ctx, id)
		require.ErrorContains(t, err, "want a plain name", "id %q", id)
	}

	// Files in a plain directory would be hidden by the mount.
	plain := m.Dir("plain")
	require.NoError(t, os.MkdirAll(plain, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(plain, "old.txt"), []byte("x"), 0o644))
	_, err := m.Open(ctx, "plain")
	require.ErrorIs(t, err, wsquota.ErrNotEmpty)
	require.ErrorContains(t, err, "workspace_quota: 0")

	// A missing mkfs names itself and the way out; nothing is mounted.
	noMkfs, err := wsquota.New(m.Root(), wsquota.Config{Quota: testQuota, Mkfs: "/nonexistent/mkfs.ext4"})
	require.NoError(t, err)
	_, err = noMkfs.Open(ctx, "x")
	require.ErrorIs(t, err, wsquota.ErrUnavailable)
	require.ErrorContains(t, err, "/nonexistent/mkfs.ext4")
	require.ErrorContains(t, err, "install e2fsprogs")
	require.ErrorContains(t, err, "set workspace_quota: 0 (AETHERIUM_WORKSPACE_QUOTA=0)")
	require.Empty(t, mountsAt(t, noMkfs.Dir("x")))
}

func TestQuotaZeroIsAPlainDirectory(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	m, err := wsquota.New(root, wsquota.Config{})
	require.NoError(t, err)
	require.NoError(t, m.Check())
	dir, err := m.Open(context.Background(), "run")
	require.NoError(t, err)
	fi, err := os.Stat(dir)
	require.NoError(t, err)
	require.True(t, fi.IsDir())
	_, err = os.Stat(filepath.Join(root, wsquota.ImagesDir))
	require.ErrorIs(t, err, os.ErrNotExist, "no images without a quota")
	_, ok := wsquota.UsageOf(dir)
	require.False(t, ok)

	full, err := wsquota.New(root, wsquota.Config{MinFree: wsquota.MinFree{Bytes: 1 << 60}})
	require.NoError(t, err)
	_, err = full.Open(context.Background(), "new")
	require.ErrorIs(t, err, wsquota.ErrDiskFull, "the guard holds without quotas too")
	_, err = full.Open(context.Background(), "run")
	require.NoError(t, err)
}

// A workspace unmounted here while another mount namespace (a sandbox container's)
// still has it is mounted again from the same loop device: one ext4 instance on
// the image, never two (which would corrupt it). The other namespace sees what is
// written after the remount.
func TestRemountReusesTheLoopDeviceAnotherNamespaceHolds(t *testing.T) {
	t.Parallel()
	m := manager(t, wsquota.Config{})
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("unshare (util-linux) not installed")
	}
	ctx := context.Background()
	dir, err := m.Open(ctx, "held")
	require.NoError(t, err)
	before := mountsAt(t, dir)
	require.Len(t, before, 1)

	holder := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", `echo ready; read x; cat "$1/later.txt"`, "sh", dir)
	stdin, err := holder.StdinPipe()
	require.NoError(t, err)
	stdout, err := holder.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, holder.Start())
	t.Cleanup(func() { _ = holder.Process.Kill(); _ = holder.Wait() })
	out := bufio.NewReader(stdout)
	line, err := out.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "ready\n", line)

	require.NoError(t, m.Unmount(ctx, "held"))
	dir, err = m.Open(ctx, "held")
	require.NoError(t, err)
	after := mountsAt(t, dir)
	require.Len(t, after, 1)
	require.Equal(t, before[0].source, after[0].source, "the same loop device")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "later.txt"), []byte("one filesystem\n"), 0o644))

	_, err = stdin.Write([]byte("go\n"))
	require.NoError(t, err)
	line, err = out.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "one filesystem\n", line, "the other namespace sees the write: a single ext4 instance")
}
