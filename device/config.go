// Package device drives the Steam Frame headset for the device tools. The work is
// done by the bash scripts in device/steam-frame/ (ssh to the headset's SteamOS side,
// adb over TCP to its Android container); this package validates every value before
// it becomes an argv word of those scripts, holds the headset for one call at a time
// (a Redis lock), files everything captured under .frame/ in the run's workspace,
// composes the contact sheet and judges the frame rate against the 72 fps bar.
package device

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/aetherium-engine/aetherium/device/apk"
	"github.com/aetherium-engine/aetherium/device/fps"
	"github.com/aetherium-engine/aetherium/internal/defaults"
)

// Config is the headset connection and the bounds of what agents may ask for (the
// devices.steam_frame section of aetherium.yaml; the fields tagged "-" are not
// configuration keys). Zero fields take the defaults documented per field
// (WithDefaults); New validates the result (Validate).
type Config struct {
	// Host is the headset's address for ssh and adb. Default steam-frame.local.
	Host string `yaml:"host"`
	// User is the SteamOS account ssh logs in as. Default deck.
	User string `yaml:"user"`
	// SSHPort is the headset's sshd port. Default 22.
	SSHPort int `yaml:"ssh_port"`
	// ADBPort is the Android container's adb-over-TCP port. Default 5555.
	ADBPort int `yaml:"adb_port"`
	// KeyPath is the ssh private key paired with the headset. Default empty: ssh's
	// own identity files. The headset's host key must be in known_hosts (pairing);
	// the scripts run ssh with StrictHostKeyChecking=yes and BatchMode=yes.
	KeyPath string `yaml:"key_path"`
	// ScriptsDir holds the device/steam-frame scripts. Default device/steam-frame,
	// relative to the working directory (New makes every path absolute).
	ScriptsDir string `yaml:"scripts_dir"`

	// SimScenario, when set, points the scripts at the headset simulator: the
	// simulator's stand-in ssh and adb come first on the scripts' PATH and read this
	// scenario file. Default empty (the real headset).
	SimScenario string `yaml:"sim_scenario"`
	// SimBin is the directory holding the simulator's ssh and adb (built by
	// device/steam-frame/sim/build.sh). Default <ScriptsDir>/sim/bin.
	SimBin string `yaml:"sim_bin"`
	// SimState is the simulated headset's state directory. Default
	// <SimScenario>.state next to the scenario file.
	SimState string `yaml:"-"`

	// MaxAPKBytes caps an APK. Default 512 MiB.
	MaxAPKBytes int64 `yaml:"-"`
	// MaxUncompressedBytes caps an APK's inflated size (zip-bomb guard). Default 2 GiB.
	MaxUncompressedBytes int64 `yaml:"-"`
	// AndroidAPI is the Android container's API level. Default 30.
	AndroidAPI int `yaml:"-"`

	// MaxRunDuration bounds frame_run's max_seconds. Default 20m: a run, its set-up
	// and the collection after it must fit in one worker task (asynq timeout 30m).
	MaxRunDuration time.Duration `yaml:"max_run_duration"`
	// DefaultRunDuration is frame_run's wait when the agent names none. Default 10m.
	DefaultRunDuration time.Duration `yaml:"-"`
	// CaptureInterval is how often frame_run captures the headset view when the agent
	// names none (agents may ask for 1–60 s). Default 5s.
	CaptureInterval time.Duration `yaml:"capture_interval"`
	// MaxCaptures caps the captures of one run; later ones are skipped. Default 360.
	MaxCaptures int `yaml:"-"`
	// PollInterval is how often frame_run checks whether the app still runs. Default
	// 1s (never longer than the capture interval).
	PollInterval time.Duration `yaml:"-"`

	// WarmUp is excluded from the start of a performance recording. Default 5s.
	WarmUp time.Duration `yaml:"-"`
	// MinSteady is the least steady state the 72 fps check judges. Default 5s.
	MinSteady time.Duration `yaml:"-"`

	// LockKey is the Redis key of the headset lock. Default
	// aetherium:device:steam_frame:lock.
	LockKey string `yaml:"-"`
	// LockTTL is the lock's time to live; a call renews it every third of it, so a
	// crashed holder frees the headset after at most this long. Default 30s.
	LockTTL time.Duration `yaml:"-"`

	// ScriptTimeout bounds one script invocation. Default 2m.
	ScriptTimeout time.Duration `yaml:"-"`
	// InstallTimeout bounds the install script (large APKs over Wi-Fi). Default 10m.
	InstallTimeout time.Duration `yaml:"-"`
}

// Defaults of Config.
const (
	DefaultHost    = "steam-frame.local"
	DefaultUser    = "deck"
	DefaultSSHPort = 22
	DefaultADBPort = 5555
	DefaultScripts = "device/steam-frame"
	DefaultLockKey = "aetherium:device:steam_frame:lock"
	// Bounds of what an agent may ask of frame_run.
	MinRunDuration  = time.Second
	MinCaptureEvery = time.Second
	MaxCaptureEvery = 60 * time.Second
)

