package device

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/aetherium-engine/aetherium/confine"
	"github.com/aetherium-engine/aetherium/device/fps"
	"github.com/aetherium-engine/aetherium/toolbox/workspace"
)

// FrameDir is the workspace directory everything captured lands in. Knowledge
// indexing skips dot directories: the captures show the wearer's room.
const FrameDir = ".frame"

// Sentinel errors of the headset's state.
var (
	ErrUnreachable  = errors.New("headset unreachable")
	ErrNotPaired    = errors.New("headset not paired")
	ErrContainer    = errors.New("android container not running")
	ErrADB          = errors.New("adb not connected")
	ErrNotInstalled = errors.New("app not installed")
	ErrNoPackage    = errors.New("no package named")
)

// Deps are the driver's collaborators.
type Deps struct {
	// Redis holds the headset lock. Required.
	Redis redis.UniversalClient
	// Metrics records fps and run outcomes; nil records nothing.
	Metrics *Metrics
	// Log defaults to slog.Default().
	Log *slog.Logger
}

// Driver carries out the four device tools on the headset.
type Driver struct {
	cfg  Config
	lock *Lock
	m    *Metrics
	log  *slog.Logger
	sh   runner
}

// New checks cfg (after defaults) and returns a driver.
func New(cfg Config, d Deps) (*Driver, error) {
	cfg = cfg.WithDefaults().absolute()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("devices.steam_frame: %w", err)
	}
	if d.Redis == nil {
		return nil, errors.New("devices.steam_frame: a Redis client is required for the headset lock")
	}
	if d.Log == nil {
		d.Log = slog.Default()
	}
	return &Driver{cfg: cfg, lock: NewLock(d.Redis, cfg.LockKey, cfg.LockTTL), m: d.Metrics, log: d.Log, sh: newRunner(cfg)}, nil
}

// Config returns the effective (defaulted) configuration.
func (d *Driver) Config() Config { return d.cfg }

// Lock returns the headset lock (tests and the API may show its holder).
func (d *Driver) Lock() *Lock { return d.lock }

// Caller identifies who asks, for the lock's holder record.
type Caller struct {
	RunID string
	Agent string
	Tool  string
}

func (c Caller) holder() Holder {
	owner := c.Tool
	if c.RunID != "" || c.Agent != "" {
		owner = fmt.Sprintf("%s of agent %s in run %s", c.Tool, c.Agent, c.RunID)
	}
	return Holder{Owner: owner, RunID: c.RunID, Agent: c.Agent, Tool: c.Tool}
}

// hold takes the headset for one call; the returned context ends if the hold lapses.
func (d *Driver) hold(ctx context.Context, c Caller) (context.Context, func(), error) {
	lease, err := d.lock.Acquire(ctx, c.holder())
	if err != nil {
		return nil, nil, err
	}
	hctx, stop := lease.Hold(ctx)
	return hctx, stop, nil
}

// ---- frame_status ---------------------------------------------------------------

// Status is the headset's state as frame_status reports it.
type Status struct {
	Reachable   bool   `json:"reachable"`
	Paired      bool   `json:"paired"`
	Container   string `json:"container"`
	ADB         string `json:"adb"`
	Package     string `json:"package,omitempty"`
	Installed   *bool  `json:"installed,omitempty"`
	VersionName string `json:"version_name,omitempty"`
	VersionCode int64  `json:"version_code,omitempty"`
	Saves       *int   `json:"saves,omitempty"`
	Summary     string `json:"summary"`
}

// Status reads the headset's state without changing it. pkg may be empty: then the
// package last installed from this workspace is reported, if any.
func (d *Driver) Status(ctx context.Context, c Caller, ws, pkg string) (Status, error) {
	if pkg == "" {
		pkg = lastInstalled(ws)
	} else if err := ValidatePackage(pkg); err != nil {
		return Status{}, err
	}
	ctx, release, err := d.hold(ctx, c)
	if err != nil {
		return Status{}, err
	}
	defer release()
	st, err := d.status(ctx, pkg)
	if err != nil {
		return Status{}, err
	}
	st.Summary = st.summarize()
	return st, nil
}

