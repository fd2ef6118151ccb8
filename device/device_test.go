package device_test

import (
	"bytes"
	"context"
	"image"
	"image/color"
	"image/png"
	"math"
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

	"github.com/aetherium-engine/aetherium/device"
	"github.com/aetherium-engine/aetherium/device/apk"
	"github.com/aetherium-engine/aetherium/device/apk/apktest"
	"github.com/aetherium-engine/aetherium/device/devicetest"
	"github.com/aetherium-engine/aetherium/device/fps"
	"github.com/aetherium-engine/aetherium/device/steam-frame/sim"
	"github.com/aetherium-engine/aetherium/internal/testdb"

	"github.com/aetherium-engine/aetherium/toolbox/workspace"
)

func redisClient(t *testing.T) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(testdb.Redis(t))
	require.NoError(t, err)
	c := redis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
	return c
}

// setup returns a driver on a simulated headset and a workspace holding
// build/game.apk. Nothing runs on the headset until a call is made: the simulator
// writes its state file on first contact.
func setup(t *testing.T, sc sim.Scenario) (*device.Driver, devicetest.Headset, string) {
	t.Helper()
	h := devicetest.Sim(t, sc)
	d, err := device.New(h.Config, device.Deps{Redis: redisClient(t)})
	require.NoError(t, err)
	ws := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(ws, "build"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(ws, "build", "game.apk"), apktest.APK(apktest.GameAPK()), 0o644))
	return d, h, ws
}

func untouched(t *testing.T, h devicetest.Headset) {
	t.Helper()
	_, err := os.Stat(filepath.Join(h.StateDir, "state.json"))
	require.ErrorIs(t, err, os.ErrNotExist, "a refused call must not reach the headset")
}

var caller = device.Caller{RunID: "run-1", Agent: "vr-tester", Tool: "frame_install"}

func TestInstallRefusesHostileArgumentsBeforeTheHeadset(t *testing.T) {
	t.Parallel()
	d, h, ws := setup(t, sim.Scenario{})
	outside := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(outside, "evil.apk"), apktest.APK(apktest.GameAPK()), 0o644))
	require.NoError(t, os.Symlink(filepath.Join(outside, "evil.apk"), filepath.Join(ws, "link.apk")))
	require.NoError(t, os.Symlink(outside, filepath.Join(ws, "linkdir")))
	require.NoError(t, os.WriteFile(filepath.Join(ws, "notzip.apk"), []byte("MZ\x90\x00 definitely not a zip"), 0o644))
	x86 := apktest.GameAPK()
	x86.ABIs = []string{"x86"}
	require.NoError(t, os.WriteFile(filepath.Join(ws, "x86.apk"), apktest.APK(x86), 0o644))
	bomb := apktest.GameAPK()
	bomb.Extra = map[string][]byte{"assets/zeros": make([]byte, 32<<20)}
	require.NoError(t, os.WriteFile(filepath.Join(ws, "bomb.apk"), apktest.APK(bomb), 0o644))

	for _, tc := range []struct {
		name, apk, pkg string
		is             error
		want           string
	}{
		{"parent escape", "../" + filepath.Base(outside) + "/evil.apk", "", workspace.ErrOutside, "escapes the workspace"},
		{"deep escape", "build/../../../../etc/passwd", "", workspace.ErrOutside, "escapes the workspace"},
		{"absolute path", "/etc/passwd", "", workspace.ErrOutside, "absolute"},
		{"symlink out", "link.apk", "", workspace.ErrOutside, "outside the workspace"},
		{"symlinked dir out", "linkdir/evil.apk", "", workspace.ErrOutside, "outside the workspace"},
		{"NUL byte", "build/game.apk\x00.txt", "", workspace.ErrOutside, "NUL"},
		{"missing", "build/nope.apk", "", device.ErrInvalidArg, "no such file"},
		{"directory", "build", "", device.ErrInvalidArg, "not a regular file"},
		{"not a zip", "notzip.apk", "", apk.ErrInvalid, "not a zip archive"},
		{"x86 only", "x86.apk", "", apk.ErrInvalid, "x86 only"},
		{"zip bomb", "bomb.apk", "", apk.ErrInvalid, "zip bomb"},
		{"shell metacharacters in package", "build/game.apk", "com.aetherium.testgame;reboot", apk.ErrPackageName, "invalid Android package name"},
		{"command substitution in package", "build/game.apk", "$(reboot)", apk.ErrPackageName, "invalid Android package name"},
		{"package differs from the manifest", "build/game.apk", "com.other.game", device.ErrInvalidArg, "does not match the APK's manifest (com.aetherium.testgame)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := d.Install(context.Background(), caller, ws, tc.apk, tc.pkg)
			require.ErrorIs(t, err, tc.is)
			require.ErrorIs(t, err, device.ErrInvalidArg)
			require.ErrorContains(t, err, tc.want)
			require.NotContains(t, err.Error(), outside, "errors never show host paths outside the workspace")
		})
	}
	untouched(t, h)
}

