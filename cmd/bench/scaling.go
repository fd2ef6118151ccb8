package main

import (
	"context"
	"fmt"
	"time"

	"github.com/aetherium-engine/aetherium/internal/harness"
)

// ScalePoint is one row of section 4: P worker processes of concurrency C, every
// model call sleeping the script latency (an I/O-bound fleet, as with a real LLM).
type ScalePoint struct {
	Procs       int     `json:"procs"`
	Concurrency int     `json:"concurrency_per_proc"`
	LatencyMS   int64   `json:"model_latency_ms"`
	Runs        int     `json:"runs"`
	ModelTurns  int     `json:"model_turns"`
	Seconds     float64 `json:"seconds"`
	// AchievedPerS is model turns per second; IdealPerS is every slot in a model
	// call all the time (procs × concurrency / latency).
	AchievedPerS float64 `json:"achieved_turns_per_s"`
	IdealPerS    float64 `json:"ideal_turns_per_s"`
	Efficiency   float64 `json:"efficiency"`
	// Steady is the efficiency until fewer runs are left than slots: from then on
	// some slots must idle (each run holds at most one), so the drain measures the
	// workload's size, not the fleet. SteadySeconds is that window.
	Steady        float64        `json:"steady_efficiency"`
	SteadySeconds float64        `json:"steady_seconds"`
	CPU           harness.CPUUse `json:"cpu"`
}

// scaleTurns is the caller's model turns per run (one todo call each) in section 4.
const scaleTurns = 10

func benchScaling(ctx context.Context, e *env, res *Result) error {
	team := harness.ToolLoop(scaleTurns, 1, "todo", map[string]any{"action": "read"})
	want := harness.ExpectOf(team)
	// Each process count at the scale concurrency, then one process at ten times
	// it (many turns in flight in one process).
	type point struct{ procs, conc int }
	var points []point
	for _, p := range e.o.procs {
		points = append(points, point{p, e.o.scaleConc})
	}
	points = append(points, point{1, 10 * e.o.scaleConc})
	for _, pc := range points {
		p, conc := pc.procs, pc.conc
		procs, err := startWorkers(e, p, conc, e.o.latency, fmt.Sprintf("scale%dx%d", p, conc))
		if err != nil {
			return err
		}
		// As many runs per slot as at the scale concurrency.
		runs := e.o.scaleRuns * p * conc / e.o.scaleConc
		progress("scaling: %d worker process(es) × concurrency %d, model latency %s: %d runs × %d model turns", p, conc, e.o.latency, runs, want.ModelTurns)
		meter := e.cpu()
		ids, err := submitTeamRuns(ctx, e, team, runs)
		if err != nil {
			stopWorkers(procs)
			return err
		}
		counts, err := harness.WaitTerminal(ctx, e.db, ids, 3*time.Minute, nil)
		cpu := meter.Stop()
		stopWorkers(procs)
		if err != nil {
			return err
		}
		if counts.ByStatus["completed"] != runs {
			return fmt.Errorf("%d of %d runs completed (%v; %v)", counts.ByStatus["completed"], runs, counts.Reasons, counts.Errors)
		}
		elapsed, err := span(ctx, e, ids)
		if err != nil {
			return err
		}
		turns, err := e.countEvents(ctx, ids, "agent.message")
		if err != nil {
			return err
		}
		if turns != want.ModelTurns*runs {
			return fmt.Errorf("%d model turns recorded, want %d", turns, want.ModelTurns*runs)
		}
		pt := ScalePoint{Procs: p, Concurrency: conc, LatencyMS: e.o.latency.Milliseconds(), Runs: runs, ModelTurns: turns,
			Seconds: elapsed.Seconds(), AchievedPerS: float64(turns) / elapsed.Seconds(),
			IdealPerS: float64(p*conc) / e.o.latency.Seconds(), CPU: cpu}
		pt.Efficiency = pt.AchievedPerS / pt.IdealPerS
		if pt.Steady, pt.SteadySeconds, err = steady(ctx, e, ids, p*conc, pt.IdealPerS); err != nil {
			return err
		}
		res.Scaling = append(res.Scaling, pt)
		progress("scaling: %d proc(s): %d turns in %.2fs = %.0f turns/s of an ideal %.0f (%.0f%%; %.0f%% until the drain); CPU: %s",
			p, turns, pt.Seconds, pt.AchievedPerS, pt.IdealPerS, 100*pt.Efficiency, 100*pt.Steady, cpu)
	}
	return nil
}

// steady is the efficiency from the first run's creation until the run whose end
// left fewer runs than slots: model turns recorded in that window per second,
// over ideal. 0 when there are no more runs than slots.
func steady(ctx context.Context, e *env, ids []string, slots int, ideal float64) (eff, seconds float64, err error) {
	if len(ids) <= slots {
		return 0, 0, nil
	}
	var turns int
	err = e.db.QueryRow(ctx, `
		WITH r AS (SELECT created_at, finished_at FROM runs WHERE id = ANY($1::uuid[])),
		     t0 AS (SELECT min(created_at) AS t FROM r),
		     t1 AS (SELECT finished_at AS t FROM r ORDER BY finished_at LIMIT 1 OFFSET $2)
		SELECT extract(epoch FROM t1.t - t0.t),
		       (SELECT count(*) FROM run_events WHERE run_id = ANY($1::uuid[]) AND type = 'agent.message' AND created_at <= t1.t)
		FROM t0, t1`, ids, len(ids)-slots).Scan(&seconds, &turns)
	if err != nil || seconds <= 0 {
		return 0, seconds, err
	}
	return float64(turns) / seconds / ideal, seconds, nil
}
