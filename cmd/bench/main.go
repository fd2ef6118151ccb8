// Command bench measures, in one run on the same Redis and PostgreSQL, the raw asynq
// floor, the fleet's gated tool calls and delegations, River on the same
// PostgreSQL, I/O-bound scaling over worker processes, demo-run latency with a
// worker's peak memory, hop latency with the idle cost of workers, and (section 7,
// from section 2's counts) what one PostgreSQL and one Redis carry per model turn
// and per delegation, and (section 8) model traffic against a rate-limited provider:
// the same burst of runs on four worker processes against a fake OpenAI API limited
// per minute, with the fleet's governor and without (AETHERIUM_LLM_GOVERNOR=off) —
// the share of calls answered 429, failed runs, the fake's peak requests and tokens
// in any window, the wall time and the worker slots held while runs wait, and
// (section 9, issue 38) one long session: -long-turns model turns each with an
// 8 KiB tool result against the fake OpenAI API with a -long-window context
// window — whether the run completes within the window, the bytes written to
// PostgreSQL per step (pg_stat_statements WAL bytes on a private cluster) and the
// step latency, early against late, and (section 10, issue 39) fairness between
// two tenants on 2 worker processes: a burst of one tenant's runs against a
// few of another's (start latency), weighted shares, a per-key run limit and
// priorities — features a build without them is detected lacking, and (section
// 11, issue 45) DBOS Transact on the same PostgreSQL: a two-step workflow against
// a model turn and a parent/child workflow against a delegation round trip,
// transactions and CPU per unit side by side with section 7's. It prints progress on stderr, the result table (markdown) on
// stdout, and writes cmd/bench/results/latest.{md,json}.
//
//	go run ./cmd/bench [-bin bin/aetherium] [-quick] [-sections 2,6]
//	go run ./cmd/bench -sections 8 [-gov-runs 200 -gov-rpm 60 -gov-tpm 20000]
//	go run ./cmd/bench -sections 9 [-long-turns 500 -long-window 32768 -long-pg private|shared]
//	go run ./cmd/bench -sections 11 [-dbos-workflows 2000]   # DBOS alone; -sections 2,11 for the ratios
//	go run ./cmd/bench -sections 10 [-fair-a-runs 1000 -fair-b-runs 10 -fair-procs 2 -fair-concurrency 10 -fair-latency 300ms -fair-share-for 60s]
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/fleet"
	"github.com/aetherium-engine/aetherium/internal/harness"
	"github.com/aetherium-engine/aetherium/internal/redisconn"
	"github.com/aetherium-engine/aetherium/internal/testinfra"
	"github.com/aetherium-engine/aetherium/wsquota"
)

// options are the bench's knobs; the defaults keep the whole run within about six
// minutes on a two-core machine.
type options struct {
	bin         string
	out         string
	redisAddr   string
	redisDB     int
	database    string
	concurrency int
	asynqTasks  int
	riverJobs   int
	toolRuns    int
	toolTurns   int
	toolCalls   int
	relayRuns   int
	relayDepth  int
	latency     time.Duration
	slowLatency time.Duration
	scaleConc   int
	scaleRuns   int
	procs       []int
	// slowOnly: section 4 runs only its -slow-latency points.
	slowOnly bool
	// knowledgeDocs is the size of the packs section 4's knowledge probe searches.
	knowledgeDocs int
	seqRuns       int
	concRuns      int
	profile       bool
	poolConns     int
	trace         string
	// The tracing overhead (sections 2 and 5, tracing.go).
	tracingRounds int
	tracingSink   string
	jaegerOTLP    string
	hopRuns       int
	idleFor       time.Duration
	// Section 8: the governor.
	govRuns      int
	govRPM       int
	govTPM       int
	govProcs     int
	govConc      int
	govMaxTokens int
	// Section 9: long sessions.
	longTurns   int
	longWindow  int
	longPG      string
	longTimeout time.Duration
	// Section 10: fairness.
	fairARuns    int
	fairBRuns    int
	fairProcs    int
	fairConc     int
	fairLatency  time.Duration
	fairShareFor time.Duration
	fairPrioRuns int
	// Section 11: DBOS.
	dbosWorkflows int
	pairs         int
	sections      map[int]bool
}

