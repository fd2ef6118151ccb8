package fleet_test

import (
	"bytes"
	"context"
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/fleet"
	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/sandbox/sandboxtest"
	"github.com/aetherium-engine/aetherium/toolbox/research"
)

// An agent's capture_reference through a running fleet (script model, real Docker,
// the real browser image, real Chromium, the fleet's egress proxy): on the palette
// fixture it returns the known palette, type scale, rhythm and breakpoints, and the
// screenshots in the run's workspace decode as PNGs 1440 and 390 pixels wide; on
// the probe fixture, whose scripts ask for the fleet's API and for a stand-in on
// this host (fetch and WebSocket), every request is refused by the proxy and
// reported in the result, and the stand-in receives nothing. Both calls are
// audited as Elevated with their full arguments and results.
func TestCaptureReferenceEndToEnd(t *testing.T) {
	t.Parallel()
	dockerOrFail(t)
	image := sandboxtest.FamilyImage(t, "browser")
	host := listenStandIn(t, "0.0.0.0:0")
	require.NotNil(t, host)
	standPort, err := strconv.Atoi(portOf(t, host.addr))
	require.NoError(t, err)
	hostIP := hostIPv4(t).String()

	cfg := fleettest.Config(t)
	cfg.Research.CaptureImage = image
	cfg.Research.CaptureTimeout = 90 * time.Second
	// The API's port is known once the fleet listens; the fixture pages are
	// written before, so the API gets a name whose port the page learns from
	// its own query string.
	pal, err := os.ReadFile(fleettest.RepoPath(t, "toolbox/research/testdata/capture/palette.html"))
	require.NoError(t, err)
	probe, err := os.ReadFile(fleettest.RepoPath(t, "toolbox/research/testdata/capture/probe.html"))
	require.NoError(t, err)
	standURL := "http://standin.test:" + strconv.Itoa(standPort)
	probePage := strings.NewReplacer(
		"{{STANDIN}}", standURL, "{{STANDIN_WS}}", "ws"+strings.TrimPrefix(standURL, "http"),
		"'{{API}}", "'http://api.test:' + new URLSearchParams(location.search).get('api') + '",
		"'{{API_WS}}", "'ws://api.test:' + new URLSearchParams(location.search).get('api') + '",
	).Replace(string(probe))
	upstream := sandboxtest.UpstreamFiles(t, map[string]string{"palette.html": string(pal), "probe.html": probePage})

	f := fleettest.StartWith(t, cfg, fleettest.Options{Fleet: fleet.Options{Executor: sandboxtest.Docker(t),
		EgressResolver: fleettest.DNS(t, map[string]string{"fixture.test": upstream, "standin.test": hostIP, "api.test": hostIP})}})
	require.NotNil(t, f.EgressProxy, "the fleet runs its egress proxy")
	apiPort, err := strconv.Atoi(portOf(t, f.URL[len("http://"):]))
	require.NoError(t, err)

	tm := team([]map[string]any{
		call("capture_reference", map[string]any{"url": "http://fixture.test/palette.html"}),
		call("capture_reference", map[string]any{"url": "http://fixture.test/probe.html?api=" + strconv.Itoa(apiPort), "name": "probe"}),
		{"say": "captured"},
	}, map[string]any{
		"allowed_domains": []string{"fixture.test", "api.test", "standin.test"},
		// The ports are allowed: what refuses is the address (this host).
		"egress_ports": []int{apiPort, standPort},
	})
	tm["workers"] = []map[string]any{{"name": "writer", "prompt": "capture the reference", "mcp_servers": []string{"research"}}}
	id := f.SubmitTeam(tm, "capture the reference page")
	run := f.WaitTerminal(id, 4*time.Minute)
	require.Equal(t, "completed", run.Status, run.Error)

	results := toolResults(t, f, id, "capture_reference")
	require.Len(t, results, 2)
	var page, probed research.CaptureAnswer
	require.NoError(t, json.Unmarshal([]byte(results[0]), &page), results[0])
	require.NoError(t, json.Unmarshal([]byte(results[1]), &probed), results[1])
	t.Logf("palette %+v type scale %+v", page.Palette, page.TypeScale)

	hexes := map[string]float64{}
	for _, s := range page.Palette {
		hexes[s.Hex] = s.Share
	}
	require.InDelta(t, 0.50, hexes["#1e3a8a"], 0.03, "%+v", page.Palette)
	require.InDelta(t, 0.25, hexes["#f59e0b"], 0.02, "%+v", page.Palette)
	require.InDelta(t, 0.25, hexes["#ffffff"], 0.03, "%+v", page.Palette)
	var sizes []float64
	for _, s := range page.TypeScale {
		sizes = append(sizes, s.PX)
	}
	require.Equal(t, []float64{32, 24, 16, 12}, sizes)
	require.Equal(t, 16.0, page.Rhythm.BodyFontPX)
	require.Equal(t, 24.0, page.Rhythm.BodyLineHeightPX)
	require.Len(t, page.Breakpoints, 3)

	ws := filepath.Join(cfg.Workspaces, id)
	for i, width := range []int{research.DesktopWidth, research.MobileWidth} {
		s := page.Screenshots[i]
		b, err := os.ReadFile(filepath.Join(ws, s.Path))
		require.NoError(t, err, s.Path)
		img, err := png.Decode(bytes.NewReader(b))
		require.NoError(t, err, s.Path)
		require.Equal(t, width, img.Bounds().Dx(), s.Path)
	}

	t.Logf("refused %+v", probed.Refused)
	refused := map[string]bool{}
	for _, r := range probed.Refused {
		require.Contains(t, r.Reason, "the fleet's own", "%+v", r)
		refused[r.Method+" "+r.Host+":"+strconv.Itoa(r.Port)] = true
	}
	for _, want := range []string{
		"GET api.test:" + strconv.Itoa(apiPort), "CONNECT api.test:" + strconv.Itoa(apiPort),
		"GET standin.test:" + strconv.Itoa(standPort), "CONNECT standin.test:" + strconv.Itoa(standPort),
	} {
		require.True(t, refused[want], "%s refused and reported: %+v", want, probed.Refused)
	}
	require.Zero(t, host.accepted.Load(), "the stand-in received nothing")

	f.Audit.Flush()
	rows, err := f.Store.RunAudit(context.Background(), id, 100)
	require.NoError(t, err)
	n := 0
	for _, r := range rows {
		if r.Tool == "capture_reference" {
			n++
			require.Equal(t, "allowed", r.Decision)
			require.Equal(t, "elevated", r.Tier)
			require.NotEmpty(t, r.Args)
			require.NotNil(t, r.Result)
		}
	}
	require.Equal(t, 2, n)
}
