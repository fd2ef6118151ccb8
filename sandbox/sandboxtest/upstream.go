package sandboxtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
)

// Upstream runs busybox httpd in a container on a network of its own (an ordinary
// bridge) serving /hello.txt ("hello-from-upstream"): a web server at an address
// that is not this host's, owned by the test, for egress tests that must not leave
// the machine. It returns the container's address; everything goes at cleanup.
func Upstream(t testing.TB) string {
	t.Helper()
	return UpstreamFiles(t, map[string]string{"hello.txt": "hello-from-upstream\n"})
}

// UpstreamFiles is Upstream serving files (path under the web root → content)
// instead: fixture pages a sandboxed browser loads through the egress proxy
// (which refuses every address of this host, so the fixtures cannot be served
// from a listener here).
func UpstreamFiles(t testing.TB, files map[string]string) string {
	t.Helper()
	BuildImage(t)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		unavailable(t, "docker client: %v", err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	ctx := context.Background()
	name := "aetherium-test-upstream-" + randomHex(4)
	if _, err := cli.NetworkCreate(ctx, name, network.CreateOptions{Driver: "bridge"}); err != nil {
		unavailable(t, "docker network for the upstream: %v", err)
	}
	t.Cleanup(func() { _ = cli.NetworkRemove(context.Background(), name) })
	c, err := cli.ContainerCreate(ctx, &container.Config{
		Image: "aetherium-sandbox:latest", User: "0:0",
		Cmd: []string{"httpd", "-f", "-p", "80", "-h", "/www"},
	}, &container.HostConfig{NetworkMode: container.NetworkMode(name),
		Mounts: []mount.Mount{{Type: mount.TypeBind, Source: dir, Target: "/www", ReadOnly: true}}}, nil, nil, name)
	if err != nil {
		t.Fatalf("upstream container: %v", err)
	}
	t.Cleanup(func() {
		_ = cli.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true})
	})
	if err := cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
		t.Fatalf("upstream container: %v", err)
	}
	info, err := cli.ContainerInspect(ctx, c.ID)
	if err != nil {
		t.Fatalf("upstream container: %v", err)
	}
	ip := info.NetworkSettings.Networks[name].IPAddress
	if strings.TrimSpace(ip) == "" {
		t.Fatalf("upstream container: no address on %s", name)
	}
	return fmt.Sprint(ip)
}
