// Package simimage builds the TTS simulator's image for tests and starts it as
// a leased GPU service (apart from package ttssim so the simulator's binary
// links no Docker client).
package simimage

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	dockerimage "github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"github.com/redis/go-redis/v9"

	"github.com/aetherium-engine/aetherium/gpu"
	"github.com/aetherium-engine/aetherium/gpu/gputest"
	"github.com/aetherium-engine/aetherium/internal/testdb"
	"github.com/aetherium-engine/aetherium/internal/testinfra"
	"github.com/aetherium-engine/aetherium/lease"
	"github.com/aetherium-engine/aetherium/media/voice/ttssim"
)

// Port is the port the image's simulator listens on.
const Port = ttssim.DefaultPort

// BuildImage compiles cmd/ttssim as a static binary (the go command of the
// caller's module) and builds a FROM-scratch image of it under tag through the
// Engine API: nothing is pulled, as with the stand-in GPU image (gpu/gputest).
func BuildImage(ctx context.Context, dc *client.Client, tag string) error {
	dir, err := os.MkdirTemp("", "ttssim-build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "ttssim")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "github.com/aetherium-engine/aetherium/cmd/ttssim")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build ttssim: %v: %s", err, out)
	}
	body, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	return gputest.BuildContext(ctx, dc, tag, []gputest.File{
		{Name: "Dockerfile", Mode: 0o644, Body: []byte(fmt.Sprintf("FROM scratch\nCOPY ttssim /ttssim\nUSER 10001:10001\nEXPOSE %d\nCMD [\"/ttssim\", \"-addr\", \":%d\"]\n", Port, Port))},
		{Name: "ttssim", Mode: 0o755, Body: body},
	})
}

// Sim is the simulator running as a leased GPU service.
type Sim struct {
	// Ctx holds the grant on the service (lease.GrantFrom), as a run's step does.
	Ctx   context.Context
	Grant lease.Grant
	// URL is the service's base URL on the host.
	URL    string
	GPU    *gpu.Controller
	Leases *lease.Manager
}

var image struct {
	mu  sync.Mutex
	tag string
	err error
}

// Image builds the simulator's image once per test binary and returns its tag
// (Cleanup removes it).
func Image(ctx context.Context, dc *client.Client) (string, error) {
	image.mu.Lock()
	defer image.mu.Unlock()
	if image.tag == "" && image.err == nil {
		b := make([]byte, 5)
		_, _ = rand.Read(b)
		tag := "aetherium-test/ttssim:" + hex.EncodeToString(b)
		if image.err = BuildImage(ctx, dc, tag); image.err == nil {
			image.tag = tag
		}
	}
	return image.tag, image.err
}

// Cleanup removes the image Image built; call it from TestMain after m.Run.
func Cleanup() {
	image.mu.Lock()
	defer image.mu.Unlock()
	if image.tag == "" {
		return
	}
	if dc, err := gpu.NewDockerClient(); err == nil {
		_, _ = dc.ImageRemove(context.Background(), image.tag, dockerimage.RemoveOptions{Force: true, PruneChildren: true})
	}
}

// Start starts the simulator as the service named service through the lease
// controller — a lease.Service with the image, a published port and a health
// URL, Acquire'd by a run holder — exactly as a real vllm-omni container would
// be, with a fresh Redis. The container is removed at cleanup.
func Start(t testing.TB, service string) *Sim {
	t.Helper()
	dc, err := gpu.NewDockerClient()
	if err != nil {
		testinfra.Unavailable(t, "the Docker engine is required", "docker client: %v", err)
	}
	t.Cleanup(func() { _ = dc.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	if _, err := dc.Ping(ctx); err != nil {
		testinfra.Unavailable(t, "the Docker engine is required", "docker: %v", err)
	}
	tag, err := Image(ctx, dc)
	if err != nil {
		t.Fatalf("ttssim image: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	// StartTimeout bounds the Docker engine's own create/start calls too: on
	// a loaded CI machine a container start alone took over 30 s (a failed
	// TestQwenOnTheSimulator, "start container …: context deadline exceeded").
	svc := lease.Service{
		Name: service, Capacity: 1, TTL: time.Minute, Image: tag,
		Container: "aetherium-test-ttssim-" + hex.EncodeToString(b),
		Ports:     []string{fmt.Sprintf("127.0.0.1:%d:%d", port, Port)},
		HealthURL: base + "/health", StartTimeout: 90 * time.Second, IdleStop: time.Minute,
	}
	t.Cleanup(func() {
		_ = dc.ContainerRemove(context.Background(), svc.Container, container.RemoveOptions{Force: true})
	})
	opt, err := redis.ParseURL(testdb.Redis(t))
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	lm, err := lease.New(rdb, lease.Config{Services: []lease.Service{svc}}, lease.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := gpu.New(gpu.Config{HealthPoll: 50 * time.Millisecond, StopTimeout: time.Second}, gpu.Deps{Leases: lm, Docker: dc})
	if err != nil {
		t.Fatal(err)
	}
	g, err := ctl.Acquire(ctx, service, "run-"+hex.EncodeToString(b))
	if err != nil {
		t.Fatalf("acquire %s (starts the simulator): %v", service, err)
	}
	return &Sim{Ctx: lease.WithGrants(ctx, g), Grant: g, URL: base, GPU: ctl, Leases: lm}
}

// Requests are what the simulator has received (GET /requests).
func (s *Sim) Requests(t testing.TB) []ttssim.Request {
	t.Helper()
	resp, err := http.Get(s.URL + "/requests")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []ttssim.Request
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out
}
