package main

import (
	"context"
	"fmt"
	"github.com/jackc/pgx/v5/pgxpool"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"time"

	"github.com/aetherium-engine/aetherium/fleet"
	"github.com/aetherium-engine/aetherium/internal/harness"
	"github.com/aetherium-engine/aetherium/templates"
)

// FleetResult is section 2: the fleet's own work on the same Redis and PostgreSQL —
// tool calls that pass the whole permission gate and are audited, and delegations.
type FleetResult struct {
	Concurrency int `json:"concurrency"`
	// Tool calls: runs × (caller turns × calls + the supervisor's delegate and reply).
	ToolRuns       int     `json:"tool_runs"`
	ToolCalls      int     `json:"tool_calls"`
	ToolSeconds    float64 `json:"tool_seconds"`
	ToolCallsPerS  float64 `json:"tool_calls_per_s"`
	ToolRatio      float64 `json:"tool_calls_ratio_to_asynq"`
	ToolModelTurns int     `json:"tool_model_turns"`
	// ToolXactPerCall is PostgreSQL transactions committed per gated call.
	ToolXactPerCall float64        `json:"tool_pg_xact_per_call"`
	ToolCPU         harness.CPUUse `json:"tool_cpu"`
	ToolProfile     string         `json:"tool_profile,omitempty"`
	// The same workload with the permission gate off (fleet.Options.NoGate): what
	// the gate and its audit cost.
	UngatedPerS  float64        `json:"ungated_tool_calls_per_s"`
	UngatedRatio float64        `json:"ungated_ratio_to_asynq"`
	UngatedXact  float64        `json:"ungated_pg_xact_per_call"`
	UngatedCPU   harness.CPUUse `json:"ungated_cpu"`
	// Delegations: runs × depth sequential supervisor → worker → supervisor trips.
	RelayRuns        int            `json:"relay_runs"`
	Delegations      int            `json:"delegations"`
	RelaySeconds     float64        `json:"relay_seconds"`
	DelegationsPerS  float64        `json:"delegations_per_s"`
	DelegationsRatio float64        `json:"delegations_ratio_to_asynq"`
	RelayXactPerDel  float64        `json:"relay_pg_xact_per_delegation"`
	RelayCPU         harness.CPUUse `json:"relay_cpu"`
	// One gated call per model message: the per-turn cost next to the per-call one.
	OneRuns      int            `json:"one_call_runs"`
	OneCalls     int            `json:"one_call_calls"`
	OnePerS      float64        `json:"one_call_calls_per_s"`
	OneRatio     float64        `json:"one_call_ratio_to_asynq"`
	OneXact      float64        `json:"one_call_pg_xact_per_call"`
	OneCPU       harness.CPUUse `json:"one_call_cpu"`
	RelayOneXact float64        `json:"relay_depth1_pg_xact_per_run"`
	// SubmitPerS is how fast the API accepted the runs (HTTP, insert, enqueue).
	SubmitPerS float64 `json:"submit_per_s"`
}

// workload is one timed fleet workload.
type workload struct {
	ids        []string
	elapsed    time.Duration
	submitPerS float64
	xact       int64
	stmts      stmtCounts
	redis      redisCounts
	cpu        harness.CPUUse
}

// xactCommits reads the bench database's committed transactions once the
// fleets' backends published what they counted, and how many of those
// transactions the publishing itself made (flushStats).
func (e *env) xactCommits(ctx context.Context, fleets ...*fleet.Fleet) (n, made int64, err error) {
	pools := []*pgxpool.Pool{e.fleet.Store.Pool}
	for _, fl := range fleets {
		if fl != e.fleet {
			pools = append(pools, fl.Store.Pool)
		}
	}
	if made, err = flushStats(ctx, pools...); err != nil {
		return 0, 0, err
	}
	err = e.db.QueryRow(ctx, `SELECT xact_commit FROM pg_stat_database WHERE datname = $1`, e.o.database).Scan(&n)
	return n, made, err
}

