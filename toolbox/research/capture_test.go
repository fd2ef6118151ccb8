package research_test

import (
	"bytes"
	"context"
	"encoding/json"
	"image/png"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/egress"
	"github.com/aetherium-engine/aetherium/egressproxy"
	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/internal/testinfra"
	"github.com/aetherium-engine/aetherium/sandbox"
	"github.com/aetherium-engine/aetherium/sandbox/sandboxtest"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/toolbox/research"
	"github.com/aetherium-engine/aetherium/tools"
)

// memRecorder keeps the proxy's connection records in memory.
type memRecorder struct {
	mu   sync.Mutex
	recs []store.EgressConnection
}

func (m *memRecorder) InsertEgress(_ context.Context, c store.EgressConnection) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.recs = append(m.recs, c)
	return nil
}

// standIn listens on every address of this host and counts what reaches it: a
// forbidden destination (the fleet's own services live on this host).
type standIn struct {
	port     int
	accepted atomic.Int64
}

func newStandIn(t testing.TB) *standIn {
	t.Helper()
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	s := &standIn{port: ln.Addr().(*net.TCPAddr).Port}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.accepted.Add(1)
			_ = c.Close()
		}
	}()
	return s
}

// captureEnv is a Docker executor whose egress goes through a real proxy (with
// its firewall rules), the browser image, fixture pages in a container of their
// own ("fixture.test") and a stand-in on this host ("standin.test").
type captureEnv struct {
	d     *sandbox.Docker
	image string
	ws    string
	stand *standIn
	call  func(run string, args research.CaptureArgs) (research.CaptureAnswer, error)
}

func fixturePages(t testing.TB, standURL, apiURL string) map[string]string {
	t.Helper()
	pal, err := os.ReadFile(filepath.Join("testdata", "capture", "palette.html"))
	require.NoError(t, err)
	probe, err := os.ReadFile(filepath.Join("testdata", "capture", "probe.html"))
	require.NoError(t, err)
	p := strings.NewReplacer("{{API}}", apiURL, "{{STANDIN}}", standURL,
		"{{API_WS}}", "ws"+strings.TrimPrefix(apiURL, "http"), "{{STANDIN_WS}}", "ws"+strings.TrimPrefix(standURL, "http")).Replace(string(probe))
	hang, err := os.ReadFile(filepath.Join("testdata", "capture", "hang.html"))
	require.NoError(t, err)
	return map[string]string{"palette.html": string(pal), "probe.html": p, "hang.html": string(hang)}
}