func (d *Driver) status(ctx context.Context, pkg string) (Status, error) {
	args := []string{}
	if pkg != "" {
		args = append(args, pkg)
	}
	out, err := d.sh.run(ctx, d.cfg.ScriptTimeout, scriptStatus, args...)
	if err != nil {
		return Status{}, fmt.Errorf("frame status: %w", err)
	}
	m := kv(out)
	st := Status{Reachable: m["reachable"] == "yes", Paired: m["paired"] == "yes", Container: or(m["container"], "unknown"),
		ADB: or(m["adb"], "disconnected"), Package: pkg}
	if v, ok := m["installed"]; ok {
		inst := v == "yes"
		st.Installed = &inst
		st.VersionName = m["version_name"]
		st.VersionCode, _ = strconv.ParseInt(m["version_code"], 10, 64)
	}
	if v, ok := m["saves"]; ok {
		if n, err := strconv.Atoi(v); err == nil {
			st.Saves = &n
		}
	}
	return st, nil
}

func (s Status) summarize() string {
	switch {
	case !s.Reachable:
		return "the headset does not answer over ssh"
	case !s.Paired:
		return "the headset answers but is not paired with this host (ssh key or host key not accepted)"
	}
	b := fmt.Sprintf("headset reachable and paired; Android container %s; adb %s", s.Container, s.ADB)
	switch {
	case s.Package == "":
		b += "; no package named (none installed from this workspace yet)"
	case s.Installed == nil:
		b += fmt.Sprintf("; %s: unknown until adb is connected", s.Package)
	case !*s.Installed:
		b += fmt.Sprintf("; %s is not installed", s.Package)
	default:
		b += fmt.Sprintf("; %s %s (version code %d) installed", s.Package, s.VersionName, s.VersionCode)
		if s.Saves != nil {
			b += fmt.Sprintf(", %d save file(s)", *s.Saves)
		}
	}
	return b
}

// ---- readiness ------------------------------------------------------------------

// readiness is what a call had to do before the headset could take commands.
type readiness struct {
	ContainerStarted bool `json:"container_started"`
	ADBReconnected   bool `json:"adb_reconnected"`
	SavesRestored    int  `json:"saves_restored"`
}

// ready brings the headset to "container up, adb connected". startContainer says
// whether this call may start a stopped container.
func (d *Driver) ready(ctx context.Context, startContainer bool) (readiness, error) {
	var r readiness
	st, err := d.status(ctx, "")
	if err != nil {
		return r, err
	}
	switch {
	case !st.Reachable:
		return r, fmt.Errorf("%w: %s does not answer over ssh (is it on and on this network?)", ErrUnreachable, d.cfg.Host)
	case !st.Paired:
		return r, fmt.Errorf("%w: %s refused this host's ssh key or its host key is unknown", ErrNotPaired, d.cfg.Host)
	}
	if st.Container != "running" {
		if !startContainer {
			return r, fmt.Errorf("%w (it is %s); frame_install or frame_run start it", ErrContainer, st.Container)
		}
		if _, err := d.sh.run(ctx, d.cfg.ScriptTimeout, scriptContainer); err != nil {
			return r, fmt.Errorf("%w: start: %w", ErrContainer, err)
		}
		r.ContainerStarted = true
	}
	if st.ADB != "connected" || r.ContainerStarted {
		if _, err := d.sh.run(ctx, d.cfg.ScriptTimeout, scriptConnect); err != nil {
			return r, fmt.Errorf("%w: %w", ErrADB, err)
		}
		r.ADBReconnected = true
	}
	return r, nil
}

