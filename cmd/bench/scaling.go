package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/aetherium-engine/aetherium/internal/harness"
	"github.com/aetherium-engine/aetherium/knowledge"
	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/memory"
	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/templates"
	"github.com/hibiken/asynq"
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
	Steady float64 `json:"steady_efficiency"`
	// Settled is Steady from ten model turns after t0 on: the runs' first
	// steps start together (every slot at once as the queues resume) and
	// contend for the same connections for a few seconds before the turns
	// spread out; Settled is the fleet once they have.
	Settled       float64        `json:"settled_efficiency"`
	SteadySeconds float64        `json:"steady_seconds"`
	CPU           harness.CPUUse `json:"cpu"`
	// Recall is memory recall the worker's way, at recallEntries entries,
	// sampled by the bench process while this point runs: a new session's
	// acquire reads the project's generation and the task's lexemes with its
	// lease (not timed: every step takes its lease anyway), then the recall
	// is timed — the fleet's store.MemoryIndex at that generation, then
	// memory.Rank and Format: what a new project session pays for its memory.
	RecallN     int     `json:"recall_samples"`
	RecallP50MS float64 `json:"recall_p50_ms"`
	RecallP99MS float64 `json:"recall_p99_ms"`
	// AcquireP99MS is the p99 of those acquires (the lease's batch with the
	// generation's read in it), for reference.
	AcquireP99MS float64 `json:"recall_acquire_p99_ms"`
	// PingP99MS is a SELECT 1 round trip's p99, sampled beside each recall: the
	// floor of any recall that asks PostgreSQL anything (a generation check).
	PingP99MS float64 `json:"select1_p99_ms"`
	// KnowledgeN, KnowledgeP50MS and KnowledgeP99MS are knowledge searches
	// (knowledge.Postgres.Search, k 5) over -knowledge-docs documents of five
	// chunks each, sampled every 200 ms by the bench process while this point
	// runs (0 samples: -knowledge-docs 0).
	KnowledgeN     int     `json:"knowledge_samples"`
	KnowledgeP50MS float64 `json:"knowledge_p50_ms"`
	KnowledgeP99MS float64 `json:"knowledge_p99_ms"`
}

// recallEntries is the size of the project section 4 recalls from.
const recallEntries = 10000

// seedRecall fills project "bench-recall" with recallEntries long-term entries
// of 50 words from a 2,000-word vocabulary, a tenth agent-scoped, over 60 days
// (store's BenchmarkMemoryInjection).
func seedRecall(ctx context.Context, e *env) error {
	_, err := e.db.Exec(ctx, `INSERT INTO agent_memory (project, tier, scope, agent, content, created_at)
		SELECT 'bench-recall', 'long_term', CASE WHEN i % 10 = 0 THEN 'agent' ELSE 'project' END,
			CASE WHEN i % 10 = 0 THEN 'agent' || (i % 7) ELSE '' END,
			(SELECT string_agg('w' || ((i * 7919 + j * 104729) % 2000), ' ') FROM generate_series(1, 50) j),
			now() - (i % 1440) * interval '1 hour'
		FROM generate_series(1, $1::int) i`, recallEntries)
	if err != nil {
		return fmt.Errorf("seed memory: %w", err)
	}
	if _, err = e.db.Exec(ctx, `VACUUM ANALYZE agent_memory, agent_memory_terms`); err != nil {
		return fmt.Errorf("seed memory: %w", err)
	}
	// A worker builds its index of a project at its first recall, then reads
	// only what changed: build it here, outside the samples, as a worker that
	// has served the project before has.
	start := time.Now()
	if _, err := recaller(e).RecallMemory(ctx, "bench-recall", "agent3", "w1", 1); err != nil {
		return fmt.Errorf("seed memory: first recall: %w", err)
	}
	progress("scaling: memory of %d entries seeded; first recall (the index built) in %s", recallEntries, time.Since(start).Round(time.Millisecond))
	return nil
}

// recaller is what the fleet's worker recalls memory with: its MemoryIndex,
// or the store when memory.cache_entries turns the index off.
func recaller(e *env) interface {
	RecallMemory(ctx context.Context, project, agent, text string, limit int) ([]store.MemoryEntry, error)
} {
	if e.fleet.MemoryIndex != nil {
		return e.fleet.MemoryIndex
	}
	return e.fleet.Store
}