func newCaptureEnv(t testing.TB, cfg research.Config) *captureEnv {
	t.Helper()
	ctx := context.Background()
	cfg.CaptureImage = sandboxtest.FamilyImage(t, "browser")
	hostIP, ok := testinfra.HostIPv4()
	require.True(t, ok, "this host has an IPv4 address")
	e := &captureEnv{stand: newStandIn(t), ws: t.TempDir(), image: cfg.CaptureImage}
	standURL := "http://standin.test:" + strconv.Itoa(e.stand.port)
	upstream := sandboxtest.UpstreamFiles(t, fixturePages(t, standURL, standURL))
	dns := fleettest.DNS(t, map[string]string{"fixture.test": upstream, "standin.test": hostIP.String()})

	pcfg := egressproxy.Config{}.WithDefaults()
	require.NoError(t, pcfg.InstallFirewall(ctx))
	dlp, err := egress.NewDLP()
	require.NoError(t, err)
	p, err := egressproxy.New(pcfg, egressproxy.Deps{DLP: dlp, Recorder: &memRecorder{}, Resolver: dns, Log: fleettest.Logger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	e.d = sandboxtest.Docker(t)
	e.d.SetEgress(p)

	reg := tools.NewRegistry()
	research.Register(reg, nil, cfg, e.d)
	router := tools.NewRouter(reg)
	e.call = func(run string, args research.CaptureArgs) (research.CaptureAnswer, error) {
		raw, err := json.Marshal(args)
		require.NoError(t, err)
		ctx, caller := context.Background(), &tools.Session{RunID: run, SessionID: "s", Agent: "designer", Workspace: e.ws,
			Access: tools.Access{Tools: []string{"capture_reference"}}, AllowedDomains: []string{"fixture.test", "standin.test", "nowhere.test"},
			EgressPorts: []int{e.stand.port}}
		res, err := router.Dispatch(ctx, tools.Call{Session: caller, ID: "c", Name: "capture_reference", Args: raw})
		if err != nil {
			return research.CaptureAnswer{}, err
		}
		var ans research.CaptureAnswer
		require.NoError(t, json.Unmarshal([]byte(res.Content), &ans), res.Content)
		return ans, nil
	}
	return e
}

func share(t *testing.T, ans research.CaptureAnswer, hex string) float64 {
	t.Helper()
	for _, s := range ans.Palette {
		if s.Hex == hex {
			return s.Share
		}
	}
	t.Fatalf("%s is not in the palette %+v", hex, ans.Palette)
	return 0
}

// The real browser image, real Chromium and a real egress proxy: the fixture's
// palette, type scale, rhythm and breakpoints come back, the screenshots decode
// as PNGs of 1440 and 390 pixels, a second capture does not overwrite the first,
// and the page's requests to this host (fetch and WebSocket) are refused and
// reported while the stand-in receives nothing. Errors are clear: a 404, a name
// that does not resolve, a host the proxy refuses.
func TestCaptureReference(t *testing.T) {
	t.Parallel()
	e := newCaptureEnv(t, research.Config{CaptureTimeout: 60 * time.Second, CaptureIdleTimeout: 4 * time.Second})
	run := "run-" + strconv.FormatInt(time.Now().UnixNano(), 36)

	ans, err := e.call(run, research.CaptureArgs{URL: "http://fixture.test/palette.html"})
	require.NoError(t, err)
	out, _ := json.MarshalIndent(ans, "", " ")
	t.Logf("capture: %s", out)
	require.Equal(t, 200, ans.Status)
	require.Equal(t, "Palette fixture", ans.Title)
	require.InDelta(t, 0.50, share(t, ans, "#1e3a8a"), 0.03)
	require.InDelta(t, 0.25, share(t, ans, "#f59e0b"), 0.02)
	require.InDelta(t, 0.25, share(t, ans, "#ffffff"), 0.03)
	require.Len(t, ans.Screenshots, 2)
	for i, want := range []struct {
		viewport string
		width    int
		path     string
	}{{"desktop", research.DesktopWidth, "captures/fixture.test_palette.html-desktop.png"}, {"mobile", research.MobileWidth, "captures/fixture.test_palette.html-mobile.png"}} {
		s := ans.Screenshots[i]
		require.Equal(t, want.viewport, s.Viewport)
		require.Equal(t, want.path, s.Path)
		f, err := os.ReadFile(filepath.Join(e.ws, s.Path))
		require.NoError(t, err)
		img, err := png.Decode(bytes.NewReader(f))
		require.NoError(t, err, s.Path)
		require.Equal(t, want.width, img.Bounds().Dx(), s.Path)
		require.Equal(t, s.Height, img.Bounds().Dy(), s.Path)
	}
	require.Equal(t, 1200, ans.Screenshots[0].Height, "the whole page, not the viewport")

	var sizes []float64
	for _, s := range ans.TypeScale {
		sizes = append(sizes, s.PX)
	}
	require.Equal(t, []float64{32, 24, 16, 12}, sizes)
	for _, s := range ans.TypeScale {
		if s.PX == 16 {
			require.Equal(t, 1.0, s.Ratio, "16 px carries most of the text")
			require.Greater(t, s.Share, 0.7)
			require.Equal(t, "p", s.Tags[0])
		}
		if s.PX == 32 {
			require.Equal(t, 2.0, s.Ratio)
			require.Equal(t, []string{"h1"}, s.Tags)
		}
	}
	require.Equal(t, "DejaVu Sans", ans.Fonts[0].Family)
	require.Equal(t, 2, ans.Measure.Paragraphs)
	require.InDelta(t, 560, ans.Measure.WidthPX, 0.5)
	require.Greater(t, ans.Measure.CharsPerLine, 50.0)
	require.Less(t, ans.Measure.CharsPerLine, 90.0)
	require.Equal(t, 16.0, ans.Rhythm.BodyFontPX)
	require.Equal(t, 24.0, ans.Rhythm.BodyLineHeightPX)
	require.Equal(t, 24.0, ans.Rhythm.BlockGaps[0].PX)
	var bps []string
	for _, b := range ans.Breakpoints {
		bps = append(bps, strconv.FormatFloat(b.PX, 'f', -1, 64)+" "+b.Feature)
	}
	require.Equal(t, []string{"768 min-width", "1023.98 max-width", "1024 min-width"}, bps)
	require.Empty(t, ans.Refused)

	// The same page again: new names, the first files untouched.
	again, err := e.call(run, research.CaptureArgs{URL: "http://fixture.test/palette.html"})
	require.NoError(t, err)
	require.Equal(t, "captures/fixture.test_palette.html-2-desktop.png", again.Screenshots[0].Path)
	require.Equal(t, "captures/fixture.test_palette.html-2-mobile.png", again.Screenshots[1].Path)

	// Calls in parallel share the run's browser, a page each (two at a time,
	// research.capture_max_pages; the third waits), and never share a file name.
	var wg sync.WaitGroup
	paths := make([]string, 3)
	errs := make([]error, 3)
	for i := range 3 {
		wg.Go(func() {
			a, err := e.call(run, research.CaptureArgs{URL: "http://fixture.test/palette.html", Name: "parallel"})
			errs[i] = err
			if err == nil {
				paths[i] = a.Screenshots[0].Path
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	require.ElementsMatch(t, []string{"captures/parallel-desktop.png", "captures/parallel-2-desktop.png", "captures/parallel-3-desktop.png"}, paths)

	// Requests to this host: refused by the proxy, reported, never received.
	probe, err := e.call(run, research.CaptureArgs{URL: "http://fixture.test/probe.html", Name: "probe"})
	require.NoError(t, err)
	t.Logf("refused: %+v failed: %+v", probe.Refused, probe.FailedRequests)
	methods := map[string]bool{}
	for _, r := range probe.Refused {
		require.Equal(t, "standin.test", r.Host)
		require.Equal(t, e.stand.port, r.Port)
		require.Contains(t, r.Reason, "the fleet's own services")
		methods[r.Method] = true
	}
	require.True(t, methods["GET"], "the fetch is refused: %+v", probe.Refused)
	require.True(t, methods["CONNECT"], "the WebSocket is refused: %+v", probe.Refused)
	require.Zero(t, e.stand.accepted.Load(), "the stand-in received nothing")

	_, err = e.call(run, research.CaptureArgs{URL: "http://fixture.test/missing.html"})
	require.ErrorContains(t, err, "HTTP 404 Not Found")
	_, err = e.call(run, research.CaptureArgs{URL: "http://nowhere.test/"})
	require.ErrorContains(t, err, "DNS: nowhere.test does not resolve")
	_, err = e.call(run, research.CaptureArgs{URL: "http://standin.test:" + strconv.Itoa(e.stand.port) + "/"})
	require.ErrorContains(t, err, "the egress proxy refused standin.test")
	require.Zero(t, e.stand.accepted.Load(), "the stand-in received nothing")

	// A page that never loads ends at the call's timeout; the browser goes on.
	_, err = e.call(run, research.CaptureArgs{URL: "http://fixture.test/hang.html", TimeoutSeconds: 3})
	require.ErrorContains(t, err, "timed out loading the page after 3s (timeout_seconds)")
	_, err = e.call(run, research.CaptureArgs{URL: "http://fixture.test/palette.html", Name: "after-hang"})
	require.NoError(t, err)

	// A browser that dies is replaced: the call that finds it dead says so (or,
	// when the death was already seen, starts a new one), the next one works.
	out2, err := exec.Command("docker", "ps", "-q", "--filter", "label="+sandbox.LabelService+"=browser",
		"--filter", "label="+sandbox.LabelProject+"="+run).Output()
	require.NoError(t, err)
	ids := strings.Fields(string(out2))
	require.Len(t, ids, 1, "one browser container for the run")
	require.NoError(t, exec.Command("docker", "kill", ids[0]).Run())
	_, err = e.call(run, research.CaptureArgs{URL: "http://fixture.test/palette.html", Name: "after-crash"})
	if err != nil {
		require.ErrorContains(t, err, "the browser crashed")
		_, err = e.call(run, research.CaptureArgs{URL: "http://fixture.test/palette.html", Name: "after-crash"})
	}
	require.NoError(t, err)
	out2, err = exec.Command("docker", "ps", "-aq", "--filter", "label="+sandbox.LabelService+"=browser",
		"--filter", "label="+sandbox.LabelProject+"="+run).Output()
	require.NoError(t, err)
	require.Len(t, strings.Fields(string(out2)), 1, "the dead browser's container is gone, a new one serves")

	// An idle browser is closed (research.capture_idle_timeout), and the next
	// call starts one again.
	browsers := func() []string {
		out, err := exec.Command("docker", "ps", "-aq", "--filter", "label="+sandbox.LabelService+"=browser",
			"--filter", "label="+sandbox.LabelProject+"="+run).Output()
		require.NoError(t, err)
		return strings.Fields(string(out))
	}
	require.Eventually(t, func() bool { return len(browsers()) == 0 }, 30*time.Second, 250*time.Millisecond, "the idle browser is removed")
	_, err = e.call(run, research.CaptureArgs{URL: "http://fixture.test/palette.html", Name: "after-idle"})
	require.NoError(t, err)
	require.Len(t, browsers(), 1)

	// The run's end removes its browser.
	require.NoError(t, e.d.Release(context.Background(), run))
	out2, err = exec.Command("docker", "ps", "-aq", "--filter", "label="+sandbox.LabelProject+"="+run).Output()
	require.NoError(t, err)
	require.Empty(t, strings.TrimSpace(string(out2)), "Release removes the browser container")
}

// BenchmarkCaptureReference is one capture_reference call with a warm browser
// (the run's container and Chromium already up): the page load through the egress
// proxy, the probe, two full-page screenshots, the palette and the saving. It
// reports the median as p50-ms. Run it with a fixed count:
//
//	go test ./toolbox/research/ -run '^$' -bench CaptureReference -benchtime 20x
func BenchmarkCaptureReference(b *testing.B) {
	e := newCaptureEnv(b, research.Config{CaptureTimeout: 60 * time.Second})
	run := "bench-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	args := research.CaptureArgs{URL: "http://fixture.test/palette.html", Name: "bench"}
	_, err := e.call(run, args) // starts the browser
	require.NoError(b, err)
	times := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		_, err := e.call(run, args)
		times = append(times, time.Since(start))
		require.NoError(b, err)
	}
	b.StopTimer()
	slices.Sort(times)
	b.ReportMetric(float64(times[len(times)/2].Microseconds())/1000, "p50-ms")
}

func TestCaptureConfig(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		cfg  research.Config
		err  string
	}{
		{name: "defaults", cfg: research.Config{}},
		{name: "a taller cut with room", cfg: research.Config{CaptureMaxHeight: 16384, CaptureMemoryBytes: 2 << 30, CaptureTmpfsBytes: 512 << 20}},
		{name: "taller than Chromium draws", cfg: research.Config{CaptureMaxHeight: 20000}, err: "research.capture_max_height 20000: at most 16384"},
		{name: "memory below the tmpfs", cfg: research.Config{CaptureTmpfsBytes: 1 << 30}, err: "research.capture_memory_bytes (1.0 GiB) must exceed research.capture_tmpfs_bytes (1.0 GiB) by 256 MiB"},
		{name: "negative", cfg: research.Config{CaptureMaxPages: -1}, err: "capture limits must not be negative"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.cfg.Validate()
			if tc.err == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.err)
		})
	}
	d := research.Config{}.WithDefaults()
	require.Equal(t, "aetherium-browser:latest", d.CaptureImage)
	require.Equal(t, 45*time.Second, d.CaptureTimeout)
	require.Equal(t, 2, d.CaptureMaxPages)
	require.Equal(t, 12000, d.CaptureMaxHeight)
}

// Without the Docker sandbox capture_reference refuses rather than render on the
// worker's host; bad arguments are refused before any browser starts.
func TestCaptureReferenceRefuses(t *testing.T) {
	t.Parallel()
	reg := tools.NewRegistry()
	research.Register(reg, nil, research.Config{}, nil)
	router := tools.NewRouter(reg)
	ctx, caller := context.Background(), &tools.Session{AllowedDomains: []string{"127.0.0.1"}, RunID: "r", SessionID: "s", Agent: "a", Workspace: t.TempDir(),
		Access: tools.Access{Tools: []string{"capture_reference"}}}
	_, err := router.Dispatch(ctx, tools.Call{Session: caller, ID: "c", Name: "capture_reference", Args: []byte(`{"url":"http://example.org/"}`)})
	require.ErrorContains(t, err, "needs the Docker sandbox")
}
