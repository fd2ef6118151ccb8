package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/aetherium-engine/aetherium/internal/harness"
	"github.com/aetherium-engine/aetherium/internal/testinfra"
)

// partitionLatency is the script model's latency in drill 8: turns long enough
// that the cut lands in the middle of them.
const partitionLatency = time.Second

// asynqRecoverAfter is how long after a task's lease expired asynq's recoverer
// hands it back (its cutoff; recoverer.go), plus a margin.
const asynqRecoverAfter = 31 * time.Second

// drillPartition: a worker in a network namespace of its own reaches Redis and
// PostgreSQL only through a veth pair. Mid-turn the link goes down (its host
// end: the worker's packets vanish, its connections hang). Its step leases
// (5 s) and asynq task leases (30 s) run out; a standby worker in the root
// namespace starts once asynq can hand the tasks back (it recovers expired
// leases as it starts), takes the sessions over from their last save and
// finishes the runs. Then the link comes back and the cut-off worker's writes,
// stalled in its sockets, finally arrive: the session lease (lease_token)
// refuses each of them (store.ErrLeaseLost), the worker counts it
// (aetherium_stale_writes_refused_total, log "stale write refused"), and the
// drill fails unless it saw at least one. No tool call's result is recorded
// twice, no audit row is duplicated, no session is overwritten by the stale step.
//
// It needs root and iproute2 (ip netns); without them it fails, it never skips.
func drillPartition(ctx context.Context, e *env, r *report) error {
	ns, err := harness.NewNetns(os.Getpid())
	if err != nil {
		return err
	}
	defer func() {
		ns.Remove()
		out, _ := osexec.Command("ip", "netns", "list").Output()
		say("network namespace %s and veth %s removed (still listed: %v)", ns.Name, ns.HostIf, strings.Contains(string(out), ns.Name))
	}()
	say("network namespace %s: veth %s %s ↔ %s %s", ns.Name, ns.HostIf, ns.HostAddr, ns.NsIf, ns.NsAddr)
	pg, err := harness.StartPrivatePostgresOn(filepath.Join(e.dir, "postgres-partition"), []string{ns.HostAddr}, []string{ns.Subnet})
	if err != nil {
		return err
	}
	defer pg.Stop()
	c, err := newCluster(ctx, e, "partition", clusterOpts{
		workers: 0, concurrency: e.o.concurrency, latency: partitionLatency, pg: pg, redisBind: []string{"127.0.0.1", ns.HostAddr},
	})
	if err != nil {
		return err
	}
	defer c.close()
	cut, err := c.startCutOffWorker(ns)
	if err != nil {
		return err
	}
	n := min(e.o.runs, 10)
	say("submitting %d runs; they all start on the worker in %s", n, ns.Name)
	ids, err := c.submitTeam(ctx, n, 0)
	if err != nil {
		return err
	}
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline) && c.inFlightTurns(ctx) < 3; {
		time.Sleep(20 * time.Millisecond)
	}
	held, err := c.leasedSessions(ctx)
	if err != nil {
		return err
	}
	if err := ns.Cut(); err != nil {
		return err
	}
	t0 := time.Now()
	say("link %s down with %d sessions leased by the cut-off worker (pid %d)", ns.HostIf, len(held), cut.proc.Pid())
	r.check(len(held) > 0, "the link went down mid-turn: %d sessions leased by the cut-off worker", len(held))
	restored := false
	defer func() {
		if !restored {
			_ = ns.Restore()
		}
	}()

	time.Sleep(c.fleetCfg.StepLease + time.Second)
	stalled := c.stalled(ctx, held)
	r.check(len(stalled) > 0, "its step leases ran out unrenewed: %d sessions stalled (step lease %s)", len(stalled), c.fleetCfg.StepLease)

	// asynq hands a task back 30 s after its lease expired; a worker's recoverer
	// runs as it starts, so the standby starts just then.
	expiry, err := c.taskLeaseExpiry(ctx)
	if err != nil {
		return err
	}
	if wait := time.Until(expiry.Add(asynqRecoverAfter)); wait > 0 {
		say("waiting %.0fs: the cut-off worker's task leases expire at +%.0fs, asynq hands them back 30s later", wait.Seconds(), expiry.Sub(t0).Seconds())
		time.Sleep(wait)
	}
	standby, err := c.startWorker()
	if err != nil {
		return err
	}
	c.workers = append(c.workers, standby)
	say("standby worker pid %d started in the root namespace at +%.0fs", standby.Pid(), time.Since(t0).Seconds())
	taken := c.waitTakeover(ctx, stalled, 60*time.Second)
	r.check(taken > 0, "the standby took over %d of the %d stalled sessions (+%.0fs)", taken, len(stalled), time.Since(t0).Seconds())

	if err := ns.Restore(); err != nil {
		return err
	}
	restored = true
	up := time.Now()
	say("link %s up again at +%.0fs; waiting for the cut-off worker's stalled writes to arrive", ns.HostIf, up.Sub(t0).Seconds())
	refused := waitRefused(cut, 90*time.Second)
	r.check(refused.total() > 0, "late writes of the cut-off worker refused by the session lease: %d (%s; %.0fs after the link came back; metric: %s)",
		refused.total(), refused, time.Since(up).Seconds(), cut.metric())

	if !waitRuns(ctx, c, r, ids, 3*time.Minute) {
		return nil
	}
	say("all runs terminal %.0fs after the cut", time.Since(t0).Seconds())
	verifyCounts(ctx, c, r, ids)
	c.alive(r)
	return nil
}

