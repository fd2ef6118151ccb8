package sandbox_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/sandbox"
	"github.com/aetherium-engine/aetherium/sandbox/sandboxtest"
)

const busybox = "aetherium-sandbox:latest"

// oneShots returns an executor and its scope (to look for leftover containers).
func oneShots(t *testing.T) (*sandbox.Docker, string) {
	t.Helper()
	var scope string
	d := sandboxtest.Docker(t, func(c *sandbox.Config) { scope = c.Docker.Scope })
	return d, scope
}

// leftovers lists the scope's containers as the engine sees them.
func leftovers(t *testing.T, scope string) []string {
	t.Helper()
	out, err := exec.Command("docker", "ps", "-aq", "--filter", "label="+sandbox.LabelScope+"="+scope).CombinedOutput()
	require.NoError(t, err, string(out))
	return strings.Fields(string(out))
}

// A one-shot gets the project sandbox's lockdown: non-root, no capabilities,
// no-new-privileges, read-only root, a writable /tmp, no network interface but
// loopback, read-only mounts unless asked, and its limits.
func TestRunOnceLockdown(t *testing.T) {
	t.Parallel()
	d, scope := oneShots(t)
	in := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(in, "doc.txt"), []byte("mounted-content"), 0o644))
	out := t.TempDir()
	require.NoError(t, os.Chmod(out, 0o777))
	cases := []struct {
		name, cmd string
		want      string
	}{
		{"non-root", "id -u; id -g", "10001\n10001\n"},
		{"no capabilities", "grep -E '^Cap(Prm|Eff|Bnd)' /proc/self/status | cut -f2 | sort -u", "0000000000000000\n"},
		{"no new privileges", "grep NoNewPrivs /proc/self/status | cut -f2", "1\n"},
		{"read-only root", "echo x > /newfile 2>/dev/null && echo wrote || echo refused", "refused\n"},
		{"writable tmp", "echo x > /tmp/f && cat /tmp/f", "x\n"},
		{"no network", "ls /sys/class/net", "lo\n"},
		{"read-only mount", "cat /in/doc.txt; echo; echo x > /in/new 2>/dev/null && echo wrote || echo refused", "mounted-content\nrefused\n"},
		{"writable mount", "echo made > /out/f && cat /out/f", "made\n"},
		// cgroup v1 or v2, whichever the engine's host has.
		{"pids limit", "cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids.max", "64\n"},
		{"memory limit", "cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max", "67108864\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res, err := d.RunOnce(context.Background(), sandbox.OneShot{
				Image: busybox, Cmd: []string{"/bin/sh", "-c", tc.cmd}, Project: "p1",
				Mounts:      []sandbox.Bind{{Source: in, Target: "/in"}, {Source: out, Target: "/out", Writable: true}},
				MemoryBytes: 64 << 20, PidsLimit: 64, Timeout: 30 * time.Second,
			})
			require.NoError(t, err, res.Stderr)
			require.Equal(t, 0, res.ExitCode, res.Stderr)
			require.Equal(t, tc.want, res.Stdout, res.Stderr)
		})
	}
	t.Cleanup(func() { require.Empty(t, leftovers(t, scope), "every one-shot container is removed") })
}

