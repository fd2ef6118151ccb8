package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// State is the simulated headset between invocations (state.json).
type State struct {
	ContainerRunning bool `json:"container_running"`
	// ADB is the local adb server's entry for the headset: "", device, unauthorized.
	ADB       string               `json:"adb"`
	Installed map[string]Package   `json:"installed"`
	App       *AppRun              `json:"app,omitempty"`
	Perf      map[string]time.Time `json:"perf"`
	Log       []string             `json:"log"`
	Captures  int                  `json:"captures"`
	NextPID   int                  `json:"next_pid"`
	// Starts counts container starts (tests assert a down container was started).
	Starts int `json:"starts"`
}

// AppRun is the app launched last.
type AppRun struct {
	Package string    `json:"package"`
	PID     int       `json:"pid"`
	Started time.Time `json:"started"`
	Ended   time.Time `json:"ended,omitzero"`
	// How is exited, crashed or stopped once Ended is set.
	How string `json:"how,omitempty"`
}

// headset is one invocation's view: scenario, state and the state directory.
type headset struct {
	sc    Scenario
	st    State
	dir   string
	now   time.Time
	dirty bool
}

// open locks the state directory for the whole invocation (the scripts run ssh and
// adb one at a time, but a test may run several scripts in parallel) and loads the
// state, initialising it from the scenario on first use.
func open(scenarioPath, dir string) (*headset, func(), error) {
	if scenarioPath == "" || dir == "" {
		return nil, nil, errors.New("framesim: FRAME_SIM_SCENARIO and FRAME_SIM_STATE must be set")
	}
	sc, err := LoadScenario(scenarioPath)
	if err != nil {
		return nil, nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, err
	}
	lf, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, nil, err
	}
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX); err != nil {
		lf.Close()
		return nil, nil, err
	}
	unlock := func() { _ = syscall.Flock(int(lf.Fd()), syscall.LOCK_UN); lf.Close() }
	h := &headset{sc: sc, dir: dir, now: time.Now()}
	raw, err := os.ReadFile(filepath.Join(dir, "state.json"))
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := h.init(); err != nil {
			unlock()
			return nil, nil, err
		}
	case err != nil:
		unlock()
		return nil, nil, err
	default:
		if err := json.Unmarshal(raw, &h.st); err != nil {
			unlock()
			return nil, nil, fmt.Errorf("framesim state: %w", err)
		}
	}
	h.evaluate()
	return h, unlock, nil
}

func (h *headset) init() error {
	h.st = State{ContainerRunning: !h.sc.ContainerStopped, Installed: map[string]Package{}, Perf: map[string]time.Time{}, NextPID: 4000}
	for p, v := range h.sc.Installed {
		h.st.Installed[p] = v
	}
	for pkg, files := range h.sc.Saves {
		for name, content := range files {
			p, err := h.sdcard(savesDir(pkg) + "/" + name)
			if err != nil {
				return err
			}
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
				return err
			}
		}
	}
	h.dirty = true
	return nil
}

func (h *headset) save() error {
	if !h.dirty {
		return nil
	}
	raw, err := json.MarshalIndent(h.st, "", " ")
	if err != nil {
		return err
	}
	p := filepath.Join(h.dir, "state.json")
	if err := os.WriteFile(p+".tmp", raw, 0o644); err != nil {
		return err
	}
	return os.Rename(p+".tmp", p)
}

