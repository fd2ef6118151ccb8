// Package sandboxtest gives tests a real Docker executor: it builds the sandbox image
// when missing (sandbox/build-image.sh, no registry) and removes every container the
// test created. Without a Docker engine a test fails under CI=true and skips
// otherwise.
package sandboxtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/aetherium-engine/aetherium/internal/testinfra"
	"github.com/aetherium-engine/aetherium/sandbox"
)

func unavailable(t testing.TB, format string, a ...any) {
	t.Helper()
	testinfra.Unavailable(t, "the Docker engine and the sandbox image are required", format, a...)
}

var (
	buildOnce sync.Once
	buildErr  error
)

// BuildImage runs sandbox/build-image.sh once per test binary (it is idempotent and
// returns at once when the image is current).
func BuildImage(t testing.TB) {
	t.Helper()
	buildOnce.Do(func() {
		script, err := repoPath("sandbox/build-image.sh")
		if err != nil {
			buildErr = err
			return
		}
		out, err := exec.Command("bash", script).CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("%s: %v: %s", script, err, out)
		}
	})
	if buildErr != nil {
		unavailable(t, "sandbox image: %v", buildErr)
	}
}

var (
	familyMu    sync.Mutex
	familyBuilt = map[string]error{}
)

// FamilyImage builds the image sandbox/images/<name>.packages describes
// (sandbox/images/build.sh: a no-op when the image is current, minutes of
// debootstrap when not) once per test binary and returns its reference,
// aetherium-<name>:latest. `make test` builds the family first (`make images`).
func FamilyImage(t testing.TB, name string) string {
	t.Helper()
	image := "aetherium-" + name + ":latest"
	familyMu.Lock()
	err, done := familyBuilt[name]
	if !done {
		var script string
		if script, err = repoPath("sandbox/images/build.sh"); err == nil {
			if out, runErr := exec.Command("bash", script, name).CombinedOutput(); runErr != nil {
				err = fmt.Errorf("%s %s: %v: %s", script, name, runErr, tail(out, 2000))
			}
		}
		familyBuilt[name] = err
	}
	familyMu.Unlock()
	if err != nil {
		unavailable(t, "sandbox image %s: %v", image, err)
	}
	return image
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// Docker returns a Docker executor in a private scope; its containers are removed at
// cleanup. configure, when given, edits the config first.
func Docker(t testing.TB, configure ...func(*sandbox.Config)) *sandbox.Docker {
	t.Helper()
	if _, err := exec.LookPath("docker"); err != nil {
		unavailable(t, "docker CLI not installed")
	}
	BuildImage(t)
	cfg := Config()
	for _, c := range configure {
		c(&cfg)
	}
	d, err := sandbox.NewDocker(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if errors.Is(err, sandbox.ErrNoEngine) {
		unavailable(t, "%v", err)
	}
	if err != nil {
		t.Fatalf("docker executor: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := d.CleanupOrphans(ctx, func(string) bool { return false }); err != nil {
			t.Errorf("remove test sandboxes: %v", err)
		}
		_ = d.Close()
	})
	return d
}

// Config is a test sandbox config: a private scope and short timeouts.
func Config() sandbox.Config {
	return sandbox.Config{
		Kind:    "docker",
		Timeout: 30 * time.Second,
		Docker:  sandbox.DockerConfig{Scope: "test-" + randomHex(5), MemoryBytes: 256 << 20, PidsLimit: 128},
	}
}

// Workspace returns a fresh workspace directory.
func Workspace(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	ws := filepath.Join(dir, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	return ws
}

// Project returns a unique project id.
func Project() string { return "proj-" + randomHex(6) }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func repoPath(rel string) (string, error) {
	root, err := testinfra.RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, rel), nil
}

// Media returns a Docker executor whose media purpose is the real media image
// (sandbox/images/media.packages, built by FamilyImage when missing) with room
// for ffmpeg and espeak-ng (512 MiB, 2-minute one-shots).
func Media(t testing.TB) *sandbox.Docker {
	t.Helper()
	img := FamilyImage(t, "media")
	return Docker(t, func(c *sandbox.Config) {
		c.Docker.Image = sandbox.ImageSet{sandbox.PurposeMedia: img}
		c.Docker.MemoryBytes = 512 << 20
		c.Timeout = 2 * time.Minute
	})
}
