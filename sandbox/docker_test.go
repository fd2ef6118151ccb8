package sandbox_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/sandbox"
	"github.com/aetherium-engine/aetherium/sandbox/sandboxtest"
)

// setup returns a Docker executor and a fresh project on it.
func setup(t *testing.T, configure ...func(*sandbox.Config)) (*sandbox.Docker, fixture) {
	t.Helper()
	d := sandboxtest.Docker(t, configure...)
	return d, fixture{x: d, project: sandboxtest.Project(), ws: sandboxtest.Workspace(t)}
}

func TestDockerLockdown(t *testing.T) {
	t.Parallel()
	d, f := setup(t)
	res := f.run(t, "id -u; id -g; grep -E '^(CapPrm|CapEff|CapBnd|NoNewPrivs)' /proc/self/status")
	require.Equal(t, 0, res.ExitCode, res.Output)
	lines := strings.Split(strings.TrimSpace(res.Output), "\n")
	require.Equal(t, []string{"10001", "10001"}, lines[:2], "non-root user")
	status := map[string]string{}
	for _, l := range lines[2:] {
		k, v, _ := strings.Cut(l, ":")
		status[k] = strings.TrimSpace(v)
	}
	require.Equal(t, "0000000000000000", status["CapPrm"])
	require.Equal(t, "0000000000000000", status["CapEff"])
	require.Equal(t, "0000000000000000", status["CapBnd"], "every capability dropped")
	require.Equal(t, "1", status["NoNewPrivs"])

	info, err := d.Inspect(context.Background(), f.project)
	require.NoError(t, err)
	hc := info.HostConfig
	require.True(t, hc.ReadonlyRootfs)
	require.Equal(t, []string{"ALL"}, []string(hc.CapDrop))
	require.Contains(t, hc.SecurityOpt, "no-new-privileges")
	require.Equal(t, "none", string(hc.NetworkMode))
	require.EqualValues(t, 256<<20, hc.Memory)
	require.EqualValues(t, 256<<20, hc.MemorySwap, "no swap beyond the memory cap")
	require.EqualValues(t, 1e9, hc.NanoCPUs)
	require.NotNil(t, hc.PidsLimit)
	require.EqualValues(t, 128, *hc.PidsLimit)
	require.Equal(t, "10001:10001", info.Config.User)
	require.Equal(t, f.project, info.Config.Labels[sandbox.LabelProject])
	require.Equal(t, f.ws, info.Config.Labels[sandbox.LabelWorkspace])
	require.Equal(t, "1", info.Config.Labels[sandbox.LabelSandbox])
}