// recallProbe recalls from the seeded project every 20 ms until stopped, as
// a worker's new session does: an AcquireStep of a new session (of a run of
// the probe's own, finished: no worker steps it) reads the generation and the
// task's lexemes, then the index recalls at them (RecallMemoryAt) — or, with
// the index off, the store recalls. It returns the sorted latencies of the
// recalls, of a SELECT 1 beside each and of the acquires.
func recallProbe(ctx context.Context, e *env) (stop func() (recall, ping, acquire []time.Duration), err error) {
	cfg := memory.Config{}.WithDefaults()
	const task = "Update w17 and w1234 in the report, then check w999 against w5 and summarize the w42 findings for the team"
	st := e.fleet.Store
	run := uuid.NewString()
	if err := st.CreateRun(ctx, store.Run{ID: run, Prompt: "recall probe", Team: json.RawMessage(`{}`), Variables: json.RawMessage(`{}`)}); err != nil {
		return nil, fmt.Errorf("recall probe: %w", err)
	}
	if _, _, err := st.FinishRun(ctx, run, store.RunCompleted, "", "", ""); err != nil {
		return nil, fmt.Errorf("recall probe: %w", err)
	}
	quit, out := make(chan struct{}), make(chan [3][]time.Duration, 1)
	go func() {
		var lat, pings, acqs []time.Duration
		for i := 0; ; i++ {
			select {
			case <-quit:
				slices.Sort(lat)
				slices.Sort(pings)
				slices.Sort(acqs)
				out <- [3][]time.Duration{lat, pings, acqs}
				return
			case <-time.After(20 * time.Millisecond):
			}
			start := time.Now()
			var one int
			if err := st.Pool.QueryRow(ctx, "SELECT 1").Scan(&one); err == nil {
				pings = append(pings, time.Since(start))
			}
			start = time.Now()
			acq, err := st.AcquireStep(ctx, store.Acquire{
				Initial: store.Session{ID: fmt.Sprintf("recall-probe:%s:%d", run, i), RunID: run, Agent: "agent3", Role: "worker",
					Messages: []llm.Message{{Role: llm.RoleSystem, Content: "probe"}, {Role: llm.RoleUser, Content: task}}},
				Token: uuid.NewString(), Lease: time.Minute, Memory: &store.MemoryAt{Project: "bench-recall", Text: task},
			})
			if err != nil || !acq.OK {
				continue
			}
			acqs = append(acqs, time.Since(start))
			start = time.Now()
			var cands []store.MemoryEntry
			if ix := e.fleet.MemoryIndex; ix != nil {
				cands, err = ix.RecallMemoryAt(ctx, *acq.Memory, "agent3", cfg.Candidates)
			} else {
				cands, err = st.RecallMemory(ctx, "bench-recall", "agent3", task, cfg.Candidates)
			}
			if err != nil {
				continue
			}
			es := make([]memory.Entry, len(cands))
			for j, c := range cands {
				es[j] = memory.Entry{ID: c.ID, Scope: c.Scope, Agent: c.Agent, RunID: c.RunID, Content: c.Content, At: c.CreatedAt, Relevance: c.Relevance}
			}
			_ = memory.Format(memory.Rank(cfg, es, "agent3", time.Now()))
			lat = append(lat, time.Since(start))
		}
	}()
	return func() ([]time.Duration, []time.Duration, []time.Duration) {
		close(quit)
		o := <-out
		return o[0], o[1], o[2]
	}, nil
}

// scaleTurns is the caller's model turns per run (one todo call each) in section 4.
const scaleTurns = 10

