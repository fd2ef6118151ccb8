package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/aetherium-engine/aetherium/internal/redisconn"
	"github.com/aetherium-engine/aetherium/internal/testinfra"
	"github.com/aetherium-engine/aetherium/lease"
)

// drillLeaseService is the GPU service the drill's lease holders contend for.
const drillLeaseService = "drill-gpu"

// drillCluster: the fleet runs on redis-cluster:// — three masters, each with a
// replica, cluster-node-timeout 1 s. While runs execute (mailboxes read on every
// turn, queue keys under asynq's hash tags) and holders take turns on a GPU
// lease (capacity 1, FIFO, fencing), the master owning the lease family's slot
// is killed with -9. Its replica is promoted; the fleet's cluster clients
// follow the new slot map; no script mixes slots (no CROSSSLOT), no MOVED
// surfaces as an error; fencing tokens keep increasing across the failover (a
// new epoch from PostgreSQL when the promoted replica has another replication
// id). As in drill 6, writes the dead master had not replicated are lost and the
// scheduler's recovery ends the runs they strand.
func drillCluster(ctx context.Context, e *env, r *report) error {
	rc, err := testinfra.StartRedisClusterWith(testinfra.ClusterOpts{Masters: 3, ReplicasPerMaster: 1, NodeTimeout: time.Second})
	if err != nil {
		return err
	}
	defer rc.Stop()
	say("redis cluster: 3 masters + 3 replicas %s", rc.URL())
	c, ids, inFlight, err := underLoadWith(ctx, e, "cluster", clusterOpts{
		workers: 2, concurrency: e.o.concurrency, latency: e.o.latency, redisURL: rc.URL(), stuckAfter: failoverStuckAfter,
	})
	if err != nil {
		return err
	}
	defer c.close()
	conn, err := redisconn.Parse(rc.URL())
	if err != nil {
		return err
	}
	rdb := conn.Client()
	defer rdb.Close()
	// A short poll: a waiter sees its hand-off within 10 ms, so the holders take
	// turns fast enough to put the lease under load.
	lm, err := lease.New(rdb, lease.Config{Services: []lease.Service{{Name: drillLeaseService, Capacity: 1, TTL: 10 * time.Second}}, PollInterval: 10 * time.Millisecond},
		lease.Options{Epoch: lease.PostgresEpoch(c.pool)})
	if err != nil {
		return err
	}
	holders := startHolders(ctx, lm, 4)
	wave, err := c.submitTeam(ctx, max(10, e.o.runs/5), 0)
	if err != nil {
		holders.stop()
		return err
	}
	ids = append(ids, wave...)
	time.Sleep(time.Second) // leases granted under load before the kill

	victim, why, err := leaseMaster(ctx, rdb.(*redis.ClusterClient))
	if err != nil {
		holders.stop()
		return err
	}
	proc := rc.Proc(victim)
	if proc == nil {
		holders.stop()
		return fmt.Errorf("no node process at %s", victim)
	}
	grantsBefore := holders.count()
	killed := time.Now()
	_ = proc.Process.Kill()
	_ = proc.Wait()
	say("kill -9 master %s (%s) with %d agent turns in flight, %d runs just submitted, %d lease grants so far", victim, why, inFlight, len(wave), grantsBefore)
	r.check(inFlight > 0, "the master died while agent turns were in flight (%d)", inFlight)

	took, err := waitClusterFailover(ctx, rc, victim, 30*time.Second)
	if !r.check(err == nil, "its replica was promoted and the cluster is ok again: failover time %.1fs after kill -9 (cluster-node-timeout 1s)%s", took.Seconds(), errText(err)) {
		holders.stop()
		return nil
	}
	promoted := killed.Add(took)
	after, ok := submitAfterFailover(ctx, c, r, "the new slot map")
	if !ok {
		holders.stop()
		return nil
	}
	ids = append(ids, after...)
	// Leases go on being granted after the promotion.
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end) && holders.countSince(promoted) < 50; {
		time.Sleep(100 * time.Millisecond)
	}
	if g := holders.firstSince(promoted); !g.IsZero() {
		say("  lease grants resumed %.1fs after the promotion", g.Sub(promoted).Seconds())
	}
	holders.stop()
	holders.check(r, promoted)

	checkAfterFailover(ctx, c, r, ids, after, promoted)
	ins := c.inspector()
	rec := recovered(ins)
	ins.Close()
	// This is what the drill's two minutes are spent on: asynq's task lease (30 s)
	// and recoverer (each minute) are not knobs.
	say("  note: asynq handed back %d turn and %d supervisor task(s) the failover left orphaned in \"active\" (a dequeue reply or an acknowledgement lost), once their lease had expired", rec["agent:turn"], rec["run:supervise"])
	cross, moved, down := c.logLines("CROSSSLOT"), c.logLines("MOVED"), c.logLines("CLUSTERDOWN")
	r.check(cross == 0, "no CROSSSLOT error in any process log (%d)", cross)
	r.check(moved == 0, "no MOVED surfaced as an error in any process log (%d)", moved)
	say("  note: %d log line(s) mention CLUSTERDOWN (the failover window; retried)", down)
	return nil
}

// leaseMaster finds the master owning the lease family's slot (and says whether
// it also owns asynq's workers queue keys).
func leaseMaster(ctx context.Context, cc *redis.ClusterClient) (string, string, error) {
	m, err := cc.MasterForKey(ctx, "{aeth:lease}:epoch")
	if err != nil {
		return "", "", fmt.Errorf("master of the lease slot: %w", err)
	}
	addr := m.Options().Addr
	why := "owner of the {aeth:lease} slot"
	if q, err := cc.MasterForKey(ctx, "asynq:{workers}:pending"); err == nil && q.Options().Addr == addr {
		why += " and of asynq's {workers} queue keys"
	}
	return addr, why, nil
}