// restoreSaves puts the workspace's copy of pkg's saves back on the headset.
func (d *Driver) restoreSaves(ctx context.Context, ws, pkg string) (int, error) {
	src, err := frameDir(ws, "saves", pkg)
	if err != nil {
		return 0, err
	}
	n := countFiles(src)
	if n == 0 {
		return 0, nil
	}
	if _, err := d.sh.run(ctx, d.cfg.ScriptTimeout, scriptSaves, "push", pkg, src); err != nil {
		return 0, fmt.Errorf("restore saves of %s: %w", pkg, err)
	}
	return n, nil
}

// ---- frame_install --------------------------------------------------------------

// InstallResult is what frame_install reports.
type InstallResult struct {
	Package     string   `json:"package"`
	VersionName string   `json:"version_name"`
	VersionCode int64    `json:"version_code"`
	ABIs        []string `json:"abis"`
	APKBytes    int64    `json:"apk_bytes"`
	SHA256      string   `json:"sha256"`
	readiness
	Summary string `json:"summary"`
}

// installedRecord is .frame/installed.json: what this workspace last installed.
type installedRecord struct {
	Package     string    `json:"package"`
	VersionName string    `json:"version_name"`
	VersionCode int64     `json:"version_code"`
	APK         string    `json:"apk"`
	SHA256      string    `json:"sha256"`
	InstalledAt time.Time `json:"installed_at"`
}

// Install validates the APK at apkRel (relative to the workspace ws), then installs
// it, starting the Android container and reconnecting adb when needed. After a
// container start the app's saves are put back from .frame/saves/<package>/. pkg,
// when given, must equal the manifest's package.
func (d *Driver) Install(ctx context.Context, c Caller, ws, apkRel, pkg string) (InstallResult, error) {
	if pkg != "" {
		if err := ValidatePackage(pkg); err != nil {
			return InstallResult{}, err
		}
	}
	snap, info, err := snapshotAPK(ws, apkRel, d.cfg.apkLimits())
	if err != nil {
		return InstallResult{}, err
	}
	defer os.Remove(snap)
	if pkg != "" && pkg != info.Package {
		return InstallResult{}, fmt.Errorf("%w: package %s does not match the APK's manifest (%s)", ErrInvalidArg, pkg, info.Package)
	}
	ctx, release, err := d.hold(ctx, c)
	if err != nil {
		return InstallResult{}, err
	}
	defer release()
	res := InstallResult{Package: info.Package, ABIs: info.ABIs, APKBytes: info.Bytes, SHA256: info.SHA256}
	if res.ABIs == nil {
		res.ABIs = []string{}
	}
	if res.readiness, err = d.ready(ctx, true); err != nil {
		return res, err
	}
	if _, err := d.sh.run(ctx, d.cfg.InstallTimeout, scriptInstall, snap, info.Package); err != nil {
		return res, fmt.Errorf("install %s: %w", info.Package, err)
	}
	st, err := d.pkgInfo(ctx, info.Package)
	if err != nil {
		return res, err
	}
	if st.Installed == nil || !*st.Installed {
		return res, fmt.Errorf("install %s: %w after a successful install (the headset does not list it)", info.Package, ErrNotInstalled)
	}
	res.VersionName, res.VersionCode = st.VersionName, st.VersionCode
	if res.ContainerStarted {
		if res.SavesRestored, err = d.restoreSaves(ctx, ws, info.Package); err != nil {
			return res, err
		}
	}
	rec := installedRecord{Package: info.Package, VersionName: res.VersionName, VersionCode: res.VersionCode, APK: apkRel, SHA256: info.SHA256, InstalledAt: time.Now().UTC()}
	if err := writeJSON(ws, rec, "installed.json"); err != nil {
		return res, err
	}
	res.Summary = fmt.Sprintf("installed %s %s (version code %d, %s)", res.Package, res.VersionName, res.VersionCode, abiText(res.ABIs))
	if res.ContainerStarted {
		res.Summary += fmt.Sprintf("; started the Android container and restored %d save file(s)", res.SavesRestored)
	} else if res.ADBReconnected {
		res.Summary += "; reconnected adb"
	}
	return res, nil
}

