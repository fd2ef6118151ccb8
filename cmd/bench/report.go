package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/aetherium-engine/aetherium/internal/harness"
)

// Result is everything one bench run measured.
type Result struct {
	Machine      harness.Machine `json:"machine"`
	Config       map[string]any  `json:"config"`
	Asynq        AsynqResult     `json:"asynq"`
	Fleet        FleetResult     `json:"fleet"`
	River        RiverResult     `json:"river"`
	Scaling      []ScalePoint    `json:"scaling"`
	Latency      LatencyResult   `json:"latency"`
	Hops         HopResult       `json:"hops"`
	Capacity     Capacity        `json:"capacity"`
	Governor     GovernorResult  `json:"governor"`
	Long         LongResult      `json:"long_sessions"`
	Fair         FairResult      `json:"fairness"`
	DBOS         DBOSResult      `json:"dbos"`
	Tracing      TracingResult   `json:"tracing"`
	TotalSeconds float64         `json:"total_seconds"`
	// PostgresCPU says what every PostgreSQL CPU figure counts
	// (harness.PGMeter); PostgresCPUUnavailable why there are none.
	PostgresCPU            string `json:"postgres_cpu_counts"`
	PostgresCPUUnavailable string `json:"postgres_cpu_unavailable,omitempty"`
}

// pgMicros renders a PostgreSQL CPU figure, or says it was not metered (a zero
// would read as a measurement).
func (r Result) pgMicros(micros float64) string {
	if r.PostgresCPUUnavailable != "" {
		return "not metered"
	}
	return fmt.Sprintf("%.0f µs", micros)
}

// pgRatio renders a ratio of PostgreSQL CPU figures.
func (r Result) pgRatio(a, b float64) string {
	if r.PostgresCPUUnavailable != "" {
		return "not metered"
	}
	return fmt.Sprintf("%.2f ×", ratio(a, b))
}

func configOf(o options) map[string]any {
	return map[string]any{
		"concurrency": o.concurrency, "asynq_tasks": o.asynqTasks, "river_jobs": o.riverJobs,
		"tool_runs": o.toolRuns, "tool_turns": o.toolTurns, "tool_calls_per_turn": o.toolCalls,
		"hop_runs": o.hopRuns, "idle_for": o.idleFor.String(),
		"relay_runs": o.relayRuns, "pairs": o.pairs, "relay_depth": o.relayDepth, "model_latency": o.latency.String(), "slow_model_latency": o.slowLatency.String(), "knowledge_docs": o.knowledgeDocs,
		"gov_runs": o.govRuns, "gov_rpm": o.govRPM, "gov_tpm": o.govTPM, "gov_procs": o.govProcs, "gov_concurrency": o.govConc, "gov_max_tokens": o.govMaxTokens,
		"fair_a_runs": o.fairARuns, "fair_b_runs": o.fairBRuns, "fair_procs": o.fairProcs, "fair_concurrency": o.fairConc,
		"fair_latency": o.fairLatency.String(), "fair_share_for": o.fairShareFor.String(), "fair_prio_runs": o.fairPrioRuns,
		"dbos_workflows": o.dbosWorkflows,
		"long_turns":     o.longTurns, "long_window": o.longWindow, "long_pg": o.longPG,
		"scale_concurrency": o.scaleConc, "pool_max_conns": o.poolConns, "scale_runs_per_proc": o.scaleRuns, "latency_runs": o.seqRuns, "concurrent_runs": o.concRuns,
	}
}

