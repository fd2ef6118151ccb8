package dashboards_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/fleet"
	"github.com/aetherium-engine/aetherium/internal/testlog"

	"github.com/aetherium-engine/aetherium/internal/testinfra"
)

// requireBinary finds a Debian-packaged tool: missing, the test fails under CI=true
// (CI installs it) and skips otherwise.
func requireBinary(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s not found (CI=true: install Debian's %s package): %v", name, name, err)
	}
	t.Skipf("%s not found (apt-get install %s): %v", name, name, err)
	return ""
}

// artifactsDir is where a test leaves files worth keeping: a directory per test
// under AETHERIUM_TEST_ARTIFACTS when set, else a temporary directory.
func artifactsDir(t *testing.T) string {
	t.Helper()
	root := os.Getenv("AETHERIUM_TEST_ARTIFACTS")
	if root == "" {
		return t.TempDir()
	}
	dir := filepath.Join(root, regexp.MustCompile(`[^A-Za-z0-9_.-]+`).ReplaceAllString(t.Name(), "_"))
	require.NoError(t, os.MkdirAll(dir, 0o755))
	return dir
}

// freeAddr reserves a loopback port for a server that must be told its address
// before it starts (the fleet's config names Prometheus before Prometheus runs).
func freeAddr(t *testing.T) string {
	t.Helper()
	p, err := testinfra.FreePort()
	require.NoError(t, err)
	return "127.0.0.1:" + strconv.Itoa(p)
}

// serveMetrics serves h at /metrics on a fresh loopback port and returns host:port.
func serveMetrics(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/metrics", h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// startRole runs one server role the way `aetherium worker|scheduler` does: its own
// fleet.Open (so its own registry, like a separate process) and its own /metrics
// listener. The roles share the test's Redis and PostgreSQL.
func startRole(t *testing.T, cfg config.Config, run func(*fleet.Fleet, context.Context) error) string {
	t.Helper()
	f, err := fleet.Open(context.Background(), cfg, testlog.Logger(t), fleet.Options{NoSandbox: true})
	require.NoError(t, err)
	addr := serveMetrics(t, f.Metrics.Handler())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(f, ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("role stopped with: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("role did not stop")
		}
		f.Close()
	})
	return addr
}

// prom is a real Prometheus server on loopback.
type prom struct {
	url string
	t   *testing.T
}

// startPrometheus runs bin scraping jobs (job name → host:port targets) every
// second, with its storage and log in temporary files.
func startPrometheus(t *testing.T, bin, addr, artifacts string, jobs map[string][]string) *prom {
	t.Helper()
	var cfg strings.Builder
	cfg.WriteString("global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n  evaluation_interval: 1s\nscrape_configs:\n")
	for job, targets := range jobs {
		quoted := make([]string, len(targets))
		for i, tg := range targets {
			quoted[i] = fmt.Sprintf("%q", tg)
		}
		fmt.Fprintf(&cfg, "  - job_name: %s\n    static_configs:\n      - targets: [%s]\n", job, strings.Join(quoted, ", "))
	}
	dir := t.TempDir()
	cfgPath := filepath.Join(artifacts, "prometheus.yml")
	require.NoError(t, os.WriteFile(cfgPath, []byte(cfg.String()), 0o644))
	logf, err := os.Create(filepath.Join(artifacts, "prometheus.log"))
	require.NoError(t, err)
	cmd := exec.Command(bin, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		_ = logf.Close()
	})
	p := &prom{url: "http://" + addr, t: t}
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case <-exited:
			log, _ := os.ReadFile(logf.Name())
			t.Fatalf("prometheus exited: %s", log)
		default:
		}
		resp, err := http.Get(p.url + "/-/ready")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		require.True(t, time.Now().Before(deadline), "prometheus not ready: %v", err)
		time.Sleep(100 * time.Millisecond)
	}
}

// get decodes a Prometheus API answer's data into out.
func (p *prom) get(path string, params url.Values, out any) error {
	resp, err := http.Get(p.url + path + "?" + params.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var env struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(raw, &env); err != nil {
		return fmt.Errorf("%s: HTTP %d: %s", path, resp.StatusCode, raw)
	}
	if env.Status != "success" {
		return fmt.Errorf("%s: %s", path, env.Error)
	}
	return json.Unmarshal(env.Data, out)
}

// waitTargetsUp waits until Prometheus has scraped every target successfully.
func (p *prom) waitTargetsUp(want int) {
	p.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var data struct {
			ActiveTargets []struct {
				ScrapeURL string `json:"scrapeUrl"`
				Health    string `json:"health"`
				LastError string `json:"lastError"`
			} `json:"activeTargets"`
		}
		require.NoError(p.t, p.get("/api/v1/targets", url.Values{"state": {"active"}}, &data))
		up := 0
		var down []string
		for _, tg := range data.ActiveTargets {
			if tg.Health == "up" {
				up++
			} else {
				down = append(down, tg.ScrapeURL+" "+tg.Health+" "+tg.LastError)
			}
		}
		if up == want && len(data.ActiveTargets) == want {
			return
		}
		require.True(p.t, time.Now().Before(deadline), "%d of %d targets up; down: %v", up, want, down)
		time.Sleep(200 * time.Millisecond)
	}
}

// series evaluates expr now and returns how many series it returned.
func (p *prom) series(expr string) (int, error) {
	var data struct {
		ResultType string            `json:"resultType"`
		Result     []json.RawMessage `json:"result"`
	}
	if err := p.get("/api/v1/query", url.Values{"query": {expr}}, &data); err != nil {
		return 0, err
	}
	if data.ResultType == "scalar" {
		return 1, nil
	}
	return len(data.Result), nil
}

// grafanaVars replaces the Grafana variables the dashboards use with what Grafana
// would send for a short range at a 1s scrape interval, with All selected in the
// job, instance and queue variables (their allValue, ".*").
var grafanaVars = strings.NewReplacer("${__rate_interval}", "1m", "$__rate_interval", "1m",
	"${__range}", "5m", "$__range", "5m", "${__interval}", "15s", "$__interval", "15s",
	"$job", ".*", "$instance", ".*", "$queue", ".*")

// labelValues evaluates a Grafana label_values(selector, label) variable query as
// Grafana's Prometheus datasource does: the label's values over the matching series.
func (p *prom) labelValues(query string) ([]string, error) {
	m := regexp.MustCompile(`^label_values\((.+),\s*(\w+)\)$`).FindStringSubmatch(query)
	if m == nil {
		return nil, fmt.Errorf("not a label_values query: %q", query)
	}
	var series []map[string]string
	if err := p.get("/api/v1/series", url.Values{"match[]": {m[1]}, "start": {strconv.FormatInt(time.Now().Add(-5*time.Minute).Unix(), 10)}}, &series); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	for _, s := range series {
		if v := s[m[2]]; v != "" && !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out, nil
}