func abiText(abis []string) string {
	if len(abis) == 0 {
		return "no native code"
	}
	return strings.Join(abis, ", ")
}

func (d *Driver) pkgInfo(ctx context.Context, pkg string) (Status, error) {
	out, err := d.sh.run(ctx, d.cfg.ScriptTimeout, scriptPkgInfo, pkg)
	if err != nil {
		return Status{}, fmt.Errorf("package info %s: %w", pkg, err)
	}
	m := kv(out)
	inst := m["installed"] == "yes"
	st := Status{Package: pkg, Installed: &inst, VersionName: m["version_name"]}
	st.VersionCode, _ = strconv.ParseInt(m["version_code"], 10, 64)
	if n, err := strconv.Atoi(m["saves"]); err == nil {
		st.Saves = &n
	}
	return st, nil
}

// ---- frame_grab -----------------------------------------------------------------

// GrabResult is what frame_grab reports.
type GrabResult struct {
	Path    string `json:"path"`
	Width   int    `json:"width"`
	Height  int    `json:"height"`
	Summary string `json:"summary"`
}

// Grab saves one picture of what the headset shows now under .frame/grabs/.
func (d *Driver) Grab(ctx context.Context, c Caller, ws string) (GrabResult, error) {
	ctx, release, err := d.hold(ctx, c)
	if err != nil {
		return GrabResult{}, err
	}
	defer release()
	if _, err := d.ready(ctx, false); err != nil {
		return GrabResult{}, err
	}
	dir, err := frameDir(ws, "grabs")
	if err != nil {
		return GrabResult{}, err
	}
	name := stamp() + ".png"
	w, h, err := d.capture(ctx, filepath.Join(dir, name))
	if err != nil {
		return GrabResult{}, err
	}
	rel := filepath.ToSlash(filepath.Join(FrameDir, "grabs", name))
	return GrabResult{Path: rel, Width: w, Height: h, Summary: fmt.Sprintf("saved what the headset shows (%dx%d) to %s", w, h, rel)}, nil
}

// capture runs the capture script into dst and checks that a real PNG arrived.
func (d *Driver) capture(ctx context.Context, dst string) (int, int, error) {
	if _, err := d.sh.run(ctx, d.cfg.ScriptTimeout, scriptCapture, dst); err != nil {
		return 0, 0, fmt.Errorf("capture: %w", err)
	}
	f, err := openCaptured(dst)
	if err != nil {
		return 0, 0, fmt.Errorf("capture: %w", err)
	}
	defer f.Close()
	cfg, err := png.DecodeConfig(f)
	if err != nil || cfg.Width*cfg.Height > maxCapturePixels {
		os.Remove(dst)
		return 0, 0, fmt.Errorf("capture: the headset sent something that is not a plausible PNG (%v)", err)
	}
	return cfg.Width, cfg.Height, nil
}

// ---- frame_run ------------------------------------------------------------------

// RunOptions are frame_run's validated arguments; zero values take the config's.
type RunOptions struct {
	Package         string
	MaxDuration     time.Duration
	CaptureInterval time.Duration
}

// RunResult is what frame_run reports. Paths are relative to the workspace.
type RunResult struct {
	Package         string        `json:"package"`
	Outcome         string        `json:"outcome"`
	DurationSeconds float64       `json:"duration_seconds"`
	Captures        int           `json:"captures"`
	Dir             string        `json:"dir"`
	ContactSheet    string        `json:"contact_sheet,omitempty"`
	Log             string        `json:"log,omitempty"`
	Recording       string        `json:"recording,omitempty"`
	SavesDir        string        `json:"saves_dir,omitempty"`
	Saves           int           `json:"saves"`
	FPS             *fps.Analysis `json:"fps,omitempty"`
	Problems        []string      `json:"problems,omitempty"`
	readiness
	Summary string `json:"summary"`
}

