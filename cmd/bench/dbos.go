package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/aetherium-engine/aetherium/internal/harness"
	"github.com/aetherium-engine/aetherium/internal/testinfra"
)

// DBOSResult is section 11: DBOS Transact (Go), the durable-execution engine a
// user might pick instead, on the same PostgreSQL (a database of its own) in the
// same run — the units section 7 measures for the fleet, for DBOS's workflows:
// (a) a two-step workflow ("model answer" step, then "tool call" step, each
// returning ~300 bytes of JSON) against a model turn with one gated call, and (b)
// a parent workflow that starts a one-step child workflow, waits for it, then runs
// one more step, against a delegation round trip.
type DBOSResult struct {
	Concurrency int `json:"concurrency"`
	// Two-step workflows.
	TwoStep DBOSWorkload `json:"two_step"`
	// Parent/child round trips (one child each).
	ParentChild DBOSWorkload `json:"parent_child"`
	// ChildXact and ChildPGMicros are what each further child of a parent costs
	// (parents of ChildDepth children minus parents of one, per extra child): the
	// same marginal the fleet's round trip is.
	ChildDepth    int          `json:"child_depth"`
	ChildXact     float64      `json:"child_marginal_pg_xact"`
	ChildPGMicros float64      `json:"child_marginal_pg_cpu_us"`
	Deep          DBOSWorkload `json:"parent_deep"`
	// Paired is the fleet's units and DBOS's measured back to back, round by
	// round (pairedRounds): the bars' figures.
	Paired Paired `json:"paired"`
}

// Paired is section 11's paired rounds: in each, the fleet's model turns and
// DBOS's two-step workflows, then the fleet's relays of depth 1 and of
// -relay-depth and DBOS's parent/child round trips, one after the other; each
// round's ratios, and their median and range.
type Paired struct {
	Rounds []PairedRound `json:"rounds,omitempty"`
	// TurnPG and TripPG are the rounds' PostgreSQL CPU ratios: model turn ÷
	// two-step workflow, delegation round trip ÷ parent/child round trip.
	TurnPG Spread `json:"turn_pg_cpu_ratio"`
	TripPG Spread `json:"trip_pg_cpu_ratio"`
}

// PairedRound is one round: PostgreSQL CPU per unit on both sides, in µs.
type PairedRound struct {
	TurnPG        float64 `json:"fleet_turn_pg_cpu_us"`
	TwoStepPG     float64 `json:"dbos_two_step_pg_cpu_us"`
	TripPG        float64 `json:"fleet_trip_pg_cpu_us"`
	ParentChildPG float64 `json:"dbos_parent_child_pg_cpu_us"`
}

// Spread is the median, least and greatest of some rounds' figures.
type Spread struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

func spreadOf(xs []float64) Spread {
	if len(xs) == 0 {
		return Spread{}
	}
	return Spread{Median: median(xs), Min: slices.Min(xs), Max: slices.Max(xs)}
}

func (s Spread) String() string {
	return fmt.Sprintf("%.2f × (%.2f–%.2f)", s.Median, s.Min, s.Max)
}

// DBOSWorkload is one timed DBOS workload: units of work, rate, and PostgreSQL
// transactions and CPU and the bench process's (DBOS's) CPU per unit.
type DBOSWorkload struct {
	Units     int            `json:"units"`
	Seconds   float64        `json:"seconds"`
	PerS      float64        `json:"per_s"`
	Xact      float64        `json:"pg_xact_per_unit"`
	PGMicros  float64        `json:"pg_cpu_us_per_unit"`
	GoMicros  float64        `json:"go_cpu_us_per_unit"`
	CPU       harness.CPUUse `json:"cpu"`
	xactTotal int64
}

// dbosPayload is a ~300-byte JSON result: what a model answer or a tool result
// checkpoint carries.
type dbosPayload struct {
	Role      string   `json:"role"`
	Content   string   `json:"content"`
	ToolCalls []string `json:"tool_calls,omitempty"`
	Tokens    int      `json:"tokens"`
}