// cutOff is the worker in the namespace.
type cutOff struct {
	proc    *harness.Proc
	metrics string
}

// startCutOffWorker starts a worker in ns whose config names Redis and PostgreSQL
// by the host end of the veth, serving /metrics on its own end.
func (c *cluster) startCutOffWorker(ns *harness.Netns) (*cutOff, error) {
	fc := c.fleetCfg
	fc.RedisURL = fmt.Sprintf("redis://%s:%d/0", ns.HostAddr, c.redis.Port)
	fc.DatabaseURL = strings.Replace(c.dbURL, "127.0.0.1", ns.HostAddr, 1)
	// A connection for each of its tasks (the default pool is one per four):
	// the drill needs the saves in flight at the cut to be written into their
	// sockets, where they stall and arrive late, not waiting for a connection
	// in the pool, where the cancelled step never sends them.
	sep := "?"
	if strings.Contains(fc.DatabaseURL, "?") {
		sep = "&"
	}
	fc.DatabaseURL += fmt.Sprintf("%spool_max_conns=%d", sep, max(fc.Concurrency, 4))
	cfg := filepath.Join(c.dir, "aetherium-netns.yaml")
	if err := fc.Write(cfg); err != nil {
		return nil, err
	}
	port, err := testinfra.FreePort()
	if err != nil {
		return nil, err
	}
	w := &cutOff{metrics: fmt.Sprintf("%s:%d", ns.NsAddr, port)}
	if w.proc, err = c.startWorkerVia(ns.Exec(), cfg, "AETHERIUM_WORKER_METRICS_ADDR="+w.metrics); err != nil {
		return nil, err
	}
	c.workers = append(c.workers, w.proc)
	return w, nil
}

// leasedSessions maps the sessions whose step lease is live to their lease token.
func (c *cluster) leasedSessions(ctx context.Context) (map[string]string, error) {
	rows, err := c.pool.Query(ctx, `SELECT id, lease_token FROM sessions WHERE status <> 'done' AND lease_until > now()`)
	if err != nil {
		return nil, fmt.Errorf("leased sessions: %w", err)
	}
	out := map[string]string{}
	var id, tok string
	if _, err := pgx.ForEachRow(rows, []any{&id, &tok}, func() error { out[id] = tok; return nil }); err != nil {
		return nil, err
	}
	return out, nil
}

