// Package simimage builds the TTS simulator's image for tests (apart from
// package ttssim so the simulator's binary links no Docker client).
package simimage

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/docker/docker/client"

	"github.com/aetherium-engine/aetherium/gpu/gputest"
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
