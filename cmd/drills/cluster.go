package main

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/aetherium-engine/aetherium/internal/harness"
	"github.com/aetherium-engine/aetherium/internal/redisconn"
	"github.com/aetherium-engine/aetherium/internal/testinfra"
	"github.com/aetherium-engine/aetherium/templates"
	"github.com/aetherium-engine/aetherium/wsquota"
)

// cluster is one drill's fleet: private Redis, its own database, api, workers and a
// scheduler as separate processes.
type cluster struct {
	e *env
	// bin is the aetherium binary the cluster starts processes from (the
	// drills' build unless clusterOpts.bin; drill 10 switches it mid-drill).
	bin   string
	name  string
	dir   string
	db    string
	dbURL string
	// redis is the private single node, nil when the drill brought its own
	// Redis (redisURL: Sentinel, Cluster).
	redis    *harness.RedisServer
	redisURL string
	cfgPath  string
	// fleetCfg is what cfgPath holds (a drill may write variants of it).
	fleetCfg harness.FleetConfig
	pgAdmin  string
	apiAddr  string
	api      *harness.Proc
	workers  []*harness.Proc
	sched    *harness.Proc
	client   *harness.Client
	pool     *pgxpool.Pool
	// metrics0 is the /metrics address of workers[0] (the others serve none).
	metrics0 string
	mu       sync.Mutex
	started  int
}

// clusterOpts shape a cluster.
type clusterOpts struct {
	workers     int
	concurrency int
	latency     time.Duration
	bodyLimit   int
	// maxRunsInFlight is api.max_runs_in_flight (0: unlimited).
	maxRunsInFlight int
	// redisURL is a Redis the drill runs itself (Sentinel, Cluster); empty: a
	// private single node with AOF on.
	redisURL string
	// stuckAfter is scheduler.stuck_after (0: the product default).
	stuckAfter time.Duration
	// fleet adjusts the fleet config before it is written.
	fleet func(*harness.FleetConfig)
	// pg is the PostgreSQL server of the cluster's database (nil: the drills' own).
	pg *harness.Postgres
	// redisBind are the addresses the private Redis listens on (nil: loopback).
	redisBind []string
	// bin starts the processes from another binary than the drills' build,
	// and migrates the database with it (`bin migrate up`) instead of with
	// this build's migrations (drill 10: an older build).
	bin string
	// restore is a pg_dump archive (custom format) the cluster's database is
	// restored from (pg_restore into an empty database, then migrated by this
	// build) instead of a new one (drill 11).
	restore string
	// restored is called on the restored, migrated database before any
	// process starts (drill 11 reads what the dump held).
	restored func(context.Context, *pgxpool.Pool) error
}

