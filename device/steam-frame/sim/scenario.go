// Package sim is the Steam Frame headset simulator: stand-ins for the ssh and adb
// commands the device/steam-frame scripts run, so the scripts themselves are what
// runs in tests and on a laptop without a headset. One binary (cmd/framesim, built
// by build.sh) answers as ssh or adb depending on the name it is called by.
//
// It is driven by a scenario file (YAML, FRAME_SIM_SCENARIO) and keeps the simulated
// headset's state — container up or down, adb connection, installed packages, the
// running app, the log, the files under /sdcard — in a directory (FRAME_SIM_STATE),
// so consecutive invocations see one consistent headset. It answers only the
// command shapes the scripts use, and refuses anything else loudly (exit 127) so a
// script that drifts from what a real headset would accept fails in tests.
package sim

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/aetherium-engine/aetherium/internal/defaults"
)

// Scenario describes the simulated headset. Zero values are the healthy defaults:
// reachable, paired, container running, adb authorized.
type Scenario struct {
	// Host, SSHPort, ADBPort and User are what ssh and adb must be pointed at;
	// anything else is "connection refused" (a misconfiguration shows up in tests).
	// Defaults 127.0.0.1, 22, 5555, deck.
	Host    string `yaml:"host,omitempty"`
	User    string `yaml:"user,omitempty"`
	SSHPort int    `yaml:"ssh_port,omitempty"`
	ADBPort int    `yaml:"adb_port,omitempty"`
	// Key, when set, is the only ssh identity (-i) the headset accepts.
	Key string `yaml:"key,omitempty"`

	// Unreachable: nothing answers (ssh and adb connections refused).
	Unreachable bool `yaml:"unreachable,omitempty"`
	// Unpaired: sshd answers but refuses this host's key.
	Unpaired bool `yaml:"unpaired,omitempty"`
	// ADBUnauthorized: the container never authorizes this host's adb key.
	ADBUnauthorized bool `yaml:"adb_unauthorized,omitempty"`
	// ContainerStopped: the Android container is down until something starts it.
	ContainerStopped bool `yaml:"container_stopped,omitempty"`
	// StartClearsSaves: starting the container loses every app's saves (the state a
	// restart can leave behind, which frame_install repairs from the workspace).
	StartClearsSaves bool `yaml:"start_clears_saves,omitempty"`

	// Installed are the packages on the headset at the start.
	Installed map[string]Package `yaml:"installed,omitempty"`
	// Saves are the save files on the headset at the start: package → name → content.
	Saves map[string]map[string]string `yaml:"saves,omitempty"`

	// App is how any launched app behaves.
	App App `yaml:"app,omitempty"`
	// CaptureWidth and CaptureHeight size screencaps. Default 640×360.
	CaptureWidth  int `yaml:"capture_width,omitempty"`
	CaptureHeight int `yaml:"capture_height,omitempty"`
}

// Package is an installed package.
type Package struct {
	VersionName string `yaml:"version_name"`
	VersionCode int64  `yaml:"version_code"`
}

// App is the launched app's behaviour.
type App struct {
	// ExitAfter: the wearer leaves the app this long after launch. 0 means never.
	ExitAfter time.Duration `yaml:"exit_after,omitempty"`
	// CrashAfter: the app dies with a fatal exception this long after launch (wins
	// over ExitAfter when earlier). 0 means never.
	CrashAfter time.Duration `yaml:"crash_after,omitempty"`
	// Frames is the frame-time profile the compositor records.
	Frames Profile `yaml:"frames,omitempty"`
	// WritesSaves are files the app writes into its saves when the wearer exits.
	WritesSaves map[string]string `yaml:"writes_saves,omitempty"`
}

// Profile generates the performance recording.
type Profile struct {
	// FPS is the steady frame rate. Default 72.
	FPS float64 `yaml:"fps,omitempty"`
	// JitterMs is uniform noise (±) on each steady frame.
	JitterMs float64 `yaml:"jitter_ms,omitempty"`
	// WarmUp is how long frames take WarmUpFrameMs after the recording starts.
	WarmUp        time.Duration `yaml:"warm_up,omitempty"`
	WarmUpFrameMs float64       `yaml:"warm_up_frame_ms,omitempty"`
	// LongEvery makes every n-th steady frame take LongFrameMs.
	LongEvery   int     `yaml:"long_every,omitempty"`
	LongFrameMs float64 `yaml:"long_frame_ms,omitempty"`
	// Seed fixes the jitter.
	Seed uint64 `yaml:"seed,omitempty"`
}

func (s Scenario) withDefaults() Scenario {
	s.Host = cmp.Or(s.Host, "127.0.0.1")
	s.User = cmp.Or(s.User, "deck")
	s.SSHPort = cmp.Or(s.SSHPort, 22)
	s.ADBPort = cmp.Or(s.ADBPort, 5555)
	if s.CaptureWidth <= 0 || s.CaptureHeight <= 0 {
		s.CaptureWidth, s.CaptureHeight = 640, 360
	}
	s.App.Frames.FPS = defaults.Positive(s.App.Frames.FPS, 72)
	return s
}

// Serial is the adb serial of the simulated headset.
func (s Scenario) Serial() string {
	s = s.withDefaults()
	return fmt.Sprintf("%s:%d", s.Host, s.ADBPort)
}

// LoadScenario reads a scenario file strictly.
func LoadScenario(path string) (Scenario, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Scenario{}, fmt.Errorf("scenario: %w", err)
	}
	var s Scenario
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&s); err != nil && !errors.Is(err, io.EOF) {
		return Scenario{}, fmt.Errorf("scenario %s: %w", path, err)
	}
	return s.withDefaults(), nil
}

// WriteScenario writes s as YAML to path.
func WriteScenario(path string, s Scenario) error {
	raw, err := yaml.Marshal(s)
	if err != nil {
		return err
	}
	return os.WriteFile(path, raw, 0o644)
}
