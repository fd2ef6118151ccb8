package device_test

import (
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	hw "github.com/aetherium-engine/aetherium/device"
	"github.com/aetherium-engine/aetherium/device/apk/apktest"
	"github.com/aetherium-engine/aetherium/device/devicetest"
	"github.com/aetherium-engine/aetherium/device/fps"
	"github.com/aetherium-engine/aetherium/device/steam-frame/sim"
	"github.com/aetherium-engine/aetherium/internal/testdb"
	"github.com/aetherium-engine/aetherium/toolbox"
	"github.com/aetherium-engine/aetherium/toolbox/device"
	"github.com/aetherium-engine/aetherium/tools"
)

const pkg = "com.aetherium.testgame"

var frameTools = []string{"frame_grab", "frame_install", "frame_run", "frame_status"}

// rig is one simulated headset behind a router, as a vr-tester agent sees it.
type rig struct {
	t       *testing.T
	router  *tools.Router
	driver  *hw.Driver
	headset devicetest.Headset
	reg     *prometheus.Registry
	ws      string
	redis   *redis.Client
}

// setup builds the rig: a private Redis for the lock, the simulator driven by sc,
// the device tools registered on a fresh registry, and a workspace holding
// build/game.apk.
func setup(t *testing.T, sc sim.Scenario) *rig {
	t.Helper()
	opt, err := redis.ParseURL(testdb.Redis(t))
	require.NoError(t, err)
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { rdb.Close() })
	h := devicetest.Sim(t, sc)
	promReg := prometheus.NewRegistry()
	d, err := hw.New(h.Config, hw.Deps{Redis: rdb, Metrics: hw.NewMetrics(promReg)})
	require.NoError(t, err)
	reg := tools.NewRegistry()
	device.Register(reg, d)
	ws := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(ws, "build"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(ws, "build", "game.apk"), apktest.APK(apktest.GameAPK()), 0o644))
	return &rig{t: t, router: tools.NewRouter(reg), driver: d, headset: h, reg: promReg, ws: ws, redis: rdb}
}

func (r *rig) session(agent string) *tools.Session {
	return &tools.Session{
		RunID: "run-" + agent, SessionID: "s-" + agent, Team: "steam-frame-vr", Agent: agent, Role: "worker",
		Workspace: r.ws, Access: tools.Access{Groups: []string{"device"}, Tools: frameTools},
	}
}

// call dispatches one tool call as the vr-tester and decodes its JSON result.
func (r *rig) call(name string, args any, out any) error {
	return r.callAs("vr-tester", name, args, out)
}

func (r *rig) callAs(agent, name string, args any, out any) error {
	r.t.Helper()
	raw, err := json.Marshal(args)
	require.NoError(r.t, err)
	res, err := r.router.Dispatch(context.Background(), tools.Call{ID: "call-" + name, Name: name, Args: raw, Session: r.session(agent)})
	if err != nil {
		return err
	}
	if out != nil {
		require.NoError(r.t, json.Unmarshal([]byte(res.Content), out), res.Content)
	}
	return nil
}

func (r *rig) file(rel string) string { return filepath.Join(r.ws, filepath.FromSlash(rel)) }

func decodePNG(t *testing.T, p string) (int, int) {
	t.Helper()
	f, err := os.Open(p)
	require.NoError(t, err)
	defer f.Close()
	img, err := png.Decode(f)
	require.NoError(t, err, "%s must be a real PNG", p)
	return img.Bounds().Dx(), img.Bounds().Dy()
}

func metric(t *testing.T, g prometheus.Gatherer, name, label, value string) float64 {
	t.Helper()
	fams, err := g.Gather()
	require.NoError(t, err)
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if label == "" || (len(m.GetLabel()) == 1 && m.GetLabel()[0].GetName() == label && m.GetLabel()[0].GetValue() == value) {
				return value1(m)
			}
		}
	}
	t.Fatalf("no series %s{%s=%q}", name, label, value)
	return 0
}

func value1(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return 0
}

// playtest is a healthy headset whose wearer leaves after 2.5 s, at a clean 72 fps
// after a stuttering warm-up, saving progress on the way out.
func playtest() sim.Scenario {
	return sim.Scenario{App: sim.App{
		ExitAfter:   2500 * time.Millisecond,
		Frames:      sim.Profile{FPS: 72, JitterMs: 0.2, WarmUp: 400 * time.Millisecond, WarmUpFrameMs: 45, Seed: 3},
		WritesSaves: map[string]string{"slot1.sav": "level=2 score=900"},
	}}
}

