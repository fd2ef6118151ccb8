package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aetherium-engine/aetherium/api"
	"github.com/aetherium-engine/aetherium/internal/harness"
	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/llm/script"
	"github.com/aetherium-engine/aetherium/templates"
)

// Section 10 (issue 39, many tenants, one fleet): two principals, tenant-a and
// tenant-b (api.tokens of an API process of the real binary, role submit), on
// -fair-procs worker processes × -fair-concurrency, the script model answering
// after -fair-latency. Four parts, each on processes of its own (the config
// differs), Redis flushed and leftover runs cancelled in between:
//
//	(a) burst: A submits -fair-a-runs one-turn runs; one second after A's
//	    first submission B submits -fair-b-runs. Bound: B's start latency p99
//	    ≤ 1 s.
//	(b) share: weights 3:1 (fairness.keys); both tenants keep a backlog of
//	    five-turn runs queued; the model turns served to each in the
//	    -fair-share-for window after both saturate. Bound: A's turns ÷ B's
//	    within ±5 % of 3.
//	(c) limit: fairness.keys.<A>.runs 5; A submits one-turn runs; A's runs
//	    running or waiting, sampled every 100 ms. Bound: never above 5.
//	(d) priority: 500 priority-3 runs then 10 priority-5 runs submitted while
//	    no worker runs, then the workers start; same tenant, and the
//	    priority-5 runs from B. Bound: the priority-5 runs start first (at
//	    most one slot-full of priority-3 runs starts before the last of them).
//
// A run's start is the created_at of its run.started event: the worker writes
// it, with the run's status change to running, in the transaction of the first
// supervisor step's lease (worker/handlers.go, store.Acquire.StartRun), so it is
// the moment that step began. Submission is the run's created_at (the API's
// insert). Both are PostgreSQL's now(): one clock.
//
// Features this build lacks are detected, not failed: the config loader
// refuses an unknown top-level key (yaml KnownFields), so an API process that
// exits naming `fairness` means no fairness config — part (b) runs without
// weights, part (c) without the limit (today's figures); the API's decoder
// refuses unknown body fields, so a 400 naming `priority` means no priorities
// — part (d) runs without the field.

const (
	fairTenantA     = "tenant-a"
	fairTenantB     = "tenant-b"
	fairSampleEvery = 100 * time.Millisecond
	fairShareTurns  = 5
	fairWeightA     = 3
	fairWeightB     = 1
	fairLimitRuns   = 5
	fairLowPrio     = 3
	fairHighPrio    = 5
	fairHighRuns    = 10
	fairStartBound  = time.Second
	fairShareBound  = 0.05
)

// FairResult is section 10.
type FairResult struct {
	Procs       int            `json:"procs"`
	Concurrency int            `json:"concurrency_per_proc"`
	LatencyMS   int64          `json:"model_latency_ms"`
	Burst       FairBurst      `json:"burst"`
	Share       FairShare      `json:"share"`
	Limit       FairLimit      `json:"limit"`
	Priority    []FairPriority `json:"priority"`
	Seconds     float64        `json:"seconds"`
	LoadAvg     [2]string      `json:"load_avg"`
	Ran         bool           `json:"ran"`
}

// FairStarts are start latencies (run.started − runs.created_at) of one tenant.
type FairStarts struct {
	Runs  int     `json:"runs"`
	P50MS float64 `json:"p50_ms"`
	P90MS float64 `json:"p90_ms"`
	P99MS float64 `json:"p99_ms"`
	MaxMS float64 `json:"max_ms"`
}

// FairBurst is part (a).
type FairBurst struct {
	ARuns int `json:"a_runs"`
	BRuns int `json:"b_runs"`
	// BAfterS is B's first submission after A's first (runs.created_at).
	BAfterS float64 `json:"b_after_s"`
	// ASubmitS is the time A's submissions took (first to last created_at).
	ASubmitS  float64    `json:"a_submit_s"`
	A         FairStarts `json:"a_starts"`
	B         FairStarts `json:"b_starts"`
	Seconds   float64    `json:"seconds"`
	Completed int        `json:"completed"`
	Failed    int        `json:"failed"`
	Pass      bool       `json:"pass"`
}