func main() {
	var o options
	quick := flag.Bool("quick", false, "small sizes (a smoke run of every section)")
	only := flag.String("sections", "", "comma-separated sections to run (default all; 2 needs 1 for its ratio)")
	flag.StringVar(&o.bin, "bin", "", "aetherium binary for the worker processes (default: build ./cmd/aetherium)")
	flag.StringVar(&o.out, "out", "cmd/bench/results", "directory for latest.md, latest.json and profiles")
	flag.StringVar(&o.redisAddr, "redis", "127.0.0.1:6379", "Redis (the local one of scripts/services.sh)")
	flag.IntVar(&o.redisDB, "redis-db", 13, "Redis database number dedicated to the bench (flushed)")
	flag.StringVar(&o.database, "database", "aetherium_bench", "PostgreSQL database dedicated to the bench (recreated)")
	flag.IntVar(&o.concurrency, "concurrency", 20, "worker concurrency of sections 1-3 (asynq, fleet, River)")
	flag.IntVar(&o.asynqTasks, "asynq-tasks", 20000, "no-op tasks of section 1")
	flag.IntVar(&o.riverJobs, "river-jobs", 10000, "no-op jobs of section 3")
	flag.IntVar(&o.toolRuns, "tool-runs", 100, "runs of the tool-call workload")
	flag.IntVar(&o.toolTurns, "tool-turns", 5, "model turns of the caller per run")
	flag.IntVar(&o.toolCalls, "tool-calls", 20, "todo calls per model turn")
	flag.IntVar(&o.relayRuns, "relay-runs", 100, "runs of the delegation workload")
	flag.IntVar(&o.relayDepth, "relay-depth", 5, "sequential delegations per run")
	flag.DurationVar(&o.latency, "latency", 100*time.Millisecond, "script model latency of sections 4 and 5")
	flag.DurationVar(&o.slowLatency, "slow-latency", time.Second, "section 4 also at this model latency with 1 × 10·scale-concurrency and 4 × 2.5·scale-concurrency slots (0: not)")
	flag.IntVar(&o.scaleConc, "scale-concurrency", 10, "worker concurrency per process in section 4")
	flag.IntVar(&o.knowledgeDocs, "knowledge-docs", 20000, "section 4: documents of five chunks each that a knowledge search probe searches while every point runs (0: no probe)")
	flag.BoolVar(&o.slowOnly, "scale-slow-only", false, "section 4: only the -slow-latency points (1 × 10·scale-concurrency and 4 × 2.5·scale-concurrency)")
	// 100 runs of 13 turns per 10 slots: the drain (fewer runs left than slots)
	// is about a second of 14, where at 30 runs it was a quarter of the span.
	flag.IntVar(&o.scaleRuns, "scale-runs", 100, "runs per worker process in section 4")
	flag.IntVar(&o.seqRuns, "latency-runs", 30, "demo runs submitted one at a time in section 5")
	flag.IntVar(&o.concRuns, "concurrent-runs", 100, "demo runs submitted at once in section 5 (the worker's concurrency)")
	flag.BoolVar(&o.profile, "profile", true, "CPU-profile the fleet sections into <out>/profiles")
	flag.IntVar(&o.poolConns, "pool-max-conns", 0, "pgxpool size of the fleet (0: the fleet's default, store.PoolConnsFor(worker concurrency))")
	flag.StringVar(&o.trace, "trace", "", "write a runtime trace of section 2's delegation workload to this file (go tool trace -pprof=sync|net|syscall FILE)")
	flag.IntVar(&o.tracingRounds, "tracing-rounds", 4, "section 2: alternating rounds each of tracing off and on; section 5: latency-runs × this pairs of runs (0: no overhead measurement)")
	flag.StringVar(&o.tracingSink, "tracing-sink", sinkNull, "sections 2 and 5: where traced rounds export: "+sinkNull+" (a receiver in the bench that reads and drops each export: the fleet's own cost) or "+sinkJaeger+" (-jaeger-otlp, on the same cores: the fleet's and the collector's)")
	flag.StringVar(&o.jaegerOTLP, "jaeger-otlp", testinfra.JaegerAt().OTLP, "sections 2 and 5: the OTLP/HTTP endpoint traced rounds export to with -tracing-sink "+sinkJaeger+" (the Jaeger of scripts/services.sh)")
	flag.IntVar(&o.hopRuns, "hop-runs", 20, "relay runs submitted one at a time in section 6 (idle-fleet hops)")
	flag.DurationVar(&o.idleFor, "idle-for", time.Minute, "how long section 6 measures idle worker processes, per interval")
	flag.IntVar(&o.govRuns, "gov-runs", 200, "runs submitted at once in section 8 (one model call each), per mode")
	flag.IntVar(&o.govRPM, "gov-rpm", 60, "section 8: the fake provider's requests per minute (and the governor's llm.limits rpm)")
	flag.IntVar(&o.govTPM, "gov-tpm", 20000, "section 8: the fake provider's tokens per minute (and the governor's llm.limits tpm)")
	flag.IntVar(&o.govProcs, "gov-procs", 4, "section 8: worker processes")
	flag.IntVar(&o.govConc, "gov-concurrency", 10, "section 8: worker concurrency per process")
	flag.IntVar(&o.govMaxTokens, "gov-max-tokens", 64, "section 8: the team's model max_tokens (the governor's output estimate)")
	flag.IntVar(&o.longTurns, "long-turns", 500, "section 9: model turns of the long session, each an 8 KiB read_file result (at least 30)")
	flag.IntVar(&o.longWindow, "long-window", 32768, "section 9: the fake's context window in tokens (0: none)")
	flag.StringVar(&o.longPG, "long-pg", "private", "section 9: PostgreSQL: private (a cluster of the bench's own, pg_stat_statements preloaded) or shared (the bench database)")
	flag.DurationVar(&o.longTimeout, "long-timeout", 45*time.Minute, "section 9: how long the long session may take")
	flag.IntVar(&o.fairARuns, "fair-a-runs", 1000, "section 10 (a): runs tenant A submits at once (part (c) submits a fifth of them)")
	flag.IntVar(&o.fairBRuns, "fair-b-runs", 10, "section 10 (a): runs tenant B submits one second later")
	flag.IntVar(&o.fairProcs, "fair-procs", 2, "section 10: worker processes")
	flag.IntVar(&o.fairConc, "fair-concurrency", 10, "section 10: worker concurrency per process")
	flag.DurationVar(&o.fairLatency, "fair-latency", 300*time.Millisecond, "section 10: script model latency")
	flag.DurationVar(&o.fairShareFor, "fair-share-for", time.Minute, "section 10 (b): the window in which both tenants' turns are counted")
	flag.IntVar(&o.fairPrioRuns, "fair-prio-runs", 500, "section 10 (d): priority-3 runs queued before the priority-5 ones")
	flag.IntVar(&o.dbosWorkflows, "dbos-workflows", 2000, "section 11: DBOS two-step workflows (half as many parent/child round trips)")
	flag.IntVar(&o.pairs, "pairs", 3, "section 11 with section 2: rounds measuring the fleet's and DBOS's units back to back (0: none)")
	flag.Parse()
	o.procs = []int{1, 2, 4}
	if *only != "" {
		o.sections = map[int]bool{}
		for _, f := range strings.Split(*only, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				fmt.Fprintf(os.Stderr, "bench: -sections %q: %v\n", *only, err)
				os.Exit(2)
			}
			o.sections[n] = true
		}
	}
	if *quick {
		o.asynqTasks, o.riverJobs, o.toolRuns, o.relayRuns, o.scaleRuns, o.seqRuns, o.concRuns = 2000, 1000, 20, 20, 6, 5, 20
		o.hopRuns, o.idleFor = 5, 5*time.Second
		o.govRuns, o.govRPM = 40, 30
		o.longTurns = 60
		o.fairARuns, o.fairBRuns, o.fairShareFor, o.fairPrioRuns = 200, 5, 15*time.Second, 100
		o.dbosWorkflows, o.pairs = 400, 1
	}
	if o.longTurns < 30 {
		fmt.Fprintln(os.Stderr, "bench: -long-turns must be at least 30")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "bench: FAILED:", err)
		os.Exit(1)
	}
}