func benchScaling(ctx context.Context, e *env, res *Result) error {
	team := harness.ToolLoop(scaleTurns, 1, "todo", map[string]any{"action": "read"})
	want := harness.ExpectOf(team)
	// Each process count at the scale concurrency, then one process at ten times
	// it (many turns in flight in one process).
	type point struct {
		procs, conc int
		latency     time.Duration
	}
	var points []point
	if !e.o.slowOnly {
		for _, p := range e.o.procs {
			points = append(points, point{p, e.o.scaleConc, e.o.latency})
		}
		points = append(points, point{1, 10 * e.o.scaleConc, e.o.latency})
	}
	// Real models answer in seconds: the same 100 slots at -slow-latency, in one
	// process and over four (issue 45).
	if e.o.slowLatency > 0 {
		points = append(points, point{1, 10 * e.o.scaleConc, e.o.slowLatency}, point{4, 10 * e.o.scaleConc / 4, e.o.slowLatency})
	}
	if err := seedRecall(ctx, e); err != nil {
		return err
	}
	kb := knowledge.NewPostgres(e.fleet.Store.Pool, knowledge.Config{})
	var queries []string
	if e.o.knowledgeDocs > 0 {
		var err error
		if queries, err = seedKnowledge(ctx, e.fleet.Store.Pool, kb, e.o.knowledgeDocs); err != nil {
			return err
		}
	}
	for _, pc := range points {
		p, conc, latency := pc.procs, pc.conc, pc.latency
		// As many runs per slot as at the scale concurrency (at slow turns at
		// least two per slot, so the drain does not measure the workload's size).
		runs := e.o.scaleRuns * p * conc / e.o.scaleConc
		if latency != e.o.latency {
			runs = max(runs, 2*p*conc)
		}
		progress("scaling: %d worker process(es) × concurrency %d, model latency %s: %d runs × %d model turns", p, conc, latency, runs, want.ModelTurns)
		// The runs are submitted with the fleet's queues paused and the
		// workers started, then the queues resume: the point measures the fleet
		// from the moment it has all its work, not the bench's submission rate
		// (the first second had 45 of 100 slots busy while runs trickled in) nor
		// the processes' start.
		ids, procs, t0, err := pausedStart(ctx, e, team, runs, func() ([]*harness.Proc, error) {
			return startWorkers(e, p, conc, latency, fmt.Sprintf("scale%dx%d-%s", p, conc, latency))
		})
		if err != nil {
			return err
		}
		meter := e.cpu()
		stopRecall, err := recallProbe(ctx, e)
		if err != nil {
			stopWorkers(procs)
			return err
		}
		stopKnowledge := func() []time.Duration { return nil }
		if queries != nil {
			stopKnowledge = knowledgeProbe(ctx, kb, queries)
		}
		counts, err := harness.WaitTerminal(ctx, e.db, ids, 3*time.Minute+time.Duration(want.ModelTurns*runs/(p*conc)+1)*latency, nil)
		cpu := meter.Stop()
		recall, ping, acquires := stopRecall()
		searches := stopKnowledge()
		stopWorkers(procs)
		if err != nil {
			return err
		}
		if counts.ByStatus["completed"] != runs {
			return fmt.Errorf("%d of %d runs completed (%v; %v)", counts.ByStatus["completed"], runs, counts.Reasons, counts.Errors)
		}
		var secs float64
		if err := e.db.QueryRow(ctx, `SELECT extract(epoch FROM max(finished_at) - $2::timestamptz) FROM runs WHERE id = ANY($1::uuid[])`, ids, t0).Scan(&secs); err != nil {
			return err
		}
		elapsed := time.Duration(secs * float64(time.Second))
		turns, err := e.countEvents(ctx, ids, "agent.message")
		if err != nil {
			return err
		}
		if turns != want.ModelTurns*runs {
			return fmt.Errorf("%d model turns recorded, want %d", turns, want.ModelTurns*runs)
		}
		pt := ScalePoint{Procs: p, Concurrency: conc, LatencyMS: latency.Milliseconds(), Runs: runs, ModelTurns: turns,
			Seconds: elapsed.Seconds(), AchievedPerS: float64(turns) / elapsed.Seconds(),
			IdealPerS: float64(p*conc) / latency.Seconds(), CPU: cpu,
			RecallN: len(recall), RecallP50MS: ms(percentile(recall, 0.5)), RecallP99MS: ms(percentile(recall, 0.99)),
			PingP99MS: ms(percentile(ping, 0.99)), AcquireP99MS: ms(percentile(acquires, 0.99)),
			KnowledgeN: len(searches), KnowledgeP50MS: ms(percentile(searches, 0.5)), KnowledgeP99MS: ms(percentile(searches, 0.99))}
		pt.Efficiency = pt.AchievedPerS / pt.IdealPerS
		if pt.Steady, pt.SteadySeconds, err = steady(ctx, e, ids, t0, p*conc, pt.IdealPerS); err != nil {
			return err
		}
		if pt.Settled, _, err = steady(ctx, e, ids, t0.Add(10*latency), p*conc, pt.IdealPerS); err != nil {
			return err
		}
		res.Scaling = append(res.Scaling, pt)
		progress("scaling: %d proc(s) × %d at %s: %d turns in %.2fs = %.0f turns/s of an ideal %.0f (%.0f%%; %.1f%% until the drain, %.1f%% settled); memory recall at %d entries meanwhile (at the acquire's generation): p50 %.2f ms, p99 %.2f ms (%d samples; SELECT 1 p99 %.2f ms, the acquires p99 %.2f ms); knowledge search p50 %.1f ms, p99 %.1f ms (%d samples); CPU: %s",
			p, conc, latency, turns, pt.Seconds, pt.AchievedPerS, pt.IdealPerS, 100*pt.Efficiency, 100*pt.Steady, 100*pt.Settled, recallEntries, pt.RecallP50MS, pt.RecallP99MS, pt.RecallN, pt.PingP99MS, pt.AcquireP99MS,
			pt.KnowledgeP50MS, pt.KnowledgeP99MS, pt.KnowledgeN, cpu)
	}
	return nil
}

