package main

import (
	"context"
	"encoding/json"
	"time"
)

// readyz asks the API process whether it reaches Redis and PostgreSQL.
func (c *cluster) readyz(ctx context.Context) (bool, string) {
	code, raw, err := c.client.Do(ctx, "GET", "/readyz", nil)
	if err != nil {
		return false, err.Error()
	}
	var body struct {
		Status string `json:"status"`
	}
	_ = json.Unmarshal(raw, &body)
	return code == 200 && body.Status == "ready", string(raw)
}

// waitReady polls /readyz until the API reports ready or timeout passes.
func (c *cluster) waitReady(ctx context.Context, timeout time.Duration) (bool, time.Duration) {
	start := time.Now()
	for time.Since(start) < timeout {
		if ok, _ := c.readyz(ctx); ok {
			return true, time.Since(start)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return false, time.Since(start)
}

// drillRedis: with runs in flight, Redis (append-only file on) shuts down and comes
// back on the same port. Queued and in-flight tasks survive in the AOF; every
// process reconnects; runs submitted while Redis is down are stored and enqueued
// later by the scheduler; every run ends.
func drillRedis(ctx context.Context, e *env, r *report) error {
	c, ids, inFlight, err := underLoad(ctx, e, "redis")
	if err != nil {
		return err
	}
	defer c.close()
	n := e.o.runs
	// A fresh wave of runs, so supervisors are in the middle of their first turns —
	// about to delegate — when Redis goes away.
	wave, err := c.submitTeam(ctx, max(10, n/5), 0)
	if err != nil {
		return err
	}
	ids = append(ids, wave...)
	// Stop Redis once their supervisors have started: they are in their first
	// model call, and their delegate calls come after Redis has gone.
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); {
		var started int
		if c.pool.QueryRow(ctx, `SELECT count(*) FROM sessions WHERE run_id = ANY($1::uuid[]) AND role = 'supervisor'`, wave).Scan(&started) == nil && started >= 3 {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	c.redis.Stop()
	down := time.Now()
	say("redis stopped (SIGTERM, AOF flushed) with %d agent turns in flight and %d runs just started", inFlight, len(wave))
	r.check(inFlight > 0, "Redis went down while agent turns were in flight (%d)", inFlight)

	// Submissions while Redis is down: the run is stored, its enqueue fails and is
	// retried by the scheduler once Redis is back.
	during, err := c.submitTeam(ctx, 2, 0)
	r.check(err == nil, "the API accepts runs while Redis is down (stored, enqueued later)%s", errText(err))
	ids = append(ids, during...)
	ok, _ := c.readyz(ctx)
	r.check(!ok, "/readyz reports not ready while Redis is down")

	time.Sleep(2 * time.Second)
	if err := c.redis.Start(); err != nil {
		return err
	}
	say("redis restarted after %.1fs", time.Since(down).Seconds())
	ready, took := c.waitReady(ctx, 30*time.Second)
	r.check(ready, "the API reconnected: /readyz is ready again %.1fs after the restart", took.Seconds())

	// Runs submitted after the restart show the whole fleet reconnected.
	after, err := c.submitTeam(ctx, 5, 10*time.Second)
	if !r.check(err == nil, "the API accepts runs after the restart%s", errText(err)) {
		return nil
	}
	ids = append(ids, after...)
	if !waitRuns(ctx, c, r, ids, 4*time.Minute) {
		return nil
	}
	say("all runs terminal %.0fs after Redis went down", time.Since(down).Seconds())
	verifyCounts(ctx, c, r, ids)
	c.alive(r)
	return nil
}
