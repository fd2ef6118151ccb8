package sandboxtest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
)

// Upstream runs busybox httpd in a container on a network of its own (an ordinary
// bridge) serving /hello.txt ("hello-from-upstream"): a web server at an address
// that is not this host's, owned by the test, for egress tests that must not leave
// the machine. It returns the container's address; everything goes at cleanup.
func Upstream(t testing.TB) string {
	t.Helper()
	BuildImage(t)
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
		Cmd: []string{"/bin/sh", "-c", "mkdir -p /tmp/www && echo hello-from-upstream > /tmp/www/hello.txt && exec httpd -f -p 80 -h /tmp/www"},
	}, &container.HostConfig{NetworkMode: container.NetworkMode(name)}, nil, nil, name)
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
