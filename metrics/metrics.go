// Package metrics owns one Prometheus registry per process, namespace aetherium_.
// Label sets are bounded: no run ids, no free text.
package metrics

import (
	"context"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/aetherium-engine/aetherium/queue"
	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"
)

// Metrics holds every collector this process exports.
type Metrics struct {
	Registry *prometheus.Registry

	RunsFinished   *prometheus.CounterVec // status
	RunsSubmitted  prometheus.Counter
	RunDuration    prometheus.Histogram
	TasksProcessed *prometheus.CounterVec   // queue, type, outcome
	TaskDuration   *prometheus.HistogramVec // queue, type
	// QueueWait is the time from enqueue to the handler's start, first
	// attempts of tasks due at once (queue.EnqueuedAt): the hop latency.
	QueueWait *prometheus.HistogramVec // queue, type
	// FirstModelCall is the time from a step's handler start to its first model
	// call (the rest of a hop: leases, workspace, session load, memory).
	FirstModelCall   *prometheus.HistogramVec // role
	ToolCalls        *prometheus.CounterVec   // tool, tier, decision
	ToolDuration     *prometheus.HistogramVec // tool
	GateDenials      *prometheus.CounterVec   // layer
	LLMRequests      *prometheus.CounterVec   // provider, model, outcome
	LLMLatency       *prometheus.HistogramVec // provider, model
	LLMTokens        *prometheus.CounterVec   // provider, model, direction
	LLMCost          *prometheus.CounterVec   // provider, model
	LLMWaits         *prometheus.CounterVec   // provider, cause
	DLPHits          *prometheus.CounterVec   // rule
	ApprovalsDecided *prometheus.CounterVec   // outcome
	ApprovalWait     prometheus.Histogram     // seconds from request to decision
	ApprovalsPending prometheus.Gauge         // refreshed from the database
	AuditBuffer      prometheus.Gauge         // rows waiting to be written
	RulesReloads     *prometheus.CounterVec   // result
	RulesValid       prometheus.Gauge         // 1 when the permissions file in force parsed
	HTTPRequests     *prometheus.CounterVec   // route, method, status
	HTTPDuration     *prometheus.HistogramVec // route, method
	// WorkerUp counts the asynq worker servers running in this process (1 in a
	// worker process); WorkerConcurrency is their summed concurrency. Both are
	// registered by WorkerStarted, so only processes that run a worker export them.
	WorkerUp          prometheus.Gauge
	WorkerConcurrency prometheus.Gauge
	// FairDispatch is the fair dispatcher fleet-wide, as this worker last read
	// it (every worker reports the same figures: aggregate with max): tasks
	// pending in lines, keys with work pending, tasks in flight, the window
	// (live workers' slots) and keys parked at their turn limit. Registered
	// with the worker series. No series per key: keys are unbounded.
	FairDispatch *prometheus.GaugeVec // state
	// StaleWritesRefused counts writes of a step whose session lease another
	// delivery had taken over (store.ErrLeaseLost): a worker paused or cut off
	// past its lease, its late save or release refused by the lease token.
	StaleWritesRefused *prometheus.CounterVec // kind
	// HookDeliveries counts inbound webhook deliveries (POST /hooks/:id) by
	// outcome (accepted, refused) and reason ("" when accepted; a refusal's
	// reason from the bounded set of webhook/inbound, or unknown_hook).
	HookDeliveries *prometheus.CounterVec // outcome, reason

	mu         sync.Mutex
	collectors []prometheus.Collector
	worker     bool
	queues     queueOnce
}