// env is what every section shares.
type env struct {
	o        options
	root     string
	tmp      string
	bin      string
	dbURL    string
	redisURL string
	// queueOpt is asynq's option for redisURL (internal/redisconn: the same
	// parse the fleet makes, whatever the URL's shape).
	queueOpt asynq.RedisConnOpt
	db       *pgxpool.Pool
	rdb      *redis.Client
	fleet    *fleet.Fleet
	client   *harness.Client
	meter    map[string]func() []int
	order    []string
	// pgss: the bench database counts statements (pgss.go).
	pgss bool
	// noCheckpoint: the bench may not CHECKPOINT (checkpoint).
	noCheckpoint bool
	// sink is the null OTLP receiver of -tracing-sink null, once started.
	sink *nullOTLP
	// pg meters the bench's own PostgreSQL CPU (harness.PGMeter).
	pg *harness.PGMeter
}

func progress(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "[bench %s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, a...))
}

func run(ctx context.Context, o options) error {
	start := time.Now()
	root, err := testinfra.RepoRoot()
	if err != nil {
		return err
	}
	e := &env{o: o, root: root}
	if e.tmp, err = os.MkdirTemp("", "aetherium-bench-"); err != nil {
		return err
	}
	defer os.RemoveAll(e.tmp)
	// Registered after the removal, so it runs first: the workspaces are mounts on
	// loop devices, which outlive the worker processes the benchmark kills.
	defer func() {
		if err := wsquota.UnmountAll(e.tmp); err != nil {
			progress("%v", err)
		}
	}()
	e.bin = o.bin
	if e.bin == "" {
		progress("building ./cmd/aetherium")
		if e.bin, err = harness.Build(ctx, root, e.tmp); err != nil {
			return err
		}
	} else if e.bin, err = filepath.Abs(e.bin); err != nil {
		return err
	}

	progress("database %s: recreating and migrating", o.database)
	if e.dbURL, err = harness.CreateDatabase(ctx, testinfra.AdminURL(), o.database); err != nil {
		return err
	}
	if o.poolConns > 0 {
		e.dbURL += fmt.Sprintf("&pool_max_conns=%d", o.poolConns)
	}
	if e.db, err = pgxpool.New(ctx, e.dbURL); err != nil {
		return err
	}
	defer e.db.Close()
	e.pgss = e.enablePGSS(ctx)
	// The bench's databases: its own and DBOS's (section 11).
	if e.pg, err = harness.NewPGMeter(ctx, e.db, "/proc", o.database, dbosDatabaseOf(o.database)); err != nil {
		return err
	}
	progress("%s", e.pg.Counts())
	e.redisURL = fmt.Sprintf("redis://%s/%d", o.redisAddr, o.redisDB)
	conn, err := redisconn.Parse(e.redisURL)
	if err != nil {
		return err
	}
	e.queueOpt = conn.Asynq()
	e.rdb = redis.NewClient(&redis.Options{Addr: o.redisAddr, DB: o.redisDB})
	defer e.rdb.Close()
	if err := e.rdb.FlushDB(ctx).Err(); err != nil {
		return fmt.Errorf("redis %s db %d: %w", o.redisAddr, o.redisDB, err)
	}
	defer e.rdb.FlushDB(context.Background())
	machine := harness.DescribeMachine(ctx, e.db, e.rdb)
	progress("machine: %d cores (%s), %d MiB, PostgreSQL %s, Redis %s", machine.Cores, machine.CPU, machine.MemoryMB, machine.Postgres, machine.Redis)

	// The in-process fleet: its API takes the runs of every section, its worker
	// server runs section 2.
	cfg := config.Default()
	cfg.DatabaseURL, cfg.RedisURL = e.dbURL, e.redisURL
	cfg.Workspaces = filepath.Join(e.tmp, "workspaces")
	cfg.Templates = filepath.Join(root, "templates")
	cfg.Security.PermissionsFile = filepath.Join(root, "config", "permissions.yaml")
	cfg.Worker.Concurrency = o.concurrency
	cfg.Worker.MetricsAddr, cfg.Scheduler.MetricsAddr = "", ""
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	if e.fleet, err = fleet.Open(ctx, cfg, log, fleet.Options{NoSandbox: true}); err != nil {
		return err
	}
	defer e.fleet.Close()
	defer func() { e.sink.close() }()
	srv := e.fleet.API()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go func() { _ = srv.App.Listener(ln) }()
	defer func() { _ = srv.App.ShutdownWithTimeout(2 * time.Second); _ = srv.Close() }()
	e.client = harness.NewClient("http://" + ln.Addr().String())

	self := os.Getpid()
	e.meter = map[string]func() []int{
		"bench": func() []int { return []int{self} },
		// The worker processes the bench starts run e.bin (-bin may name it
		// otherwise: /tmp/aeth showed "workers 0.0 cores"); the kernel's comm
		// is the file's name cut to 15 bytes.
		"workers": func() []int { return harness.PidsNamed(comm(e.bin)) },
		"redis":   func() []int { return harness.PidsNamed("redis-server") },
	}
	e.order = []string{"bench", "workers", harness.PostgresGroup, "redis"}

	res := Result{Machine: machine, Config: configOf(o), PostgresCPU: e.pg.Counts(), PostgresCPUUnavailable: e.pg.Unavailable()}
	sections := []struct {
		n    int
		name string
		fn   func(context.Context, *env, *Result) error
	}{
		{1, "1/6 raw asynq", benchAsynq},
		{2, "2/6 fleet: gated tool calls and delegations", benchFleet},
		{3, "3/6 River", benchRiver},
		{4, "4/6 I/O-bound scaling over worker processes", benchScaling},
		{5, "5/6 demo-run latency and worker memory", benchLatency},
		{6, "6/6 hop latency and idle cost", benchHops},
		{8, "8 model traffic: the governor under a rate-limited provider", benchGovernor},
		{9, "9 long sessions: one session of many 8 KiB tool results under a context window", benchLong},
		{10, "10 fairness: many tenants, one fleet", benchFair},
		{11, "11 DBOS: two-step and parent/child workflows on the same PostgreSQL", benchDBOS},
	}
	for _, s := range sections {
		if err := ctx.Err(); err != nil {
			return err
		}
		if o.sections != nil && !o.sections[s.n] {
			continue
		}
		progress("section %s", s.name)
		t := time.Now()
		if err := s.fn(ctx, e, &res); err != nil {
			return fmt.Errorf("section %s: %w", s.name, err)
		}
		progress("section %s took %.1fs", s.name, time.Since(t).Seconds())
	}
	res.TotalSeconds = time.Since(start).Seconds()
	md := res.Markdown()
	fmt.Print(md)
	return res.Write(o.out, md)
}

// cpu starts a CPU meter over the bench, worker processes, the bench's
// PostgreSQL work (e.pg) and Redis.
// comm is the process name the kernel gives a process started from bin.
func comm(bin string) string {
	name := filepath.Base(bin)
	if len(name) > 15 {
		name = name[:15]
	}
	return name
}

func (e *env) cpu() *harness.CPUMeter { return harness.NewCPUMeter(e.meter, e.order, e.pg) }