// WithDefaults returns c with every zero field filled in.
func (c Config) WithDefaults() Config {
	c.Host = cmp.Or(c.Host, DefaultHost)
	c.User = cmp.Or(c.User, DefaultUser)
	c.SSHPort = defaults.Positive(c.SSHPort, DefaultSSHPort)
	c.ADBPort = defaults.Positive(c.ADBPort, DefaultADBPort)
	c.ScriptsDir = cmp.Or(c.ScriptsDir, DefaultScripts)
	c.LockKey = cmp.Or(c.LockKey, DefaultLockKey)
	if c.SimScenario != "" {
		c.SimBin = cmp.Or(c.SimBin, filepath.Join(c.ScriptsDir, "sim", "bin"))
		c.SimState = cmp.Or(c.SimState, c.SimScenario+".state")
	}
	c.MaxAPKBytes = defaults.Positive(c.MaxAPKBytes, 512<<20)
	c.MaxUncompressedBytes = defaults.Positive(c.MaxUncompressedBytes, 2<<30)
	c.AndroidAPI = defaults.Positive(c.AndroidAPI, 30)
	c.MaxRunDuration = defaults.Positive(c.MaxRunDuration, 20*time.Minute)
	c.DefaultRunDuration = defaults.Positive(c.DefaultRunDuration, 10*time.Minute)
	c.DefaultRunDuration = min(c.DefaultRunDuration, c.MaxRunDuration)
	c.CaptureInterval = defaults.Positive(c.CaptureInterval, 5*time.Second)
	c.MaxCaptures = defaults.Positive(c.MaxCaptures, 360)
	c.PollInterval = defaults.Positive(c.PollInterval, time.Second)
	c.PollInterval = min(c.PollInterval, c.CaptureInterval)
	c.WarmUp = defaults.Positive(c.WarmUp, 5*time.Second)
	c.MinSteady = defaults.Positive(c.MinSteady, 5*time.Second)
	c.LockTTL = defaults.Positive(c.LockTTL, 30*time.Second)
	c.ScriptTimeout = defaults.Positive(c.ScriptTimeout, 2*time.Minute)
	c.InstallTimeout = defaults.Positive(c.InstallTimeout, 10*time.Minute)
	return c
}

// absolute makes the configured paths absolute: the scripts run with their own
// directory as the working directory.
func (c Config) absolute() Config {
	for _, p := range []*string{&c.ScriptsDir, &c.SimScenario, &c.SimBin, &c.SimState, &c.KeyPath} {
		if *p != "" {
			if a, err := filepath.Abs(*p); err == nil {
				*p = a
			}
		}
	}
	return c
}

// Validate checks a defaulted config; every error names the field.
func (c Config) Validate() error {
	var errs []error
	if !hostRE.MatchString(c.Host) {
		errs = append(errs, fmt.Errorf("host: %q is not a host name or address", c.Host))
	}
	if !userRE.MatchString(c.User) {
		errs = append(errs, fmt.Errorf("user: %q is not a user name", c.User))
	}
	if c.SSHPort > 65535 || c.ADBPort > 65535 {
		errs = append(errs, fmt.Errorf("ssh_port/adb_port: must be 1..65535"))
	}
	if fi, err := os.Stat(c.ScriptsDir); err != nil || !fi.IsDir() {
		errs = append(errs, fmt.Errorf("scripts_dir: %q is not a directory", c.ScriptsDir))
	} else {
		for _, s := range scripts {
			if fi, err := os.Stat(filepath.Join(c.ScriptsDir, s)); err != nil || fi.Mode()&0o111 == 0 {
				errs = append(errs, fmt.Errorf("scripts_dir: %s is missing or not executable", s))
			}
		}
	}
	if c.SimScenario != "" {
		if _, err := os.Stat(c.SimScenario); err != nil {
			errs = append(errs, fmt.Errorf("sim_scenario: %w", err))
		}
		for _, b := range []string{"ssh", "adb"} {
			if _, err := os.Stat(filepath.Join(c.SimBin, b)); err != nil {
				errs = append(errs, fmt.Errorf("sim_bin: no %s in %s (run device/steam-frame/sim/build.sh %s)", b, c.SimBin, c.SimBin))
			}
		}
	}
	return errors.Join(errs...)
}

func (c Config) apkLimits() apk.Limits {
	return apk.Limits{MaxBytes: c.MaxAPKBytes, MaxUncompressed: c.MaxUncompressedBytes, APILevel: c.AndroidAPI}
}

func (c Config) fpsOptions() fps.Options {
	return fps.Options{TargetFPS: 72, WarmUp: c.WarmUp, MinSteady: c.MinSteady}
}
