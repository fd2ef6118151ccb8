package sandbox_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/sandbox"
)

// helperShell reads a command a line from stdin and answers its output, then END.
const helperShell = `while IFS= read -r line; do sh -c "$line" 2>&1; echo END; done`

// ask sends one command line to the helper and reads its answer.
func ask(t *testing.T, a *sandbox.Attached, r *bufio.Reader, cmd string) string {
	t.Helper()
	_, err := io.WriteString(a.Stdin, cmd+"\n")
	require.NoError(t, err)
	var out strings.Builder
	for {
		line, err := r.ReadString('\n')
		require.NoError(t, err, "the helper's stdout ended (stderr: %s)", a.Stderr())
		if line == "END\n" {
			return out.String()
		}
		out.WriteString(line)
	}
}

// A helper container talks over its stdin/stdout through the attach stream, with
// the project sandbox's lockdown and no network at all without egress; asking for
// egress without a proxy is refused; closing its stdin ends it; Release and the
// orphan sweep remove helpers.
func TestStartAttached(t *testing.T) {
	t.Parallel()
	d, scope := oneShots(t)
	ctx := context.Background()
	_, err := d.StartAttached(ctx, sandbox.AttachedJob{Image: busybox, Cmd: []string{"/bin/sh", "-c", helperShell}, Service: "probe", Project: "p1",
		Egress: &sandbox.EgressBinding{Agent: "a", Allowlist: []string{"example.org"}}})
	require.ErrorIs(t, err, sandbox.ErrNoEgress, "no proxy, no network: never an unfiltered one")

	a, err := d.StartAttached(ctx, sandbox.AttachedJob{Image: busybox, Cmd: []string{"/bin/sh", "-c", helperShell}, Service: "probe", Project: "p1",
		MemoryBytes: 64 << 20, PidsLimit: 64})
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Close() })
	require.Empty(t, a.ProxyURL)
	r := bufio.NewReader(a.Stdout)
	for cmd, want := range map[string]string{
		"id -u; id -g": "10001\n10001\n",
		"grep -E '^Cap(Prm|Eff|Bnd)' /proc/self/status | cut -f2 | sort -u":                            "0000000000000000\n",
		"grep NoNewPrivs /proc/self/status | cut -f2":                                                  "1\n",
		"(echo x > /newfile) 2>/dev/null && echo wrote || echo refused":                                "refused\n",
		"echo x > /tmp/f && cat /tmp/f":                                                                "x\n",
		"ls /sys/class/net":                                                                            "lo\n",
		"cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids.max":                  "64\n",
		"cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max": "67108864\n",
		"echo to-stderr >&2": "to-stderr\n",
	} {
		require.Equal(t, want, ask(t, a, r, cmd), cmd)
	}
	out, err := exec.Command("docker", "inspect", "-f", "{{index .Config.Labels \""+sandbox.LabelService+"\"}} {{index .Config.Labels \""+sandbox.LabelProject+"\"}}", a.ID).Output()
	require.NoError(t, err)
	require.Equal(t, "probe p1\n", string(out))
	projects, err := d.Projects(ctx)
	require.NoError(t, err)
	require.NotContains(t, projects, "p1", "a helper is not a project sandbox")

	// EOF on stdin ends the process; the container is removed by Close.
	require.NoError(t, a.Stdin.Close())
	select {
	case <-a.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the helper did not end when its stdin closed")
	}
	require.NoError(t, a.Close())
	require.Empty(t, leftovers(t, scope))

	// Release removes a run's helpers; the sweep removes those of ended runs.
	for _, p := range []string{"p2", "p3"} {
		h, err := d.StartAttached(ctx, sandbox.AttachedJob{Image: busybox, Cmd: []string{"/bin/sh", "-c", helperShell}, Service: "probe", Project: p})
		require.NoError(t, err)
		t.Cleanup(func() { _ = h.Close() })
	}
	require.Len(t, leftovers(t, scope), 2)
	require.NoError(t, d.Release(ctx, "p2"))
	require.Len(t, leftovers(t, scope), 1)
	n, err := d.CleanupOrphans(ctx, func(p string) bool { return p != "p3" })
	require.NoError(t, err)
	require.Equal(t, 1, n, fmt.Sprint(leftovers(t, scope)))
	require.Empty(t, leftovers(t, scope))
}