// Markdown renders the result table.
func (r Result) Markdown() string {
	var b strings.Builder
	m := r.Machine
	fmt.Fprintf(&b, "## Benchmark (`make bench`, %s)\n\n", m.Date)
	fmt.Fprintf(&b, "Machine: %d cores (%s), %d MiB RAM, Linux %s, %s; PostgreSQL %s and Redis %s on the same machine (loopback); load average at start %s.\n\n",
		m.Cores, m.CPU, m.MemoryMB, m.Kernel, m.Go, m.Postgres, m.Redis, m.LoadAvg)
	b.WriteString("| # | what | measured | note |\n| --- | --- | --- | --- |\n")
	row := func(n, what, val, note string) { fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", n, what, val, note) }
	a := r.Asynq
	row("1", "raw asynq no-op: enqueue", fmt.Sprintf("%.0f tasks/s", a.EnqueuePerS), fmt.Sprintf("%d tasks, %d goroutines", a.Tasks, enqueuers))
	row("1", "raw asynq no-op: process", fmt.Sprintf("**%.0f tasks/s**", a.ProcessPerS), fmt.Sprintf("concurrency %d — the floor (ratio 1)", a.Concurrency))
	f := r.Fleet
	row("2", "fleet: gated tool calls", fmt.Sprintf("**%.0f calls/s** (%.2f × asynq)", f.ToolCallsPerS, f.ToolRatio),
		fmt.Sprintf("%d calls (`todo` read) through capability, rules, tier, audit, in %d agent turns of %d runs; concurrency %d", f.ToolCalls, f.ToolModelTurns, f.ToolRuns, f.Concurrency))
	row("2", "fleet: the same tool calls, gate off", fmt.Sprintf("%.0f calls/s (%.2f × asynq)", f.UngatedPerS, f.UngatedRatio),
		fmt.Sprintf("diagnostic (`fleet.Options.NoGate`): gated ÷ ungated = %.2f%s; PostgreSQL transactions per call: %.1f gated, %.1f ungated",
			ratio(f.ToolCallsPerS, f.UngatedPerS), gateVerdict(ratio(f.ToolCallsPerS, f.UngatedPerS)), f.ToolXactPerCall, f.UngatedXact))
	row("2", "fleet: delegations", fmt.Sprintf("**%.0f round trips/s** (%.3f × asynq)", f.DelegationsPerS, f.DelegationsRatio),
		fmt.Sprintf("%d supervisor → worker → supervisor trips (2 asynq tasks, %.0f PostgreSQL transactions each), %d runs", f.Delegations, f.RelayXactPerDel, f.RelayRuns))
	row("2", "fleet: gated tool calls, one per model message", fmt.Sprintf("%.0f calls/s (%.2f × asynq)", f.OnePerS, f.OneRatio),
		fmt.Sprintf("%d calls, each its own agent turn (model answer, call, result, save); %.1f PostgreSQL transactions per call", f.OneCalls, f.OneXact))
	h := r.Hops
	row("2", "fleet: a delegation round trip's own PostgreSQL transactions", fmt.Sprintf("**%.1f**", h.RelayMarginalXact),
		fmt.Sprintf("depth-%d relays minus depth-1 relays (a run's own: %.1f), per extra round trip", r.Config["relay_depth"], f.RelayOneXact))
	row("2", "API: run submissions", fmt.Sprintf("%.0f runs/s", f.SubmitPerS), "POST /api/orchestrator/run (validate, insert, event, enqueue), 16 clients")
	rv := r.River
	row("3", "River no-op: insert", fmt.Sprintf("%.0f jobs/s (bulk %.0f/s)", rv.InsertPerS, rv.BulkPerS), fmt.Sprintf("%d jobs, %d goroutines; bulk = InsertManyFast", rv.Jobs, enqueuers))
	row("3", "River no-op: process (default FetchCooldown 100ms)", fmt.Sprintf("%.0f jobs/s", rv.ProcessPerS), fmt.Sprintf("MaxWorkers %d; the cooldown caps a queue near MaxWorkers × 10/s", rv.Concurrency))
	row("3", "River no-op: process (FetchCooldown 1ms)", fmt.Sprintf("**%.0f jobs/s** (%.2f × asynq)", rv.TunedPerS, ratio(rv.TunedPerS, a.ProcessPerS)), fmt.Sprintf("MaxWorkers %d, same PostgreSQL", rv.Concurrency))
	for _, p := range r.Scaling {
		row("4", fmt.Sprintf("I/O-bound: %d worker process(es) × %d, %d ms model turns", p.Procs, p.Concurrency, p.LatencyMS),
			fmt.Sprintf("**%.0f turns/s** of ideal %.0f (%.0f%%; %.1f%% until the drain; **%.1f%% settled**, from 10 turns in)", p.AchievedPerS, p.IdealPerS, 100*p.Efficiency, 100*p.Steady, 100*p.Settled),
			fmt.Sprintf("%d model turns of %d ms, %d runs, %.1f s (%.1f s before fewer runs than slots were left); memory recall at %d entries meanwhile, the worker's way (generation and task lexemes read by a new session's acquire, then the index at that generation, rank and format): p50 %.2f ms, p99 %.2f ms (%d samples; a SELECT 1 beside it p99 %.2f ms; the acquires p99 %.2f ms)%s",
				p.ModelTurns, p.LatencyMS, p.Runs, p.Seconds, p.SteadySeconds, recallEntries, p.RecallP50MS, p.RecallP99MS, p.RecallN, p.PingP99MS, p.AcquireP99MS, p.knowledgeNote(r.Config["knowledge_docs"])))
	}
	l := r.Latency
	row("5", "demo run end to end, one at a time", fmt.Sprintf("p50 %.0f ms, p99 %.0f ms", l.SeqP50MS, l.SeqP99MS), fmt.Sprintf("%d runs, script model without latency", l.SeqRuns))
	row("5", fmt.Sprintf("demo run end to end, %d at once", l.ConcRuns), fmt.Sprintf("p50 %.0f ms, p99 %.0f ms", l.ConcP50MS, l.ConcP99MS),
		fmt.Sprintf("7 model calls of %d ms each; one worker of concurrency %d; peak %d tasks in flight", l.LatencyMS, l.ConcRuns, l.PeakActive))
	row("5", fmt.Sprintf("worker peak RSS at %d concurrent turns", l.ConcRuns), fmt.Sprintf("**%.0f MiB** (idle %.0f MiB)", l.PeakRSSMiB, l.IdleRSSMiB), "VmHWM of the `aetherium worker` process")
	row("6", "hop: enqueue → handler start, idle fleet", fmt.Sprintf("**p50 %.2f ms, p99 %.2f ms**", h.IdleP50MS, h.IdleP99MS),
		fmt.Sprintf("%d supervise/turn tasks of relay runs one at a time (timestamps from one clock)", h.IdleHops))
	row("6", "hop: handler start → first model call, idle fleet", fmt.Sprintf("p50 %.2f ms, p99 %.2f ms", h.FirstModelP50MS, h.FirstModelP99MS),
		"aetherium_step_first_model_call_seconds, bucket-interpolated")
	row("6", "hop: enqueue → handler start, under load", fmt.Sprintf("p50 %.1f ms, p99 %.1f ms", h.LoadP50MS, h.LoadP99MS),
		fmt.Sprintf("%d hops of section 2's delegation workload (all its runs in flight, concurrency %d)", h.LoadHops, f.Concurrency))
	for _, c := range h.IdleCost {
		row("6", fmt.Sprintf("idle cost at task_check_interval %s", c.Interval), fmt.Sprintf("Redis %.2f %% of a core per idle worker; each worker %.2f %%", c.RedisPctPerProc, c.WorkerPctPerProc),
			fmt.Sprintf("%d idle worker processes over %.0f s", h.IdleProcs, h.IdleSeconds))
	}
	r.Tracing.rows(row)
	r.Capacity.rows(row, r)
	r.dbosRows(row)
	for _, m := range r.Governor.Modes {
		g := r.Governor
		row("8", fmt.Sprintf("model traffic, governor %s: %d runs at once vs %d rpm / %d tpm", m.Governor, g.Runs, g.RPM, g.TPM),
			fmt.Sprintf("**%.2f %% answered 429**, %d runs failed", 100*m.Share429, m.Failed),
			fmt.Sprintf("peak %d requests and %d tokens in a 60 s window; %.0f s; busy slots median %d, max %d of %d (table below)",
				m.PeakWindowRequests, m.PeakWindowTokens, m.Seconds, m.ActiveMedian, m.ActiveMax, m.Slots))
	}
	fmt.Fprintf(&b, "\nCPU use (cores busy on average). %s.\n\n", r.PostgresCPU)
	fmt.Fprintf(&b, "- raw asynq: %s\n- fleet tool calls: %s\n- fleet tool calls, gate off: %s\n- fleet tool calls, one per message: %s\n- fleet delegations: %s\n- River: %s\n", a.CPU, f.ToolCPU, f.UngatedCPU, f.OneCPU, f.RelayCPU, rv.CPU)
	if r.DBOS.TwoStep.Units > 0 {
		fmt.Fprintf(&b, "- DBOS two-step workflows: %s\n- DBOS parent/child workflows: %s\n", r.DBOS.TwoStep.CPU, r.DBOS.ParentChild.CPU)
	}
	if f.ToolModelTurns > 0 && f.OneCalls > 0 {
		per := func(u harness.CPUUse, group string, n int) float64 { return 1e6 * u.Groups[group] / float64(n) }
		fmt.Fprintf(&b, "\nCPU per agent turn: %.0f µs in the fleet process and %s in PostgreSQL with %d calls per turn; %.0f µs and %s with one call per turn.\n",
			per(f.ToolCPU, "bench", f.ToolModelTurns), r.pgMicros(per(f.ToolCPU, harness.PostgresGroup, f.ToolModelTurns)), r.Config["tool_calls_per_turn"],
			per(f.OneCPU, "bench", f.OneCalls), r.pgMicros(per(f.OneCPU, harness.PostgresGroup, f.OneCalls)))
	}
	for _, p := range r.Scaling {
		fmt.Fprintf(&b, "- I/O-bound, %d process(es) × %d, %d ms turns: %s\n", p.Procs, p.Concurrency, p.LatencyMS, p.CPU)
	}
	if f.ToolCalls > 0 && a.Tasks > 0 {
		per := func(u harness.CPUUse, group string, n int) float64 { return 1e6 * u.Groups[group] / float64(n) }
		fmt.Fprintf(&b, "\nWhat bounds the gated rate: one gated call costs %.0f µs of CPU in the fleet process and %s in PostgreSQL (%.1f PostgreSQL transactions per call, "+
			"counting the tool's own query and its share of the step's session saves, events and run updates); "+
			"a no-op asynq task costs %.0f µs in the Go process and %.0f µs in Redis. The machine's %d cores are busy at %.1f during the tool-call workload%s.%s\n",
			per(f.ToolCPU, "bench", f.ToolCalls), r.pgMicros(per(f.ToolCPU, harness.PostgresGroup, f.ToolCalls)), f.ToolXactPerCall,
			per(a.CPU, "bench", a.Tasks), per(a.CPU, "redis", a.Tasks), m.Cores, f.ToolCPU.Machine/max(f.ToolCPU.Wall, 1e-9),
			cpuVerdict(f.ToolCPU, m.Cores), profileNote(f.ToolProfile))
	}
	b.WriteString(r.Governor.markdown())
	b.WriteString(r.Long.markdown())
	b.WriteString(r.Fair.markdown())
	fmt.Fprintf(&b, "\nWhole run: %.0f s.\n", r.TotalSeconds)
	return b.String()
}

// Write stores latest.md and latest.json in dir.
func (r Result) Write(dir, md string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	raw, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "latest.json"), append(raw, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "latest.md"), []byte(md), 0o644); err != nil {
		return err
	}
	progress("wrote %s and %s", filepath.Join(dir, "latest.md"), filepath.Join(dir, "latest.json"))
	return nil
}

