package main

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/hibiken/asynq"

	"github.com/aetherium-engine/aetherium/fleet"
	"github.com/aetherium-engine/aetherium/internal/harness"
	"github.com/aetherium-engine/aetherium/queue"
)

// HopResult is section 6: how long a hop (supervisor → worker → supervisor
// tasks) waits, and what idle workers cost.
type HopResult struct {
	// Idle: relay runs one at a time on an otherwise idle fleet.
	IdleHops  int     `json:"idle_hops"`
	IdleP50MS float64 `json:"idle_p50_ms"`
	IdleP99MS float64 `json:"idle_p99_ms"`
	// FirstModel is handler start → first model call on the idle fleet, from the
	// aetherium_step_first_model_call_seconds histogram (bucket-interpolated, as
	// histogram_quantile does).
	FirstModelP50MS float64 `json:"first_model_call_p50_ms"`
	FirstModelP99MS float64 `json:"first_model_call_p99_ms"`
	// Load: the hops of section 2's delegation workload (its runs all in flight).
	LoadHops  int     `json:"load_hops"`
	LoadP50MS float64 `json:"load_p50_ms"`
	LoadP99MS float64 `json:"load_p99_ms"`
	// RelayMarginalXact is PostgreSQL transactions per round trip beyond a run's
	// own (depth D minus depth 1 runs, divided by the extra round trips).
	RelayMarginalXact float64 `json:"relay_marginal_pg_xact_per_delegation"`
	// Idle cost of IdleProcs worker processes over IdleSeconds, per worker, at the
	// old (100ms) and the current task check interval.
	IdleProcs   int        `json:"idle_procs"`
	IdleSeconds float64    `json:"idle_seconds"`
	IdleCost    []IdleCost `json:"idle_cost"`
	idleCPU     []harness.CPUUse
}

// IdleCost is what one idle worker costs at one task check interval.
type IdleCost struct {
	Interval         string  `json:"task_check_interval"`
	RedisPctPerProc  float64 `json:"redis_pct_core_per_worker"`
	WorkerPctPerProc float64 `json:"worker_pct_core_each"`
}

// hopRecorder is an asynq middleware that samples enqueue → handler start of the
// first attempts of supervisor and turn tasks (the formula of the
// aetherium_task_queue_wait_seconds metric, one clock: every process is here).
type hopRecorder struct {
	mu  sync.Mutex
	got []time.Duration
}

func (h *hopRecorder) middleware(next asynq.Handler) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		if t.Type() == queue.TypeSupervise || t.Type() == queue.TypeTurn {
			if n, _ := asynq.GetRetryCount(ctx); n == 0 {
				if at, ok := queue.EnqueuedAt(t); ok {
					d := max(time.Since(at), 0)
					h.mu.Lock()
					h.got = append(h.got, d)
					h.mu.Unlock()
				}
			}
		}
		return next.ProcessTask(ctx, t)
	})
}

// quantiles are the sorted samples' p50 and p99.
func (h *hopRecorder) quantiles() (n int, p50, p99 float64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	sort.Slice(h.got, func(i, j int) bool { return h.got[i] < h.got[j] })
	return len(h.got), ms(percentile(h.got, 0.5)), ms(percentile(h.got, 0.99))
}

