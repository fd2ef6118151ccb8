package dashboards_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	gdash "github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/device"
	"github.com/aetherium-engine/aetherium/device/fps"
	"github.com/aetherium-engine/aetherium/fleet"
	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/lease"
	"github.com/aetherium-engine/aetherium/store"
)

// TestPanelsShowDataFromPrometheus runs a real Prometheus scraping a running fleet
// on loopback — the api (fleettest), two workers and the scheduler, each opened with
// its own fleet.Open and so its own registry and /metrics listener, as separate
// processes would be — while runs execute, then evaluates every panel query through
// Prometheus' HTTP API. Nothing drives a headset here, so the headset panels read a
// fifth target: device.Metrics fed with the analysis of a recorded fps sample.
func TestPanelsShowDataFromPrometheus(t *testing.T) {
	t.Parallel()
	bin := requireBinary(t, "prometheus")
	art := artifactsDir(t)
	promAddr := freeAddr(t)
	rules := filepath.Join(t.TempDir(), "permissions.yaml")
	require.NoError(t, os.WriteFile(rules, []byte("rules: []\n"), 0o644))
	f := fleettest.Start(t, fleettest.Options{NoWorker: true, Configure: func(c *config.Config) {
		c.API.PrometheusURL = "http://" + promAddr
		c.Security.PermissionsFile = rules
		c.Streams.Leases.Services = []lease.Service{{Name: "gpu-test", Capacity: 1}}
		c.Scheduler.Period = time.Second
	}})
	workers := []string{startRole(t, f.Cfg, (*fleet.Fleet).RunWorker), startRole(t, f.Cfg, (*fleet.Fleet).RunWorker)}
	sched := startRole(t, f.Cfg, (*fleet.Fleet).RunScheduler)
	headset := serveHeadsetSample(t, art)
	p := startPrometheus(t, bin, promAddr, art, map[string][]string{
		"aetherium-api":            {strings.TrimPrefix(f.URL, "http://")},
		"aetherium-worker":         workers,
		"aetherium-scheduler":      {sched},
		"aetherium-headset-sample": {headset},
	})
	p.waitTargetsUp(5)

	runs := []string{f.SubmitTeam(leaseTeam(), "hold a GPU lease")}
	for i := range 3 {
		runs = append(runs, f.Submit("demo", fmt.Sprintf("greeting %d", i), map[string]any{"topic": "metrics"}))
	}
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }))
	t.Cleanup(target.Close)
	gate := f.SubmitTeam(gateTeam(target.URL), "exercise the gate")
	runs = append(runs, gate)
	approve(t, f, gate)
	// A rules edit: the workers reload it (the reloads panel).
	require.NoError(t, os.WriteFile(rules, []byte("# edited\nrules: []\n"), 0o644))
	for _, id := range runs {
		r := f.WaitTerminal(id, 60*time.Second)
		require.Equal(t, "completed", r.Status, "run %s: %s %s", id, r.Reason, r.Error)
	}

	// Every panel query returns a series once the last scrapes are in.
	pending := queries(t)
	deadline := time.Now().Add(30 * time.Second)
	for len(pending) > 0 && time.Now().Before(deadline) {
		var still []query
		for _, q := range pending {
			n, err := p.series(grafanaVars.Replace(q.Expr))
			require.NoError(t, err, "%s: %s", q.Where, q.Expr)
			if n == 0 {
				still = append(still, q)
			}
		}
		pending = still
		if len(pending) > 0 {
			time.Sleep(500 * time.Millisecond)
		}
	}
	var empty []string
	for _, q := range pending {
		empty = append(empty, q.Where+": "+q.Expr)
	}
	require.Empty(t, empty, "panel queries with no series")

	// The variables' own queries list the fleet: every role's job, every process,
	// every queue (the dropdowns a user picks from).
	want := map[string][]string{
		"job":      {"aetherium-api", "aetherium-worker", "aetherium-scheduler"},
		"instance": append([]string{strings.TrimPrefix(f.URL, "http://"), sched}, workers...),
		"queue":    {"supervisor", "workers", "maintenance"},
	}
	for _, d := range loadSDKDashboards(t) {
		for _, v := range d.D.Templating.List {
			if v.Type != gdash.VariableTypeQuery {
				continue
			}
			got, err := p.labelValues(grafanaVars.Replace(queryString(v)))
			require.NoError(t, err, "%s: variable %s", d.File, v.Name)
			require.Subset(t, got, want[v.Name], "%s: variable %s", d.File, v.Name)
		}
	}
	// One process picked, as Grafana sends a multi-value selection: (a|b), regex
	// metacharacters escaped once for the regex and once for the PromQL string.
	pick := strings.NewReplacer("$job", "(aetherium-worker)", "$instance", "("+strings.ReplaceAll(regexp.QuoteMeta(workers[0]), `\`, `\\`)+")")
	for _, q := range queries(t) {
		if strings.Contains(q.Expr, "aetherium_worker_up{") {
			v, err := p.value(grafanaVars.Replace(pick.Replace(q.Expr)))
			require.NoError(t, err, q.Where)
			require.Equal(t, 1.0, v, "%s: one worker selected", q.Where)
		}
	}

	// The traffic shows up as values, not only as series.
	for expr, min := range map[string]float64{
		`sum(aetherium_worker_up)`:                                   2,
		`sum(aetherium_runs_finished_total{status="completed"})`:     float64(len(runs)),
		`sum(aetherium_gate_denials_total{layer="capability"})`:      1,
		`sum(aetherium_dlp_hits_total)`:                              1,
		`sum(aetherium_approvals_decided_total{outcome="approved"})`: 1,
		`sum(aetherium_lease_granted_total{service="gpu-test"})`:     1,
		`sum(aetherium_tasks_processed_total{queue="maintenance"})`:  1,
		`max(aetherium_headset_fps)`:                                 71.28,
	} {
		require.Eventually(t, func() bool {
			v, err := p.value(expr)
			return err == nil && v >= min
		}, 10*time.Second, 250*time.Millisecond, "%s ≥ %g", expr, min)
	}

	// asynqmon's charts read the asynq_* series from the same Prometheus.
	var charts map[string]struct {
		Status string `json:"status"`
		Data   struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
			} `json:"result"`
		} `json:"data"`
	}
	code, raw := f.Do("GET", fmt.Sprintf("/monitoring/api/metrics?duration=300&endtime=%d", time.Now().Unix()), nil, &charts)
	require.Equal(t, http.StatusOK, code, string(raw))
	for _, chart := range []string{"queue_size", "queue_latency_seconds", "tasks_processed_per_second", "pending_tasks_by_queue"} {
		var queues []string
		for _, r := range charts[chart].Data.Result {
			queues = append(queues, r.Metric["queue"])
		}
		require.Equal(t, "success", charts[chart].Status, chart)
		require.Subset(t, queues, []string{"supervisor", "workers", "maintenance"}, chart)
	}
}

// value evaluates expr to one number (the first series).
func (p *prom) value(expr string) (float64, error) {
	var data struct {
		Result []struct {
			Value [2]any `json:"value"`
		} `json:"result"`
	}
	if err := p.get("/api/v1/query", map[string][]string{"query": {expr}}, &data); err != nil {
		return 0, err
	}
	if len(data.Result) == 0 {
		return 0, fmt.Errorf("%s: no series", expr)
	}
	var v float64
	s, _ := data.Result[0].Value[1].(string)
	_, err := fmt.Sscan(s, &v)
	return v, err
}

// serveHeadsetSample records a headset performance sample in the recording format
// (device/fps), judges it as the driver does, feeds device.Metrics with the result
// and serves those metrics.
func serveHeadsetSample(t *testing.T, artifacts string) string {
	t.Helper()
	// 12 s at 72 Hz with jitter and a few long frames: a pass with a real spread.
	rng := rand.New(rand.NewPCG(72, 72))
	var frames []fps.Frame
	var at int64
	for i := range 12 * 72 {
		ft := int64(13_000_000 + rng.IntN(1_600_000))
		if i%250 == 249 {
			ft = 24_000_000
		}
		frames = append(frames, fps.Frame{PresentNS: at, FrameNS: ft})
		at += ft
	}
	var buf bytes.Buffer
	require.NoError(t, fps.Write(&buf, frames))
	path := filepath.Join(artifacts, "headset-sample.csv")
	require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o644))
	rec, err := os.Open(path)
	require.NoError(t, err)
	defer rec.Close()
	parsed, err := fps.Parse(rec)
	require.NoError(t, err)
	a := fps.Analyze(parsed, fps.Options{})
	require.Equal(t, fps.Pass, a.Result, "%+v", a.Reasons)

	reg := prometheus.NewRegistry()
	m := device.NewMetrics(reg)
	m.ObserveAnalysis(a)
	m.ObserveRun(device.OutcomeExited)
	return serveMetrics(t, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
}

// team is an inline script team: a supervisor that delegates once to writer.
func team(name string, writerServers []string, writer []map[string]any, extra map[string]any) map[string]any {
	tm := map[string]any{
		"name":  name,
		"model": map[string]any{"provider": "script"},
		"supervisor": map[string]any{
			"name": "boss", "prompt": "coordinate", "mcp_servers": []string{"orchestration"},
		},
		"workers": []map[string]any{{"name": "writer", "prompt": "write", "mcp_servers": writerServers}},
		"script": map[string]any{"agents": map[string]any{
			"boss": []map[string]any{
				{"calls": []map[string]any{{"tool": "delegate", "args": map[string]any{"agent": "writer", "task": "go"}}}},
				{"calls": []map[string]any{{"tool": "reply", "args": map[string]any{"message": "done"}}}},
			},
			"writer": writer,
		}},
	}
	for k, v := range extra {
		tm[k] = v
	}
	return tm
}

func call(tool string, args map[string]any) map[string]any {
	return map[string]any{"calls": []map[string]any{{"tool": tool, "args": args}}}
}

// leaseTeam holds a lease on the configured GPU service while it works.
func leaseTeam() map[string]any {
	return team("leased", []string{"workspace"}, []map[string]any{
		call("write_file", map[string]any{"path": "gpu.txt", "content": "leased"}),
		{"say": "done"},
	}, map[string]any{"gpu_services": []string{"gpu-test"}})
}

// gateTeam trips the gate's layers: a capability denial, a DLP hit and a
// Restricted call that waits for a human (frame_grab: approved, then it fails
// because no headset is configured, which the run survives).
func gateTeam(targetURL string) map[string]any {
	const pat = "ghp_R7x9Kq2LmN4pV8sT1wZ5yB3cD6fG0hJ2kL4m"
	return team("gated", []string{"workspace", "research", "device"}, []map[string]any{
		call("create_plan", map[string]any{"steps": []string{"x"}}),
		call("http_request", map[string]any{"method": "GET", "url": targetURL, "headers": map[string]string{"Authorization": "token " + pat}}),
		call("frame_grab", map[string]any{}),
		{"say": "done trying"},
	}, map[string]any{"allowed_domains": []string{"127.0.0.1"}}) // the target is loopback: named, or egress refuses before DLP
}

// approve approves the run's first approval request as soon as it appears.
func approve(t *testing.T, f *fleettest.Fleet, runID string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var out struct {
			Approvals []store.Approval `json:"approvals"`
		}
		code, raw := f.Do("GET", "/api/approvals?status=pending&run_id="+runID, nil, &out)
		require.Equal(t, http.StatusOK, code, string(raw))
		if len(out.Approvals) > 0 {
			code, raw = f.Do("POST", "/api/approvals/"+out.Approvals[0].ID+"/approve", map[string]string{"reason": "metrics test"}, nil)
			require.Equal(t, http.StatusOK, code, string(raw))
			return
		}
		require.True(t, time.Now().Before(deadline), "no approval requested for run %s", runID)
		time.Sleep(50 * time.Millisecond)
	}
}