func newCluster(ctx context.Context, e *env, name string, o clusterOpts) (*cluster, error) {
	c := &cluster{e: e, bin: cmp.Or(o.bin, e.bin), name: name, dir: filepath.Join(e.dir, name), db: "aetherium_drill_" + name, pgAdmin: e.pg.Admin}
	if o.pg != nil {
		c.pgAdmin = o.pg.Admin
	}
	if err := os.MkdirAll(filepath.Join(c.dir, "redis"), 0o755); err != nil {
		return nil, err
	}
	var err error
	if c.redisURL = o.redisURL; c.redisURL == "" {
		if c.redis, err = harness.StartRedisWith(&harness.RedisServer{Dir: filepath.Join(c.dir, "redis"), AOF: true, Bind: o.redisBind}); err != nil {
			return nil, err
		}
		c.redisURL = c.redis.URL(0)
	}
	create := harness.CreateDatabase
	if o.bin != "" || o.restore != "" {
		create = harness.CreateEmptyDatabase // restored and migrated below
	}
	if c.dbURL, err = create(ctx, c.pgAdmin, c.db); err != nil {
		c.close()
		return nil, err
	}
	if c.pool, err = pgxpool.New(ctx, c.dbURL); err != nil {
		c.close()
		return nil, err
	}
	port, err := testinfra.FreePort()
	if err != nil {
		c.close()
		return nil, err
	}
	c.apiAddr = fmt.Sprintf("127.0.0.1:%d", port)
	c.cfgPath = filepath.Join(c.dir, "aetherium.yaml")
	// Short leases and timeouts: a dead step's session is taken over within
	// seconds, a stopping worker hands its tasks back fast, idle queues are polled
	// often. asynq's own task lease (30s, recovered a minute later) is not a knob.
	fc := harness.FleetConfig{
		RedisURL: c.redisURL, DatabaseURL: c.dbURL, Workspaces: filepath.Join(c.dir, "workspaces"),
		Templates: filepath.Join(e.root, "templates"), Permissions: filepath.Join(e.root, "config", "permissions.yaml"),
		APIAddr: c.apiAddr, BodyLimit: o.bodyLimit, MaxRunsInFlight: o.maxRunsInFlight, Concurrency: o.concurrency, ScriptLatency: o.latency,
		ShutdownTimeout: 2 * time.Second, StepLease: 5 * time.Second, TaskCheckInterval: 50 * time.Millisecond,
		SchedulerPeriod: 2 * time.Second, StuckAfter: o.stuckAfter,
	}
	if o.fleet != nil {
		o.fleet(&fc)
	}
	c.fleetCfg = fc
	if err = fc.Write(c.cfgPath); err != nil {
		c.close()
		return nil, err
	}
	if o.restore != "" {
		if err = pgRestore(ctx, o.restore, c.dbURL); err != nil {
			c.close()
			return nil, err
		}
	}
	if o.bin != "" || o.restore != "" {
		if err = harness.Migrate(ctx, c.bin, c.cfgPath); err != nil {
			c.close()
			return nil, err
		}
	}
	if o.restored != nil {
		if err = o.restored(ctx, c.pool); err != nil {
			c.close()
			return nil, err
		}
	}
	if c.api, err = harness.StartAPI(c.bin, c.cfgPath, filepath.Join(c.dir, "api.log"), c.apiAddr); err != nil {
		c.close()
		return nil, err
	}
	c.client = harness.NewClient("http://" + c.apiAddr)
	var wg sync.WaitGroup
	errs := make([]error, o.workers+1)
	c.workers = make([]*harness.Proc, o.workers)
	if port, err = testinfra.FreePort(); err != nil {
		c.close()
		return nil, err
	}
	c.metrics0 = fmt.Sprintf("127.0.0.1:%d", port)
	for i := range o.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var env []string
			if i == 0 {
				env = append(env, "AETHERIUM_WORKER_METRICS_ADDR="+c.metrics0)
			}
			c.workers[i], errs[i] = c.startWorker(env...)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.sched, errs[o.workers] = harness.StartScheduler(c.bin, c.cfgPath, filepath.Join(c.dir, "scheduler.log"))
	}()
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			c.close()
			return nil, err
		}
	}
	say("cluster %s: api %s, %d workers (concurrency %d, model latency %s), scheduler, redis %s, database %s",
		name, c.apiAddr, o.workers, o.concurrency, o.latency, c.redisURL, c.db)
	return c, nil
}

// startWorker starts one more worker process (its log numbered in start order).
func (c *cluster) startWorker(env ...string) (*harness.Proc, error) {
	return c.startWorkerVia(nil, c.cfgPath, env...)
}

// startWorkerVia starts a worker on config through prefix (a network namespace).
func (c *cluster) startWorkerVia(prefix []string, config string, env ...string) (*harness.Proc, error) {
	c.mu.Lock()
	n := c.started
	c.started++
	c.mu.Unlock()
	return harness.StartWorkerVia(prefix, c.bin, config, filepath.Join(c.dir, fmt.Sprintf("worker-%d.log", n)), env...)
}

// procs is every process of the cluster still known.
func (c *cluster) procs() []*harness.Proc {
	out := append([]*harness.Proc{}, c.workers...)
	return append(out, c.api, c.sched)
}

func (c *cluster) close() {
	var wg sync.WaitGroup
	for _, p := range c.procs() {
		if p == nil {
			continue
		}
		wg.Add(1)
		go func() { defer wg.Done(); p.Stop(10 * time.Second) }()
	}
	wg.Wait()
	// Quota workspaces are mounts on loop devices, which outlive a process killed
	// with -9: none stays behind (the images do, in the work directory).
	if err := wsquota.UnmountAll(c.dir); err != nil {
		say("cluster %s: %v", c.name, err)
	}
	if c.pool != nil {
		c.pool.Close()
	}
	if c.redis != nil {
		c.redis.Stop()
	}
	harness.DropDatabase(c.pgAdmin, c.db)
}