// FairShare is part (b).
type FairShare struct {
	Supported   bool    `json:"weights_supported"`
	Unsupported string  `json:"unsupported,omitempty"`
	Turns       int     `json:"turns_per_run"`
	Backlog     int     `json:"backlog_per_tenant"`
	WindowS     float64 `json:"window_s"`
	TurnsA      int     `json:"turns_a"`
	TurnsB      int     `json:"turns_b"`
	ShareA      float64 `json:"share_a"`
	// Ratio is TurnsA ÷ TurnsB; Deviation is Ratio ÷ 3 − 1.
	Ratio     float64 `json:"ratio"`
	Deviation float64 `json:"deviation"`
	// IdealTurns is every slot in a model call the whole window.
	IdealTurns int `json:"ideal_turns"`
	SubmittedA int `json:"submitted_a"`
	SubmittedB int `json:"submitted_b"`
	// MinQueuedA and MinQueuedB are the fewest runs each tenant had queued at
	// a feeder check inside the window (0: the backlog ran dry).
	MinQueuedA int  `json:"min_queued_a"`
	MinQueuedB int  `json:"min_queued_b"`
	Pass       bool `json:"pass"`
}

// FairLimit is part (c).
type FairLimit struct {
	Supported   bool    `json:"limit_supported"`
	Unsupported string  `json:"unsupported,omitempty"`
	Limit       int     `json:"limit"`
	Runs        int     `json:"runs"`
	Samples     int     `json:"samples"`
	Max         int     `json:"max_in_flight"`
	Over        int     `json:"samples_over_limit"`
	Seconds     float64 `json:"seconds"`
	Completed   int     `json:"completed"`
	Pass        bool    `json:"pass"`
}

// FairPriority is one variant of part (d).
type FairPriority struct {
	Variant     string `json:"variant"`
	Supported   bool   `json:"priority_supported"`
	Unsupported string `json:"unsupported,omitempty"`
	Low         int    `json:"low_runs"`
	High        int    `json:"high_runs"`
	// LowBeforeLastHigh is the priority-3 runs that started before the last
	// priority-5 run started; LowBeforeFirstHigh before the first one.
	LowBeforeFirstHigh int     `json:"low_before_first_high"`
	LowBeforeLastHigh  int     `json:"low_before_last_high"`
	HighP50MS          float64 `json:"high_start_p50_ms"`
	HighMaxMS          float64 `json:"high_start_max_ms"`
	Slots              int     `json:"slots"`
	Pass               bool    `json:"pass"`
}

// errFairUnsupported is a build that refused the fairness config.
var errFairUnsupported = errors.New("fairness config not supported by this build")

// fairTeam is one agent whose script makes turns model turns: turns−1 todo
// reads, then the final answer that completes the run.
func fairTeam(turns int) templates.Template {
	var ts []script.Turn
	for range turns - 1 {
		ts = append(ts, script.Turn{Calls: []script.Call{{Tool: "todo", Args: map[string]any{"action": "read"}}}})
	}
	ts = append(ts, script.Turn{Say: "done"})
	node := templates.Node{Name: "solo", Prompt: "Answer."}
	if turns > 1 {
		node.MCPServers, node.Tools = []string{"planning"}, []string{"todo"}
	}
	return templates.Template{
		Name: "fair-bench", Description: fmt.Sprintf("bench section 10: %d model turn(s) per run", turns),
		Model: llm.ModelConfig{Provider: "script"}, Supervisor: node, Workers: []templates.Node{},
		Budget: templates.Budget{MaxTokens: 1 << 40}, Script: script.Script{Agents: map[string][]script.Turn{"solo": ts}},
	}
}

// fairTenants are the two principals' secrets.
type fairTenants struct{ a, b string }

func newSecret() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// fairStack is one set of processes: an API (with the two tokens), a
// scheduler and the worker processes, on one config file.
type fairStack struct {
	e       *env
	tag     string
	cfgPath string
	procs   []*harness.Proc
	workers []*harness.Proc
	a, b    *harness.Client
}

