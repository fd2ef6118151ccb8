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

	size, tasks, latency, memory, paused, processed, failed *prometheus.Desc
	// asynqmon's names (nil unless AsynqmonNames).
	aSize, aEnqueued, aLatency, aMemory, aPaused, aProcessed, aFailed *prometheus.Desc
	errors                                                            prometheus.Counter
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
		size:      d("aetherium_queue_size", "Tasks in the queue in any state but completed (asynq's queue size).", q),
		tasks:     d("aetherium_queue_tasks", "Tasks in the queue by state (pending, active, scheduled, retry, archived, completed, aggregating).", []string{"queue", "state"}),
		latency:   d("aetherium_queue_latency_seconds", "Age of the oldest pending task (0 when none is pending).", q),
		memory:    d("aetherium_queue_memory_bytes", "Approximate Redis memory the queue and its tasks use (sampled).", q),
		paused:    d("aetherium_queue_paused", "1 while the queue is paused.", q),
		processed: d("aetherium_queue_processed_total", "Tasks processed from the queue, succeeded or failed, by every worker (kept in Redis).", q),
		failed:    d("aetherium_queue_failed_total", "Tasks whose processing failed, by every worker (kept in Redis).", q),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "aetherium", Name: "queue_inspect_errors_total",
			Help: "Scrapes whose queue inspection failed (the queue series are missing from that scrape)."}),
	}
	if cfg.AsynqmonNames {
		c.aSize = d("asynq_queue_size", "Number of tasks in a queue (for asynqmon's charts).", q)
		c.aEnqueued = d("asynq_tasks_enqueued_total", "Number of tasks enqueued, by state (for asynqmon's charts).", []string{"queue", "state"})
		c.aLatency = d("asynq_queue_latency_seconds", "Queue latency in seconds (for asynqmon's charts).", q)
		c.aMemory = d("asynq_queue_memory_usage_approx_bytes", "Approximate memory usage of a queue in bytes (for asynqmon's charts).", q)
		c.aPaused = d("asynq_queue_paused_total", "1 while the queue is paused (for asynqmon's charts).", q)
		c.aProcessed = d("asynq_tasks_processed_total", "Tasks processed, succeeded or failed (for asynqmon's charts).", q)
		c.aFailed = d("asynq_tasks_failed_total", "Tasks failed (for asynqmon's charts).", q)
	}
	return c
}

func (c *QueueCollector) descs() []*prometheus.Desc {
	out := []*prometheus.Desc{c.size, c.tasks, c.latency, c.memory, c.paused, c.processed, c.failed}
	if c.cfg.AsynqmonNames {
		out = append(out, c.aSize, c.aEnqueued, c.aLatency, c.aMemory, c.aPaused, c.aProcessed, c.aFailed)
	}
	return out
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
	gauge(c.size, float64(i.Size), q)
	for k, s := range QueueStates {
		gauge(c.tasks, float64(byState[k]), q, s)
	}
	gauge(c.latency, i.Latency.Seconds(), q)
	gauge(c.memory, float64(i.MemoryUsage), q)
	gauge(c.paused, paused, q)
	counter(c.processed, float64(i.ProcessedTotal), q)
	counter(c.failed, float64(i.FailedTotal), q)
	if !c.cfg.AsynqmonNames {
		return
	}
	gauge(c.aSize, float64(i.Size), q)
	for k, s := range QueueStates {
		gauge(c.aEnqueued, float64(byState[k]), q, s)
	}
	gauge(c.aLatency, i.Latency.Seconds(), q)
	gauge(c.aMemory, float64(i.MemoryUsage), q)
	gauge(c.aPaused, paused, q)
	counter(c.aProcessed, float64(i.ProcessedTotal), q)
	counter(c.aFailed, float64(i.FailedTotal), q)
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
