// Package dashboards_test checks the Grafana dashboards against the code: every
// metric a panel queries is one the code registers, and (with a real Prometheus
// scraping a running fleet) every panel query returns data.
package dashboards_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/aetherium-engine/aetherium/device"
	"github.com/aetherium-engine/aetherium/gpu"
	"github.com/aetherium-engine/aetherium/lease"
	"github.com/aetherium-engine/aetherium/mailbox"
	"github.com/aetherium-engine/aetherium/metrics"
)

// The dashboards the issue asks for, by file.
var wantDashboards = []string{"fleet-overview.json", "tool-gate.json", "streams-leases.json", "headset.json", "llm-usage.json"}

type dashboard struct {
	File   string
	UID    string  `json:"uid"`
	Title  string  `json:"title"`
	Panels []panel `json:"panels"`
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	ID          int         `json:"id"`
	Type        string      `json:"type"`
	Title       string      `json:"title"`
	Datasource  *datasource `json:"datasource"`
	GridPos     struct{ X, Y, W, H int }
	FieldConfig struct {
		Defaults struct {
			Custom struct {
				ThresholdsStyle struct {
					Mode string `json:"mode"`
				} `json:"thresholdsStyle"`
			} `json:"custom"`
			Thresholds struct {
				Steps []step `json:"steps"`
			} `json:"thresholds"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
	Targets []target `json:"targets"`
	// Panels of a collapsed row.
	Panels []panel `json:"panels"`
}

type target struct {
	RefID      string      `json:"refId"`
	Expr       string      `json:"expr"`
	Datasource *datasource `json:"datasource"`
}

type step struct {
	Value *float64 `json:"value"`
}

// query is one panel query, named for failure messages.
type query struct {
	Where string // file / panel / refId
	Expr  string
}

// loadDashboards reads every dashboard JSON beside this test.
func loadDashboards(t *testing.T) []dashboard {
	t.Helper()
	files, err := filepath.Glob("*.json")
	require.NoError(t, err)
	for _, want := range wantDashboards {
		require.Contains(t, files, want)
	}
	var out []dashboard
	for _, f := range files {
		raw, err := os.ReadFile(f)
		require.NoError(t, err)
		var d dashboard
		require.NoError(t, json.Unmarshal(raw, &d), f)
		d.File = f
		out = append(out, d)
	}
	return out
}

// allPanels flattens collapsed rows.
func allPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

// queries lists every panel query of every dashboard, read with Grafana's SDK.
func queries(t *testing.T) []query {
	t.Helper()
	var out []query
	for _, d := range loadSDKDashboards(t) {
		for _, p := range sdkPanels(d.D) {
			where := d.File + " / " + deref(p.Title)
			for _, q := range promTargets(t, where, p) {
				out = append(out, query{Where: where + " / " + deref(q.RefId), Expr: q.Expr})
			}
		}
	}
	require.NotEmpty(t, out)
	return out
}

// recorder is a Registerer that keeps what is registered through it.
type recorder struct {
	prometheus.Registerer
	collectors []prometheus.Collector
}

func (r *recorder) Register(c prometheus.Collector) error {
	r.collectors = append(r.collectors, c)
	return r.Registerer.Register(c)
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

type noQueues struct{}

func (noQueues) Queues() ([]string, error)                     { return nil, nil }
func (noQueues) GetQueueInfo(string) (*asynq.QueueInfo, error) { return &asynq.QueueInfo{}, nil }

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

// registeredDescs builds the collectors exactly as the fleet wires them (package
// metrics with the worker gauges and the queue collector, and every subsystem's
// NewMetrics) and returns their descriptors, each with whether it observes (a
// histogram or summary, whose series carry _bucket, _sum and _count suffixes).
func registeredDescs(t *testing.T) map[*prometheus.Desc]bool {
	t.Helper()
	m := metrics.New()
	m.WorkerStarted(1)
	require.NoError(t, m.WatchQueues(noQueues{}, metrics.QueueConfig{AsynqmonNames: true}))
	rec := &recorder{Registerer: prometheus.NewRegistry()}
	_, err := mailbox.NewMetrics(rec)
	require.NoError(t, err)
	_, err = lease.NewMetrics(rec)
	require.NoError(t, err)
	_, err = gpu.NewMetrics(rec)
	require.NoError(t, err)
	device.NewMetrics(rec)

	out := map[*prometheus.Desc]bool{}
	for _, c := range append(m.Collectors(), rec.collectors...) {
		var observer bool
		switch c.(type) {
		case prometheus.Histogram, prometheus.Summary, prometheus.ObserverVec:
			observer = true
		}
		ch := make(chan *prometheus.Desc, 256)
		c.Describe(ch)
		close(ch)
		for d := range ch {
			require.NotNil(t, fqName.FindStringSubmatch(d.String()), "descriptor without a name: %s", d)
			out[d] = out[d] || observer
		}
	}
	return out
}

// registeredNames returns each registered metric name, true for histograms and
// summaries.
func registeredNames(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	for d, observer := range registeredDescs(t) {
		n := fqName.FindStringSubmatch(d.String())[1]
		names[n] = names[n] || observer
	}
	require.Greater(t, len(names), 40, "the registry looks incomplete")
	return names
}

// isRegistered maps histogram series names to their histogram.
func isRegistered(names map[string]bool, name string) bool {
	if _, ok := names[name]; ok {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && names[base] {
			return true
		}
	}
	return false
}

func TestDashboardsQueryOnlyRegisteredMetrics(t *testing.T) {
	t.Parallel()
	names := registeredNames(t)
	used := map[string]bool{}
	var unknown []string
	for _, q := range queries(t) {
		ms, err := metricNames(q.Expr)
		require.NoError(t, err, q.Where)
		require.NotEmpty(t, ms, "%s: %q selects no metric", q.Where, q.Expr)
		for _, n := range ms {
			used[n] = true
			if !isRegistered(names, n) {
				unknown = append(unknown, q.Where+": "+n)
			}
		}
	}
	require.Empty(t, unknown, "panel queries use metrics the code does not register")
	// The check itself must be able to fail.
	require.False(t, isRegistered(names, "aetherium_runs_finished_total_bucket"), "a counter has no buckets")
	require.False(t, isRegistered(names, "aetherium_no_such_metric"))
	t.Logf("%d metric names used by the dashboards, %d registered", len(used), len(names))
}

func TestDashboardsAreProvisionable(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("provisioning/datasources/prometheus.yml")
	require.NoError(t, err)
	var ds struct {
		Datasources []struct {
			UID  string `yaml:"uid"`
			Type string `yaml:"type"`
		} `yaml:"datasources"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &ds))
	require.Len(t, ds.Datasources, 1)
	// The dashboards do not name this uid (TestDashboardsImportWithAnyDatasource):
	// it is only the compose Grafana's own, for links and the API.
	require.NotEmpty(t, ds.Datasources[0].UID)
	require.Equal(t, "prometheus", ds.Datasources[0].Type)

	raw, err = os.ReadFile("provisioning/dashboards/aetherium.yml")
	require.NoError(t, err)
	var prov struct {
		Providers []struct {
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &prov))
	require.Len(t, prov.Providers, 1)
	compose, err := os.ReadFile("../docker-compose.yml")
	require.NoError(t, err)
	require.Contains(t, string(compose), "./dashboards:"+prov.Providers[0].Options.Path, "compose mounts the dashboards where the provider reads them")

	uids, titles := map[string]bool{}, map[string]bool{}
	fpsThreshold := false
	for _, d := range loadDashboards(t) {
		require.NotEmpty(t, d.UID, d.File)
		require.False(t, uids[d.UID], "duplicate uid %s", d.UID)
		require.False(t, titles[d.Title], "duplicate title %s", d.Title)
		uids[d.UID], titles[d.Title] = true, true
		ids := map[int]bool{}
		for _, p := range allPanels(d.Panels) {
			where := d.File + " / " + p.Title
			require.False(t, ids[p.ID], "%s: duplicate panel id %d", where, p.ID)
			ids[p.ID] = true
			require.NotEmpty(t, p.Targets, where)
			require.NotNil(t, p.Datasource, where)
			require.LessOrEqual(t, p.GridPos.X+p.GridPos.W, 24, where)
			require.Positive(t, p.GridPos.H, where)
			refs := map[string]bool{}
			for _, tg := range p.Targets {
				require.False(t, refs[tg.RefID], "%s: duplicate refId", where)
				refs[tg.RefID] = true
				require.NotNil(t, tg.Datasource, where)
				// A constant always has a series: the Prometheus test could not
				// tell a panel with no data.
				for _, banned := range []string{"vector(", "absent(", "or on() "} {
					require.NotContains(t, tg.Expr, banned, where)
				}
			}
			if slices.ContainsFunc(p.Targets, func(tg target) bool { return strings.Contains(tg.Expr, "aetherium_headset_fps{") }) {
				fpsThreshold = strings.Contains(p.FieldConfig.Defaults.Custom.ThresholdsStyle.Mode, "line") &&
					slices.ContainsFunc(p.FieldConfig.Defaults.Thresholds.Steps, func(s step) bool { return s.Value != nil && *s.Value == 72 })
			}
		}
	}
	require.True(t, fpsThreshold, "the headset fps panel draws the 72 fps threshold line")
}

