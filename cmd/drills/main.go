// Command drills proves, with real processes on real Redis and PostgreSQL, that the
// fleet loses nothing under faults and load. Each drill starts its own cluster —
// a private redis-server (AOF on), a fresh database on a private PostgreSQL
// server, and `aetherium api`, `worker` and `scheduler` processes built from
// ./cmd/aetherium — then breaks something, waits, and checks the database:
//
//  1. kill -9 a worker mid-turn while runs execute;
//  2. restart Redis mid-load;
//  3. restart PostgreSQL mid-load;
//  4. many concurrent runs, counted exactly;
//  5. the API under valid and hostile load;
//  6. Sentinel: the fleet on redis-sentinel:// (primary, replica, three
//     sentinels); kill -9 the primary mid-load, the replica is promoted;
//  7. Cluster: the fleet on redis-cluster:// (three masters, three replicas)
//     with GPU lease holders; kill -9 the master of the lease slot mid-load;
//  8. partition: a worker in a network namespace of its own loses its link
//     mid-turn, a standby takes its sessions over, and the cut-off worker's
//     late writes are refused by the session lease (and counted).
//  9. kill -9 the worker mid-compaction of long sessions;
//  10. rolling upgrade: the fleet built from an older commit (upgradeFrom)
//     with runs in flight; migrate, API, each worker, scheduler replaced by
//     this build; every run completes once, no task refused for its format.
//  11. backup and restore: pg_dump with runs in flight, restored into a fresh
//     database, a new fleet on an empty Redis; terminal runs intact, the runs
//     in flight finish (the scheduler re-enqueues and wakes them), counted exactly.
//
// Redis replication is asynchronous: in drills 6 and 7 the writes the dead
// master had not sent to its replica are lost. Runs stranded by a lost task end
// through the scheduler (queued runs re-enqueued, running ones failed as stuck
// after scheduler.stuck_after); the drills count them. Drill 8 needs root and
// iproute2; without them it fails, it does not skip.
//
// Each drill prints what it checked and a PASS/FAIL line; the exit status is
// non-zero when any failed. Sizes come from flags or the environment (DRILL_RUNS,
// DRILL_MANY, DRILL_LOAD_SECONDS, DRILL_ONLY) so CI can run them small.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/aetherium-engine/aetherium/internal/harness"
	"github.com/aetherium-engine/aetherium/internal/testinfra"
	"github.com/aetherium-engine/aetherium/wsquota"
)