// Run launches the app, captures the headset view every interval until the app
// ends (the wearer exits, or it crashes) or MaxDuration passes, then brings back
// the log, the performance recording, the saves and a contact sheet, and judges
// the frame rate. Collection problems after the run are reported in Problems
// rather than failing the call: what was captured is kept.
func (d *Driver) Run(ctx context.Context, c Caller, ws string, o RunOptions) (res RunResult, err error) {
	if o.Package == "" {
		o.Package = lastInstalled(ws)
		if o.Package == "" {
			return res, fmt.Errorf("%w: give package, or install an APK from this workspace first", ErrNoPackage)
		}
	}
	if err := ValidatePackage(o.Package); err != nil {
		return res, err
	}
	if o.MaxDuration <= 0 {
		o.MaxDuration = d.cfg.DefaultRunDuration
	}
	o.MaxDuration = min(o.MaxDuration, d.cfg.MaxRunDuration)
	if o.CaptureInterval <= 0 {
		o.CaptureInterval = d.cfg.CaptureInterval
	}
	hctx, release, err := d.hold(ctx, c)
	if err != nil {
		return res, err
	}
	defer release()
	res = RunResult{Package: o.Package, Outcome: OutcomeError}
	defer func() { d.m.ObserveRun(res.Outcome) }()
	if res.readiness, err = d.ready(hctx, true); err != nil {
		return res, err
	}
	if res.ContainerStarted {
		if res.SavesRestored, err = d.restoreSaves(hctx, ws, o.Package); err != nil {
			return res, err
		}
	}
	if st, err := d.pkgInfo(hctx, o.Package); err != nil {
		return res, err
	} else if !*st.Installed {
		return res, fmt.Errorf("%w: %s is not on the headset; frame_install it first", ErrNotInstalled, o.Package)
	}
	id := stamp()
	res.Dir = filepath.ToSlash(filepath.Join(FrameDir, "runs", id))
	capDir, err := frameDir(ws, "runs", id, "captures")
	if err != nil {
		return res, err
	}
	runDir := filepath.Dir(capDir)
	// A clean start: an instance left over from an earlier call would make "the
	// app ended" meaningless.
	if _, err := d.sh.run(hctx, d.cfg.ScriptTimeout, scriptStop, o.Package); err != nil {
		return res, err
	}
	if _, err := d.sh.run(hctx, d.cfg.ScriptTimeout, scriptPerf, "start", id); err != nil {
		return res, fmt.Errorf("performance recording: %w", err)
	}
	if _, err := d.sh.run(hctx, d.cfg.ScriptTimeout, scriptLaunch, o.Package); err != nil {
		return res, fmt.Errorf("launch %s: %w", o.Package, err)
	}
	start := time.Now()
	var captures []string
	ended, waitErr := d.watch(hctx, o, capDir, &captures, &res.Problems)
	res.DurationSeconds = time.Since(start).Round(time.Millisecond).Seconds()
	res.Captures = len(captures)
	// After the wait the call may have lost its context (cancelled, hold lapsed): the
	// app is still stopped on a short context of its own so it never runs on
	// unattended, but nothing more is collected.
	if waitErr != nil {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_, _ = d.sh.run(sctx, 30*time.Second, scriptStop, o.Package)
		return res, fmt.Errorf("frame_run stopped early: %w", waitErr)
	}
	if !ended {
		res.Outcome = OutcomeTimedOut
		if _, err := d.sh.run(hctx, d.cfg.ScriptTimeout, scriptStop, o.Package); err != nil {
			res.Problems = append(res.Problems, "stop after the time limit: "+err.Error())
		}
	}
	d.collect(hctx, ws, id, runDir, captures, &res)
	if err := writeJSON(ws, res, "runs", id, "report.json"); err != nil {
		res.Problems = append(res.Problems, err.Error())
	}
	return res, nil
}

