package metrics_test

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/internal/testdb"

	"github.com/aetherium-engine/aetherium/metrics"
)

// fakeInspector answers from a table; err fails every call.
type fakeInspector struct {
	infos map[string]*asynq.QueueInfo
	err   error
}

func (f fakeInspector) Queues() ([]string, error) {
	if f.err != nil {
		return nil, f.err
	}
	var out []string
	for q := range f.infos {
		out = append(out, q)
	}
	return out, nil
}

func (f fakeInspector) GetQueueInfo(q string) (*asynq.QueueInfo, error) {
	if f.err != nil {
		return nil, f.err
	}
	return f.infos[q], nil
}

func setup(t *testing.T) *metrics.Metrics {
	t.Helper()
	return metrics.New()
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func TestQueueCollector(t *testing.T) {
	t.Parallel()
	busy := &asynq.QueueInfo{Queue: "workers", Size: 6, Pending: 3, Active: 1, Scheduled: 1, Retry: 1, Completed: 4,
		Latency: 1500 * time.Millisecond, MemoryUsage: 2048, ProcessedTotal: 40, FailedTotal: 2}
	for _, tc := range []struct {
		name    string
		in      fakeInspector
		cfg     metrics.QueueConfig
		want    string // exposition of the named metrics
		names   []string
		failing bool // every scrape counts an inspection error
		nSeries int  // series of aetherium_queue_tasks
	}{
		{
			name:  "known and configured queues",
			in:    fakeInspector{infos: map[string]*asynq.QueueInfo{"workers": busy}},
			cfg:   metrics.QueueConfig{Queues: []string{"workers", "supervisor"}},
			names: []string{"aetherium_queue_size", "aetherium_queue_latency_seconds", "aetherium_queue_processed_total"},
			want: `
# HELP aetherium_queue_latency_seconds Age of the oldest pending task (0 when none is pending).
# TYPE aetherium_queue_latency_seconds gauge
aetherium_queue_latency_seconds{queue="supervisor"} 0
aetherium_queue_latency_seconds{queue="workers"} 1.5
# HELP aetherium_queue_processed_total Tasks processed from the queue, succeeded or failed, by every worker (kept in Redis).
# TYPE aetherium_queue_processed_total counter
aetherium_queue_processed_total{queue="supervisor"} 0
aetherium_queue_processed_total{queue="workers"} 40
# HELP aetherium_queue_size Tasks in the queue in any state but completed (asynq's queue size).
# TYPE aetherium_queue_size gauge
aetherium_queue_size{queue="supervisor"} 0
aetherium_queue_size{queue="workers"} 6
`,
			nSeries: 2 * len(metrics.QueueStates),
		},
		{
			name:  "asynqmon names",
			in:    fakeInspector{infos: map[string]*asynq.QueueInfo{"workers": busy}},
			cfg:   metrics.QueueConfig{AsynqmonNames: true},
			names: []string{"asynq_tasks_enqueued_total"},
			want: `
# HELP asynq_tasks_enqueued_total Number of tasks enqueued, by state (for asynqmon's charts).
# TYPE asynq_tasks_enqueued_total gauge
asynq_tasks_enqueued_total{queue="workers",state="active"} 1
asynq_tasks_enqueued_total{queue="workers",state="aggregating"} 0
asynq_tasks_enqueued_total{queue="workers",state="archived"} 0
asynq_tasks_enqueued_total{queue="workers",state="completed"} 4
asynq_tasks_enqueued_total{queue="workers",state="pending"} 3
asynq_tasks_enqueued_total{queue="workers",state="retry"} 1
asynq_tasks_enqueued_total{queue="workers",state="scheduled"} 1
`,
			nSeries: len(metrics.QueueStates),
		},
		{
			name:    "redis down drops the queue series, not the scrape",
			in:      fakeInspector{err: errors.New("connection refused")},
			cfg:     metrics.QueueConfig{Queues: []string{"workers"}},
			names:   []string{"aetherium_queue_size"},
			failing: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := setup(t)
			tc.cfg.Log = quiet
			require.NoError(t, m.WatchQueues(tc.in, tc.cfg))
			require.NoError(t, m.WatchQueues(tc.in, tc.cfg), "a second call is a no-op")
			got := exposition(t, m, tc.names...)
			require.Equal(t, strings.TrimSpace(tc.want), strings.TrimSpace(got))
			require.Equal(t, tc.nSeries, count(t, m, "aetherium_queue_tasks"))
			errs, err := gatherValue(m.Registry, "aetherium_queue_inspect_errors_total")
			require.NoError(t, err)
			if tc.failing {
				require.Equal(t, 3.0, errs, "one error per scrape so far, this one included")
			} else {
				require.Zero(t, errs)
			}
			if !tc.cfg.AsynqmonNames {
				require.Zero(t, count(t, m, "asynq_queue_size"))
			}
		})
	}
}