func TestRunAndStatusRefuseHostilePackages(t *testing.T) {
	t.Parallel()
	d, h, ws := setup(t, sim.Scenario{})
	for _, pkg := range []string{"com.x;reboot", "com.x && id", "-rf.x", "com.x\nreboot", "com.`id`.x", "com"} {
		_, err := d.Status(context.Background(), caller, ws, pkg)
		require.ErrorIs(t, err, device.ErrInvalidArg, pkg)
		_, err = d.Run(context.Background(), caller, ws, device.RunOptions{Package: pkg})
		require.ErrorIs(t, err, device.ErrInvalidArg, pkg)
	}
	_, err := d.Run(context.Background(), caller, ws, device.RunOptions{})
	require.ErrorIs(t, err, device.ErrNoPackage)
	untouched(t, h)
}

func TestBoundSeconds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		secs float64
		want time.Duration
		ok   bool
	}{
		{0, 5 * time.Second, true},
		{1, time.Second, true},
		{60, time.Minute, true},
		{2.5, 2500 * time.Millisecond, true},
		{0.5, 0, false},
		{61, 0, false},
		{-1, 0, false},
		{math.Inf(1), 0, false},
		{math.NaN(), 0, false},
		{1e300, 0, false},
	} {
		got, err := device.BoundSeconds("x", tc.secs, 5*time.Second, time.Second, time.Minute)
		if tc.ok {
			require.NoError(t, err, tc.secs)
			require.Equal(t, tc.want, got)
		} else {
			require.ErrorIs(t, err, device.ErrInvalidArg, "%v", tc.secs)
		}
	}
}

func TestConfigDefaultsAndValidation(t *testing.T) {
	t.Parallel()
	c := device.Config{}.WithDefaults()
	require.Equal(t, "steam-frame.local", c.Host)
	require.Equal(t, "deck", c.User)
	require.Equal(t, 22, c.SSHPort)
	require.Equal(t, 5555, c.ADBPort)
	require.EqualValues(t, 512<<20, c.MaxAPKBytes)
	require.Equal(t, 20*time.Minute, c.MaxRunDuration)
	require.Equal(t, 5*time.Second, c.CaptureInterval)
	require.Equal(t, 30, c.AndroidAPI)

	bad := device.Config{Host: "frame;reboot", User: "deck $(id)", ScriptsDir: t.TempDir()}.WithDefaults()
	err := bad.Validate()
	require.ErrorContains(t, err, "host:")
	require.ErrorContains(t, err, "user:")
	require.ErrorContains(t, err, "status.sh is missing")

	_, err = device.New(device.Config{ScriptsDir: filepath.Join(devicetest.RepoRoot(t), "device", "steam-frame")}, device.Deps{})
	require.ErrorContains(t, err, "Redis client is required")
}

func TestLockRefusesASecondHolderAndNamesTheFirst(t *testing.T) {
	t.Parallel()
	lockMatrix(t, func(t *testing.T, rdb redis.UniversalClient, key func(string) string) {
		ctx := context.Background()
		l := device.NewLock(rdb, key("lock:a"), 2*time.Second)
		first, err := l.Acquire(ctx, device.Holder{Owner: "frame_run of agent vr-tester in run r1"})
		require.NoError(t, err)

		_, err = l.Acquire(ctx, device.Holder{Owner: "frame_grab of agent other in run r2"})
		require.ErrorIs(t, err, device.ErrBusy)
		var busy *device.BusyError
		require.ErrorAs(t, err, &busy)
		require.Equal(t, "frame_run of agent vr-tester in run r1", busy.Holder.Owner)
		require.WithinDuration(t, first.Holder.Since, busy.Holder.Since, time.Millisecond)
		require.Contains(t, err.Error(), "held by frame_run of agent vr-tester in run r1 since "+first.Holder.Since.Format(time.RFC3339))

		// Only the holder's token releases: a stale lease from another acquisition cannot.
		other := device.NewLock(rdb, key("lock:b"), time.Second)
		stale, err := other.Acquire(ctx, device.Holder{Owner: "x"})
		require.NoError(t, err)
		require.NoError(t, stale.Release(ctx))
		require.NoError(t, first.Release(ctx))
		require.NoError(t, first.Release(ctx), "release is idempotent")
		second, err := l.Acquire(ctx, device.Holder{Owner: "second"})
		require.NoError(t, err)
		require.ErrorIs(t, first.Renew(ctx), device.ErrLockLost, "a released lease cannot renew someone else's hold")
		require.NoError(t, second.Release(ctx))
	})
}