func TestDockerWritesOnlyInWorkspaceAndTmp(t *testing.T) {
	t.Parallel()
	_, f := setup(t)
	// Readable modes on purpose: only the mount may hide the snapshots.
	require.NoError(t, os.MkdirAll(filepath.Join(f.ws, ".aetherium"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(f.ws, ".aetherium", "snapshot"), []byte("host secret"), 0o644))
	cases := []struct {
		cmd string
		ok  bool
	}{
		{"echo x > /workspace/ok.txt", true},
		{"mkdir -p /workspace/a/b && echo x > /workspace/a/b/c", true},
		{"echo x > /tmp/ok.txt", true},
		{"echo x > /newfile", false},
		{"echo x >> /etc/passwd", false},
		{"echo x >> /etc/hosts", false},
		{"echo x > /etc/newfile", false},
		{"echo x > /bin/newfile", false},
		{"rm -f /bin/ls", false},
		{"echo x > /usr/newfile", false},
		{"echo x > /dev/newfile", false},
		{"echo x > /dev/shm/newfile", false},
		{"echo x > /proc/sys/kernel/hostname", false},
		{"echo x > /sys/newfile", false},
		{"mkdir /root", false},
		{"echo x > /workspace/.aetherium/forged", false},
		{"cat /workspace/.aetherium/snapshot", false},
		{"mount -t tmpfs none /mnt", false},
		{"chroot / true", false},
	}
	for _, c := range cases {
		res := f.run(t, c.cmd)
		require.Equal(t, c.ok, res.ExitCode == 0, "%s → %d: %s", c.cmd, res.ExitCode, res.Output)
	}
	require.FileExists(t, filepath.Join(f.ws, "ok.txt"))
	require.FileExists(t, filepath.Join(f.ws, "a", "b", "c"))
	require.Equal(t, "", f.run(t, "ls -A /workspace/.aetherium").Output, "snapshots are hidden from commands")
	b, err := os.ReadFile(filepath.Join(f.ws, ".aetherium", "snapshot"))
	require.NoError(t, err)
	require.Equal(t, "host secret", string(b))
}

func TestDockerHasNoNetwork(t *testing.T) {
	t.Parallel()
	_, f := setup(t)
	// A listener on the host's loopback: the container must not reach it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	var accepted atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			_ = c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port

	res := f.run(t, "cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '")
	require.Equal(t, "lo\n", res.Output, "only the loopback interface")
	res = f.run(t, "tail -n +2 /proc/net/route | wc -l")
	require.Equal(t, "0", strings.TrimSpace(res.Output), "no routes")
	res = f.run(t, fmt.Sprintf("nc -w 2 127.0.0.1 %d </dev/null", port))
	require.NotEqual(t, 0, res.ExitCode, res.Output)
	res = f.run(t, "nslookup -timeout=1 example.com 2>&1")
	require.NotEqual(t, 0, res.ExitCode, res.Output)
	require.Zero(t, accepted.Load(), "the host listener saw a connection from the sandbox")
}

// Egress is only ever the egress proxy (egressproxy's tests): an executor without
// one never hands out the default bridge, an unfiltered way out.
func TestDockerNoEgressWithoutProxy(t *testing.T) {
	t.Parallel()
	d, f := setup(t)
	_, err := d.Exec(context.Background(), sandbox.Request{Project: f.project, Workspace: f.ws, Command: "true", Network: true})
	require.NoError(t, err)
	info, err := d.Inspect(context.Background(), f.project)
	require.NoError(t, err)
	require.Equal(t, "none", string(info.HostConfig.NetworkMode))
	require.Equal(t, "none", info.Config.Labels[sandbox.LabelNetwork])

	// egress_network none refuses egress to every team.
	d2, g := setup(t, func(c *sandbox.Config) { c.Docker.EgressNetwork = "none" })
	_, err = d2.Exec(context.Background(), sandbox.Request{Project: g.project, Workspace: g.ws, Command: "true", Network: true})
	require.NoError(t, err)
	info, err = d2.Inspect(context.Background(), g.project)
	require.NoError(t, err)
	require.Equal(t, "none", string(info.HostConfig.NetworkMode))
}

func TestDockerTimeoutKillsEscapedProcesses(t *testing.T) {
	t.Parallel()
	_, f := setup(t)
	// setsid leaves the process group; the exec marker still finds it.
	res, err := f.x.Exec(context.Background(), sandbox.Request{
		Project: f.project, Workspace: f.ws, Timeout: time.Second,
		Command: "setsid sleep 31341 & sh -c 'sleep 31342' & sleep 31343",
	})
	require.NoError(t, err)
	require.True(t, res.TimedOut)
	require.Eventually(t, func() bool { return f.running(t, "sleep 3134[1]|sleep 3134[2]|sleep 3134[3]") == 0 }, 10*time.Second, 100*time.Millisecond)
}

func TestDockerOutputCap(t *testing.T) {
	t.Parallel()
	_, f := setup(t, func(c *sandbox.Config) { c.MaxOutputBytes = 1000 })
	res := f.run(t, "head -c 5000 /dev/zero | tr '\\0' a; echo; echo done >&2")
	require.True(t, res.Truncated)
	require.EqualValues(t, 5006, res.OutputBytes)
	require.Contains(t, res.Output, "[... output truncated: 4006 of 5006 bytes omitted ...]")
	require.True(t, strings.HasSuffix(res.Output, "a\ndone\n"), res.Output)
}

func TestDockerPidsLimit(t *testing.T) {
	t.Parallel()
	_, f := setup(t)
	res := f.run(t, "i=0; while [ $i -lt 200 ]; do sleep 2 </dev/null >/dev/null 2>&1 & i=$((i+1)); done; echo spawned")
	require.Contains(t, res.Output, "fork", "the pids limit (128) stops a fork storm")
}

func TestDockerOneContainerPerProject(t *testing.T) {
	t.Parallel()
	d, f := setup(t)
	g := fixture{x: d, project: sandboxtest.Project(), ws: sandboxtest.Workspace(t)}
	f.run(t, "echo one > /tmp/mark")
	require.Equal(t, "one\n", f.run(t, "cat /tmp/mark").Output, "same container between calls")
	require.NotEqual(t, 0, g.run(t, "cat /tmp/mark").ExitCode, "projects do not share a container")
	projects, err := d.Projects(context.Background())
	require.NoError(t, err)
	require.ElementsMatch(t, []string{f.project, g.project}, projects)
}

func TestDockerRecoversFromARemovedContainer(t *testing.T) {
	t.Parallel()
	d, f := setup(t)
	f.run(t, "echo keep > kept.txt")
	out, err := exec.Command("docker", "rm", "-f", d.ContainerName(f.project)).CombinedOutput()
	require.NoError(t, err, string(out))
	require.Equal(t, "keep\n", f.run(t, "cat kept.txt").Output)
}

func TestDockerCleanupOrphans(t *testing.T) {
	t.Parallel()
	d, f := setup(t)
	g := fixture{x: d, project: sandboxtest.Project(), ws: sandboxtest.Workspace(t)}
	f.run(t, "true")
	g.run(t, "true")
	n, err := d.CleanupOrphans(context.Background(), func(p string) bool { return p == f.project })
	require.NoError(t, err)
	require.Equal(t, 1, n)
	projects, err := d.Projects(context.Background())
	require.NoError(t, err)
	require.Equal(t, []string{f.project}, projects)
	_, err = d.Inspect(context.Background(), g.project)
	require.ErrorIs(t, err, sandbox.ErrNoSandbox)

	// Another scope's containers are never touched.
	other, h := setup(t)
	h.run(t, "true")
	n, err = d.CleanupOrphans(context.Background(), func(string) bool { return false })
	require.NoError(t, err)
	require.Equal(t, 1, n)
	_, err = other.Inspect(context.Background(), h.project)
	require.NoError(t, err)
}

func TestDockerLogs(t *testing.T) {
	t.Parallel()
	d, f := setup(t)
	_, err := d.Logs(context.Background(), f.project, sandbox.LogOptions{})
	require.ErrorIs(t, err, sandbox.ErrNoSandbox)
	f.run(t, "for i in 1 2 3 4 5; do echo line-$i >> /tmp/console.log; done")
	require.Eventually(t, func() bool {
		out, err := d.Logs(context.Background(), f.project, sandbox.LogOptions{Tail: 2})
		return err == nil && out == "line-4\nline-5\n"
	}, 10*time.Second, 100*time.Millisecond)
	out, err := d.Logs(context.Background(), f.project, sandbox.LogOptions{Since: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	require.Empty(t, out, "since in the future drops everything")
}

func TestDockerRefusesRootAndMissingImage(t *testing.T) {
	t.Parallel()
	sandboxtest.BuildImage(t)
	for _, user := range []string{"0", "0:0", "root", "1000:abc"} {
		cfg := sandboxtest.Config()
		cfg.Docker.User = user
		_, err := sandbox.NewDocker(context.Background(), cfg, nil)
		require.Error(t, err, user)
	}
	cfg := sandboxtest.Config()
	cfg.Docker.Image = sandbox.ImageSet{sandbox.PurposeDefault: "aetherium-sandbox-does-not-exist:latest"}
	_, err := sandbox.NewDocker(context.Background(), cfg, nil)
	require.ErrorIs(t, err, sandbox.ErrNoImage)
}

func TestDockerTimeoutKillsAtThePidsLimit(t *testing.T) {
	t.Parallel()
	_, f := setup(t, func(c *sandbox.Config) { c.Docker.PidsLimit = 40 })
	// Fill the pids limit exactly (builtins only, so the shell never fails a fork),
	// then become a sleep: the kill script must work without forking.
	res, err := f.x.Exec(context.Background(), sandbox.Request{
		Project: f.project, Workspace: f.ws, Timeout: 2 * time.Second,
		Command: `p=/sys/fs/cgroup/pids/pids; [ -r $p.max ] || p=/sys/fs/cgroup/pids
read max < $p.max; read cur < $p.current
while [ "$cur" -lt "$max" ]; do sleep 31351 </dev/null >/dev/null 2>&1 & read cur < $p.current; done
exec sleep 31355`,
	})
	require.NoError(t, err)
	require.True(t, res.TimedOut, "%+v", res)
	require.Equal(t, sandbox.ExitTimedOut, res.ExitCode)
	require.Equal(t, 0, f.running(t, "sleep 3135[15]"))
}

func TestDockerTimeoutReplacesAContainerWhoseCommandHides(t *testing.T) {
	t.Parallel()
	d, f := setup(t)
	f.run(t, "echo x > kept.txt")
	before, err := d.Inspect(context.Background(), f.project)
	require.NoError(t, err)
	// The command's own process drops the exec marker: the kill cannot find it and
	// it keeps the output open, so the container is replaced.
	res, err := f.x.Exec(context.Background(), sandbox.Request{
		Project: f.project, Workspace: f.ws, Timeout: time.Second,
		Command: "sleep 31356 & exec env -u AETHERIUM_EXEC sleep 31357",
	})
	require.NoError(t, err)
	require.True(t, res.TimedOut)
	require.Equal(t, sandbox.ExitTimedOut, res.ExitCode)
	require.Equal(t, 0, f.running(t, "sleep 3135[67]"))
	after, err := d.Inspect(context.Background(), f.project)
	require.NoError(t, err)
	require.NotEqual(t, before.ID, after.ID, "a fresh container")
	require.Equal(t, "x\n", f.run(t, "cat kept.txt").Output, "the workspace is intact")
}
