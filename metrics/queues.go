package metrics

import (
	"log/slog"
	"slices"
	"sync"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
)

// QueueInspector is the part of *asynq.Inspector the queue collector reads.
type QueueInspector interface {
	Queues() ([]string, error)
	GetQueueInfo(queue string) (*asynq.QueueInfo, error)
}

// QueueConfig configures the queue collector.
type QueueConfig struct {
	// Queues are always reported, with zeros until their first task exists, so a
	// dashboard has a series for every queue from the start. Queues asynq knows
	// besides these are reported too. Default none.
	Queues []string
	// AsynqmonNames also exports the asynq_* series (asynq_queue_size,
	// asynq_tasks_enqueued_total, ...) that asynqmon's charts query when it is pointed
	// at Prometheus; asynqmon hard-codes those names. Default false.
	AsynqmonNames bool
	// Log receives inspection errors. Default slog.Default().
	Log *slog.Logger
}

// QueueStates are the task states of aetherium_queue_tasks (bounded label values).
var QueueStates = []string{"pending", "active", "scheduled", "retry", "archived", "completed", "aggregating"}

// QueueCollector reads queue state from asynq at scrape time. Register it in one
// process per deployment (the api): every process would report the same Redis.
type QueueCollector struct {
	in  QueueInspector
	cfg QueueConfig

	own queueSeries
	// asynqmon's names (nil unless AsynqmonNames).
	asynqmon *queueSeries
	errors   prometheus.Counter
}

// queueSeries are the series of a queue under one naming: aetherium's, or
// asynqmon's for the same values.
type queueSeries struct {
	size, tasks, latency, memory, paused, processed, failed *prometheus.Desc
}

// NewQueueCollector builds the collector; it queries Redis only when scraped.
func NewQueueCollector(in QueueInspector, cfg QueueConfig) *QueueCollector {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	q := []string{"queue"}
	d := func(name, help string, labels []string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	c := &QueueCollector{in: in, cfg: cfg,
		own: queueSeries{
			size:      d("aetherium_queue_size", "Tasks in the queue in any state but completed (asynq's queue size).", q),
			tasks:     d("aetherium_queue_tasks", "Tasks in the queue by state (pending, active, scheduled, retry, archived, completed, aggregating).", []string{"queue", "state"}),
			latency:   d("aetherium_queue_latency_seconds", "Age of the oldest pending task (0 when none is pending).", q),
			memory:    d("aetherium_queue_memory_bytes", "Approximate Redis memory the queue and its tasks use (sampled).", q),
			paused:    d("aetherium_queue_paused", "1 while the queue is paused.", q),
			processed: d("aetherium_queue_processed_total", "Tasks processed from the queue, succeeded or failed, by every worker (kept in Redis).", q),
			failed:    d("aetherium_queue_failed_total", "Tasks whose processing failed, by every worker (kept in Redis).", q),
		},
		errors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "aetherium", Name: "queue_inspect_errors_total",
			Help: "Scrapes whose queue inspection failed (the queue series are missing from that scrape)."}),
	}
	if cfg.AsynqmonNames {
		c.asynqmon = &queueSeries{
			size:      d("asynq_queue_size", "Number of tasks in a queue (for asynqmon's charts).", q),
			tasks:     d("asynq_tasks_enqueued_total", "Number of tasks enqueued, by state (for asynqmon's charts).", []string{"queue", "state"}),
			latency:   d("asynq_queue_latency_seconds", "Queue latency in seconds (for asynqmon's charts).", q),
			memory:    d("asynq_queue_memory_usage_approx_bytes", "Approximate memory usage of a queue in bytes (for asynqmon's charts).", q),
			paused:    d("asynq_queue_paused_total", "1 while the queue is paused (for asynqmon's charts).", q),
			processed: d("asynq_tasks_processed_total", "Tasks processed, succeeded or failed (for asynqmon's charts).", q),
			failed:    d("asynq_tasks_failed_total", "Tasks failed (for asynqmon's charts).", q),
		}
	}
	return c
}

func (c *QueueCollector) descs() []*prometheus.Desc {
	out := c.own.descs()
	if c.asynqmon != nil {
		out = append(out, c.asynqmon.descs()...)
	}
	return out
}

func (s *queueSeries) descs() []*prometheus.Desc {
	return []*prometheus.Desc{s.size, s.tasks, s.latency, s.memory, s.paused, s.processed, s.failed}
}

// Describe implements prometheus.Collector.
func (c *QueueCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs() {
		ch <- d
	}
	c.errors.Describe(ch)
}

// Collect implements prometheus.Collector. An unreachable Redis drops the queue
// series from this scrape and counts an error, rather than failing the whole
// scrape: the process's other metrics stay visible.
func (c *QueueCollector) Collect(ch chan<- prometheus.Metric) {
	defer c.errors.Collect(ch)
	known, err := c.in.Queues()
	if err != nil {
		c.errors.Inc()
		c.cfg.Log.Warn("queue metrics: list queues", "err", err)
		return
	}
	var infos []*asynq.QueueInfo
	for _, q := range known {
		info, err := c.in.GetQueueInfo(q)
		if err != nil {
			c.errors.Inc()
			c.cfg.Log.Warn("queue metrics: inspect queue", "queue", q, "err", err)
			return
		}
		infos = append(infos, info)
	}
	for _, q := range c.cfg.Queues {
		if !slices.Contains(known, q) {
			infos = append(infos, &asynq.QueueInfo{Queue: q})
		}
	}
	for _, i := range infos {
		c.collect(ch, i)
	}
}

func (c *QueueCollector) collect(ch chan<- prometheus.Metric, i *asynq.QueueInfo) {
	c.own.collect(ch, i)
	if c.asynqmon != nil {
		c.asynqmon.collect(ch, i)
	}
}

func (s *queueSeries) collect(ch chan<- prometheus.Metric, i *asynq.QueueInfo) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	q := i.Queue
	paused := 0.0
	if i.Paused {
		paused = 1
	}
	byState := []int{i.Pending, i.Active, i.Scheduled, i.Retry, i.Archived, i.Completed, i.Aggregating}
	gauge(s.size, float64(i.Size), q)
	for k, state := range QueueStates {
		gauge(s.tasks, float64(byState[k]), q, state)
	}
	gauge(s.latency, i.Latency.Seconds(), q)
	gauge(s.memory, float64(i.MemoryUsage), q)
	gauge(s.paused, paused, q)
	counter(s.processed, float64(i.ProcessedTotal), q)
	counter(s.failed, float64(i.FailedTotal), q)
}

// queueOnce guards WatchQueues: the api may be built more than once per process.
type queueOnce struct {
	mu   sync.Mutex
	done bool
}

// WatchQueues registers a queue collector on the process registry, once; later
// calls are no-ops. Call it in the one role that should report queue state (the
// api).
func (m *Metrics) WatchQueues(in QueueInspector, cfg QueueConfig) error {
	m.queues.mu.Lock()
	defer m.queues.mu.Unlock()
	if m.queues.done {
		return nil
	}
	if err := m.register(NewQueueCollector(in, cfg)); err != nil {
		return err
	}
	m.queues.done = true
	return nil
}