func TestLockHoldRenewsAndNoticesLoss(t *testing.T) {
	t.Parallel()
	lockMatrix(t, func(t *testing.T, rdb redis.UniversalClient, key func(string) string) {
		ctx := context.Background()
		l := device.NewLock(rdb, key("lock:hold"), 300*time.Millisecond)
		lease, err := l.Acquire(ctx, device.Holder{Owner: "long run"})
		require.NoError(t, err)
		hctx, stop := lease.Hold(ctx)
		// Three TTLs later the hold is still ours: renewals keep it alive.
		time.Sleep(900 * time.Millisecond)
		require.NoError(t, hctx.Err())
		h, held, err := l.Current(ctx)
		require.NoError(t, err)
		require.True(t, held)
		require.Equal(t, "long run", h.Owner)

		// Someone deletes the key (an operator, or expiry during a Redis outage): the
		// call's context ends with ErrLockLost at the next renewal.
		require.NoError(t, rdb.Del(ctx, key("lock:hold")).Err())
		select {
		case <-hctx.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("the hold did not notice the lost lock")
		}
		require.ErrorIs(t, context.Cause(hctx), device.ErrLockLost)
		stop()

		// stop releases: the next caller gets the headset at once.
		lease2, err := l.Acquire(ctx, device.Holder{Owner: "next"})
		require.NoError(t, err)
		_, stop2 := lease2.Hold(ctx)
		stop2()
		_, held, err = l.Current(ctx)
		require.NoError(t, err)
		require.False(t, held)
	})
}

func TestLockOneWinnerAmongMany(t *testing.T) {
	t.Parallel()
	lockMatrix(t, func(t *testing.T, rdb redis.UniversalClient, key func(string) string) {
		l := device.NewLock(rdb, key("lock:race"), 5*time.Second)
		var mu sync.Mutex
		winners, busy := 0, 0
		var wg sync.WaitGroup
		for i := 0; i < 16; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := l.Acquire(context.Background(), device.Holder{Owner: "racer"})
				mu.Lock()
				defer mu.Unlock()
				if err == nil {
					winners++
				} else if assertBusy(err) {
					busy++
				}
			}()
		}
		wg.Wait()
		require.Equal(t, 1, winners)
		require.Equal(t, 15, busy)
	})
}

// lockMatrix runs body against each Redis shape (testdb.RedisMatrix); key puts a
// lock key under the test's prefix (the cluster is shared by the binary).
func lockMatrix(t *testing.T, body func(t *testing.T, rdb redis.UniversalClient, key func(string) string)) {
	t.Helper()
	testdb.EachRedis(t, func(t *testing.T, tg testdb.RedisTarget) {
		body(t, testdb.Connect(t, tg.URL), func(k string) string { return tg.Prefix + ":" + k })
	})
}

func assertBusy(err error) bool { return err != nil && strings.Contains(err.Error(), "headset busy") }

func writePNG(t *testing.T, p string, w, h int, c color.Color) {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			img.Set(x, y, c)
		}
	}
	var buf bytes.Buffer
	require.NoError(t, png.Encode(&buf, img))
	require.NoError(t, os.WriteFile(p, buf.Bytes(), 0o644))
}

func TestContactSheetIsOneDecodableGrid(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var caps []string
	colors := []color.RGBA{{255, 0, 0, 255}, {0, 255, 0, 255}, {0, 0, 255, 255}, {255, 255, 0, 255}, {0, 255, 255, 255}}
	for i, c := range colors {
		p := filepath.Join(dir, string(rune('a'+i))+".png")
		writePNG(t, p, 640, 360, c)
		caps = append(caps, p)
	}
	// A broken capture is skipped, not fatal.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "broken.png"), []byte("\x89PNG\r\n\x1a\ngarbage"), 0o644))
	caps = append(caps, filepath.Join(dir, "broken.png"))

	out := filepath.Join(dir, "sheet.png")
	n, err := device.ContactSheet(out, caps)
	require.NoError(t, err)
	require.Equal(t, 5, n)
	f, err := os.Open(out)
	require.NoError(t, err)
	defer f.Close()
	img, err := png.Decode(f)
	require.NoError(t, err)
	// 5 tiles → 3 columns × 2 rows of 320×180 thumbnails with 8 px gaps and a 4 px bar.
	require.Equal(t, 8+3*(320+8), img.Bounds().Dx())
	require.Equal(t, 8+2*(180+4+8), img.Bounds().Dy())
	// Each tile shows its capture, in order: centre pixels carry the colours.
	for i, c := range colors {
		x := 8 + (i%3)*(320+8) + 160
		y := 8 + (i/3)*(180+4+8) + 90
		r, g, b, _ := img.At(x, y).RGBA()
		require.Equal(t, [3]uint32{uint32(c.R), uint32(c.G), uint32(c.B)}, [3]uint32{r >> 8, g >> 8, b >> 8}, "tile %d", i)
	}

	_, err = device.ContactSheet(filepath.Join(dir, "none.png"), []string{filepath.Join(dir, "broken.png")})
	require.ErrorContains(t, err, "none of 1 captures decodes")
}