func benchHops(ctx context.Context, e *env, res *Result) error {
	r := &res.Hops
	// Idle: a fresh fleet (its own metrics), one relay run at a time.
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	fl, err := fleet.Open(ctx, e.fleet.Cfg, log, fleet.Options{NoSandbox: true})
	if err != nil {
		return err
	}
	defer fl.Close()
	rec := &hopRecorder{}
	srv, mux, cancel := fl.WorkerServer()
	mux.Use(rec.middleware)
	if err := srv.Start(mux); err != nil {
		cancel()
		return err
	}
	relay := harness.Relay(e.o.relayDepth)
	progress("hops: %d relay runs × %d delegations, one at a time, idle fleet", e.o.hopRuns, e.o.relayDepth)
	for i := range e.o.hopRuns {
		id, err := e.client.SubmitTeam(ctx, relay, fmt.Sprintf("hop run %d", i))
		if err == nil {
			_, err = harness.WaitTerminal(ctx, e.db, []string{id}, time.Minute, nil)
		}
		if err != nil {
			srv.Shutdown()
			cancel()
			return err
		}
	}
	srv.Shutdown()
	cancel()
	r.IdleHops, r.IdleP50MS, r.IdleP99MS = rec.quantiles()
	r.FirstModelP50MS, r.FirstModelP99MS = histQuantileMS(fl, "aetherium_step_first_model_call_seconds", 0.5), histQuantileMS(fl, "aetherium_step_first_model_call_seconds", 0.99)
	progress("hops: idle fleet: %d hops, enqueue → handler p50 %.2f ms, p99 %.2f ms; handler → first model call p50 %.2f ms, p99 %.2f ms",
		r.IdleHops, r.IdleP50MS, r.IdleP99MS, r.FirstModelP50MS, r.FirstModelP99MS)

	// Idle cost: IdleProcs idle worker processes polling every 5ms (the previous
	// default, which made hops fast by polling) and at the current default (the
	// Waker makes hops fast; an idle worker polls once per interval).
	r.IdleProcs, r.IdleSeconds = 4, e.o.idleFor.Seconds()
	for _, iv := range []time.Duration{5 * time.Millisecond, e.fleet.Cfg.Worker.TaskCheckInterval} {
		procs, err := startWorkersWith(e, r.IdleProcs, iv, "idle-"+iv.String())
		if err != nil {
			return err
		}
		time.Sleep(2 * time.Second) // past the start-up
		meter := e.cpu()
		progress("hops: %d idle worker processes at task_check_interval %s for %s", r.IdleProcs, iv, e.o.idleFor)
		select {
		case <-ctx.Done():
		case <-time.After(e.o.idleFor):
		}
		u := meter.Stop()
		stopWorkers(procs)
		if err := ctx.Err(); err != nil {
			return err
		}
		c := IdleCost{Interval: iv.String(),
			RedisPctPerProc:  100 * u.Groups["redis"] / u.Wall / float64(r.IdleProcs),
			WorkerPctPerProc: 100 * u.Groups["workers"] / u.Wall / float64(r.IdleProcs)}
		r.IdleCost = append(r.IdleCost, c)
		progress("hops: idle at %s: Redis %.2f %% of a core per idle worker, each worker %.2f %%", c.Interval, c.RedisPctPerProc, c.WorkerPctPerProc)
	}
	return nil
}

// histQuantileMS is the q-quantile of a histogram of fl's registry over all its
// label sets, interpolated within buckets (histogram_quantile's method).
func histQuantileMS(fl *fleet.Fleet, name string, q float64) float64 {
	mfs, err := fl.Metrics.Registry.Gather()
	if err != nil {
		return math.NaN()
	}
	counts := map[float64]uint64{}
	var total uint64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			h := m.GetHistogram()
			total += h.GetSampleCount()
			for _, b := range h.GetBucket() {
				counts[b.GetUpperBound()] += b.GetCumulativeCount()
			}
		}
	}
	return bucketQuantile(counts, total, q) * 1000
}

func bucketQuantile(cum map[float64]uint64, total uint64, q float64) float64 {
	if total == 0 {
		return math.NaN()
	}
	bounds := make([]float64, 0, len(cum))
	for b := range cum {
		bounds = append(bounds, b)
	}
	sort.Float64s(bounds)
	rank := q * float64(total)
	lower, below := 0.0, uint64(0)
	for _, b := range bounds {
		c := cum[b]
		if float64(c) >= rank {
			if c == below {
				return b
			}
			return lower + (b-lower)*(rank-float64(below))/float64(c-below)
		}
		lower, below = b, c
	}
	return bounds[len(bounds)-1] // above the last bucket: its bound
}