// TestComposePrometheusScrapesEveryRole checks dashboards/prometheus.yml against
// docker-compose.yml: a job per role, on the port that role's metrics listen on,
// workers found by DNS so every scaled replica is scraped.
func TestComposePrometheusScrapesEveryRole(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("prometheus.yml")
	require.NoError(t, err)
	var pc struct {
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
			DNSSDConfigs []struct {
				Names []string `yaml:"names"`
				Port  int      `yaml:"port"`
			} `yaml:"dns_sd_configs"`
		} `yaml:"scrape_configs"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &pc))
	targets := map[string]string{} // compose service -> port scraped
	for _, sc := range pc.ScrapeConfigs {
		for _, s := range sc.StaticConfigs {
			for _, tg := range s.Targets {
				host, port, _ := strings.Cut(tg, ":")
				targets[host] = port
			}
		}
		for _, d := range sc.DNSSDConfigs {
			for _, n := range d.Names {
				targets[n] = strconv.Itoa(d.Port)
			}
		}
	}

	raw, err = os.ReadFile("../docker-compose.yml")
	require.NoError(t, err)
	var compose struct {
		Services map[string]struct {
			Environment map[string]string `yaml:"environment"`
		} `yaml:"services"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &compose))
	for svc, env := range map[string]string{"api": "AETHERIUM_API_METRICS_ADDR", "worker": "AETHERIUM_WORKER_METRICS_ADDR", "scheduler": "AETHERIUM_SCHEDULER_METRICS_ADDR"} {
		addr := compose.Services[svc].Environment[env]
		require.NotEmpty(t, addr, "compose service %s sets %s", svc, env)
		_, port, _ := strings.Cut(addr, ":")
		require.Equal(t, port, targets[svc], "prometheus scrapes %s on the port its metrics listen on", svc)
	}
	require.Equal(t, "http://prometheus:9090", compose.Services["api"].Environment["AETHERIUM_PROMETHEUS_URL"], "asynqmon's charts read the compose Prometheus")

	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("promtool not found (CI=true: install Debian's prometheus package): %v", err)
		}
		t.Skipf("promtool not found: %v", err)
	}
	out, err := exec.Command(promtool, "check", "config", "prometheus.yml").CombinedOutput()
	require.NoError(t, err, "%s", out)
}
