package main

import (
	"context"
	"time"
)

// pgDown is how long PostgreSQL stays down in drill 3.
const pgDown = 3 * time.Second

// drillPostgres: with runs in flight, PostgreSQL restarts (fast mode: every
// connection is cut). Steps fail and are retried, tool calls fail cleanly or wait,
// the audit writer retries its batch until the database is back, and every run
// ends with everything audited exactly once.
func drillPostgres(ctx context.Context, e *env, r *report) error {
	c, ids, inFlight, err := underLoad(ctx, e, "postgres")
	if err != nil {
		return err
	}
	defer c.close()
	start := time.Now()
	say("restarting PostgreSQL (%s; down for %s) with %d agent turns in flight", e.o.pgMode, pgDown, inFlight)
	r.check(inFlight > 0, "PostgreSQL restarted while agent turns were in flight (%d)", inFlight)
	if err := e.pg.Restart(ctx, pgDown); err != nil {
		return err
	}
	say("PostgreSQL is back after %.1fs", time.Since(start).Seconds())
	ready, took := c.waitReady(ctx, 30*time.Second)
	r.check(ready, "the API reconnected: /readyz is ready %.1fs after the restart", took.Seconds())

	if !waitRuns(ctx, c, r, ids, 4*time.Minute) {
		return nil
	}
	say("all runs terminal %.0fs after the restart began", time.Since(start).Seconds())
	verifyCounts(ctx, c, r, ids)
	var failedCalls int
	_ = c.pool.QueryRow(ctx, `SELECT count(*) FROM sessions s, jsonb_array_elements(session_history(s.id)) m
		WHERE s.run_id = ANY($1::uuid[]) AND m->>'role' = 'tool' AND (m->>'is_error')::boolean`, ids).Scan(&failedCalls)
	say("  note: %d tool call(s) failed cleanly during the outage (an error result to the model); %d step(s) failed and were retried; %d audit batch write(s) failed and were retried",
		failedCalls, c.logLines(`"task failed, will retry"`), c.logLines("audit write failed; retrying"))
	r.check(c.logLines("audit row NOT written") == 0, "no audit row was given up on")
	c.alive(r)
	return nil
}