func TestRunOnceResults(t *testing.T) {
	t.Parallel()
	d, _ := oneShots(t)
	ctx := context.Background()
	cases := []struct {
		name      string
		job       sandbox.OneShot
		stdout    string
		stderr    string
		exit      int
		truncated bool
		err       error
		errText   string
	}{
		{name: "streams apart and the exit code", job: sandbox.OneShot{Cmd: []string{"/bin/sh", "-c", "echo out; echo err >&2; exit 3"}},
			stdout: "out\n", stderr: "err\n", exit: 3},
		{name: "stdout keeps its head", job: sandbox.OneShot{Cmd: []string{"/bin/sh", "-c", "echo 0123456789; echo more"}, MaxStdoutBytes: 4},
			stdout: "0123", truncated: true},
		// The timeout includes the container's start, which takes seconds on a
		// loaded machine: the bound leaves room for the echo to run first.
		{name: "timeout kills", job: sandbox.OneShot{Cmd: []string{"/bin/sh", "-c", "echo started; sleep 60"}, Timeout: 8 * time.Second},
			stdout: "started\n", exit: sandbox.ExitTimedOut, err: sandbox.ErrTimedOut, errText: "timed out after 8s"},
		{name: "memory limit", job: sandbox.OneShot{Cmd: []string{"/bin/sh", "-c", `awk 'BEGIN { s = "x"; while (1) s = s s }'`}, MemoryBytes: 32 << 20},
			exit: 137, err: sandbox.ErrOutOfMemory, errText: "32 MiB memory limit"},
		{name: "stdin", job: sandbox.OneShot{Cmd: []string{"/bin/sh", "-c", "cat > /tmp/in && wc -c < /tmp/in && head -c 5 /tmp/in"}, Stdin: strings.NewReader("%PDF-" + strings.Repeat("x", 3<<20))},
			stdout: "3145733\n%PDF-"},
		{name: "stdin left unread", job: sandbox.OneShot{Cmd: []string{"/bin/sh", "-c", "echo bad >&2; exit 1"}, Stdin: strings.NewReader(strings.Repeat("x", 8<<20))},
			stderr: "bad\n", exit: 1},
		{name: "missing image", job: sandbox.OneShot{Image: "aetherium-nosuch:latest", Cmd: []string{"true"}},
			err: sandbox.ErrNoImage, errText: "make images`, or sandbox/images/build.sh nosuch"},
		{name: "no command", job: sandbox.OneShot{}, err: sandbox.ErrInvalidRequest},
		{name: "relative mount", job: sandbox.OneShot{Cmd: []string{"true"}, Mounts: []sandbox.Bind{{Source: "rel", Target: "/x"}}}, err: sandbox.ErrInvalidRequest},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			job := tc.job
			if job.Image == "" && len(job.Cmd) > 0 {
				job.Image = busybox
			}
			start := time.Now()
			res, err := d.RunOnce(ctx, job)
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
				require.ErrorContains(t, err, tc.errText)
			} else {
				require.NoError(t, err)
			}
			require.Less(t, time.Since(start), 25*time.Second)
			require.Equal(t, tc.stdout, res.Stdout)
			require.Equal(t, tc.truncated, res.StdoutTruncated)
			if tc.stderr != "" {
				require.Equal(t, tc.stderr, res.Stderr)
			}
			require.Equal(t, tc.exit, res.ExitCode)
		})
	}
}

// A one-shot whose worker died is the orphan sweep's: it is removed once its run is
// no longer active, and left alone while it is.
func TestRunOnceOrphanSweep(t *testing.T) {
	t.Parallel()
	d, scope := oneShots(t)
	done := make(chan error, 1)
	go func() {
		_, err := d.RunOnce(context.Background(), sandbox.OneShot{Image: busybox, Cmd: []string{"sleep", "120"}, Project: "run-7", Timeout: 2 * time.Minute})
		done <- err
	}()
	require.Eventually(t, func() bool { return len(leftovers(t, scope)) == 1 }, 30*time.Second, 100*time.Millisecond)
	ctx := context.Background()
	n, err := d.CleanupOrphans(ctx, func(p string) bool { return p == "run-7" })
	require.NoError(t, err)
	require.Zero(t, n, "the run is active")
	require.Len(t, leftovers(t, scope), 1)
	projects, err := d.Projects(ctx)
	require.NoError(t, err)
	require.Empty(t, projects, "a one-shot is no project sandbox")

	n, err = d.CleanupOrphans(ctx, func(string) bool { return false })
	require.NoError(t, err)
	require.Equal(t, 1, n)
	select {
	case err := <-done:
		require.Error(t, err, "the removed one-shot ends with an error")
	case <-time.After(30 * time.Second):
		t.Fatal("RunOnce did not return after its container was removed")
	}
	require.Empty(t, leftovers(t, scope))
}

// The browser image of the family: its tools run as the sandbox user, and it holds
// no setuid or setgid file.
func TestBrowserImage(t *testing.T) {
	t.Parallel()
	d, _ := oneShots(t)
	image := sandboxtest.FamilyImage(t, "browser")
	res, err := d.RunOnce(context.Background(), sandbox.OneShot{
		Image: image, Timeout: time.Minute, MemoryBytes: 512 << 20,
		Cmd: []string{"/bin/sh", "-c", "id -un; pdftotext -v 2>&1 | head -1; chromium --version; fc-list | grep -c -i -E 'dejavu|liberation'; find / -xdev -type f -perm /6000 | wc -l"},
	})
	require.NoError(t, err, res.Stderr)
	require.Equal(t, 0, res.ExitCode, res.Stderr)
	lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
	require.Len(t, lines, 5, res.Stdout)
	require.Equal(t, "sandbox", lines[0])
	require.Contains(t, lines[1], "pdftotext version")
	require.Contains(t, lines[2], "Chromium")
	require.NotEqual(t, "0", lines[3], "fonts installed")
	require.Equal(t, "0", lines[4], "no setuid or setgid file")
}