// exposition renders the named metric families in the text format.
func exposition(t *testing.T, m *metrics.Metrics, names ...string) string {
	t.Helper()
	mfs, err := m.Registry.Gather()
	require.NoError(t, err)
	var b strings.Builder
	for _, mf := range mfs {
		if slices.Contains(names, mf.GetName()) {
			_, err := expfmt.MetricFamilyToText(&b, mf)
			require.NoError(t, err)
		}
	}
	return b.String()
}

// samples is exposition without HELP and TYPE lines.
func samples(t *testing.T, m *metrics.Metrics, names ...string) string {
	t.Helper()
	var out []string
	for _, l := range strings.Split(exposition(t, m, names...), "\n") {
		if l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func count(t *testing.T, m *metrics.Metrics, name string) int {
	t.Helper()
	mfs, err := m.Registry.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			return len(mf.GetMetric())
		}
	}
	return 0
}

func gatherValue(g prometheus.Gatherer, name string) (float64, error) {
	mfs, err := g.Gather()
	if err != nil {
		return 0, err
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			var sum float64
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
			return sum, nil
		}
	}
	return 0, errors.New(name + " not gathered")
}

// TestQueueCollectorOnRedis reads real queues through asynq's inspector.
func TestQueueCollectorOnRedis(t *testing.T) {
	t.Parallel()
	opt, err := asynq.ParseRedisURI(testdb.Redis(t))
	require.NoError(t, err)
	client := asynq.NewClient(opt)
	t.Cleanup(func() { _ = client.Close() })
	for range 2 {
		_, err := client.Enqueue(asynq.NewTask("t", nil), asynq.Queue("workers"))
		require.NoError(t, err)
	}
	_, err = client.Enqueue(asynq.NewTask("t", nil), asynq.Queue("workers"), asynq.ProcessIn(time.Hour))
	require.NoError(t, err)
	in := asynq.NewInspector(opt)
	t.Cleanup(func() { _ = in.Close() })
	m := setup(t)
	require.NoError(t, m.WatchQueues(in, metrics.QueueConfig{Queues: []string{"supervisor"}, Log: quiet}))

	srv := httptest.NewServer(m.Handler())
	t.Cleanup(srv.Close)
	body := scrape(t, srv.URL)
	for _, want := range []string{
		`aetherium_queue_tasks{queue="workers",state="pending"} 2`,
		`aetherium_queue_tasks{queue="workers",state="scheduled"} 1`,
		`aetherium_queue_size{queue="workers"} 3`,
		`aetherium_queue_size{queue="supervisor"} 0`,
		`aetherium_queue_inspect_errors_total 0`,
	} {
		require.Contains(t, body, want)
	}
	lat, err := gatherLabelled(m.Registry, "aetherium_queue_latency_seconds", "workers")
	require.NoError(t, err)
	require.GreaterOrEqual(t, lat, 0.0)
}

func gatherLabelled(g prometheus.Gatherer, name, queue string) (float64, error) {
	mfs, err := g.Gather()
	if err != nil {
		return 0, err
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "queue" && l.GetValue() == queue {
					return m.GetGauge().GetValue(), nil
				}
			}
		}
	}
	return 0, errors.New(name + " not gathered")
}

func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(raw)
}

func TestWorkerGaugesOnlyInWorkerProcesses(t *testing.T) {
	t.Parallel()
	m := setup(t)
	require.Zero(t, count(t, m, "aetherium_worker_up")+count(t, m, "aetherium_worker_concurrency"), "a process without a worker exports no worker series")

	m.WorkerStarted(8)
	m.WorkerStarted(4)
	require.Equal(t, "aetherium_worker_concurrency 12\naetherium_worker_up 2", samples(t, m, "aetherium_worker_concurrency", "aetherium_worker_up"))
	m.WorkerStopped(4)
	require.Equal(t, "aetherium_worker_concurrency 8\naetherium_worker_up 1", samples(t, m, "aetherium_worker_concurrency", "aetherium_worker_up"))
}

func TestCollectorsListsEveryRegisteredName(t *testing.T) {
	t.Parallel()
	m := setup(t)
	m.WorkerStarted(1)
	require.NoError(t, m.WatchQueues(fakeInspector{}, metrics.QueueConfig{AsynqmonNames: true, Log: quiet}))
	names := map[string]bool{}
	for _, c := range m.Collectors() {
		ch := make(chan *prometheus.Desc, 64)
		c.Describe(ch)
		close(ch)
		for d := range ch {
			names[d.String()] = true
		}
	}
	joined := ""
	for n := range names {
		joined += n + "\n"
	}
	for _, want := range []string{"aetherium_runs_finished_total", "aetherium_worker_up", "aetherium_queue_tasks", "asynq_queue_size", "go_goroutines"} {
		require.Contains(t, joined, `"`+want+`"`)
	}
}
