package main

import (
	"context"
	"time"

	"github.com/aetherium-engine/aetherium/internal/harness"
)

// drillMany: many runs submitted at once, no faults: everything completes and the
// counts of runs, delegations, sessions, events and audit rows are exactly what the
// script implies.
func drillMany(ctx context.Context, e *env, r *report) error {
	c, err := newCluster(ctx, e, "many", clusterOpts{workers: 2, concurrency: 2 * e.o.concurrency})
	if err != nil {
		return err
	}
	defer c.close()

	n := e.o.many
	want := harness.ExpectOf(drillTeam()).Times(n)
	say("submitting %d runs at once (%d delegations, %d model turns, %d tool calls expected)", n, want.Delegations, want.ModelTurns, want.ToolCalls)
	start := time.Now()
	ids, err := c.submitTeam(ctx, n, 0)
	if !r.check(err == nil, "the API accepted all %d runs (%.1fs)%s", n, time.Since(start).Seconds(), errText(err)) {
		return nil
	}
	if !waitRuns(ctx, c, r, ids, 10*time.Minute) {
		return nil
	}
	say("%d runs done in %.1fs", n, time.Since(start).Seconds())
	var runs int
	if err := c.pool.QueryRow(ctx, `SELECT count(*) FROM runs`).Scan(&runs); err != nil {
		return err
	}
	r.check(runs == n, "runs in the database: %d (want %d: no duplicates, none lost)", runs, n)
	verifyCounts(ctx, c, r, ids)
	c.alive(r)
	return nil
}