// checkpoint makes PostgreSQL write a checkpoint before a measured workload,
// so that no timed one falls inside it (every window is far shorter than
// checkpoint_timeout): the first change of each page after a checkpoint writes
// the whole page to the WAL, and a checkpoint inside one window of a
// difference (section 7's round trip is depth-5 relays minus depth-1) moved
// its PostgreSQL CPU by half. Each window, the fleet's and DBOS's alike, starts
// right after one and pays those first changes as a workload does after any
// checkpoint. Without the right to (not a superuser, no pg_checkpoint) the
// bench says so once and goes on.
func (e *env) checkpoint(ctx context.Context) {
	if e.noCheckpoint {
		return
	}
	if _, err := e.db.Exec(ctx, `CHECKPOINT`); err != nil {
		e.noCheckpoint = true
		progress("CHECKPOINT before each workload refused (%v): a timed checkpoint may fall inside a measured window", err)
	}
}

// flushStats makes the backends of pools publish their statistics without
// closing them, and returns the transactions it made for that. A backend
// publishes what it counted as it goes idle once its last publication is over
// a second old, and otherwise only ten seconds later; closing the connections
// instead (as the bench did) makes the next workload open new ones, whose
// startups and first use of each statement (pgx prepares it: a transaction of
// its own) were counted as the workload's — 0.3–0.6 transactions per model turn
// of section 2 that a long-lived pool pays once an hour, not per turn.
func flushStats(ctx context.Context, pools ...*pgxpool.Pool) (made int64, err error) {
	time.Sleep(1100 * time.Millisecond)
	for _, p := range pools {
		for _, c := range p.AcquireAllIdle(ctx) {
			// The simple protocol: one transaction, nothing prepared.
			_, err = c.Conn().PgConn().Exec(ctx, "SELECT 1").ReadAll()
			c.Release()
			if err != nil {
				return made, fmt.Errorf("flush statistics: %w", err)
			}
			made++
		}
	}
	return made, nil
}

// fleetWorkload submits runs of team with no worker running, then starts fl's
// worker server and times it until every run is terminal.
func fleetWorkload(ctx context.Context, e *env, fl *fleet.Fleet, team templates.Template, runs int, profile string, rec ...*hopRecorder) (w workload, err error) {
	start := time.Now()
	w.ids, err = harness.SubmitMany(ctx, runs, 16, 0, func(ctx context.Context, i int) (string, error) {
		return e.client.SubmitTeam(ctx, team, fmt.Sprintf("bench run %d", i))
	})
	if err != nil {
		return w, err
	}
	w.submitPerS = float64(runs) / time.Since(start).Seconds()
	e.checkpoint(ctx)
	x0, _, err := e.xactCommits(ctx, fl)
	if err != nil {
		return w, err
	}
	if err := e.resetStatements(ctx); err != nil {
		return w, err
	}
	r0, err := e.redisCommands(ctx)
	if err != nil {
		return w, err
	}
	if profile != "" {
		stop, err := recordTo(profile, pprof.StartCPUProfile, pprof.StopCPUProfile)
		if err != nil {
			return w, err
		}
		defer stop()
	}
	// A runtime trace shows where handlers wait off the CPU (go tool trace
	// -pprof=sync|net|syscall), which a CPU profile cannot: it found the pool waits.
	if e.o.trace != "" && len(rec) > 0 {
		stop, err := recordTo(e.o.trace, trace.Start, trace.Stop)
		if err != nil {
			return w, err
		}
		defer stop()
	}
	meter := e.cpu()
	srv, mux, cancel := fl.WorkerServer()
	defer cancel()
	for _, r := range rec {
		mux.Use(r.middleware)
	}
	start = time.Now()
	if err := srv.Start(mux); err != nil {
		return w, err
	}
	counts, err := harness.WaitTerminal(ctx, e.db, w.ids, 5*time.Minute, func(c harness.RunCounts) {
		progress("  … %d/%d runs finished", c.Terminal(), len(w.ids))
	})
	w.elapsed = time.Since(start)
	w.cpu = meter.Stop()
	srv.Shutdown()
	if err != nil {
		return w, err
	}
	if counts.ByStatus["completed"] != runs {
		return w, fmt.Errorf("%d of %d runs completed (%v; %v)", counts.ByStatus["completed"], runs, counts.Reasons, counts.Errors)
	}
	if fl.Audit != nil {
		fl.Audit.Flush()
	}
	x1, made, err := e.xactCommits(ctx, fl)
	if err != nil {
		return w, err
	}
	w.xact = x1 - x0 - made
	if w.stmts, err = e.statements(ctx); err != nil {
		return w, err
	}
	r1, err := e.redisCommands(ctx)
	w.redis = r1.minus(r0)
	return w, err
}