// steady is the efficiency from t0 (the queues resumed) until the run whose end
// left fewer runs than slots: model turns recorded in that window per second,
// over ideal. 0 when there are no more runs than slots.
func steady(ctx context.Context, e *env, ids []string, t0 time.Time, slots int, ideal float64) (eff, seconds float64, err error) {
	if len(ids) <= slots {
		return 0, 0, nil
	}
	var turns int
	err = e.db.QueryRow(ctx, `
		WITH r AS (SELECT finished_at FROM runs WHERE id = ANY($1::uuid[])),
		     t1 AS (SELECT finished_at AS t FROM r ORDER BY finished_at LIMIT 1 OFFSET $2)
		SELECT extract(epoch FROM t1.t - $3::timestamptz),
		       (SELECT count(*) FROM run_events WHERE run_id = ANY($1::uuid[]) AND type = 'agent.message' AND created_at > $3::timestamptz AND created_at <= t1.t)
		FROM t1`, ids, len(ids)-slots, t0).Scan(&seconds, &turns)
	if err != nil || seconds <= 0 {
		return 0, seconds, err
	}
	return float64(turns) / seconds / ideal, seconds, nil
}

// pausedStart submits runs of team with the fleet's step queues paused, starts
// the workers (start), and resumes the queues; t0 is PostgreSQL's clock as they
// resumed. The queues are resumed whatever fails.
func pausedStart(ctx context.Context, e *env, team templates.Template, runs int, start func() ([]*harness.Proc, error)) (ids []string, procs []*harness.Proc, t0 time.Time, err error) {
	ins := asynq.NewInspector(e.queueOpt)
	defer ins.Close()
	steps := []string{queue.QueueSupervisor, queue.QueueWorkers}
	resume := func() error {
		var errs []error
		for _, q := range steps {
			if err := ins.UnpauseQueue(q); err != nil && !strings.Contains(err.Error(), "not paused") {
				errs = append(errs, fmt.Errorf("resume queue %s: %w", q, err))
			}
		}
		return errors.Join(errs...)
	}
	for _, q := range steps {
		if err := ins.PauseQueue(q); err != nil {
			_ = resume()
			return nil, nil, t0, fmt.Errorf("pause queue %s: %w", q, err)
		}
	}
	if ids, err = submitTeamRuns(ctx, e, team, runs); err == nil {
		procs, err = start()
	}
	if rerr := resume(); err == nil {
		err = rerr
	}
	if err == nil {
		err = e.db.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&t0)
	}
	if err != nil && procs != nil {
		stopWorkers(procs)
		procs = nil
	}
	return ids, procs, t0, err
}