func TestContactSheetRefusesAPNGBomb(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// A valid PNG header claiming 100000×100000 pixels: refused before decoding.
	var buf bytes.Buffer
	require.NoError(t, png.Encode(&buf, image.NewGray(image.Rect(0, 0, 1, 1))))
	b := buf.Bytes()
	b[16], b[17], b[18], b[19] = 0, 1, 0x86, 0xa0 // width 100000
	b[20], b[21], b[22], b[23] = 0, 1, 0x86, 0xa0 // height 100000
	p := filepath.Join(dir, "bomb.png")
	require.NoError(t, os.WriteFile(p, b, 0o644))
	_, err := device.ContactSheet(filepath.Join(dir, "sheet.png"), []string{p})
	require.Error(t, err)
}

func TestMetricsRecordChecksFPSAndOutcomes(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := device.NewMetrics(reg)
	var frames []fps.Frame
	for i := 1; i <= 72*20; i++ {
		frames = append(frames, fps.Frame{PresentNS: int64(i) * 13888888, FrameNS: 13888888})
	}
	a := fps.Analyze(frames, fps.Options{})
	require.Equal(t, fps.Pass, a.Result)
	m.ObserveAnalysis(a)
	m.ObserveAnalysis(fps.Analyze(nil, fps.Options{}))
	m.ObserveRun(device.OutcomeExited)
	m.ObserveRun(device.OutcomeCrashed)

	require.InDelta(t, 72, gathered(t, reg, "aetherium_headset_fps", nil), 0.01)
	require.EqualValues(t, 1, gathered(t, reg, "aetherium_headset_fps_checks_total", map[string]string{"result": "pass"}))
	require.EqualValues(t, 0, gathered(t, reg, "aetherium_headset_fps_checks_total", map[string]string{"result": "fail"}))
	require.EqualValues(t, 1, gathered(t, reg, "aetherium_headset_fps_checks_total", map[string]string{"result": "insufficient_data"}))
	require.EqualValues(t, 1, gathered(t, reg, "aetherium_headset_runs_total", map[string]string{"outcome": "exited"}))
	require.EqualValues(t, 1, gathered(t, reg, "aetherium_headset_runs_total", map[string]string{"outcome": "crashed"}))
	require.EqualValues(t, 0, gathered(t, reg, "aetherium_headset_runs_total", map[string]string{"outcome": "timed_out"}))
	// Every steady frame is observed, all in the 13.9 ms bucket and none above.
	require.EqualValues(t, a.SteadyFrames, gathered(t, reg, "aetherium_headset_frame_time_seconds", nil))
	require.EqualValues(t, a.SteadyFrames, bucket(t, reg, "aetherium_headset_frame_time_seconds", 0.0139))
	require.EqualValues(t, 0, bucket(t, reg, "aetherium_headset_frame_time_seconds", 0.0125))

	var nilMetrics *device.Metrics
	nilMetrics.ObserveAnalysis(a) // a nil *Metrics records nothing and does not panic
	nilMetrics.ObserveRun(device.OutcomeExited)
}

// gathered returns the value of one series (a histogram's sample count).
func gathered(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	m := series(t, g, name, labels)
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	t.Fatalf("%s: unsupported metric type", name)
	return 0
}

// bucket returns a histogram's cumulative count at upper bound le.
func bucket(t *testing.T, g prometheus.Gatherer, name string, le float64) uint64 {
	t.Helper()
	for _, b := range series(t, g, name, nil).GetHistogram().GetBucket() {
		if b.GetUpperBound() == le {
			return b.GetCumulativeCount()
		}
	}
	t.Fatalf("%s: no bucket %g", name, le)
	return 0
}

func series(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) *dto.Metric {
	t.Helper()
	fams, err := g.Gather()
	require.NoError(t, err)
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if labels[lp.GetName()] != lp.GetValue() {
					continue next
				}
			}
			if len(m.GetLabel()) == len(labels) {
				return m
			}
		}
	}
	t.Fatalf("no series %s%v", name, labels)
	return nil
}

func TestRelativeScriptsDirWorks(t *testing.T) {
	t.Parallel()
	h := devicetest.Sim(t, sim.Scenario{})
	cfg := h.Config
	cfg.ScriptsDir = "steam-frame" // relative to this package's directory
	d, err := device.New(cfg, device.Deps{Redis: redisClient(t)})
	require.NoError(t, err)
	require.True(t, filepath.IsAbs(d.Config().ScriptsDir))
	st, err := d.Status(context.Background(), caller, t.TempDir(), "")
	require.NoError(t, err)
	require.True(t, st.Reachable)
}