// New builds the registry with Go and process collectors.
func New() *Metrics {
	r := prometheus.NewRegistry()
	m := &Metrics{Registry: r}
	f := func(c prometheus.Collector) {
		if err := m.register(c); err != nil {
			panic(err)
		}
	}
	f(collectors.NewGoCollector())
	f(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	const ns = "aetherium"
	m.RunsSubmitted = prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "runs_submitted_total", Help: "Runs accepted by the API."})
	m.RunsFinished = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "runs_finished_total", Help: "Runs that reached a terminal status."}, []string{"status"})
	m.RunDuration = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "run_duration_seconds", Help: "Run wall time from submission to terminal status.", Buckets: prometheus.ExponentialBuckets(0.05, 2, 16)})
	m.TasksProcessed = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "tasks_processed_total", Help: "asynq tasks handled, by outcome (ok, error, busy)."}, []string{"queue", "type", "outcome"})
	m.QueueWait = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "task_queue_wait_seconds", Help: "Time from enqueue to the handler's start (first attempts of tasks due at once; approximate across hosts: the enqueuer's clock).", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}, []string{"queue", "type"})
	m.TaskDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "task_duration_seconds", Help: "asynq task handling time.", Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 14)}, []string{"queue", "type"})
	m.ToolCalls = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "tool_calls_total", Help: "Tool calls by tool, tier and gate decision."}, []string{"tool", "tier", "decision"})
	m.ToolDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "tool_duration_seconds", Help: "Tool execution time.", Buckets: prometheus.ExponentialBuckets(0.0005, 3, 12)}, []string{"tool"})
	m.GateDenials = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "gate_denials_total", Help: "Tool calls refused, by the gate layer that refused them."}, []string{"layer"})
	m.LLMRequests = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "llm_requests_total", Help: "Model calls by provider, model and outcome."}, []string{"provider", "model", "outcome"})
	m.LLMLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "llm_request_duration_seconds", Help: "Model call latency.", Buckets: prometheus.ExponentialBuckets(0.01, 2.5, 12)}, []string{"provider", "model"})
	m.LLMTokens = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "llm_tokens_total", Help: "Tokens used by provider, model and direction (input, output; cached_input and cache_write are parts of input)."}, []string{"provider", "model", "direction"})
	m.LLMCost = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "llm_cost_total", Help: "What model calls cost, in US dollars, by the fleet's price table (unpriced models add nothing)."}, []string{"provider", "model"})
	m.LLMWaits = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "llm_waits_total", Help: "Model calls parked instead of made or answered: by the fleet's governor (cause governor) or the provider (cause http_429, http_503, http_529)."}, []string{"provider", "cause"})
	m.HTTPRequests = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "http_requests_total", Help: "API requests by route, method and status."}, []string{"route", "method", "status"})
	m.HTTPDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "http_request_duration_seconds", Help: "API request latency.", Buckets: prometheus.DefBuckets}, []string{"route", "method"})
	m.DLPHits = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "dlp_hits_total", Help: "Outbound calls blocked by DLP, by gitleaks rule."}, []string{"rule"})
	m.ApprovalsDecided = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "approvals_decided_total", Help: "Approvals decided, by outcome (approved, denied, timed_out)."}, []string{"outcome"})
	m.ApprovalWait = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "approval_wait_seconds", Help: "Time from approval request to decision.", Buckets: prometheus.ExponentialBuckets(0.5, 2, 12)})
	m.ApprovalsPending = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "approvals_pending", Help: "Approvals waiting for a human."})
	m.AuditBuffer = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "audit_buffer_depth", Help: "Audit rows buffered, not yet written."})
	m.RulesReloads = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "permission_rules_reloads_total", Help: "Permission rule reloads by result (ok, error)."}, []string{"result"})
	m.WorkerUp = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "worker_up", Help: "asynq worker servers running in this process (1 in a worker process, 0 once it stopped)."})
	m.FairDispatch = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "fair_dispatch", Help: "The fair dispatcher fleet-wide by state: pending (tasks in lines), keys (keys with work pending), in_flight, window (live workers' slots), blocked (keys at their turn limit)."}, []string{"state"})
	m.WorkerConcurrency = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "worker_concurrency", Help: "Tasks the worker servers of this process run at once."})
	m.RulesValid = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "permission_rules_valid", Help: "1 when the last permissions file read parsed; 0 when the last good rules are kept after an error."})
	for _, c := range []prometheus.Collector{m.DLPHits, m.ApprovalsDecided, m.ApprovalWait, m.ApprovalsPending, m.AuditBuffer, m.RulesReloads, m.RulesValid} {
		f(c)
	}
	m.RulesValid.Set(1)
	m.StaleWritesRefused = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "stale_writes_refused_total", Help: "Late writes of a step whose session lease was taken over, refused by the lease token, by kind (save, release)."}, []string{"kind"})
	m.FirstModelCall = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "step_first_model_call_seconds", Help: "Time from a step's handler start to its first model call, by agent role.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}, []string{"role"})
	m.HookDeliveries = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "hook_deliveries_total", Help: "Inbound webhook deliveries by outcome (accepted, refused) and the refusal's reason (bad_signature, stale, replayed, too_large, too_deep, bad_json, unmapped, disabled, owner_gone, submit_refused, unknown_hook)."}, []string{"outcome", "reason"})
	for _, c := range []prometheus.Collector{m.HookDeliveries, m.StaleWritesRefused, m.RunsSubmitted, m.RunsFinished, m.RunDuration, m.TasksProcessed, m.TaskDuration, m.QueueWait, m.FirstModelCall, m.ToolCalls, m.ToolDuration, m.GateDenials, m.LLMRequests, m.LLMLatency, m.LLMTokens, m.LLMCost, m.LLMWaits, m.HTTPRequests, m.HTTPDuration} {
		f(c)
	}
	return m
}