var dbosText = strings.Repeat("benchmark text ", 15) // 225 bytes

func dbosModelAnswer(context.Context) (dbosPayload, error) {
	return dbosPayload{Role: "assistant", Content: dbosText, ToolCalls: []string{`todo{"action":"read"}`}, Tokens: 42}, nil
}

func dbosToolCall(context.Context) (dbosPayload, error) {
	return dbosPayload{Role: "tool", Content: dbosText + "items: []", Tokens: 7}, nil
}

// dbosTwoStep is a model turn's shape: the model's answer, then the tool call.
func dbosTwoStep(ctx dbos.Context, _ int) (dbosPayload, error) {
	if _, err := dbos.RunAsStep(ctx, dbosModelAnswer); err != nil {
		return dbosPayload{}, err
	}
	return dbos.RunAsStep(ctx, dbosToolCall)
}

// dbosChild is the delegated work: one step.
func dbosChild(ctx dbos.Context, _ int) (dbosPayload, error) {
	return dbos.RunAsStep(ctx, dbosModelAnswer)
}

// dbosParent starts children one child workflow at a time, waiting for each (a
// delegation round trip each), then runs one more step (the supervisor's reply).
func dbosParent(ctx dbos.Context, children int) (dbosPayload, error) {
	for i := range children {
		h, err := dbos.RunWorkflow(ctx, dbosChild, i)
		if err != nil {
			return dbosPayload{}, err
		}
		if _, err := h.GetResult(); err != nil {
			return dbosPayload{}, err
		}
	}
	return dbos.RunAsStep(ctx, dbosToolCall)
}

// dbosDatabaseOf is DBOS's database beside the bench's own (-database): two
// benches on one server with their own -database do not share it.
func dbosDatabaseOf(benchDB string) string { return benchDB + "_dbos" }