// startFairStack starts the API and the scheduler (and the workers unless
// noWorkers); fairness, when set, is the config's top-level fairness key. An
// API that refuses the key is errFairUnsupported (with the refusal's line).
func startFairStack(e *env, t fairTenants, tag string, fairness map[string]any, noWorkers bool) (*fairStack, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	o := e.o
	c := harness.FleetConfig{Concurrency: o.fairConc, ScriptLatency: o.fairLatency, APIAddr: addr, RedisURL: e.redisURL, DatabaseURL: e.dbURL,
		Workspaces: filepath.Join(e.tmp, "workspaces"), Templates: filepath.Join(e.root, "templates"),
		Permissions: filepath.Join(e.root, "config", "permissions.yaml"), ShutdownTimeout: 5 * time.Second,
		Sections: map[string]map[string]any{"api": {"tokens": []map[string]any{
			{"name": fairTenantA, "sha256": api.HashToken(t.a), "roles": []string{api.RoleSubmit, api.RoleRead}},
			{"name": fairTenantB, "sha256": api.HashToken(t.b), "roles": []string{api.RoleSubmit, api.RoleRead}},
		}}}}
	if fairness != nil {
		c.Sections["fairness"] = fairness
	}
	s := &fairStack{e: e, tag: tag, cfgPath: filepath.Join(e.tmp, "aetherium-fair-"+tag+".yaml")}
	if err := c.Write(s.cfgPath); err != nil {
		return nil, err
	}
	// Any of the processes may be the one that refuses the key.
	refused := func(err error) error {
		if fairness != nil && strings.Contains(err.Error(), "fairness") {
			return fmt.Errorf("%w: %s", errFairUnsupported, refusal(err.Error()))
		}
		return err
	}
	p, err := harness.StartAPI(e.bin, s.cfgPath, filepath.Join(e.tmp, "api-fair-"+tag+".log"), addr)
	if err != nil {
		return nil, refused(err)
	}
	s.procs = append(s.procs, p)
	if p, err = harness.StartScheduler(e.bin, s.cfgPath, filepath.Join(e.tmp, "scheduler-fair-"+tag+".log")); err != nil {
		s.stop(true)
		return nil, refused(err)
	}
	s.procs = append(s.procs, p)
	base := "http://" + addr
	s.a, s.b = harness.NewClient(base), harness.NewClient(base)
	s.a.Token, s.b.Token = t.a, t.b
	if !noWorkers {
		if err := s.startWorkers(); err != nil {
			s.stop(true)
			return nil, refused(err)
		}
	}
	return s, nil
}

// startFairOrWithout is startFairStack with the fairness config, or, when
// the build refuses it, without (today's figure for the part); why is the
// refusal, "" when the config was taken.
func startFairOrWithout(e *env, t fairTenants, tag string, fairness map[string]any, what string) (st *fairStack, why string, err error) {
	st, err = startFairStack(e, t, tag, fairness, false)
	if errors.Is(err, errFairUnsupported) {
		why = err.Error()
		progress("fairness %s are not supported by this build (%v): measuring without them", what, err)
		st, err = startFairStack(e, t, tag, nil, false)
	}
	return st, why, err
}

// refusal is the log line that names fairness (the loader's error), shortened.
func refusal(msg string) string {
	for _, l := range strings.Split(msg, "\n") {
		if strings.Contains(l, "fairness") {
			return truncate(strings.TrimSpace(l), 240)
		}
	}
	return truncate(msg, 240)
}

func (s *fairStack) startWorkers() error {
	ws, err := startParallel(s.e.o.fairProcs, func(i int) (*harness.Proc, error) {
		return harness.StartWorker(s.e.bin, s.cfgPath, filepath.Join(s.e.tmp, fmt.Sprintf("worker-fair-%s-%d-%d.log", s.tag, len(s.procs), i)))
	})
	for _, w := range ws {
		if w != nil {
			s.workers = append(s.workers, w)
			s.procs = append(s.procs, w)
		}
	}
	return err
}

func (s *fairStack) stopWorkers() {
	stopWorkers(s.workers)
	s.workers = nil
}