// evaluate advances the app by the wall clock: it exits or crashes when its time
// has come, as if the headset had been running all along.
func (h *headset) evaluate() {
	a := h.st.App
	if a == nil || !a.Ended.IsZero() {
		return
	}
	app := h.sc.App
	if app.CrashAfter > 0 && !h.now.Before(a.Started.Add(app.CrashAfter)) && (app.ExitAfter == 0 || app.CrashAfter <= app.ExitAfter) {
		at := a.Started.Add(app.CrashAfter)
		h.end("crashed", at)
		h.logf(at, a.PID, "E", "AndroidRuntime", "FATAL EXCEPTION: GLThread 1")
		h.logf(at, a.PID, "E", "AndroidRuntime", "Process: %s, PID: %d", a.Package, a.PID)
		h.logf(at, a.PID, "E", "AndroidRuntime", "java.lang.IllegalStateException: simulated crash")
		h.logf(at, 1000, "I", "ActivityManager", "Process %s (pid %d) has died: fg TOP", a.Package, a.PID)
		return
	}
	if app.ExitAfter > 0 && !h.now.Before(a.Started.Add(app.ExitAfter)) {
		at := a.Started.Add(app.ExitAfter)
		h.logf(at, a.PID, "I", "VrApp", "wearer left the app; saving")
		for name, content := range app.WritesSaves {
			if p, err := h.sdcard(savesDir(a.Package) + "/" + name); err == nil {
				_ = os.MkdirAll(filepath.Dir(p), 0o755)
				_ = os.WriteFile(p, []byte(content), 0o644)
			}
		}
		h.end("exited", at)
		h.logf(at, 1000, "I", "ActivityManager", "Process %s (pid %d) has died: fg TOP", a.Package, a.PID)
	}
}

func (h *headset) end(how string, at time.Time) {
	h.st.App.Ended, h.st.App.How = at, how
	h.dirty = true
}

func (h *headset) running() *AppRun {
	if a := h.st.App; a != nil && a.Ended.IsZero() {
		return a
	}
	return nil
}

func (h *headset) logf(at time.Time, pid int, level, tag, format string, a ...any) {
	h.st.Log = append(h.st.Log, fmt.Sprintf("%s %5d %5d %s %s: %s", at.Format("01-02 15:04:05.000"), pid, pid, level, tag, fmt.Sprintf(format, a...)))
	h.dirty = true
}

func savesDir(pkg string) string { return "/sdcard/Android/data/" + pkg + "/files/saves" }

// sdcard maps a device path under /sdcard to the state directory.
func (h *headset) sdcard(remote string) (string, error) {
	clean := filepath.Clean(remote)
	if clean != "/sdcard" && !strings.HasPrefix(clean, "/sdcard/") {
		return "", fmt.Errorf("%s: Permission denied (the simulator serves /sdcard only)", remote)
	}
	for _, seg := range strings.Split(remote, "/") {
		if seg == ".." {
			return "", fmt.Errorf("%s: Permission denied", remote)
		}
	}
	return filepath.Join(h.dir, clean), nil
}

// startContainer is what frame-ctl container-start does.
func (h *headset) startContainer() {
	if h.st.ContainerRunning {
		return
	}
	h.st.ContainerRunning = true
	h.st.Starts++
	// adb's connection to the old container is gone, and so is any app.
	h.st.ADB = ""
	if a := h.running(); a != nil {
		h.end("stopped", h.now)
	}
	if h.sc.StartClearsSaves {
		root := filepath.Join(h.dir, "sdcard", "Android", "data")
		entries, _ := os.ReadDir(root)
		for _, e := range entries {
			_ = os.RemoveAll(filepath.Join(root, e.Name(), "files", "saves"))
		}
	}
	h.logf(h.now, 1, "I", "init", "Android container started")
	h.dirty = true
}

// ReadState returns the simulated headset's state in dir (for test assertions).
func ReadState(dir string) (State, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil {
		return State{}, err
	}
	var st State
	return st, json.Unmarshal(raw, &st)
}

// SDCard returns the host directory holding the simulated /sdcard.
func SDCard(dir string) string { return filepath.Join(dir, "sdcard") }

// SavesDir is where the headset keeps pkg's saves, under the simulated /sdcard.
func SavesDir(dir, pkg string) string {
	return filepath.Join(dir, filepath.FromSlash(savesDir(pkg)))
}