func benchDBOS(ctx context.Context, e *env, res *Result) error {
	r := &res.DBOS
	r.Concurrency = e.o.concurrency
	admin := testinfra.AdminURL()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return err
	}
	dbosDatabase := dbosDatabaseOf(e.o.database)
	for _, q := range []string{"DROP DATABASE IF EXISTS " + pgx.Identifier{dbosDatabase}.Sanitize() + " WITH (FORCE)", "CREATE DATABASE " + pgx.Identifier{dbosDatabase}.Sanitize()} {
		if _, err := conn.Exec(ctx, q); err != nil {
			conn.Close(ctx)
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	conn.Close(ctx)
	url := testinfra.WithDB(admin, dbosDatabase)
	defer harness.DropDatabase(admin, dbosDatabase)

	n, np := e.o.dbosWorkflows, dbosParentsOf(e)
	progress("dbos: %d two-step workflows (model answer step, tool call step), %d at a time", n, r.Concurrency)
	if r.TwoStep, err = dbosWorkload(ctx, e, url, n, dbosTwoStepUnit); err != nil {
		return err
	}
	progress("dbos two-step workflows: %s", r.TwoStep)
	progress("dbos: %d parent workflows (child workflow of one step, wait, one more step), %d at a time", np, r.Concurrency)
	if r.ParentChild, err = dbosWorkload(ctx, e, url, np, dbosParents(1)); err != nil {
		return err
	}
	progress("dbos parent/child round trips: %s", r.ParentChild)
	r.ChildDepth = e.o.relayDepth
	if r.ChildDepth > 1 {
		progress("dbos: %d parent workflows of %d sequential children", np, r.ChildDepth)
		if r.Deep, err = dbosWorkload(ctx, e, url, np, dbosParents(r.ChildDepth)); err != nil {
			return err
		}
		extra := float64(np * (r.ChildDepth - 1))
		r.ChildXact = float64(r.Deep.xactTotal-r.ParentChild.xactTotal) / extra
		r.ChildPGMicros = marginalMicros(r.Deep.CPU, r.ParentChild.CPU, harness.PostgresGroup, extra)
		progress("dbos: each further child: %.1f transactions, %s PostgreSQL CPU (%s)", r.ChildXact, pgMicrosOf(r.Deep.CPU, r.ChildPGMicros), pgCPUWhat)
	}
	if e.o.pairs > 0 && res.Capacity.TripXact > 0 && res.PostgresCPUUnavailable == "" {
		return pairedRounds(ctx, e, url, res)
	}
	return nil
}

// dbosParentsOf is how many parent workflows a DBOS round-trip workload runs.
func dbosParentsOf(e *env) int { return max(e.o.dbosWorkflows/2, 1) }

func dbosTwoStepUnit(d dbos.Context) error {
	h, err := dbos.RunWorkflow(d, dbosTwoStep, 0)
	if err == nil {
		_, err = h.GetResult()
	}
	return err
}

// dbosParents is the unit of a parent workflow of children sequential children.
func dbosParents(children int) func(d dbos.Context) error {
	return func(d dbos.Context) error {
		h, err := dbos.RunWorkflow(d, dbosParent, children)
		if err == nil {
			_, err = h.GetResult()
		}
		return err
	}
}

// pairedRounds measures the units of the bars again, e.o.pairs times, the
// fleet's and DBOS's back to back in each round, and keeps each round's
// ratios. PostgreSQL's CPU per unit drifts with the host over a run (the same
// DBOS workload's moved 1.2–4.4 ms between runs of one evening, the fleet's
// round trip, a difference of two windows, more): a ratio of figures taken
// seconds apart carries less of that drift than section 7's and section 11's
// single measures taken minutes apart, and the median of the rounds is robust
// to one disturbed window. The round trip is section 7's marginal (depth
// -relay-depth minus depth 1) against DBOS's whole parent/child workflow, as
// the single measures compare them.
func pairedRounds(ctx context.Context, e *env, url string, res *Result) error {
	p := &res.DBOS.Paired
	one := e.oneCallTeam()
	calls := float64(harness.ExpectOf(one).Times(e.o.toolRuns).ToolCalls)
	extra := float64(e.o.relayRuns * (e.o.relayDepth - 1))
	var turns, trips []float64
	for i := range e.o.pairs {
		progress("paired round %d/%d: fleet model turns, DBOS two-step workflows, fleet relays of depth 1 and %d, DBOS parent/child", i+1, e.o.pairs, e.o.relayDepth)
		var pr PairedRound
		w, err := fleetWorkload(ctx, e, e.fleet, one, e.o.toolRuns, "")
		if err != nil {
			return fmt.Errorf("paired round %d: %w", i+1, err)
		}
		pr.TurnPG = cpuMicros(w.cpu, harness.PostgresGroup, calls)
		d, err := dbosWorkload(ctx, e, url, e.o.dbosWorkflows, dbosTwoStepUnit)
		if err != nil {
			return fmt.Errorf("paired round %d: %w", i+1, err)
		}
		pr.TwoStepPG = d.PGMicros
		w1, err := fleetWorkload(ctx, e, e.fleet, harness.Relay(1), e.o.relayRuns, "")
		if err != nil {
			return fmt.Errorf("paired round %d: %w", i+1, err)
		}
		wn, err := fleetWorkload(ctx, e, e.fleet, harness.Relay(e.o.relayDepth), e.o.relayRuns, "")
		if err != nil {
			return fmt.Errorf("paired round %d: %w", i+1, err)
		}
		pr.TripPG = marginalMicros(wn.cpu, w1.cpu, harness.PostgresGroup, extra)
		if d, err = dbosWorkload(ctx, e, url, dbosParentsOf(e), dbosParents(1)); err != nil {
			return fmt.Errorf("paired round %d: %w", i+1, err)
		}
		pr.ParentChildPG = d.PGMicros
		p.Rounds = append(p.Rounds, pr)
		turns, trips = append(turns, ratio(pr.TurnPG, pr.TwoStepPG)), append(trips, ratio(pr.TripPG, pr.ParentChildPG))
		progress("paired round %d/%d: PostgreSQL CPU per model turn %.0f µs ÷ per two-step workflow %.0f µs = %.2f ×; per delegation round trip %.0f µs ÷ per parent/child round trip %.0f µs = %.2f ×",
			i+1, e.o.pairs, pr.TurnPG, pr.TwoStepPG, turns[i], pr.TripPG, pr.ParentChildPG, trips[i])
	}
	p.TurnPG, p.TripPG = spreadOf(turns), spreadOf(trips)
	return nil
}

func (w DBOSWorkload) String() string {
	return fmt.Sprintf("%d in %.2fs = %.0f/s; per unit %.2f PostgreSQL transactions, %s PostgreSQL CPU (%s), %.0f µs Go CPU; CPU: %s",
		w.Units, w.Seconds, w.PerS, w.Xact, pgMicrosOf(w.CPU, w.PGMicros), pgCPUWhat, w.GoMicros, w.CPU)
}

// dbosWorkload launches DBOS on its own pool of url, warms it (two units per
// goroutine), then runs n units from e.o.concurrency goroutines, and counts
// what they cost. The transactions are read once the pool's backends published
// theirs (flushStats), on warm connections as the fleet's are.
func dbosWorkload(ctx context.Context, e *env, url string, n int, unit func(dbos.Context) error) (w DBOSWorkload, err error) {
	pool, err := pgxpool.New(ctx, url+"&pool_max_conns="+fmt.Sprint(e.o.concurrency+4))
	if err != nil {
		return w, err
	}
	defer pool.Close()
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	d, err := dbos.NewContext(ctx, dbos.Config{AppName: "aetherium-bench", SystemDBPool: pool, Logger: quiet})
	if err != nil {
		return w, fmt.Errorf("dbos: %w", err)
	}
	dbos.RegisterWorkflow(d, dbosTwoStep)
	dbos.RegisterWorkflow(d, dbosChild)
	dbos.RegisterWorkflow(d, dbosParent)
	if err := dbos.Launch(d); err != nil {
		return w, fmt.Errorf("dbos launch: %w", err)
	}
	shut := func() { _ = dbos.Shutdown(d, 10*time.Second) }
	// Warm at the measured concurrency, as the fleet's pools are by the
	// workloads before: every connection opened and its statements prepared.
	if err := concurrently(2*e.o.concurrency, e.o.concurrency, func() error { return unit(d) }); err != nil {
		shut()
		return w, fmt.Errorf("dbos warm-up: %w", err)
	}
	e.checkpoint(ctx)
	x0, _, err := dbosXact(ctx, e, pool)
	if err != nil {
		shut()
		return w, err
	}
	meter := e.cpu()
	start := time.Now()
	err = concurrently(n, e.o.concurrency, func() error { return unit(d) })
	elapsed := time.Since(start)
	w.CPU = meter.Stop()
	shut()
	if err != nil {
		return w, fmt.Errorf("dbos: %w", err)
	}
	x1, made, err := dbosXact(ctx, e, pool)
	if err != nil {
		return w, err
	}
	units := float64(n)
	w.Units, w.Seconds, w.PerS, w.xactTotal = n, elapsed.Seconds(), units/elapsed.Seconds(), x1-x0-made
	w.Xact = float64(w.xactTotal) / units
	w.PGMicros, w.GoMicros = cpuMicros(w.CPU, harness.PostgresGroup, units), cpuMicros(w.CPU, "bench", units)
	return w, nil
}

// dbosXact reads the DBOS database's committed transactions once pool's
// backends published theirs (flushStats), and the transactions that took.
func dbosXact(ctx context.Context, e *env, pool *pgxpool.Pool) (n, made int64, err error) {
	if made, err = flushStats(ctx, pool); err != nil {
		return 0, 0, err
	}
	err = e.db.QueryRow(ctx, `SELECT xact_commit FROM pg_stat_database WHERE datname = $1`, dbosDatabaseOf(e.o.database)).Scan(&n)
	return n, made, err
}

// dbosRows prints section 11 and, when section 2 ran, the fleet/DBOS ratios.
func (r Result) dbosRows(row func(n, what, val, note string)) {
	d := r.DBOS
	if d.TwoStep.Units == 0 {
		return
	}
	row("11", "DBOS two-step workflow (model answer step, tool call step)", fmt.Sprintf("**%.0f workflows/s**; %.1f PostgreSQL transactions, %s PostgreSQL CPU", d.TwoStep.PerS, d.TwoStep.Xact, r.pgMicros(d.TwoStep.PGMicros)),
		fmt.Sprintf("%d workflows, %d at a time, same PostgreSQL (own database); %.0f µs Go CPU each (DBOS in the bench process)", d.TwoStep.Units, d.Concurrency, d.TwoStep.GoMicros))
	row("11", "DBOS parent/child round trip (child of one step, wait, one more step)", fmt.Sprintf("**%.0f round trips/s**; %.1f PostgreSQL transactions, %s PostgreSQL CPU", d.ParentChild.PerS, d.ParentChild.Xact, r.pgMicros(d.ParentChild.PGMicros)),
		fmt.Sprintf("%d parent workflows, %d at a time; %.0f µs Go CPU each", d.ParentChild.Units, d.Concurrency, d.ParentChild.GoMicros))
	if d.ChildDepth > 1 {
		row("11", fmt.Sprintf("DBOS: each further child of a parent (depth %d minus depth 1)", d.ChildDepth), fmt.Sprintf("%.1f PostgreSQL transactions, %s PostgreSQL CPU", d.ChildXact, r.pgMicros(d.ChildPGMicros)),
			"the marginal the fleet's round trip (section 7) is measured as")
	}
	c := r.Capacity
	if c.TurnXact > 0 {
		row("11", "fleet ÷ DBOS: model turn ÷ two-step workflow", fmt.Sprintf("**%.2f × transactions, %s PostgreSQL CPU**, %.2f × Go CPU", ratio(c.TurnXact, d.TwoStep.Xact), r.pgRatio(c.TurnPGMicros, d.TwoStep.PGMicros), ratio(c.TurnFleetMicros, d.TwoStep.GoMicros)),
			fmt.Sprintf("fleet %.1f transactions, %s PostgreSQL, %.0f µs Go per turn (section 7); bars: ≤ 2.0 transactions per turn, ≤ 1.5 × PostgreSQL CPU (both sides: "+pgCPUWhat+")", c.TurnXact, r.pgMicros(c.TurnPGMicros), c.TurnFleetMicros))
	}
	if c.TripXact > 0 {
		row("11", "fleet ÷ DBOS: delegation round trip ÷ parent/child round trip", fmt.Sprintf("**%.2f × transactions, %s PostgreSQL CPU**", ratio(c.TripXact, d.ParentChild.Xact), r.pgRatio(c.TripPGMicros, d.ParentChild.PGMicros)),
			fmt.Sprintf("fleet %.1f transactions, %s PostgreSQL per round trip (section 7); bar: ≤ 1.5 × in both", c.TripXact, r.pgMicros(c.TripPGMicros)))
	}
	if n := len(d.Paired.Rounds); n > 0 {
		row("11", fmt.Sprintf("fleet ÷ DBOS, paired (%d rounds, each side's units back to back): PostgreSQL CPU", n),
			fmt.Sprintf("**model turn ÷ two-step workflow %s; round trip ÷ parent/child %s**", d.Paired.TurnPG, d.Paired.TripPG),
			"median of the rounds (least–greatest): the bars' figures, less of the host's drift between the single measures above; bars ≤ 1.5 ×")
	}
}