// watch captures on schedule and polls the app until it ends (true) or the time
// limit passes (false).
func (d *Driver) watch(ctx context.Context, o RunOptions, capDir string, captures, problems *[]string) (bool, error) {
	start := time.Now()
	deadline := start.Add(o.MaxDuration)
	nextCapture := start.Add(o.CaptureInterval)
	poll := min(d.cfg.PollInterval, o.CaptureInterval)
	failures := 0
	for {
		out, err := d.sh.run(ctx, d.cfg.ScriptTimeout, scriptRunning, o.Package)
		switch {
		case ctx.Err() != nil:
			return false, context.Cause(ctx)
		case err != nil:
			failures++
			if failures >= 3 {
				return false, fmt.Errorf("lost the headset while waiting: %w", err)
			}
		case kv(out)["running"] != "yes":
			return true, nil
		default:
			failures = 0
		}
		now := time.Now()
		if !now.Before(deadline) {
			return false, nil
		}
		if !now.Before(nextCapture) {
			nextCapture = nextCapture.Add(o.CaptureInterval)
			if len(*captures) < d.cfg.MaxCaptures {
				p := filepath.Join(capDir, fmt.Sprintf("%04d.png", len(*captures)+1))
				if _, _, err := d.capture(ctx, p); err != nil {
					if ctx.Err() != nil {
						return false, context.Cause(ctx)
					}
					*problems = append(*problems, err.Error())
				} else {
					*captures = append(*captures, p)
				}
			}
		}
		wait := min(time.Until(nextCapture), poll, time.Until(deadline))
		t := time.NewTimer(max(wait, 0))
		select {
		case <-ctx.Done():
			t.Stop()
			return false, context.Cause(ctx)
		case <-t.C:
		}
	}
}

// collect brings back the recording, the log and the saves, composes the contact
// sheet and judges the frame rate.
func (d *Driver) collect(ctx context.Context, ws, id, runDir string, captures []string, res *RunResult) {
	problem := func(format string, a ...any) { res.Problems = append(res.Problems, fmt.Sprintf(format, a...)) }
	rel := func(name string) string { return filepath.ToSlash(filepath.Join(res.Dir, name)) }

	recPath := filepath.Join(runDir, "frametimes.csv")
	if _, err := d.sh.run(ctx, d.cfg.ScriptTimeout, scriptPerf, "dump", id, recPath); err != nil {
		problem("performance recording: %v", err)
	} else {
		res.Recording = rel("frametimes.csv")
		if a, err := analyzeFile(recPath, d.cfg.fpsOptions()); err != nil {
			problem("performance recording: %v", err)
		} else {
			res.FPS = &a
			d.m.ObserveAnalysis(a)
		}
	}

	logPath := filepath.Join(runDir, "logcat.txt")
	if _, err := d.sh.run(ctx, d.cfg.ScriptTimeout, scriptLogcat, logPath); err != nil {
		problem("log: %v", err)
	} else {
		res.Log = rel("logcat.txt")
	}
	if res.Outcome != OutcomeTimedOut {
		res.Outcome = OutcomeExited
		if crashed(logPath, res.Package) {
			res.Outcome = OutcomeCrashed
		}
	}

	savesPath := filepath.Join(runDir, "saves")
	if _, err := d.sh.run(ctx, d.cfg.ScriptTimeout, scriptSaves, "pull", res.Package, savesPath); err != nil {
		problem("saves: %v", err)
	} else {
		res.SavesDir = rel("saves")
		res.Saves = countFiles(savesPath)
		// The workspace keeps the latest saves; frame_install puts them back after
		// a container restart.
		if err := d.keepSaves(ws, res.Package, savesPath); err != nil {
			problem("saves backup: %v", err)
		}
	}

	if len(captures) > 0 {
		if _, err := ContactSheet(filepath.Join(runDir, "contact-sheet.png"), captures); err != nil {
			problem("%v", err)
		} else {
			res.ContactSheet = rel("contact-sheet.png")
		}
	} else {
		problem("no captures (the run ended before the first capture interval)")
	}

	res.Summary = fmt.Sprintf("%s %s after %.1f s; %d capture(s)", res.Package, outcomeText(res.Outcome), res.DurationSeconds, res.Captures)
	if res.FPS != nil {
		switch res.FPS.Result {
		case fps.Insufficient:
			res.Summary += "; 72 fps check: insufficient data (" + strings.Join(res.FPS.Reasons, "; ") + ")"
		default:
			res.Summary += fmt.Sprintf("; 72 fps check %s: %.2f fps steady, p99 %.1f ms, %.2f%% long frames", strings.ToUpper(res.FPS.Result), res.FPS.SteadyFPS, res.FPS.P99Ms, res.FPS.LongFramePct)
			if len(res.FPS.Reasons) > 0 {
				res.Summary += " (" + strings.Join(res.FPS.Reasons, "; ") + ")"
			}
		}
	}
	if len(res.Problems) > 0 {
		res.Summary += fmt.Sprintf("; %d problem(s), see problems", len(res.Problems))
	}
}

