// Package devicetest wires a simulated Steam Frame headset to the real
// device/steam-frame scripts for tests (the fleet's end-to-end tests use it too).
// APKs for tests come from package apk/apktest.
package devicetest

import (
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aetherium-engine/aetherium/device"
	"github.com/aetherium-engine/aetherium/device/steam-frame/sim"
)

// RepoRoot returns the module root (tests run in their package directory).
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the test directory")
		}
		dir = parent
	}
}

var (
	binOnce sync.Once
	binDir  string
	binErr  error
	binOut  []byte
)

// SimBin builds the simulator with device/steam-frame/sim/build.sh (once per test
// binary) and returns the directory holding its ssh and adb. The build lands in a
// directory named after a hash of the simulator's sources, so test binaries share
// it and a stale build is never reused.
func SimBin(t testing.TB) string {
	t.Helper()
	root := RepoRoot(t)
	binOnce.Do(func() {
		h := sha256.New()
		for _, dir := range []string{"device/apk", "device/fps", "device/steam-frame/sim"} {
			_ = filepath.WalkDir(filepath.Join(root, dir), func(p string, e fs.DirEntry, err error) error {
				if err == nil && !e.IsDir() && (strings.HasSuffix(p, ".go") || strings.HasSuffix(p, ".sh")) {
					b, _ := os.ReadFile(p)
					h.Write([]byte(p))
					h.Write(b)
				}
				return nil
			})
		}
		for _, f := range []string{"go.mod", "go.sum"} {
			b, _ := os.ReadFile(filepath.Join(root, f))
			h.Write(b)
		}
		dir := filepath.Join(os.TempDir(), "aetherium-framesim-"+hex.EncodeToString(h.Sum(nil))[:16])
		if _, err := os.Stat(filepath.Join(dir, "adb")); err == nil {
			binDir = dir
			return
		}
		tmp, err := os.MkdirTemp(os.TempDir(), "aetherium-framesim-build-")
		if err != nil {
			binErr = err
			return
		}
		cmd := exec.Command("bash", filepath.Join(root, "device/steam-frame/sim/build.sh"), tmp)
		if binOut, binErr = cmd.CombinedOutput(); binErr != nil {
			os.RemoveAll(tmp)
			return
		}
		// Another test binary may have won the race; either build is the same.
		if err := os.Rename(tmp, dir); err != nil {
			os.RemoveAll(tmp)
		}
		binDir = dir
	})
	if binErr != nil {
		t.Fatalf("build the headset simulator: %v\n%s", binErr, binOut)
	}
	return binDir
}

// Headset is a simulated headset and the driver config that points the real
// scripts at it.
type Headset struct {
	Config   device.Config
	Scenario sim.Scenario
	// StateDir is the simulator's state (state.json, the simulated /sdcard).
	StateDir string
}

// Sim writes sc to a fresh directory and returns a config whose scripts run against
// it. Intervals are short so a test run takes seconds: captures every 200 ms, a
// 500 ms warm-up and 500 ms of steady state are enough to judge.
func Sim(t testing.TB, sc sim.Scenario) Headset {
	t.Helper()
	bin := SimBin(t)
	dir := t.TempDir()
	if sc.Host == "" {
		sc.Host = "127.0.0.1"
	}
	scPath := filepath.Join(dir, "scenario.yaml")
	if err := sim.WriteScenario(scPath, sc); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	cfg := device.Config{
		Host:            sc.Host,
		User:            sc.User,
		SSHPort:         sc.SSHPort,
		ADBPort:         sc.ADBPort,
		ScriptsDir:      filepath.Join(RepoRoot(t), "device", "steam-frame"),
		SimScenario:     scPath,
		SimBin:          bin,
		SimState:        state,
		CaptureInterval: 200 * time.Millisecond,
		PollInterval:    100 * time.Millisecond,
		WarmUp:          500 * time.Millisecond,
		MinSteady:       500 * time.Millisecond,
		LockTTL:         3 * time.Second,
		ScriptTimeout:   30 * time.Second,
		// Unique per headset: parallel tests on one Redis must not share a lock.
		LockKey: "aetherium:test:steam_frame:" + shortHash(dir),
	}
	return Headset{Config: cfg, Scenario: sc, StateDir: state}
}

// State reads the simulated headset's state.
func (h Headset) State(t testing.TB) sim.State {
	t.Helper()
	st, err := sim.ReadState(h.StateDir)
	if err != nil {
		t.Fatalf("simulator state: %v", err)
	}
	return st
}

// Saves returns the save files on the simulated headset for pkg (name → content).
func (h Headset) Saves(t testing.TB, pkg string) map[string]string {
	t.Helper()
	out := map[string]string{}
	root := sim.SavesDir(h.StateDir, pkg)
	_ = filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err == nil && e.Type().IsRegular() {
			b, _ := os.ReadFile(p)
			rel, _ := filepath.Rel(root, p)
			out[filepath.ToSlash(rel)] = string(b)
		}
		return nil
	})
	return out
}

func shortHash(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:6])
}