// waitClusterFailover waits until a surviving node reports cluster_state:ok with
// the dead node flagged failed and three live masters again (its replica promoted).
func waitClusterFailover(ctx context.Context, rc *testinfra.RedisCluster, dead string, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	var probe string
	for _, a := range rc.Addrs {
		if a != dead {
			probe = a
			break
		}
	}
	n := redis.NewClient(&redis.Options{Addr: probe})
	defer n.Close()
	last := errors.New("not yet")
	for time.Since(start) < timeout && ctx.Err() == nil {
		info, err := n.ClusterInfo(ctx).Result()
		nodes, nerr := n.ClusterNodes(ctx).Result()
		if err == nil && nerr == nil {
			masters, deadFailed := 0, false
			for _, l := range strings.Split(strings.TrimSpace(nodes), "\n") {
				f := strings.Fields(l)
				if len(f) < 3 {
					continue
				}
				flags := f[2]
				if strings.HasPrefix(f[1], dead) && strings.Contains(flags, "fail") {
					deadFailed = true
				}
				if strings.Contains(flags, "master") && !strings.Contains(flags, "fail") {
					masters++
				}
			}
			if strings.Contains(info, "cluster_state:ok") && deadFailed && masters == 3 {
				return time.Since(start), nil
			}
			last = fmt.Errorf("state: %s, dead failed: %v, live masters: %d", strings.Fields(info)[0], deadFailed, masters)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Since(start), fmt.Errorf("no promotion within %s (%v)", timeout, last)
}

// holderGrant is one grant a drill holder received.
type holderGrant struct {
	at     time.Time
	holder string
	token  uint64
}

// holders are goroutines taking turns on the drill's GPU lease: acquire (waiting
// in FIFO), hold briefly, release, again.
type holders struct {
	mu     sync.Mutex
	grants []holderGrant
	errs   int
	last   error
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func startHolders(ctx context.Context, lm *lease.Manager, n int) *holders {
	h := &holders{}
	ctx, h.cancel = context.WithCancel(ctx)
	for i := range n {
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			holder := fmt.Sprintf("drill-holder-%d", i)
			for ctx.Err() == nil {
				g, err := lm.AcquireWait(ctx, drillLeaseService, holder, 5*time.Second)
				if err != nil {
					if ctx.Err() == nil && !errors.Is(err, lease.ErrWaiting) {
						h.fail(err)
						time.Sleep(100 * time.Millisecond)
					}
					continue
				}
				h.mu.Lock()
				h.grants = append(h.grants, holderGrant{at: time.Now(), holder: holder, token: g.Token})
				h.mu.Unlock()
				time.Sleep(20 * time.Millisecond)
				if _, err := lm.Release(context.WithoutCancel(ctx), drillLeaseService, holder, g.Token); err != nil {
					h.fail(err)
				}
			}
		}()
	}
	return h
}

func (h *holders) fail(err error) {
	h.mu.Lock()
	h.errs++
	h.last = err
	h.mu.Unlock()
}

func (h *holders) count() int { return h.countSince(time.Time{}) }

func (h *holders) countSince(t time.Time) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, g := range h.grants {
		if g.at.After(t) {
			n++
		}
	}
	return n
}

// firstSince is when the first grant after t was received (zero if none).
func (h *holders) firstSince(t time.Time) time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	var first time.Time
	for _, g := range h.grants {
		if g.at.After(t) && (first.IsZero() || g.at.Before(first)) {
			first = g.at
		}
	}
	return first
}

func (h *holders) stop() {
	h.cancel()
	h.wg.Wait()
}

// check: grants happened before and after the failover, and with capacity 1 each
// grant follows the previous one's release, so in the order they were received
// the fencing tokens must strictly increase — across the failover too.
func (h *holders) check(r *report, promoted time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	// A holder whose release failed in the failover window still holds its
	// grant, and its next Acquire returns that same grant (same token): one grant.
	seen := map[holderGrant]bool{}
	var gs []holderGrant
	for _, g := range h.grants {
		k := holderGrant{holder: g.holder, token: g.token}
		if !seen[k] {
			seen[k] = true
			gs = append(gs, g)
		}
	}
	sort.Slice(gs, func(i, j int) bool { return gs[i].at.Before(gs[j].at) })
	before, after, bad := 0, 0, 0
	example := ""
	epochs := map[uint64]bool{}
	for i, g := range gs {
		if g.at.Before(promoted) {
			before++
		} else {
			after++
		}
		epochs[lease.TokenEpoch(g.token)] = true
		if i > 0 && g.token <= gs[i-1].token {
			bad++
			if example == "" {
				p := gs[i-1]
				example = fmt.Sprintf("; e.g. %s got %d at %s after %s got %d at %s", g.holder, g.token, g.at.Format("15:04:05.000"), p.holder, p.token, p.at.Format("15:04:05.000"))
			}
		}
	}
	r.check(before > 0 && after > 0, "GPU lease grants through the lease API under load: %d before the failover, %d after (%d acquire/release errors during it%s)", before, after, h.errs, errText(h.last))
	var first, last uint64
	if len(gs) > 0 {
		first, last = gs[0].token, gs[len(gs)-1].token
	}
	r.check(bad == 0 && len(gs) > 0, "fencing tokens strictly increase in grant order across the failover (%d grants, %d out of order%s; epochs seen: %d; first %d/%d, last %d/%d as epoch/counter)",
		len(gs), bad, example, len(epochs), lease.TokenEpoch(first), lease.TokenCounter(first), lease.TokenEpoch(last), lease.TokenCounter(last))
}
