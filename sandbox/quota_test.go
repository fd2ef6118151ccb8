package sandbox_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/sandbox/sandboxtest"
	"github.com/aetherium-engine/aetherium/wsquota"
	"github.com/aetherium-engine/aetherium/wsquota/wsquotatest"
)

// A process in the sandbox cannot outrun its workspace's quota: the workspace is a
// filesystem of that size, so dd fails at it, the workspace (and its image on the
// host disk) stays within it, the project can free space and go on, another
// project is untouched, and the container's mountinfo never names the host path.
func TestDockerWorkspaceQuota(t *testing.T) {
	t.Parallel()
	const quota = 16 << 20
	d := sandboxtest.Docker(t)
	m := wsquotatest.Manager(t, quota)
	ctx := context.Background()
	open := func(id string) fixture {
		ws, err := m.Open(ctx, id)
		require.NoError(t, err)
		return fixture{x: d, project: sandboxtest.Project(), ws: ws}
	}
	full, other := open("full"), open("other")

	res := full.run(t, "dd if=/dev/zero of=/workspace/big bs=1M count=32")
	require.NotEqual(t, 0, res.ExitCode, res.Output)
	require.Contains(t, res.Output, "No space left on device")
	qe, ok := wsquota.ExplainCommand(full.ws, res.Output, res.ExitCode)
	require.True(t, ok, "a full quota workspace explains the failure")
	require.Regexp(t, `^workspace quota exceeded: 1[56]\.\d MiB of 16\.0 MiB$`, qe.Error())

	u, ok := wsquota.UsageOf(full.ws)
	require.True(t, ok)
	require.LessOrEqual(t, u.Used, int64(quota))
	require.True(t, u.Full())
	fi, err := os.Stat(filepath.Join(full.ws, "big"))
	require.NoError(t, err)
	require.Less(t, fi.Size(), int64(quota), "the file stopped at the quota")
	img, err := os.Stat(m.Image("full"))
	require.NoError(t, err)
	require.LessOrEqual(t, img.Sys().(*syscall.Stat_t).Blocks*512, int64(quota), "the host disk holds no more than the quota")

	// The other project's workspace is untouched, and its sandbox works.
	res = other.run(t, "echo fine > /workspace/f && cat /workspace/f && df -k /workspace | tail -1")
	require.Equal(t, 0, res.ExitCode, res.Output)
	require.True(t, strings.HasPrefix(res.Output, "fine\n"), res.Output)
	ou, ok := wsquota.UsageOf(other.ws)
	require.True(t, ok)
	require.False(t, ou.Full())

	// The full project frees space and goes on.
	res = full.run(t, "rm /workspace/big && echo again > /workspace/small && cat /workspace/small")
	require.Equal(t, 0, res.ExitCode, res.Output)
	require.Equal(t, "again\n", res.Output)
	_, ok = wsquota.ExplainCommand(full.ws, "No space left on device", 1)
	require.False(t, ok, "not full any more: an ENOSPC now is not the quota's")

	// mountinfo shows a filesystem's root on a loop device, not the host path.
	res = full.run(t, "cat /proc/self/mountinfo")
	require.Equal(t, 0, res.ExitCode, res.Output)
	var line string
	for l := range strings.Lines(res.Output) {
		if f := strings.Fields(l); len(f) > 4 && f[4] == "/workspace" {
			line = l
		}
	}
	require.NotEmpty(t, line, res.Output)
	f := strings.Fields(line)
	require.Equal(t, "/", f[3], "the mount's root is the filesystem's root: %s", line)
	require.Regexp(t, ` - ext4 /dev/loop\d+ `, line)
	require.NotContains(t, res.Output, m.Root(), "the host's workspaces path")
	// The root's own name is t.TempDir's counter ("001", "002"), which a
	// container id may contain by chance; its parent's name is the test's own.
	require.NotContains(t, res.Output, filepath.Base(filepath.Dir(m.Root())))
}

// The documented limit of quota 0: a plain directory is bind-mounted, and the
// container's mountinfo shows its path on the host's filesystem.
func TestDockerPlainWorkspaceShowsItsPath(t *testing.T) {
	t.Parallel()
	_, f := setup(t)
	res := f.run(t, "cat /proc/self/mountinfo")
	require.Equal(t, 0, res.ExitCode, res.Output)
	require.Contains(t, res.Output, f.ws+" /workspace ")
}