// stalled are the sessions of held still under the same token with their lease
// expired: the cut-off worker's steps, which can no longer save.
func (c *cluster) stalled(ctx context.Context, held map[string]string) map[string]string {
	now, err := c.leasedSessions(ctx)
	out := map[string]string{}
	if err != nil {
		return out
	}
	for id, tok := range held {
		if _, live := now[id]; live {
			continue
		}
		var cur string
		if c.pool.QueryRow(ctx, `SELECT lease_token FROM sessions WHERE id = $1`, id).Scan(&cur) == nil && cur == tok {
			out[id] = tok
		}
	}
	return out
}

// taskLeaseExpiry is the latest expiry of a task lease in asynq's lease sets
// (only the cut-off worker holds tasks, and it can no longer extend them).
func (c *cluster) taskLeaseExpiry(ctx context.Context) (time.Time, error) {
	rdb := redis.NewClient(&redis.Options{Addr: c.redis.Addr()})
	defer rdb.Close()
	var last float64
	for _, q := range []string{"supervisor", "workers"} {
		zs, err := rdb.ZRangeWithScores(ctx, "asynq:{"+q+"}:lease", 0, -1).Result()
		if err != nil {
			return time.Time{}, fmt.Errorf("asynq lease set of %s: %w", q, err)
		}
		for _, z := range zs {
			last = max(last, z.Score)
		}
	}
	if last == 0 {
		return time.Now(), nil
	}
	return time.Unix(int64(last), 0), nil
}

// waitTakeover waits until some stalled session is leased under another token,
// and returns how many are.
func (c *cluster) waitTakeover(ctx context.Context, stalled map[string]string, timeout time.Duration) int {
	ids, toks := make([]string, 0, len(stalled)), make([]string, 0, len(stalled))
	for id, tok := range stalled {
		ids, toks = append(ids, id), append(toks, tok)
	}
	n := 0
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline) && ctx.Err() == nil; {
		err := c.pool.QueryRow(ctx, `SELECT count(*) FROM unnest($1::text[], $2::text[]) AS u(id, tok)
			JOIN sessions s ON s.id = u.id WHERE s.lease_token <> u.tok`, ids, toks).Scan(&n)
		if err == nil && n > 0 {
			return n
		}
		time.Sleep(100 * time.Millisecond)
	}
	return n
}

// refusals counts the cut-off worker's "stale write refused" log lines by kind.
type refusals map[string]int

func (r refusals) total() int {
	n := 0
	for _, v := range r {
		n += v
	}
	return n
}

func (r refusals) String() string {
	if len(r) == 0 {
		return "none"
	}
	var parts []string
	for k, v := range r {
		parts = append(parts, fmt.Sprintf("%s %d", k, v))
	}
	return strings.Join(parts, ", ")
}

// waitRefused waits until the cut-off worker has logged a refused late write and
// its stalled writes have had time to drain (a few seconds without a new one).
func waitRefused(w *cutOff, timeout time.Duration) refusals {
	deadline := time.Now().Add(timeout)
	var got refusals
	var lastChange time.Time
	for time.Now().Before(deadline) {
		now := refusals{}
		for _, l := range w.proc.LogLines(`"stale write refused"`) {
			kind := "?"
			if _, rest, ok := strings.Cut(l, `"kind":"`); ok {
				kind, _, _ = strings.Cut(rest, `"`)
			}
			now[kind]++
		}
		if now.total() != got.total() {
			got, lastChange = now, time.Now()
		}
		if got.total() > 0 && time.Since(lastChange) > 5*time.Second {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	return got
}

// metric reads aetherium_stale_writes_refused_total from the cut-off worker.
func (w *cutOff) metric() string {
	cl := http.Client{Timeout: 3 * time.Second}
	resp, err := cl.Get("http://" + w.metrics + "/metrics")
	if err != nil {
		return "unreadable: " + err.Error()
	}
	defer resp.Body.Close()
	var lines []string
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 8<<20))
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "aetherium_stale_writes_refused_total") {
			lines = append(lines, strings.TrimPrefix(sc.Text(), "aetherium_stale_writes_refused_total"))
		}
	}
	if len(lines) == 0 {
		return "no series"
	}
	return "aetherium_stale_writes_refused_total " + strings.Join(lines, " ")
}