// stop ends every process (the logs kept under <out>/fair-logs when failed),
// then cancels the runs left in flight and flushes the bench's Redis database:
// the next part starts on an empty fleet.
func (s *fairStack) stop(failed bool) {
	stopWorkers(s.procs)
	if failed {
		keepLogs(s.e, "fair-logs", s.procs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.e.db.Exec(ctx, `UPDATE runs SET status = 'cancelled', reason = 'bench', updated_at = now(), finished_at = now()
		WHERE status IN ('queued', 'running', 'waiting')`); err != nil {
		progress("fairness: cancel leftover runs: %v", err)
	}
	if err := s.e.rdb.FlushDB(ctx).Err(); err != nil {
		progress("fairness: flush redis: %v", err)
	}
}

// submitRuns posts n runs of team as c (priority when > 0) from parallel
// clients.
func submitRuns(ctx context.Context, c *harness.Client, team templates.Template, n, parallel, priority int, tag string) ([]string, error) {
	return harness.SubmitMany(ctx, n, parallel, 0, func(ctx context.Context, i int) (string, error) {
		body := map[string]any{"team": team, "prompt": fmt.Sprintf("%s %d", tag, i)}
		if priority > 0 {
			body["priority"] = priority
		}
		return c.Submit(ctx, "/api/orchestrator/run", body)
	})
}

// runStart is one run's submission and start (PostgreSQL's clock).
type runStart struct {
	owner            string
	created, started time.Time
}

// starts reads each run's created_at and its run.started event's created_at.
func starts(ctx context.Context, e *env, ids []string) (map[string]runStart, error) {
	rows, err := e.db.Query(ctx, `SELECT r.id::text, r.owner, r.created_at, ev.created_at
		FROM unnest($1::uuid[]) AS u(id) JOIN runs r ON r.id = u.id
		JOIN run_events ev ON ev.run_id = r.id AND ev.type = 'run.started'`, ids)
	if err != nil {
		return nil, err
	}
	out := map[string]runStart{}
	var id string
	var s runStart
	_, err = pgx.ForEachRow(rows, []any{&id, &s.owner, &s.created, &s.started}, func() error {
		out[id] = s
		return nil
	})
	return out, err
}

func startsOf(all map[string]runStart, ids []string) FairStarts {
	var ds []time.Duration
	for _, id := range ids {
		if s, ok := all[id]; ok {
			ds = append(ds, s.started.Sub(s.created))
		}
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return FairStarts{Runs: len(ds), P50MS: ms(percentile(ds, 0.5)), P90MS: ms(percentile(ds, 0.9)), P99MS: ms(percentile(ds, 0.99)), MaxMS: ms(percentile(ds, 1))}
}

func (o options) fairSlots() int { return o.fairProcs * o.fairConc }

// fairWait waits for every run of ids to end, with progress every 5 s.
func fairWait(ctx context.Context, e *env, what string, ids []string, turns int) (harness.RunCounts, error) {
	o := e.o
	expect := time.Duration(len(ids)*turns) * o.fairLatency / time.Duration(max(o.fairSlots(), 1))
	last := time.Now()
	return harness.WaitTerminal(ctx, e.db, ids, 3*expect+2*time.Minute, func(c harness.RunCounts) {
		if time.Since(last) >= 5*time.Second {
			last = time.Now()
			progress("  … fairness %s: %d/%d runs finished", what, c.Terminal(), len(ids))
		}
	})
}

func benchFair(ctx context.Context, e *env, res *Result) error {
	o := e.o
	r := &res.Fair
	*r = FairResult{Procs: o.fairProcs, Concurrency: o.fairConc, LatencyMS: o.fairLatency.Milliseconds(), Ran: true}
	start := time.Now()
	r.LoadAvg[0] = loadAvg()
	t := fairTenants{a: newSecret(), b: newSecret()}
	for _, part := range []struct {
		name string
		fn   func(context.Context, *env, fairTenants, *FairResult) error
	}{
		{"(a) burst", fairBurst},
		{"(b) weighted share", fairShare},
		{"(c) per-key run limit", fairLimit},
		{"(d) priorities", fairPriority},
	} {
		if err := ctx.Err(); err != nil {
			return err
		}
		progress("fairness %s", part.name)
		if err := part.fn(ctx, e, t, r); err != nil {
			return fmt.Errorf("%s: %w", part.name, err)
		}
	}
	r.Seconds = time.Since(start).Seconds()
	r.LoadAvg[1] = loadAvg()
	return nil
}

// fairBurst is part (a).
func fairBurst(ctx context.Context, e *env, t fairTenants, r *FairResult) (err error) {
	o := e.o
	b := &r.Burst
	*b = FairBurst{ARuns: o.fairARuns, BRuns: o.fairBRuns}
	st, err := startFairStack(e, t, "burst", nil, false)
	if err != nil {
		return err
	}
	defer func() { st.stop(err != nil) }()
	team := fairTeam(1)
	progress("fairness (a): %s submits %d runs, %s %d runs one second later; %d worker processes × %d, model latency %s",
		fairTenantA, b.ARuns, fairTenantB, b.BRuns, o.fairProcs, o.fairConc, o.fairLatency)
	var aIDs []string
	var aErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		aIDs, aErr = submitRuns(ctx, st.a, team, b.ARuns, 16, 0, "burst a")
	}()
	select {
	case <-ctx.Done():
		<-done
		return ctx.Err()
	case <-time.After(time.Second):
	}
	bIDs, bErr := submitRuns(ctx, st.b, team, b.BRuns, max(b.BRuns, 1), 0, "burst b")
	<-done
	if err := errors.Join(aErr, bErr); err != nil {
		return err
	}
	ids := append(append([]string(nil), aIDs...), bIDs...)
	counts, err := fairWait(ctx, e, "(a)", ids, 1)
	if err != nil {
		return err
	}
	b.Completed, b.Failed = counts.ByStatus["completed"], counts.ByStatus["failed"]
	all, err := starts(ctx, e, ids)
	if err != nil {
		return err
	}
	b.A, b.B = startsOf(all, aIDs), startsOf(all, bIDs)
	var firstA, lastA, firstB time.Time
	for i, id := range ids {
		s := all[id]
		if i < len(aIDs) {
			if firstA.IsZero() || s.created.Before(firstA) {
				firstA = s.created
			}
			if s.created.After(lastA) {
				lastA = s.created
			}
		} else if firstB.IsZero() || s.created.Before(firstB) {
			firstB = s.created
		}
	}
	b.BAfterS, b.ASubmitS = firstB.Sub(firstA).Seconds(), lastA.Sub(firstA).Seconds()
	el, err := span(ctx, e, ids)
	if err != nil {
		return err
	}
	b.Seconds = el.Seconds()
	b.Pass = b.B.Runs == b.BRuns && b.B.P99MS <= ms(fairStartBound)
	progress("fairness (a): B's start p50 %.0f ms, p90 %.0f ms, p99 %.0f ms, max %.0f ms; A's p50 %.0f ms, p99 %.0f ms, max %.0f ms; %d completed, %d failed in %.1fs (A's submissions took %.1fs, B's began %.1fs after A's)",
		b.B.P50MS, b.B.P90MS, b.B.P99MS, b.B.MaxMS, b.A.P50MS, b.A.P99MS, b.A.MaxMS, b.Completed, b.Failed, b.Seconds, b.ASubmitS, b.BAfterS)
	return nil
}

// fairShare is part (b): both tenants keep Backlog runs queued (a feeder each,
// every 500 ms, topping up to the backlog, within a bounded total); the model
// turns (agent.message events) each was served in the window after both
// saturated.
func fairShare(ctx context.Context, e *env, t fairTenants, r *FairResult) (err error) {
	o := e.o
	sh := &r.Share
	slots := o.fairSlots()
	runRate := float64(slots) / o.fairLatency.Seconds() / fairShareTurns
	*sh = FairShare{Supported: true, Turns: fairShareTurns, Backlog: max(2*slots, int(10*runRate))}
	weights := map[string]any{"keys": map[string]any{
		fairTenantA: map[string]any{"weight": fairWeightA},
		fairTenantB: map[string]any{"weight": fairWeightB},
	}}
	st, why, err := startFairOrWithout(e, t, "share", weights, "(b): weights")
	if err != nil {
		return err
	}
	sh.Supported, sh.Unsupported = why == "", why
	defer func() { st.stop(err != nil) }()
	team := fairTeam(fairShareTurns)
	// The most a tenant submits: its backlog plus the whole fleet's rate over
	// the window and a margin.
	limit := sh.Backlog + int(runRate*(o.fairShareFor.Seconds()+30))
	fctx, stopFeed := context.WithCancel(ctx)
	defer stopFeed()
	type feeder struct {
		owner     string
		c         *harness.Client
		submitted atomic.Int64
		minQueued atomic.Int64
		filled    chan struct{}
		err       error
	}
	var inWindow atomic.Bool
	feeders := []*feeder{{owner: fairTenantA, c: st.a, filled: make(chan struct{})}, {owner: fairTenantB, c: st.b, filled: make(chan struct{})}}
	var wg sync.WaitGroup
	for _, f := range feeders {
		f.minQueued.Store(int64(sh.Backlog))
		wg.Add(1)
		go func() {
			defer wg.Done()
			first := true
			for fctx.Err() == nil {
				var queued int
				if err := e.db.QueryRow(fctx, `SELECT count(*) FROM runs WHERE owner = $1 AND status = 'queued'`, f.owner).Scan(&queued); err != nil {
					if fctx.Err() == nil {
						f.err = err
					}
					return
				}
				if inWindow.Load() && int64(queued) < f.minQueued.Load() {
					f.minQueued.Store(int64(queued))
				}
				n := min(sh.Backlog-queued, limit-int(f.submitted.Load()))
				if n > 0 {
					if _, err := submitRuns(fctx, f.c, team, n, 8, 0, "share "+f.owner); err != nil {
						if fctx.Err() == nil {
							f.err = err
						}
						return
					}
					f.submitted.Add(int64(n))
				}
				if first {
					first = false
					close(f.filled)
				}
				select {
				case <-fctx.Done():
				case <-time.After(500 * time.Millisecond):
				}
			}
		}()
	}
	for _, f := range feeders {
		select {
		case <-f.filled:
		case <-ctx.Done():
			stopFeed()
			wg.Wait()
			return ctx.Err()
		}
	}
	// Every slot busy before the window opens.
	warm := 3 * time.Second
	progress("fairness (b): both tenants have %d runs of %d turns queued; window of %s after %s", sh.Backlog, fairShareTurns, o.fairShareFor, warm)
	time.Sleep(warm)
	var t0, t1 time.Time
	if err := e.db.QueryRow(ctx, `SELECT now()`).Scan(&t0); err != nil {
		stopFeed()
		wg.Wait()
		return err
	}
	inWindow.Store(true)
	deadline := time.Now().Add(o.fairShareFor)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(min(5*time.Second, time.Until(deadline)))
		progress("  … fairness (b): %.0fs of %s; submitted %d / %d", o.fairShareFor.Seconds()-time.Until(deadline).Seconds(), o.fairShareFor, feeders[0].submitted.Load(), feeders[1].submitted.Load())
	}
	inWindow.Store(false)
	err = e.db.QueryRow(ctx, `SELECT now()`).Scan(&t1)
	stopFeed()
	wg.Wait()
	if err != nil {
		return err
	}
	for _, f := range feeders {
		if f.err != nil {
			return fmt.Errorf("feeder %s: %w", f.owner, f.err)
		}
	}
	// A step that began before t1 commits its event a moment later.
	time.Sleep(2 * time.Second)
	rows, err := e.db.Query(ctx, `SELECT r.owner, count(*) FROM run_events ev JOIN runs r ON r.id = ev.run_id
		WHERE ev.type = 'agent.message' AND ev.created_at >= $1 AND ev.created_at < $2 AND r.owner IN ($3, $4) GROUP BY r.owner`, t0, t1, fairTenantA, fairTenantB)
	if err != nil {
		return err
	}
	var owner string
	var n int
	if _, err = pgx.ForEachRow(rows, []any{&owner, &n}, func() error {
		if owner == fairTenantA {
			sh.TurnsA = n
		} else {
			sh.TurnsB = n
		}
		return nil
	}); err != nil {
		return err
	}
	sh.WindowS = t1.Sub(t0).Seconds()
	sh.IdealTurns = int(float64(slots) * sh.WindowS / o.fairLatency.Seconds())
	sh.SubmittedA, sh.SubmittedB = int(feeders[0].submitted.Load()), int(feeders[1].submitted.Load())
	sh.MinQueuedA, sh.MinQueuedB = int(feeders[0].minQueued.Load()), int(feeders[1].minQueued.Load())
	sh.ShareA = ratio(float64(sh.TurnsA), float64(sh.TurnsA+sh.TurnsB))
	sh.Ratio = ratio(float64(sh.TurnsA), float64(sh.TurnsB))
	sh.Deviation = sh.Ratio/(float64(fairWeightA)/fairWeightB) - 1
	sh.Pass = sh.Supported && sh.TurnsB > 0 && sh.Deviation >= -fairShareBound && sh.Deviation <= fairShareBound
	progress("fairness (b): in %.1fs A was served %d model turns, B %d (A's share %.1f %%, ratio %.2f:1, %+.1f %% from %d:%d; ideal %d turns); submitted %d / %d; fewest queued in the window %d / %d",
		sh.WindowS, sh.TurnsA, sh.TurnsB, 100*sh.ShareA, sh.Ratio, 100*sh.Deviation, fairWeightA, fairWeightB, sh.IdealTurns, sh.SubmittedA, sh.SubmittedB, sh.MinQueuedA, sh.MinQueuedB)
	return nil
}

// fairLimit is part (c).
func fairLimit(ctx context.Context, e *env, t fairTenants, r *FairResult) (err error) {
	o := e.o
	l := &r.Limit
	*l = FairLimit{Supported: true, Limit: fairLimitRuns, Runs: max(o.fairARuns/5, 4*o.fairSlots())}
	cfg := map[string]any{"keys": map[string]any{fairTenantA: map[string]any{"runs": fairLimitRuns}}}
	st, why, err := startFairOrWithout(e, t, "limit", cfg, "(c): per-key run limits")
	if err != nil {
		return err
	}
	l.Supported, l.Unsupported = why == "", why
	defer func() { st.stop(err != nil) }()
	stopSampling := sampler(fairSampleEvery, func() (int, bool) {
		var n int
		err := e.db.QueryRow(ctx, `SELECT count(*) FROM runs WHERE owner = $1 AND status IN ('running', 'waiting')`, fairTenantA).Scan(&n)
		return n, err == nil
	})
	progress("fairness (c): %s submits %d one-turn runs, limit %d (sampled every %s)", fairTenantA, l.Runs, l.Limit, fairSampleEvery)
	ids, err := submitRuns(ctx, st.a, fairTeam(1), l.Runs, 16, 0, "limit")
	var counts harness.RunCounts
	if err == nil {
		counts, err = fairWait(ctx, e, "(c)", ids, 1)
	}
	samples := stopSampling()
	if err != nil {
		return err
	}
	l.Completed = counts.ByStatus["completed"]
	l.Samples = len(samples)
	for _, n := range samples {
		l.Max = max(l.Max, n)
		if n > l.Limit {
			l.Over++
		}
	}
	el, err := span(ctx, e, ids)
	if err != nil {
		return err
	}
	l.Seconds = el.Seconds()
	l.Pass = l.Supported && l.Over == 0 && l.Samples > 0
	progress("fairness (c): most of A's runs running or waiting at once: %d (limit %d; %d of %d samples over it); %d completed in %.1fs", l.Max, l.Limit, l.Over, l.Samples, l.Completed, l.Seconds)
	return nil
}

// fairPriority is part (d): the runs are submitted while no worker runs (the
// backlog is there when the priority-5 runs arrive), then the workers start.
func fairPriority(ctx context.Context, e *env, t fairTenants, r *FairResult) (err error) {
	o := e.o
	st, err := startFairStack(e, t, "priority", nil, true)
	if err != nil {
		return err
	}
	defer func() { st.stop(err != nil) }()
	team := fairTeam(1)
	supported, why := true, ""
	prio := func(p int) int {
		if supported {
			return p
		}
		return 0
	}
	for _, v := range []struct {
		name string
		high *harness.Client
	}{{"same tenant", st.a}, {"priority-5 runs from the other tenant", st.b}} {
		p := FairPriority{Variant: v.name, Low: o.fairPrioRuns, High: fairHighRuns, Slots: o.fairSlots()}
		var lowIDs []string
		if supported {
			// The first submission tells whether the API takes the field.
			id, err := submitRuns(ctx, st.a, team, 1, 1, fairLowPrio, "priority low")
			switch {
			case err == nil:
				lowIDs = id
			case strings.Contains(err.Error(), "HTTP 400") && strings.Contains(err.Error(), "priority"):
				supported, why = false, "the API refuses the field: "+truncate(err.Error(), 200)
				progress("fairness (d): priorities are not supported by this build (%s): measuring the order without them", why)
			default:
				return err
			}
		}
		rest, err := submitRuns(ctx, st.a, team, p.Low-len(lowIDs), 16, prio(fairLowPrio), "priority low")
		if err != nil {
			return err
		}
		lowIDs = append(lowIDs, rest...)
		highIDs, err := submitRuns(ctx, v.high, team, p.High, p.High, prio(fairHighPrio), "priority high")
		if err != nil {
			return err
		}
		p.Supported, p.Unsupported = supported, why
		progress("fairness (d), %s: %d priority-%d runs then %d priority-%d runs queued (priority sent: %v); starting the workers", v.name, p.Low, fairLowPrio, p.High, fairHighPrio, supported)
		if err := st.startWorkers(); err != nil {
			return err
		}
		_, err = fairWait(ctx, e, "(d)", append(append([]string(nil), lowIDs...), highIDs...), 1)
		st.stopWorkers()
		if err != nil {
			return err
		}
		all, err := starts(ctx, e, append(append([]string(nil), lowIDs...), highIDs...))
		if err != nil {
			return err
		}
		var first, last time.Time
		for _, id := range highIDs {
			s := all[id].started
			if first.IsZero() || s.Before(first) {
				first = s
			}
			if s.After(last) {
				last = s
			}
		}
		for _, id := range lowIDs {
			s, ok := all[id]
			if !ok {
				continue
			}
			if s.started.Before(first) {
				p.LowBeforeFirstHigh++
			}
			if s.started.Before(last) {
				p.LowBeforeLastHigh++
			}
		}
		hs := startsOf(all, highIDs)
		p.HighP50MS, p.HighMaxMS = hs.P50MS, hs.MaxMS
		p.Pass = p.Supported && p.LowBeforeLastHigh < p.Slots
		r.Priority = append(r.Priority, p)
		progress("fairness (d), %s: %d of %d priority-3 runs started before the first priority-5 run, %d before the last; priority-5 start latency p50 %.0f ms, max %.0f ms",
			v.name, p.LowBeforeFirstHigh, p.Low, p.LowBeforeLastHigh, p.HighP50MS, p.HighMaxMS)
	}
	return nil
}

func verdict(pass, supported bool) string {
	switch {
	case !supported:
		return "not supported by this build"
	case pass:
		return "PASS"
	default:
		return "FAIL"
	}
}

// markdown renders section 10.
func (f FairResult) markdown() string {
	if !f.Ran {
		return ""
	}
	var b strings.Builder
	slots := f.Procs * f.Concurrency
	fmt.Fprintf(&b, "\n### 10. Fairness: many tenants, one fleet (issue 39)\n\n")
	fmt.Fprintf(&b, "Two principals, `%s` and `%s` (API tokens of an `aetherium api` process), %d `aetherium worker` processes × concurrency %d (%d slots) and a scheduler, the script model answering after %d ms. "+
		"A run's **start** is the `created_at` of its `run.started` event (written with the status change to running in the transaction of the first supervisor step's lease); its submission is the run's `created_at`: both PostgreSQL's clock.\n\n",
		fairTenantA, fairTenantB, f.Procs, f.Concurrency, slots, f.LatencyMS)
	b.WriteString("| part | figure | measured | bound | verdict |\n|---|---|---|---|---|\n")
	row := func(part, what, val, bound, v string) {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", part, what, val, bound, v)
	}
	st := func(s FairStarts) string {
		return fmt.Sprintf("p50 %.0f ms, p90 %.0f ms, p99 **%.0f ms**, max %.0f ms (%d runs)", s.P50MS, s.P90MS, s.P99MS, s.MaxMS, s.Runs)
	}
	u := f.Burst
	row("(a)", fmt.Sprintf("B's start latency (%d runs, %.1f s after A's first of %d)", u.BRuns, u.BAfterS, u.ARuns), st(u.B), "p99 ≤ 1000 ms", verdict(u.Pass, true))
	row("(a)", "A's start latency", st(u.A), "", "")
	row("(a)", "wall time (first submission → last run's end)", fmt.Sprintf("%.1f s (A's submissions took %.1f s); %d completed, %d failed", u.Seconds, u.ASubmitS, u.Completed, u.Failed), "", "")
	s := f.Share
	w := fmt.Sprintf("weights %d:%d", fairWeightA, fairWeightB)
	if !s.Supported {
		w = "**no weights** (not supported by this build)"
	}
	row("(b)", fmt.Sprintf("model turns served in %.0f s, A : B (%s; %d-turn runs, backlog %d each)", s.WindowS, w, s.Turns, s.Backlog),
		fmt.Sprintf("%d : %d = **%.2f : 1** (A's share %.1f %%; %+.1f %% from %d:1)", s.TurnsA, s.TurnsB, s.Ratio, 100*s.ShareA, 100*s.Deviation, fairWeightA),
		fmt.Sprintf("within ±%.0f %% of %d:%d", 100*fairShareBound, fairWeightA, fairWeightB), verdict(s.Pass, s.Supported))
	row("(b)", "turns served / every slot busy", fmt.Sprintf("%d / %d; submitted A %d, B %d; fewest queued in the window A %d, B %d", s.TurnsA+s.TurnsB, s.IdealTurns, s.SubmittedA, s.SubmittedB, s.MinQueuedA, s.MinQueuedB), "", "")
	l := f.Limit
	lim := fmt.Sprintf("limit %d", l.Limit)
	if !l.Supported {
		lim = "**no limit** (not supported by this build)"
	}
	row("(c)", fmt.Sprintf("A's runs running or waiting, sampled every %s (%s; %d runs)", fairSampleEvery, lim, l.Runs),
		fmt.Sprintf("max **%d** (%d of %d samples over %d); %.1f s", l.Max, l.Over, l.Samples, l.Limit, l.Seconds), fmt.Sprintf("≤ %d", l.Limit), verdict(l.Pass, l.Supported))
	for _, p := range f.Priority {
		sent := fmt.Sprintf("priority %d then %d", fairLowPrio, fairHighPrio)
		if !p.Supported {
			sent = "**no priority field** (not supported by this build)"
		}
		row("(d)", fmt.Sprintf("%s: priority-%d runs started before the last of %d priority-%d runs (%d queued first; %s)", p.Variant, fairLowPrio, p.High, fairHighPrio, p.Low, sent),
			fmt.Sprintf("**%d** (%d before the first); priority-%d start latency p50 %.0f ms, max %.0f ms", p.LowBeforeLastHigh, p.LowBeforeFirstHigh, fairHighPrio, p.HighP50MS, p.HighMaxMS),
			fmt.Sprintf("< %d (one slot-full)", p.Slots), verdict(p.Pass, p.Supported))
	}
	for _, n := range []string{s.Unsupported, l.Unsupported} {
		if n != "" {
			fmt.Fprintf(&b, "\nDetected: %s\n", n)
			break
		}
	}
	if len(f.Priority) > 0 && f.Priority[0].Unsupported != "" {
		fmt.Fprintf(&b, "\nDetected: %s\n", f.Priority[0].Unsupported)
	}
	fmt.Fprintf(&b, "\nSection 10 took %.0f s; machine load average (1 min) %s → %s.\n", f.Seconds, f.LoadAvg[0], f.LoadAvg[1])
	return b.String()
}