type options struct {
	bin         string
	runs        int
	many        int
	loadSeconds int
	only        map[int]bool
	pgMode      string
	keep        bool
	latency     time.Duration
	concurrency int
	rssLimitMiB int
	sentinelLag time.Duration
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func envDuration(name string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func envStr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func main() {
	var o options
	only := ""
	flag.StringVar(&o.bin, "bin", "", "aetherium binary (default: build ./cmd/aetherium)")
	flag.IntVar(&o.runs, "runs", envInt("DRILL_RUNS", 100), "runs in flight during drills 1-3, 6 and 7; drill 8 takes at most 10 (env DRILL_RUNS)")
	flag.IntVar(&o.many, "many", envInt("DRILL_MANY", 1000), "concurrent runs of drill 4 (env DRILL_MANY)")
	flag.IntVar(&o.loadSeconds, "load-seconds", envInt("DRILL_LOAD_SECONDS", 15), "duration of drill 5's load (env DRILL_LOAD_SECONDS)")
	flag.StringVar(&only, "only", envStr("DRILL_ONLY", ""), "comma-separated drill numbers to run (env DRILL_ONLY; default all)")
	flag.StringVar(&o.pgMode, "pg", envStr("DRILL_PG", "private"), "private: a PostgreSQL cluster of the drills' own; local: the machine's cluster (drill 3 restarts it with pg_ctlcluster)")
	flag.BoolVar(&o.keep, "keep", os.Getenv("DRILL_KEEP") != "", "keep the work directory (logs) (env DRILL_KEEP)")
	flag.DurationVar(&o.latency, "latency", 100*time.Millisecond, "script model latency in drills 1-3 (turns long enough to be interrupted)")
	flag.IntVar(&o.concurrency, "concurrency", 10, "worker concurrency")
	flag.IntVar(&o.rssLimitMiB, "api-rss-limit", 512, "drill 5: the API process's peak RSS must stay under this (MiB)")
	flag.DurationVar(&o.sentinelLag, "sentinel-lag", envDuration("DRILL_SENTINEL_LAG", 0), "drill 6: cut the replica off its primary this long before the kill, so the failover loses that much and the scheduler's recovery shows (env DRILL_SENTINEL_LAG; default 0: loses only the natural lag)")
	flag.Parse()
	if only != "" {
		o.only = map[int]bool{}
		for _, s := range strings.Split(only, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil {
				fmt.Fprintf(os.Stderr, "drills: -only %q: %v\n", only, err)
				os.Exit(2)
			}
			o.only[n] = true
		}
	}
	// go-redis logs Sentinel switches to stdout; the drills print their own account.
	redis.SetLogger(quiet{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	failed, err := run(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "drills: error:", err)
		os.Exit(2)
	}
	if failed > 0 {
		fmt.Printf("\ndrills: %d FAILED\n", failed)
		os.Exit(1)
	}
	fmt.Println("\ndrills: all PASS")
}

// quiet drops go-redis's internal log lines.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// env is what every drill shares: the binary, the PostgreSQL server, the work dir.
type env struct {
	o    options
	root string
	dir  string
	bin  string
	pg   *harness.Postgres
}

func say(format string, a ...any) {
	fmt.Printf("[%s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, a...))
}

func run(ctx context.Context, o options) (int, error) {
	root, err := testinfra.RepoRoot()
	if err != nil {
		return 0, err
	}
	e := &env{o: o, root: root}
	if e.dir, err = os.MkdirTemp("", "aetherium-drills-"); err != nil {
		return 0, err
	}
	// The private PostgreSQL runs as the postgres user: it must reach its directory.
	_ = os.Chmod(e.dir, 0o755)
	if o.keep {
		say("work directory (kept): %s", e.dir)
	} else {
		defer os.RemoveAll(e.dir)
	}
	// Registered after the removal, so it runs first: no workspace mount (nor its
	// loop device) outlives the drills, even a cluster's that was never closed.
	defer func() {
		if err := wsquota.UnmountAll(e.dir); err != nil {
			say("%v", err)
		}
	}()
	if e.bin = o.bin; e.bin == "" {
		say("building ./cmd/aetherium")
		if e.bin, err = harness.Build(ctx, root, e.dir); err != nil {
			return 0, err
		}
	} else if e.bin, err = filepath.Abs(e.bin); err != nil {
		return 0, err
	}
	switch o.pgMode {
	case "private":
		say("starting a private PostgreSQL server")
		if e.pg, err = harness.StartPrivatePostgres(filepath.Join(e.dir, "postgres")); err != nil {
			return 0, err
		}
	case "local":
		if e.pg, err = harness.LocalPostgres(); err != nil {
			return 0, err
		}
	default:
		return 0, fmt.Errorf("-pg %q: want private or local", o.pgMode)
	}
	defer e.pg.Stop()

	drills := []struct {
		n    int
		name string
		fn   func(context.Context, *env, *report) error
	}{
		{1, "kill -9 a worker mid-turn", drillKill},
		{2, "restart Redis (AOF on) mid-load", drillRedis},
		{3, "restart PostgreSQL mid-load", drillPostgres},
		{4, "many concurrent runs, counted exactly", drillMany},
		{5, "the API under valid and hostile load", drillAPI},
		{6, "Sentinel failover: kill -9 the primary mid-load", drillSentinel},
		{7, "Redis Cluster with replicas: kill -9 the lease slot's master mid-load", drillCluster},
		{8, "partition a worker (network namespace) mid-turn; its late writes refused", drillPartition},
		{9, "kill -9 the worker mid-compaction of long sessions", drillCompact},
		{10, "rolling upgrade from an older build with runs in flight", drillUpgrade},
		{11, "pg_dump under load, restored into a fresh database and an empty Redis", drillBackup},
	}
	failed := 0
	for _, d := range drills {
		if o.only != nil && !o.only[d.n] {
			continue
		}
		if err := ctx.Err(); err != nil {
			return failed, err
		}
		fmt.Printf("\n=== drill %d: %s\n", d.n, d.name)
		start := time.Now()
		r := &report{}
		if err := d.fn(ctx, e, r); err != nil {
			r.fail("drill could not run: %v", err)
		}
		if r.failed > 0 {
			failed++
			fmt.Printf("--- FAIL: drill %d: %s (%d of %d checks failed, %.0fs)\n", d.n, d.name, r.failed, r.checks, time.Since(start).Seconds())
		} else {
			fmt.Printf("--- PASS: drill %d: %s (%d checks, %.0fs)\n", d.n, d.name, r.checks, time.Since(start).Seconds())
		}
	}
	return failed, nil
}

// report collects a drill's checks.
type report struct {
	checks, failed int
}

// check prints one checked property and whether it held.
func (r *report) check(ok bool, format string, a ...any) bool {
	r.checks++
	mark := "ok  "
	if !ok {
		mark = "FAIL"
		r.failed++
	}
	fmt.Printf("    %s %s\n", mark, fmt.Sprintf(format, a...))
	return ok
}

func (r *report) fail(format string, a ...any) { r.check(false, format, a...) }