func (m *Metrics) register(c prometheus.Collector) error {
	if err := m.Registry.Register(c); err != nil {
		return err
	}
	m.mu.Lock()
	m.collectors = append(m.collectors, c)
	m.mu.Unlock()
	return nil
}

// Collectors returns every collector registered through this package, in order
// (the subsystems' own collectors, registered on Registry directly, are not
// included). Tests list the metric names the code exports with it.
func (m *Metrics) Collectors() []prometheus.Collector {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.collectors)
}

// WorkerStarted marks an asynq worker server of the given concurrency as running;
// the first call registers the worker gauges. Pair it with WorkerStopped.
func (m *Metrics) WorkerStarted(concurrency int) {
	m.mu.Lock()
	first := !m.worker
	m.worker = true
	m.mu.Unlock()
	if first {
		// Registered lazily: an api or scheduler process exports no worker series.
		if err := m.register(m.WorkerUp); err != nil {
			panic(err)
		}
		if err := m.register(m.WorkerConcurrency); err != nil {
			panic(err)
		}
		if err := m.register(m.FairDispatch); err != nil {
			panic(err)
		}
	}
	m.WorkerUp.Inc()
	m.WorkerConcurrency.Add(float64(concurrency))
}

// WorkerStopped undoes WorkerStarted.
func (m *Metrics) WorkerStopped(concurrency int) {
	m.WorkerUp.Dec()
	m.WorkerConcurrency.Sub(float64(concurrency))
}

// Handler serves the registry, in the OpenMetrics format to a scraper that
// asks for it (Prometheus does): the only format that carries exemplars.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry, EnableOpenMetrics: true})
}

// ObserveTraced observes v on o with the trace of ctx as its exemplar
// (trace_id, span_id: issue 42), so a latency histogram's bucket links to a
// run's trace; without a sampled span on ctx (tracing off) it is o.Observe.
func ObserveTraced(ctx context.Context, o prometheus.Observer, v float64) {
	sc := trace.SpanContextFromContext(ctx)
	if eo, ok := o.(prometheus.ExemplarObserver); ok && sc.IsValid() && sc.IsSampled() {
		eo.ObserveWithExemplar(v, prometheus.Labels{"trace_id": sc.TraceID().String(), "span_id": sc.SpanID().String()})
		return
	}
	o.Observe(v)
}

// TaskMiddleware counts and times every asynq task.
func (m *Metrics) TaskMiddleware(outcome func(error) string) asynq.MiddlewareFunc {
	return func(next asynq.Handler) asynq.Handler {
		return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			q, _ := asynq.GetQueueName(ctx)
			start := time.Now()
			if retried, _ := asynq.GetRetryCount(ctx); retried == 0 {
				if at, ok := queue.EnqueuedAt(t); ok {
					m.QueueWait.WithLabelValues(q, t.Type()).Observe(max(start.Sub(at), 0).Seconds())
				}
			}
			err := next.ProcessTask(context.WithValue(ctx, taskStartKey{}, start), t)
			m.TaskDuration.WithLabelValues(q, t.Type()).Observe(time.Since(start).Seconds())
			m.TasksProcessed.WithLabelValues(q, t.Type(), outcome(err)).Inc()
			return err
		})
	}
}

type taskStartKey struct{}

// TaskStart is when TaskMiddleware started the task ctx belongs to.
func TaskStart(ctx context.Context) (time.Time, bool) {
	at, ok := ctx.Value(taskStartKey{}).(time.Time)
	return at, ok
}

// Serve runs a /metrics listener until ctx ends (workers and the scheduler).
func (m *Metrics) Serve(ctx context.Context, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return m.ServeListener(ctx, ln)
}

// ServeListener is Serve on a listener the caller bound (and, say, registered).
func (m *Metrics) ServeListener(ctx context.Context, ln net.Listener) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
		return err
	}
	return nil
}