// audited counts the allowed audit rows of ids. The reply call finishes its run
// before the gate queues the call's audit row, so rows may still arrive after the
// last run is terminal: flush and count until want is reached (or a few seconds).
func (e *env) audited(ctx context.Context, ids []string, want int) (int, error) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		e.fleet.Audit.Flush()
		var n int
		if err := e.db.QueryRow(ctx, `SELECT count(*) FROM tool_audit WHERE run_id = ANY($1::uuid[]) AND decision = 'allowed'`, ids).Scan(&n); err != nil {
			return 0, err
		}
		if n >= want || time.Now().After(deadline) {
			return n, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func benchFleet(ctx context.Context, e *env, res *Result) error {
	r := &res.Fleet
	r.Concurrency = e.o.concurrency
	profile := ""
	if e.o.profile {
		if err := os.MkdirAll(filepath.Join(e.o.out, "profiles"), 0o755); err != nil {
			return err
		}
		profile = filepath.Join(e.o.out, "profiles", "fleet-tools.cpu.pprof")
	}

	team := harness.ToolLoop(e.o.toolTurns, e.o.toolCalls, "todo", map[string]any{"action": "read"})
	want := harness.ExpectOf(team).Times(e.o.toolRuns)
	progress("fleet tool calls: %d runs × %d gated calls (caller: %d turns × %d todo{read}; supervisor: delegate, reply)",
		e.o.toolRuns, want.ToolCalls/e.o.toolRuns, e.o.toolTurns, e.o.toolCalls)
	w, err := fleetWorkload(ctx, e, e.fleet, team, e.o.toolRuns, profile)
	if err != nil {
		return err
	}
	audited, err := e.audited(ctx, w.ids, want.ToolCalls)
	if err != nil {
		return err
	}
	if audited != want.ToolCalls {
		return fmt.Errorf("audited %d allowed tool calls, want %d", audited, want.ToolCalls)
	}
	turns, err := e.countEvents(ctx, w.ids, "agent.message")
	if err != nil {
		return err
	}
	r.ToolRuns, r.ToolCalls, r.ToolSeconds, r.ToolModelTurns, r.SubmitPerS = e.o.toolRuns, audited, w.elapsed.Seconds(), turns, w.submitPerS
	r.ToolCallsPerS = float64(audited) / w.elapsed.Seconds()
	r.ToolRatio = ratio(r.ToolCallsPerS, res.Asynq.ProcessPerS)
	r.ToolXactPerCall = float64(w.xact) / float64(audited)
	r.ToolCPU = w.cpu
	progress("fleet tool calls: %d gated+audited calls in %.2fs = %.0f/s (%.2f × raw asynq), %.1f PostgreSQL transactions per call; CPU: %s",
		audited, w.elapsed.Seconds(), r.ToolCallsPerS, r.ToolRatio, r.ToolXactPerCall, w.cpu)
	if profile != "" {
		r.ToolProfile = profile
		writeTop(ctx, profile)
	}

	// The same workload without the gate, to tell the gate's share from the loop's.
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	ungated, err := fleet.Open(ctx, e.fleet.Cfg, log, fleet.Options{NoSandbox: true, NoGate: true})
	if err != nil {
		return err
	}
	w, err = fleetWorkload(ctx, e, ungated, team, e.o.toolRuns, "")
	ungated.Close()
	if err != nil {
		return err
	}
	calls, err := e.countEvents(ctx, w.ids, "tool.call")
	if err != nil {
		return err
	}
	if calls != want.ToolCalls {
		return fmt.Errorf("ungated: %d tool.call events, want %d", calls, want.ToolCalls)
	}
	r.UngatedPerS = float64(calls) / w.elapsed.Seconds()
	r.UngatedRatio = ratio(r.UngatedPerS, res.Asynq.ProcessPerS)
	r.UngatedXact = float64(w.xact) / float64(calls)
	r.UngatedCPU = w.cpu
	progress("fleet tool calls without the gate: %d calls in %.2fs = %.0f/s (%.2f × raw asynq), %.1f PostgreSQL transactions per call; CPU: %s",
		calls, w.elapsed.Seconds(), r.UngatedPerS, r.UngatedRatio, r.UngatedXact, w.cpu)

	// One call per model message: what a whole agent turn costs per call.
	one := e.oneCallTeam()
	want = harness.ExpectOf(one).Times(e.o.toolRuns)
	progress("fleet tool calls, one per model message: %d runs × %d gated calls", e.o.toolRuns, want.ToolCalls/e.o.toolRuns)
	w, err = fleetWorkload(ctx, e, e.fleet, one, e.o.toolRuns, "")
	if err != nil {
		return err
	}
	if audited, err = e.audited(ctx, w.ids, want.ToolCalls); err != nil {
		return err
	}
	r.OneRuns, r.OneCalls = e.o.toolRuns, audited
	r.OnePerS = float64(audited) / w.elapsed.Seconds()
	r.OneRatio = ratio(r.OnePerS, res.Asynq.ProcessPerS)
	r.OneXact = float64(w.xact) / float64(audited)
	r.OneCPU = w.cpu
	c := &res.Capacity
	oneTurns := float64(audited) // one call per turn
	c.TurnXact, c.TurnRedisCmds, c.TurnTopCmds = r.OneXact, float64(w.redis.total())/oneTurns, w.redis.top(6, oneTurns)
	c.TurnPGMicros, c.TurnRedisMicros, c.TurnFleetMicros = cpuMicros(w.cpu, harness.PostgresGroup, oneTurns), cpuMicros(w.cpu, "redis", oneTurns), cpuMicros(w.cpu, "bench", oneTurns)
	printStatements("model turn (one gated call)", w.stmts, oneTurns, nil, 0)
	progress("per model turn: %.1f PostgreSQL transactions, %s PostgreSQL CPU (%s)", c.TurnXact, pgMicrosOf(w.cpu, c.TurnPGMicros), pgCPUWhat)
	progress("fleet tool calls, one per model message: %d calls in %.2fs = %.0f/s (%.2f × raw asynq), %.1f PostgreSQL transactions per call; CPU: %s",
		audited, w.elapsed.Seconds(), r.OnePerS, r.OneRatio, r.OneXact, w.cpu)

	// A run's own transactions (submit, start, finish, events), from depth-1
	// relays: the relay's per-delegation cost beyond them is the round trip's.
	w, err = fleetWorkload(ctx, e, e.fleet, harness.Relay(1), e.o.relayRuns, "")
	if err != nil {
		return err
	}
	r.RelayOneXact = float64(w.xact) / float64(e.o.relayRuns)
	one1 := w
	c.RunXact, c.RunRedisCmds = r.RelayOneXact, float64(w.redis.total())/float64(e.o.relayRuns)

	relay := harness.Relay(e.o.relayDepth)
	want = harness.ExpectOf(relay).Times(e.o.relayRuns)
	progress("fleet delegations: %d runs × %d sequential delegations", e.o.relayRuns, e.o.relayDepth)
	loadHops := &hopRecorder{}
	relayProfile := ""
	if profile != "" {
		relayProfile = filepath.Join(e.o.out, "profiles", "fleet-relay.cpu.pprof")
	}
	w, err = fleetWorkload(ctx, e, e.fleet, relay, e.o.relayRuns, relayProfile, loadHops)
	if err != nil {
		return err
	}
	res.Hops.LoadHops, res.Hops.LoadP50MS, res.Hops.LoadP99MS = loadHops.quantiles()
	var dels int
	if err := e.db.QueryRow(ctx, `SELECT count(*) FROM delegations WHERE run_id = ANY($1::uuid[]) AND status = 'completed'`, w.ids).Scan(&dels); err != nil {
		return err
	}
	if dels != want.Delegations {
		return fmt.Errorf("%d delegations completed, want %d", dels, want.Delegations)
	}
	r.RelayRuns, r.Delegations, r.RelaySeconds = e.o.relayRuns, dels, w.elapsed.Seconds()
	r.DelegationsPerS = float64(dels) / w.elapsed.Seconds()
	r.DelegationsRatio = ratio(r.DelegationsPerS, res.Asynq.ProcessPerS)
	r.RelayXactPerDel = float64(w.xact) / float64(dels)
	r.RelayCPU = w.cpu
	if relayProfile != "" {
		writeTop(ctx, relayProfile)
	}
	if e.o.relayDepth > 1 {
		extra := float64(e.o.relayRuns * (e.o.relayDepth - 1))
		res.Hops.RelayMarginalXact = (float64(w.xact)/float64(e.o.relayRuns) - r.RelayOneXact) / float64(e.o.relayDepth-1)
		c.TripXact = res.Hops.RelayMarginalXact
		c.TripRedisCmds = float64(w.redis.total()-one1.redis.total()) / extra
		// CPU seconds of the deep relays minus the depth-1 ones (the same runs).
		c.TripPGMicros = marginalMicros(w.cpu, one1.cpu, harness.PostgresGroup, extra)
		c.TripRedisMicros = marginalMicros(w.cpu, one1.cpu, "redis", extra)
		printStatements("depth-1 relay run", one1.stmts, float64(e.o.relayRuns), nil, 0)
		printStatements("delegation round trip (depth-5 minus depth-1)", w.stmts, extra, one1.stmts, 1)
		progress("per delegation round trip: %.1f PostgreSQL transactions, %s PostgreSQL CPU (%s)", c.TripXact, pgMicrosOf(w.cpu, c.TripPGMicros), pgCPUWhat)
	}
	progress("fleet delegations: %.1f PostgreSQL transactions per round trip beyond the run's own (%.1f per depth-1 run); hops under load: p50 %.1f ms, p99 %.1f ms (%d hops)",
		res.Hops.RelayMarginalXact, r.RelayOneXact, res.Hops.LoadP50MS, res.Hops.LoadP99MS, res.Hops.LoadHops)
	progress("fleet delegations: %d round trips in %.2fs = %.0f/s (%.3f × raw asynq), %.1f PostgreSQL transactions per delegation; CPU: %s",
		dels, w.elapsed.Seconds(), r.DelegationsPerS, r.DelegationsRatio, r.RelayXactPerDel, w.cpu)
	// The same tool-call workload with tracing off and on (tracing.go).
	return benchTracingTools(ctx, e, res)
}

// ratio is a / b, or 0 when b was not measured (a section skipped).
// oneCallTeam is the workload of model turns of one gated call each.
func (e *env) oneCallTeam() templates.Template {
	return harness.ToolLoop(e.o.toolTurns*e.o.toolCalls/5, 1, "todo", map[string]any{"action": "read"})
}

func ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}

// writeTop writes pprof's top functions of a CPU profile beside it (.top.txt).
func writeTop(ctx context.Context, profile string) {
	top := strings.TrimSuffix(profile, ".cpu.pprof") + ".top.txt"
	exe, err := os.Executable()
	if err != nil {
		return
	}
	if out, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-nodecount=40", exe, profile).Output(); err == nil {
		_ = os.WriteFile(top, out, 0o644)
		progress("CPU profile %s (top: %s)", profile, top)
	}
}

// recordTo starts a CPU profile or runtime trace (start, stop) into a new file
// at path; the returned func stops it and closes the file.
func recordTo(path string, start func(io.Writer) error, stop func()) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := start(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		stop()
		f.Close()
	}, nil
}
