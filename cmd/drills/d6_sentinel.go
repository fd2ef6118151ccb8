package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/aetherium-engine/aetherium/internal/harness"
)

// sentinelMaster is the name the drill's sentinels monitor.
const sentinelMaster = "drill"

// drillSentinel: the fleet runs on redis-sentinel:// (a primary, one replica,
// three sentinels); with runs in flight the primary is killed with -9, the
// sentinels promote the replica, and the fleet's clients (go-redis failover
// clients for our keys and asynq's) follow it to the new master.
//
// What this can lose, stated plainly: Redis replication is asynchronous. Writes
// the old primary acknowledged but had not yet sent to the replica (enqueued
// tasks, tasks moved to active or acknowledged, mailbox entries) are gone after
// the promotion. PostgreSQL holds the truth of every run, so nothing is lost
// there, and the stream is replicated in order, so what is lost is a suffix:
// whenever a task's writes are lost, so is its later acknowledgement, and asynq
// delivers the task again — the step, idempotent by design, redoes them (a
// session waiting on delegations enqueues their turns again). What no task
// wrote is not redone that way: a run the API enqueued stays queued, and the
// scheduler re-enqueues it after 30 s. A run stranded any other way stops making
// progress, and the scheduler's stuck-run detector fails it after
// scheduler.stuck_after — a terminal state, never a run that hangs forever. The
// drill prints the bytes lost and counts both recoveries. On loopback the replica
// is rarely more than a few bytes behind; -sentinel-lag 1s (DRILL_SENTINEL_LAG)
// pauses the replica and drops its link for that long before the kill, so the
// failover loses a second or more of writes (with it, 121 kB and 277 kB lost
// left no run stranded: redelivery redid all of it).
func drillSentinel(ctx context.Context, e *env, r *report) error {
	g, err := harness.StartSentinelGroup(filepath.Join(e.dir, "sentinel"), sentinelMaster, harness.SentinelOpts{
		Sentinels: 3, Quorum: 2, DownAfter: time.Second, FailoverTimeout: 3 * time.Second,
	})
	if err != nil {
		return err
	}
	defer g.Stop()
	say("sentinel group: primary :%d, replica :%d, sentinels %s", g.Primary.Port, g.Replica.Port, g.URL(0))
	c, ids, inFlight, err := underLoadWith(ctx, e, "sentinel", clusterOpts{
		workers: 2, concurrency: e.o.concurrency, latency: e.o.latency, redisURL: g.URL(0), stuckAfter: failoverStuckAfter,
	})
	if err != nil {
		return err
	}
	defer c.close()
	// A fresh wave, so supervisors are about to delegate (enqueue) as the primary dies.
	wave, err := c.submitTeam(ctx, max(10, e.o.runs/5), 0)
	if err != nil {
		return err
	}
	ids = append(ids, wave...)
	if e.o.sentinelLag > 0 {
		if err := cutReplica(ctx, g, e.o.sentinelLag); err != nil {
			return err
		}
	}
	primaryAt, perr := replOffset(ctx, g.Primary.Addr())
	killed := time.Now()
	g.Primary.Kill()
	g.Replica.Resume() // paused by cutReplica, if it ran
	// What the replica had applied when its primary died: the stream beyond it
	// (at least primaryAt minus this) is what the promotion loses.
	replicaAt, rerr := replOffset(ctx, g.Replica.Addr())
	lag := "unknown"
	if perr == nil && rerr == nil {
		lag = fmt.Sprintf("%d bytes of replication stream", max(primaryAt-replicaAt, 0))
	}
	say("kill -9 the primary (:%d) with %d agent turns in flight and %d runs just submitted; not yet on the replica, lost with the primary: at least %s", g.Primary.Port, inFlight, len(wave), lag)
	r.check(inFlight > 0, "the primary died while agent turns were in flight (%d)", inFlight)

	took, err := g.WaitPromoted(ctx, 30*time.Second)
	if !r.check(err == nil, "Sentinel promoted the replica :%d: failover time %.1fs after kill -9 (down-after 1s)%s", g.Replica.Port, took.Seconds(), errText(err)) {
		return nil
	}
	promoted := killed.Add(took)
	after, ok := submitAfterFailover(ctx, c, r, "the new master")
	if !ok {
		return nil
	}
	ids = append(ids, after...)
	checkAfterFailover(ctx, c, r, ids, after, promoted)
	return nil
}

// cutReplica makes the replica fall lag behind, as a slow or cut link would: it is
// paused and the primary drops its link, so everything the primary acknowledges
// from then on exists only on the primary. The caller kills the primary and
// resumes the replica.
func cutReplica(ctx context.Context, g *harness.SentinelGroup, lag time.Duration) error {
	g.Replica.Pause()
	c := redis.NewClient(&redis.Options{Addr: g.Primary.Addr()})
	defer c.Close()
	if err := c.ClientKillByFilter(ctx, "TYPE", "replica").Err(); err != nil {
		g.Replica.Resume()
		return fmt.Errorf("drop the replica's link: %w", err)
	}
	say("replica paused and its link dropped; the primary goes on alone for %s", lag)
	time.Sleep(lag)
	return nil
}

// replOffset reads a server's replication offset (master_repl_offset: on a
// replica, how much of its master's stream it has applied).
func replOffset(ctx context.Context, addr string) (int64, error) {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "master_repl_offset:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("%s: no master_repl_offset in INFO replication", addr)
}
