package main

import (
	"context"
	"fmt"
	"time"

	"github.com/hibiken/asynq"

	"github.com/aetherium-engine/aetherium/internal/harness"
)

// LatencyResult is section 5: the shipped demo run end to end (API insert to
// terminal state, as PostgreSQL timed them) and a worker's memory.
type LatencyResult struct {
	// Sequential: one run at a time, script model without latency, one worker
	// process of the default concurrency.
	SeqRuns  int     `json:"seq_runs"`
	SeqP50MS float64 `json:"seq_p50_ms"`
	SeqP99MS float64 `json:"seq_p99_ms"`
	// Concurrent: ConcRuns runs at once on one worker process whose concurrency is
	// ConcRuns, every model call taking the script latency.
	ConcRuns      int     `json:"conc_runs"`
	LatencyMS     int64   `json:"model_latency_ms"`
	ConcP50MS     float64 `json:"conc_p50_ms"`
	ConcP99MS     float64 `json:"conc_p99_ms"`
	PeakActive    int     `json:"peak_active_tasks"`
	IdleRSSMiB    float64 `json:"worker_idle_rss_mib"`
	PeakRSSMiB    float64 `json:"worker_peak_rss_mib"`
	ConcSeconds   float64 `json:"conc_seconds"`
	ConcCompleted int     `json:"conc_completed"`
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func benchLatency(ctx context.Context, e *env, res *Result) error {
	r := &res.Latency
	vars := map[string]any{"topic": "benchmarks"}

	procs, err := startWorkers(e, 1, e.o.concurrency, 0, "seq")
	if err != nil {
		return err
	}
	var seq []string
	for i := range e.o.seqRuns {
		id, err := e.client.SubmitTemplate(ctx, "demo", fmt.Sprintf("demo %d", i), vars)
		if err == nil {
			_, err = harness.WaitTerminal(ctx, e.db, []string{id}, time.Minute, nil)
		}
		if err != nil {
			stopWorkers(procs)
			return err
		}
		seq = append(seq, id)
	}
	stopWorkers(procs)
	if err := allCompleted(ctx, e, seq); err != nil {
		return err
	}
	lat, err := latencies(ctx, e, seq)
	if err != nil {
		return err
	}
	r.SeqRuns, r.SeqP50MS, r.SeqP99MS = len(seq), ms(percentile(lat, 0.5)), ms(percentile(lat, 0.99))
	progress("latency: %d demo runs one at a time: p50 %.0f ms, p99 %.0f ms", len(seq), r.SeqP50MS, r.SeqP99MS)

	n := e.o.concRuns
	procs, err = startWorkers(e, 1, n, e.o.latency, "conc")
	if err != nil {
		return err
	}
	defer stopWorkers(procs)
	pid := procs[0].Pid()
	idle, _ := harness.ReadMemory(pid)
	ins := asynq.NewInspector(e.queueOpt)
	defer ins.Close()
	stopSampling := make(chan struct{})
	peak := make(chan int, 1)
	go func() {
		best := 0
		for {
			active := 0
			for _, q := range []string{"supervisor", "workers"} {
				if qi, err := ins.GetQueueInfo(q); err == nil {
					active += qi.Active
				}
			}
			best = max(best, active)
			select {
			case <-stopSampling:
				peak <- best
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	progress("latency: %d demo runs at once on one worker process of concurrency %d, model latency %s", n, n, e.o.latency)
	ids, err := harness.SubmitMany(ctx, n, 32, 0, func(ctx context.Context, i int) (string, error) {
		return e.client.SubmitTemplate(ctx, "demo", fmt.Sprintf("demo %d", i), vars)
	})
	if err == nil {
		_, err = harness.WaitTerminal(ctx, e.db, ids, 3*time.Minute, nil)
	}
	close(stopSampling)
	r.PeakActive = <-peak
	if err != nil {
		return err
	}
	mem, err := harness.ReadMemory(pid)
	if err != nil {
		return err
	}
	if err := allCompleted(ctx, e, ids); err != nil {
		return err
	}
	lat, err = latencies(ctx, e, ids)
	if err != nil {
		return err
	}
	elapsed, err := span(ctx, e, ids)
	if err != nil {
		return err
	}
	r.ConcRuns, r.LatencyMS, r.ConcCompleted, r.ConcSeconds = n, e.o.latency.Milliseconds(), len(ids), elapsed.Seconds()
	r.ConcP50MS, r.ConcP99MS = ms(percentile(lat, 0.5)), ms(percentile(lat, 0.99))
	r.IdleRSSMiB, r.PeakRSSMiB = float64(idle.RSS)/1024, float64(mem.HWM)/1024
	progress("latency: %d concurrent demo runs: p50 %.0f ms, p99 %.0f ms (7 model calls of %s each); peak %d tasks in flight; worker RSS idle %.0f MiB, peak (VmHWM) %.0f MiB",
		n, r.ConcP50MS, r.ConcP99MS, e.o.latency, r.PeakActive, r.IdleRSSMiB, r.PeakRSSMiB)
	stopWorkers(procs)
	// The one-at-a-time runs again with tracing off and on (tracing.go).
	return benchTracingLatency(ctx, e, res)
}

func allCompleted(ctx context.Context, e *env, ids []string) error {
	c, err := harness.CountRuns(ctx, e.db, ids)
	if err != nil {
		return err
	}
	if c.ByStatus["completed"] != len(ids) {
		return fmt.Errorf("%d of %d runs completed (%v; %v)", c.ByStatus["completed"], len(ids), c.Reasons, c.Errors)
	}
	return nil
}
