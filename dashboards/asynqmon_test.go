package dashboards_test

import (
	"context"
	"image"
	"image/png"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/fleettest"
)

// fleetQueues are the queues a fleet has once a run finished: supervisor steps,
// agent turns, and the run's cleanup on maintenance.
var fleetQueues = []string{"supervisor", "workers", "maintenance"}

// TestAsynqmonInChromium loads asynqmon at /monitoring/ in headless Chromium
// (Debian's chromium), keeps a screenshot as a test artifact, and checks that
// asynqmon's API and the rendered page list the fleet's queues.
func TestAsynqmonInChromium(t *testing.T) {
	t.Parallel()
	chromium := requireBinary(t, "chromium")
	art := artifactsDir(t)
	f := fleettest.Start(t, fleettest.Options{})
	id := f.Submit("demo", "hello", map[string]any{"topic": "asynqmon"})
	require.Equal(t, "completed", f.WaitTerminal(id, 60*time.Second).Status)

	var out struct {
		Queues []struct {
			Queue string `json:"queue"`
			Size  int    `json:"size"`
		} `json:"queues"`
	}
	require.Eventually(t, func() bool {
		code, _ := f.Do("GET", "/monitoring/api/queues", nil, &out)
		var names []string
		for _, q := range out.Queues {
			names = append(names, q.Queue)
		}
		return code == http.StatusOK && containsAll(names, fleetQueues)
	}, 15*time.Second, 100*time.Millisecond, "asynqmon lists the fleet's queues: %+v", out.Queues)

	// The page is a single-page app: give its scripts virtual time to fetch the
	// queues and render before the DOM is dumped and the screenshot taken.
	url := f.URL + "/monitoring/"
	dom := runChromium(t, chromium, "--dump-dom", url)
	for _, q := range fleetQueues {
		require.Contains(t, dom, ">"+q+"<", "the rendered page lists queue %s", q)
	}
	shot := filepath.Join(art, "asynqmon.png")
	runChromium(t, chromium, "--screenshot="+shot, url)
	t.Logf("screenshot: %s", shot)
	requireNotBlank(t, shot)
}

func containsAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

func runChromium(t *testing.T, bin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--no-first-run", "--hide-scrollbars", "--user-data-dir=" + t.TempDir(),
		"--window-size=1280,800", "--virtual-time-budget=5000"}
	cmd := exec.CommandContext(ctx, bin, append(base, args...)...)
	var stderr limitedBuffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "chromium %v: %s", args, stderr.String())
	return string(out)
}

// limitedBuffer keeps the last 8 KiB written (chromium is chatty on stderr).
type limitedBuffer struct{ b []byte }

func (l *limitedBuffer) Write(p []byte) (int, error) {
	l.b = append(l.b, p...)
	if len(l.b) > 8<<10 {
		l.b = l.b[len(l.b)-8<<10:]
	}
	return len(p), nil
}

func (l *limitedBuffer) String() string { return string(l.b) }

// requireNotBlank decodes the PNG and requires a real page: the window's size and
// more than a sliver of pixels away from the background colour.
func requireNotBlank(t *testing.T, path string) {
	t.Helper()
	fh, err := os.Open(path)
	require.NoError(t, err)
	defer fh.Close()
	img, err := png.Decode(fh)
	require.NoError(t, err)
	b := img.Bounds()
	require.Equal(t, image.Rect(0, 0, 1280, 800), b)
	counts := map[[4]uint32]int{}
	for y := b.Min.Y; y < b.Max.Y; y += 2 {
		for x := b.Min.X; x < b.Max.X; x += 2 {
			r, g, bl, a := img.At(x, y).RGBA()
			counts[[4]uint32{r >> 8, g >> 8, bl >> 8, a >> 8}]++
		}
	}
	total, top := 0, 0
	for _, n := range counts {
		total += n
		top = max(top, n)
	}
	require.Greater(t, len(counts), 16, "a rendered page has more than a few colours")
	require.Less(t, float64(top)/float64(total), 0.97, "more than a sliver of the page differs from its background")
}