// inspector reads the fleet's queues through the same redis_url the fleet uses
// (a single node, Sentinel or Cluster).
func (c *cluster) inspector() *asynq.Inspector {
	conn, err := redisconn.Parse(c.redisURL)
	if err != nil {
		// The URL was written by the drill itself and the fleet started on it.
		panic(fmt.Sprintf("drills: redis url %q: %v", c.redisURL, err))
	}
	return asynq.NewInspector(conn.Asynq())
}

// logLines counts lines containing s in every process log of the cluster.
func (c *cluster) logLines(s string) int {
	n := 0
	logs, _ := filepath.Glob(filepath.Join(c.dir, "*.log"))
	for _, l := range logs {
		raw, err := os.ReadFile(l)
		if err != nil {
			continue
		}
		n += strings.Count(string(raw), s)
	}
	return n
}

// panics reports the process logs that contain a Go panic or a fatal error.
func (c *cluster) panics() []string {
	var out []string
	logs, _ := filepath.Glob(filepath.Join(c.dir, "*.log"))
	for _, l := range logs {
		raw, err := os.ReadFile(l)
		if err != nil {
			continue
		}
		s := string(raw)
		if strings.Contains(s, "panic: ") || strings.Contains(s, "fatal error: ") || strings.Contains(s, "goroutine 1 [") {
			out = append(out, filepath.Base(l))
		}
	}
	return out
}

// alive checks that every process still runs (the killed ones are not listed).
func (c *cluster) alive(r *report) {
	var dead []string
	for _, p := range c.procs() {
		if p == nil {
			continue
		}
		if exited, err := p.Exited(); exited {
			dead = append(dead, fmt.Sprintf("%s (%v, log %s)", p.Role, err, p.Log))
		}
	}
	r.check(len(dead) == 0, "every process is still running%s", list(dead))
	pan := c.panics()
	r.check(len(pan) == 0, "no panic or fatal error in any process log%s", list(pan))
}

func list(xs []string) string {
	if len(xs) == 0 {
		return ""
	}
	return ": " + strings.Join(xs, "; ")
}

// submit posts n runs of the drill team through the API process.
func (c *cluster) submitTeam(ctx context.Context, n int, retryFor time.Duration) ([]string, error) {
	team := drillTeam()
	return harness.SubmitMany(ctx, n, 16, retryFor, func(ctx context.Context, i int) (string, error) {
		return c.client.SubmitTeam(ctx, team, fmt.Sprintf("drill %s run %d", c.name, i))
	})
}

// drillTeam is the team of drills 1-4: a plan, two parallel delegations, and in
// each worker idempotent calls and a non-idempotent edit_file per turn.
func drillTeam() templates.Template { return harness.Crew(3) }

// underLoad starts a drill's cluster (two workers at the drill concurrency and model
// latency), submits the drill's runs and waits (up to a minute) until at least four
// agent turns are in flight: the moment drills 1-3 strike. It returns the run ids
// and the turns in flight.
func underLoad(ctx context.Context, e *env, name string) (*cluster, []string, int, error) {
	return underLoadWith(ctx, e, name, clusterOpts{workers: 2, concurrency: e.o.concurrency, latency: e.o.latency})
}

// underLoadWith is underLoad on a cluster shaped by o.
func underLoadWith(ctx context.Context, e *env, name string, o clusterOpts) (*cluster, []string, int, error) {
	c, err := newCluster(ctx, e, name, o)
	if err != nil {
		return nil, nil, 0, err
	}
	say("submitting %d runs", e.o.runs)
	ids, err := c.submitTeam(ctx, e.o.runs, 0)
	if err != nil {
		c.close()
		return nil, nil, 0, err
	}
	inFlight := 0
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); {
		if inFlight = c.inFlightTurns(ctx); inFlight >= 4 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	return c, ids, inFlight, nil
}