func TestInstallRunStatus(t *testing.T) {
	t.Parallel()
	r := setup(t, playtest())

	var before hw.Status
	require.NoError(t, r.call("frame_status", map[string]any{}, &before))
	require.True(t, before.Reachable)
	require.True(t, before.Paired)
	require.Equal(t, "running", before.Container)
	require.Equal(t, "disconnected", before.ADB, "frame_status changes nothing, so it does not connect adb")
	require.Empty(t, before.Package)

	var inst hw.InstallResult
	require.NoError(t, r.call("frame_install", map[string]any{"apk": "build/game.apk"}, &inst))
	require.Equal(t, pkg, inst.Package)
	require.Equal(t, "1.0", inst.VersionName)
	require.EqualValues(t, 1, inst.VersionCode)
	require.Equal(t, []string{"arm64-v8a"}, inst.ABIs)
	require.False(t, inst.ContainerStarted)
	require.True(t, inst.ADBReconnected)
	require.Contains(t, inst.Summary, "installed com.aetherium.testgame 1.0")
	require.Contains(t, r.headset.State(t).Installed, pkg)

	var run hw.RunResult
	require.NoError(t, r.call("frame_run", map[string]any{"max_seconds": 30}, &run))
	require.Equal(t, hw.OutcomeExited, run.Outcome, run.Summary)
	require.Empty(t, run.Problems)
	require.InDelta(t, 2.5, run.DurationSeconds, 1.5)
	require.GreaterOrEqual(t, run.Captures, 3, "a capture every 200 ms over ~2.5 s")
	require.True(t, strings.HasPrefix(run.Dir, ".frame/runs/"), run.Dir)

	// Everything captured is under .frame/ and real.
	w, h := decodePNG(t, r.file(run.ContactSheet))
	require.Greater(t, w, 320)
	require.Greater(t, h, 180)
	for i := 1; i <= run.Captures; i++ {
		cw, ch := decodePNG(t, r.file(fmt.Sprintf("%s/captures/%04d.png", run.Dir, i)))
		require.Equal(t, [2]int{640, 360}, [2]int{cw, ch})
	}
	log, err := os.ReadFile(r.file(run.Log))
	require.NoError(t, err)
	require.Contains(t, string(log), "wearer left the app")
	rec, err := os.Open(r.file(run.Recording))
	require.NoError(t, err)
	frames, err := fps.Parse(rec)
	rec.Close()
	require.NoError(t, err)
	require.InDelta(t, 72*2.5, len(frames), 40)
	saved, err := os.ReadFile(r.file(run.SavesDir + "/slot1.sav"))
	require.NoError(t, err)
	require.Equal(t, "level=2 score=900", string(saved))
	backup, err := os.ReadFile(r.file(".frame/saves/" + pkg + "/slot1.sav"))
	require.NoError(t, err, "the latest saves are kept for a later restore")
	require.Equal(t, "level=2 score=900", string(backup))
	var report hw.RunResult
	raw, err := os.ReadFile(r.file(run.Dir + "/report.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &report))
	require.Equal(t, run.Outcome, report.Outcome)

	// The frame rate against the bar, in the result and in the metrics.
	require.NotNil(t, run.FPS)
	require.Equal(t, fps.Pass, run.FPS.Result, run.FPS.Reasons)
	require.InDelta(t, 72, run.FPS.SteadyFPS, 0.5)
	require.Positive(t, run.FPS.WarmUpFrames)
	require.Less(t, run.FPS.MaxMs, 20.0, "the 45 ms warm-up frames are excluded")
	require.Contains(t, run.Summary, "72 fps check PASS")
	require.InDelta(t, run.FPS.SteadyFPS, metric(t, r.reg, "aetherium_headset_fps", "", ""), 0.01)
	require.EqualValues(t, 1, metric(t, r.reg, "aetherium_headset_fps_checks_total", "result", "pass"))
	require.EqualValues(t, run.FPS.SteadyFrames, metric(t, r.reg, "aetherium_headset_frame_time_seconds", "", ""))
	require.EqualValues(t, 1, metric(t, r.reg, "aetherium_headset_runs_total", "outcome", "exited"))

	var after hw.Status
	require.NoError(t, r.call("frame_status", map[string]any{}, &after))
	require.Equal(t, pkg, after.Package, "defaults to the package installed from this workspace")
	require.Equal(t, "connected", after.ADB)
	require.NotNil(t, after.Installed)
	require.True(t, *after.Installed)
	require.Equal(t, "1.0", after.VersionName)
	require.EqualValues(t, 1, after.VersionCode)
	require.NotNil(t, after.Saves)
	require.Equal(t, 1, *after.Saves)
	require.Contains(t, after.Summary, "1 save file(s)")

	// The headset is free again.
	_, held, err := r.driver.Lock().Current(context.Background())
	require.NoError(t, err)
	require.False(t, held)
}

func TestSecondConcurrentCallIsRefused(t *testing.T) {
	t.Parallel()
	sc := playtest()
	sc.Installed = map[string]sim.Package{pkg: {VersionName: "1.0", VersionCode: 1}}
	sc.App.ExitAfter = 3 * time.Second
	r := setup(t, sc)
	// A second worker process: its own driver on the same Redis and headset.
	other, err := hw.New(r.headset.Config, hw.Deps{Redis: r.redis})
	require.NoError(t, err)
	reg2 := tools.NewRegistry()
	device.Register(reg2, other)
	router2 := tools.NewRouter(reg2)

	var wg sync.WaitGroup
	var run hw.RunResult
	var runErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		runErr = r.call("frame_run", map[string]any{"package": pkg}, &run)
	}()
	// Wait until the run holds the headset.
	var holder hw.Holder
	require.Eventually(t, func() bool {
		h, held, err := r.driver.Lock().Current(context.Background())
		holder = h
		return err == nil && held
	}, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, "frame_run", holder.Tool)

	valid := map[string]string{
		"frame_status": `{}`, "frame_grab": `{}`,
		"frame_install": `{"apk": "build/game.apk"}`, "frame_run": `{"package": "` + pkg + `"}`,
	}
	for _, name := range frameTools {
		_, err := router2.Dispatch(context.Background(), tools.Call{ID: "c2", Name: name, Args: json.RawMessage(valid[name]), Session: r.session("second-agent")})
		require.ErrorIs(t, err, hw.ErrBusy, name)
		require.ErrorContains(t, err, "held by frame_run of agent vr-tester in run run-vr-tester since "+holder.Since.Format(time.RFC3339))
	}
	wg.Wait()
	require.NoError(t, runErr)
	require.Equal(t, hw.OutcomeExited, run.Outcome)
	// Once the run is done the headset takes the next call.
	var st hw.Status
	require.NoError(t, r.callAs("second-agent", "frame_status", map[string]any{"package": pkg}, &st))
	require.True(t, *st.Installed)
}

func TestStoppedContainerIsStartedAndSavesRestored(t *testing.T) {
	t.Parallel()
	r := setup(t, sim.Scenario{
		ContainerStopped: true,
		StartClearsSaves: true,
		Installed:        map[string]sim.Package{pkg: {VersionName: "0.9", VersionCode: 1}},
		Saves:            map[string]map[string]string{pkg: {"slot1.sav": "lost on restart"}},
	})
	// The saves an earlier frame_run brought back into this workspace.
	backup := r.file(".frame/saves/" + pkg)
	require.NoError(t, os.MkdirAll(filepath.Join(backup, "profiles"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(backup, "slot1.sav"), []byte("level=7"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(backup, "profiles", "p1.json"), []byte(`{"name":"p1"}`), 0o644))

	var st hw.Status
	require.NoError(t, r.call("frame_status", map[string]any{"package": pkg}, &st))
	require.Equal(t, "stopped", st.Container)
	require.Nil(t, st.Installed, "unknown while adb cannot reach the container")

	var inst hw.InstallResult
	require.NoError(t, r.call("frame_install", map[string]any{"apk": "build/game.apk", "package": pkg}, &inst))
	require.True(t, inst.ContainerStarted)
	require.True(t, inst.ADBReconnected)
	require.Equal(t, 2, inst.SavesRestored)
	require.Contains(t, inst.Summary, "started the Android container and restored 2 save file(s)")

	state := r.headset.State(t)
	require.True(t, state.ContainerRunning)
	require.Equal(t, 1, state.Starts)
	require.Equal(t, map[string]string{"slot1.sav": "level=7", "profiles/p1.json": `{"name":"p1"}`}, r.headset.Saves(t, pkg),
		"the workspace's saves replaced what the restart left")
	require.EqualValues(t, 1, state.Installed[pkg].VersionCode)
	require.Equal(t, "1.0", state.Installed[pkg].VersionName, "the new build replaced 0.9")

	require.NoError(t, r.call("frame_status", map[string]any{}, &st))
	require.Equal(t, "running", st.Container)
	require.Equal(t, 2, *st.Saves)
}

func TestCrashIsReported(t *testing.T) {
	t.Parallel()
	sc := playtest()
	sc.Installed = map[string]sim.Package{pkg: {VersionName: "1.0", VersionCode: 1}}
	sc.App.CrashAfter = 1500 * time.Millisecond
	r := setup(t, sc)
	var run hw.RunResult
	require.NoError(t, r.call("frame_run", map[string]any{"package": pkg}, &run))
	require.Equal(t, hw.OutcomeCrashed, run.Outcome, run.Summary)
	require.Contains(t, run.Summary, "crashed")
	log, err := os.ReadFile(r.file(run.Log))
	require.NoError(t, err)
	require.Contains(t, string(log), "FATAL EXCEPTION")
	require.EqualValues(t, 1, metric(t, r.reg, "aetherium_headset_runs_total", "outcome", "crashed"))
	require.EqualValues(t, 0, metric(t, r.reg, "aetherium_headset_runs_total", "outcome", "exited"))
}

func TestTimeLimitStopsTheApp(t *testing.T) {
	t.Parallel()
	sc := playtest()
	sc.Installed = map[string]sim.Package{pkg: {VersionName: "1.0", VersionCode: 1}}
	sc.App.ExitAfter = 0 // the wearer never leaves
	sc.App.Frames = sim.Profile{FPS: 72, LongEvery: 20, LongFrameMs: 30}
	r := setup(t, sc)
	var run hw.RunResult
	require.NoError(t, r.call("frame_run", map[string]any{"package": pkg, "max_seconds": 1.5, "capture_interval_seconds": 1}, &run))
	require.Equal(t, hw.OutcomeTimedOut, run.Outcome)
	require.Equal(t, 1, run.Captures)
	app := r.headset.State(t).App
	require.Equal(t, "stopped", app.How, "the app is stopped at the time limit, not left running")
	// 5% long frames: the check fails, and says why.
	require.Equal(t, fps.Fail, run.FPS.Result)
	require.Contains(t, strings.Join(run.FPS.Reasons, " "), "longer than 20.8 ms")
	require.EqualValues(t, 1, metric(t, r.reg, "aetherium_headset_fps_checks_total", "result", "fail"))
	require.EqualValues(t, 1, metric(t, r.reg, "aetherium_headset_runs_total", "outcome", "timed_out"))
}

func TestGrab(t *testing.T) {
	t.Parallel()
	r := setup(t, sim.Scenario{})
	var g hw.GrabResult
	require.NoError(t, r.call("frame_grab", map[string]any{}, &g))
	require.True(t, strings.HasPrefix(g.Path, ".frame/grabs/") && strings.HasSuffix(g.Path, ".png"), g.Path)
	w, h := decodePNG(t, r.file(g.Path))
	require.Equal(t, [2]int{g.Width, g.Height}, [2]int{w, h})

	stopped := setup(t, sim.Scenario{ContainerStopped: true})
	err := stopped.call("frame_grab", map[string]any{}, nil)
	require.ErrorIs(t, err, hw.ErrContainer)
	require.False(t, stopped.headset.State(t).ContainerRunning, "frame_grab does not start the container")
}

func TestUnreachableAndUnpairedHeadsets(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		sc   sim.Scenario
		is   error
		st   func(*testing.T, hw.Status)
	}{
		{"unreachable", sim.Scenario{Unreachable: true}, hw.ErrUnreachable, func(t *testing.T, s hw.Status) {
			require.False(t, s.Reachable)
			require.Contains(t, s.Summary, "does not answer")
		}},
		{"unpaired", sim.Scenario{Unpaired: true}, hw.ErrNotPaired, func(t *testing.T, s hw.Status) {
			require.True(t, s.Reachable)
			require.False(t, s.Paired)
		}},
		{"adb unauthorized", sim.Scenario{ADBUnauthorized: true}, hw.ErrADB, func(t *testing.T, s hw.Status) {
			require.True(t, s.Paired)
			require.Equal(t, "running", s.Container)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := setup(t, tc.sc)
			var st hw.Status
			require.NoError(t, r.call("frame_status", map[string]any{}, &st))
			tc.st(t, st)
			err := r.call("frame_install", map[string]any{"apk": "build/game.apk"}, nil)
			require.ErrorIs(t, err, tc.is)
			require.NotContains(t, r.headset.State(t).Installed, pkg)
		})
	}
}

func TestHostileArgumentsNeverReachTheHeadset(t *testing.T) {
	t.Parallel()
	r := setup(t, sim.Scenario{})
	for _, tc := range []struct {
		tool string
		args string
		is   error
	}{
		{"frame_install", `{"apk": "../../etc/passwd"}`, hw.ErrInvalidArg},
		{"frame_install", `{"apk": "/etc/passwd"}`, hw.ErrInvalidArg},
		{"frame_install", `{"apk": "build/game.apk", "package": "com.x;reboot"}`, hw.ErrInvalidArg},
		{"frame_install", `{}`, tools.ErrInvalidArgs},
		{"frame_install", `{"apk": "build/game.apk", "shell": "reboot"}`, tools.ErrInvalidArgs},
		{"frame_status", `{"package": "$(reboot)"}`, hw.ErrInvalidArg},
		{"frame_status", `{"package": "com.x y"}`, hw.ErrInvalidArg},
		{"frame_run", `{"package": "com.x|sh"}`, hw.ErrInvalidArg},
		{"frame_run", `{"package": "com.x.y", "max_seconds": 100000}`, hw.ErrInvalidArg},
		{"frame_run", `{"package": "com.x.y", "max_seconds": -5}`, hw.ErrInvalidArg},
		{"frame_run", `{"package": "com.x.y", "capture_interval_seconds": 0.01}`, hw.ErrInvalidArg},
		{"frame_run", `{"package": "com.x.y", "capture_interval_seconds": 3600}`, hw.ErrInvalidArg},
		{"frame_run", `{"package": "com.x.y", "max_seconds": "10; reboot"}`, tools.ErrInvalidArgs},
		{"frame_run", `{}`, hw.ErrNoPackage},
		{"frame_grab", `{"path": "/etc/shadow"}`, tools.ErrInvalidArgs},
	} {
		_, err := r.router.Dispatch(context.Background(), tools.Call{ID: "x", Name: tc.tool, Args: json.RawMessage(tc.args), Session: r.session("vr-tester")})
		require.ErrorIs(t, err, tc.is, "%s %s", tc.tool, tc.args)
	}
	_, err := os.Stat(filepath.Join(r.headset.StateDir, "state.json"))
	require.ErrorIs(t, err, os.ErrNotExist, "no script ran: the simulator never saw a command")
}

func TestCatalogAndConnectionLayer(t *testing.T) {
	t.Parallel()
	// A catalog-only registry (no headset): the tools exist with their tiers and fail
	// at call time with a clear error.
	reg, err := toolbox.New(toolbox.Deps{})
	require.NoError(t, err)
	for _, name := range frameTools {
		s, ok := reg.Spec(name)
		require.True(t, ok, name)
		require.Equal(t, "device", s.Group)
		want := tools.Restricted
		if name == "frame_status" {
			want = tools.Standard
		}
		require.Equal(t, want, s.Tier, name)
	}
	router := tools.NewRouter(reg)
	ctx, caller := context.Background(), &tools.Session{Agent: "vr-tester", Workspace: t.TempDir(),
		Access: tools.Access{Groups: []string{"device"}, Tools: frameTools}}
	_, err = router.Dispatch(ctx, tools.Call{Session: caller, ID: "1", Name: "frame_status", Args: json.RawMessage(`{}`)})
	require.ErrorIs(t, err, device.ErrNotConfigured)

	// Only a node that lists the device group (or the tools) sees them.
	require.ElementsMatch(t, frameTools, reg.Resolve(tools.Node{Role: "worker", MCPServers: []string{"device"}}).Tools)
	for _, name := range frameTools {
		require.NotContains(t, reg.Resolve(tools.Node{Role: "worker", MCPServers: []string{"workspace", "planning", "comms"}}).Tools, name)
	}
	other, otherCaller := context.Background(), &tools.Session{Agent: "writer", Workspace: t.TempDir(),
		Access: reg.Resolve(tools.Node{Role: "worker", MCPServers: []string{"workspace"}})}
	_, err = router.Dispatch(other, tools.Call{Session: otherCaller, ID: "2", Name: "frame_grab", Args: json.RawMessage(`{}`)})
	require.ErrorIs(t, err, tools.ErrNotInCatalog)
}