func outcomeText(o string) string {
	switch o {
	case OutcomeExited:
		return "exited (the wearer left the app)"
	case OutcomeCrashed:
		return "crashed"
	case OutcomeTimedOut:
		return "was still running at the time limit and was stopped"
	}
	return o
}

func analyzeFile(p string, o fps.Options) (fps.Analysis, error) {
	f, err := openCaptured(p)
	if err != nil {
		return fps.Analysis{}, err
	}
	defer f.Close()
	frames, err := fps.Parse(f)
	if err != nil {
		return fps.Analysis{}, err
	}
	return fps.Analyze(frames, o), nil
}

// crashMarkers are the lines Android logs when an app dies abnormally: a Java
// exception, a native signal, or an ANR kill. The package must appear on the marker
// line or within the two lines after it (the "Process: <pkg>" line).
var crashMarkers = []string{"FATAL EXCEPTION", "Fatal signal", "ANR in "}

func crashed(logPath, pkg string) bool {
	f, err := openCaptured(logPath)
	if err != nil {
		return false
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, confine.DefaultMaxBytes))
	if err != nil {
		return false
	}
	lines := strings.Split(string(b), "\n")
	for i, l := range lines {
		for _, m := range crashMarkers {
			if !strings.Contains(l, m) {
				continue
			}
			for j := i; j < min(i+3, len(lines)); j++ {
				if strings.Contains(lines[j], pkg) {
					return true
				}
			}
		}
	}
	return false
}

// keepSaves replaces .frame/saves/<pkg> with a copy of the run's saves.
func (d *Driver) keepSaves(ws, pkg, from string) error {
	dst, err := frameDir(ws, "saves", pkg)
	if err != nil {
		return err
	}
	tmp := dst + ".new"
	_ = os.RemoveAll(tmp)
	if err := copyTree(from, tmp); err != nil {
		_ = os.RemoveAll(tmp)
		return err
	}
	if err := os.RemoveAll(dst); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

// ---- workspace helpers ----------------------------------------------------------

// openCaptured opens p, a file a script brought back into the workspace's
// .frame/ (a capture, the recording, the log), through confine on its
// directory: the agent can reach .frame/ too, so a FIFO, socket or symlink
// under the name is refused (a KindError, ErrLoop) instead of blocking the
// open or leading elsewhere, and nothing over confine.DefaultMaxBytes is
// opened.
func openCaptured(p string) (*confine.File, error) {
	root, err := confine.OpenRoot(filepath.Dir(p), confine.Config{})
	if err != nil {
		return nil, err
	}
	defer root.Close()
	f, err := root.Open(filepath.Base(p))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Base(p), err)
	}
	return f, nil
}