// gateVerdict reads the gated ÷ ungated rate.
func gateVerdict(r float64) string {
	if r >= 0.9 {
		return ", so the gate and its audit are not what bounds the rate"
	}
	return fmt.Sprintf(": the gate and its audit take %.0f%% of the rate", 100*(1-r))
}

func profileNote(pprof string) string {
	if pprof == "" {
		return ""
	}
	return fmt.Sprintf(" CPU profile of the fleet process: `%s` (top functions: `%s`).", pprof, strings.TrimSuffix(pprof, ".cpu.pprof")+".top.txt")
}

// cpuVerdict says whether the machine's CPU was the bound, and whose it mostly was.
func cpuVerdict(u harness.CPUUse, cores int) string {
	busy := u.Machine / max(u.Wall, 1e-9)
	if busy < 0.75*float64(cores) {
		return " (CPU is not saturated: latency, not CPU, bounds the rate)"
	}
	top, topS := "", 0.0
	for name, s := range u.Groups {
		if s > topS {
			top, topS = name, s
		}
	}
	if top == "bench" {
		top = "the fleet process"
	}
	return ", so CPU is the bound, most of it " + top + "'s"
}

// knowledgeNote is a section-4 row's knowledge search figures, when sampled.
func (p ScalePoint) knowledgeNote(docs any) string {
	if p.KnowledgeN == 0 {
		return ""
	}
	return fmt.Sprintf("; knowledge search over %v documents (5 chunks each) meanwhile, every 200 ms: p50 %.1f ms, p99 %.1f ms (%d samples)", docs, p.KnowledgeP50MS, p.KnowledgeP99MS, p.KnowledgeN)
}