// frameDir returns (creating it) an absolute directory under .frame/ of the
// workspace, confined like every workspace path.
func frameDir(ws string, parts ...string) (string, error) {
	rel := filepath.Join(append([]string{FrameDir}, parts...)...)
	p, err := workspace.Resolve(ws, rel)
	if err != nil {
		return "", fmt.Errorf("%s: %w", rel, err)
	}
	if err := os.MkdirAll(p, 0o755); err != nil {
		return "", fmt.Errorf("%s: %w", rel, err)
	}
	// Resolve again now that it exists: a symlink planted on the way is caught.
	if _, err := workspace.Resolve(ws, rel); err != nil {
		return "", fmt.Errorf("%s: %w", rel, err)
	}
	return p, nil
}

func writeJSON(ws string, v any, parts ...string) error {
	if _, err := frameDir(ws, parts[:len(parts)-1]...); err != nil {
		return err
	}
	raw, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	// The directory lies in the agent-writable workspace: written through
	// confine (a temporary file of its own and renameat), so a FIFO or a symlink
	// the agent planted at the name (or at a ".tmp" beside it) neither blocks the
	// host nor leads the write out of the workspace.
	root, err := confine.OpenRoot(ws, confine.Config{})
	if err != nil {
		return fmt.Errorf("write %s: %w", parts[len(parts)-1], err)
	}
	defer root.Close()
	rel := path.Join(append([]string{FrameDir}, parts...)...)
	if err := root.WriteFile(rel, append(raw, '\n'), confine.WriteOptions{Perm: 0o644}); err != nil {
		return fmt.Errorf("write %s: %w", parts[len(parts)-1], err)
	}
	return nil
}

// lastInstalled is the package this workspace last installed, or "".
func lastInstalled(ws string) string {
	// The record lies in the agent-writable workspace: read through confine (no
	// FIFO opened, no symlink out, at most 64 KiB).
	root, err := confine.OpenRoot(ws, confine.Config{MaxBytes: 64 << 10})
	if err != nil {
		return ""
	}
	defer root.Close()
	raw, err := root.ReadFile(path.Join(FrameDir, "installed.json"))
	if err != nil {
		return ""
	}
	var rec installedRecord
	if json.Unmarshal(raw, &rec) != nil || ValidatePackage(rec.Package) != nil {
		return ""
	}
	return rec.Package
}

func countFiles(dir string) int {
	n := 0
	_ = filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
		if err == nil && e.Type().IsRegular() {
			n++
		}
		return nil
	})
	return n
}

// maxSaveBytes bounds one file of the saves copied back into the workspace.
const maxSaveBytes = 1 << 30

// copyTree copies regular files and directories; symlinks are not followed.
// from lies in the agent-writable .frame/: it is walked and read through
// confine, so a file swapped for a FIFO is refused instead of blocking the
// copy, and no symlink leads out.
func copyTree(from, to string) error {
	root, err := confine.OpenRoot(from, confine.Config{MaxBytes: maxSaveBytes})
	if err != nil {
		return err
	}
	defer root.Close()
	return root.WalkDir(".", func(rel string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		dst := filepath.Join(to, filepath.FromSlash(rel))
		switch {
		case e.IsDir():
			return os.MkdirAll(dst, 0o755)
		case e.Type().IsRegular():
			return copyFile(root, rel, dst)
		}
		return nil
	})
}

func copyFile(root *confine.Root, rel, to string) error {
	src, err := root.Open(rel)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.Create(to)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}

// stamp names a run or grab: UTC time plus a random suffix (two calls in one
// second from two workspaces never collide, and the name is a valid perf session).
func stamp() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return strings.ToLower(time.Now().UTC().Format("20060102-150405")) + "-" + hex.EncodeToString(b)
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
