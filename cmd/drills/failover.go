package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aetherium-engine/aetherium/internal/harness"
)

// failoverStuckAfter is scheduler.stuck_after in the failover drills (6, 7): a run
// whose task an async-replicated Redis lost has no event from then on, and the
// scheduler's stuck-run detector fails it this long after its last one. It is
// longer than asynq's own recovery of a task orphaned in "active" (lease 30 s,
// handed back 30 s after expiry by a recoverer that runs each minute: up to two
// minutes), so a run the detector ends really had its task lost, not merely
// delayed. The drill waits this long only when something was lost.
const failoverStuckAfter = 150 * time.Second

// runSplit is how the runs of a failover drill ended.
type runSplit struct {
	completed []string
	// stuck ended through the scheduler's stuck-run recovery (failed, reason
	// "stuck"): their tasks were lost with the writes the new master never got.
	stuck []string
	// other failed some other way (a drill failure).
	other []string
}

func splitRuns(ctx context.Context, c *cluster, ids []string) (runSplit, error) {
	var s runSplit
	rows, err := c.pool.Query(ctx, `SELECT id::text, status, coalesce(reason, ''), left(coalesce(error, ''), 300) FROM runs WHERE id = ANY($1::uuid[])`, ids)
	if err != nil {
		return s, err
	}
	var id, status, reason, msg string
	_, err = pgx.ForEachRow(rows, []any{&id, &status, &reason, &msg}, func() error {
		switch {
		case status == "completed":
			s.completed = append(s.completed, id)
		case status == "failed" && reason == "stuck":
			s.stuck = append(s.stuck, id)
		default:
			s.other = append(s.other, id+" "+status+" "+reason+": "+msg)
		}
		return nil
	})
	return s, err
}

// requeued sums the "re-enqueued queued runs" counts of the maintenance task in
// every process log: runs whose first task was lost before any worker took it,
// put on the queue again.
func (c *cluster) requeued() int {
	logs, _ := filepath.Glob(filepath.Join(c.dir, "*.log"))
	n := 0
	for _, f := range logs {
		raw, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(raw), "\n") {
			if !strings.Contains(l, "re-enqueued queued runs") {
				continue
			}
			var rec struct {
				Count int `json:"count"`
			}
			if json.Unmarshal([]byte(l), &rec) == nil {
				n += rec.Count
			}
		}
	}
	return n
}

// submitAfterFailover checks that the API is ready again on the new master (what
// names "the new master" in the lines) and takes new runs, and returns them.
func submitAfterFailover(ctx context.Context, c *cluster, r *report, master string) ([]string, bool) {
	ready, readyIn := c.waitReady(ctx, 30*time.Second)
	r.check(ready, "the API follows %s: /readyz ready %.1fs after the promotion", master, readyIn.Seconds())
	after, err := c.submitTeam(ctx, 5, 10*time.Second)
	return after, r.check(err == nil, "the API accepts runs after the failover%s", errText(err))
}

// checkAfterFailover is what drills 6 and 7 check once the master is gone and a
// replica promoted: every run ends — completed, or failed as stuck by the
// scheduler when the failover lost its tasks — the completed ones with exactly
// their script's work, every recovered one with its executed calls audited, runs
// submitted after the failover complete, and the fleet's processes live on.
func checkAfterFailover(ctx context.Context, c *cluster, r *report, ids, after []string, promoted time.Time) {
	start := time.Now()
	_, err := harness.WaitTerminal(ctx, c.pool, ids, failoverStuckAfter+2*time.Minute, nil)
	if !r.check(err == nil, "every one of the %d runs reached a terminal state (%.0fs after the promotion)%s", len(ids), time.Since(promoted).Seconds(), errText(err)) {
		return
	}
	say("all runs terminal %.0fs after waiting began", time.Since(start).Seconds())
	s, err := splitRuns(ctx, c, ids)
	if err != nil {
		r.fail("runs: %v", err)
		return
	}
	say("  %d runs completed, %d ended via the scheduler's stuck-run recovery (tasks lost with the old master), %d queued runs re-enqueued by the scheduler",
		len(s.completed), len(s.stuck), c.requeued())
	r.check(len(s.other) == 0, "no run failed other than through the stuck-run recovery (%d%s)", len(s.other), list(first(s.other, 3)))
	done := map[string]bool{}
	for _, id := range s.completed {
		done[id] = true
	}
	late := 0
	for _, id := range after {
		if done[id] {
			late++
		}
	}
	r.check(late == len(after), "the fleet followed the failover: all %d runs submitted after it completed (%d)", len(after), late)
	var since int
	_ = c.pool.QueryRow(ctx, `SELECT count(*) FROM runs WHERE id = ANY($1::uuid[]) AND status = 'completed' AND updated_at > $2`, ids, promoted).Scan(&since)
	r.check(since > 0, "runs completed after the promotion: %d", since)
	r.check(c.settle(ctx, 150*time.Second), "the fleet settled: no step in progress, no task queued, active or waiting to retry")
	if len(s.completed) > 0 {
		verifyCounts(ctx, c, r, s.completed)
	}
	if len(s.stuck) > 0 {
		describeStuck(ctx, c, s.stuck)
		checkRecoveredAudit(ctx, c, r, s.stuck)
	}
	c.alive(r)
}

func first(xs []string, n int) []string {
	if len(xs) > n {
		return xs[:n]
	}
	return xs
}

// checkRecoveredAudit checks the audit of runs the stuck-run recovery ended: every
// tool result in their sessions is audited, and the only audit rows without a
// result are delegate calls — the call ran (the delegation row and its audit row
// were saved with the waiting supervisor), but the task that would have run the
// delegation, or resumed the supervisor with its outcome, was lost with the old
// master, so the supervisor's session never got the call's result.
func checkRecoveredAudit(ctx context.Context, c *cluster, r *report, ids []string) {
	_, unaudited, _, _, err := auditCounts(ctx, c, ids)
	if err != nil {
		r.fail("audit of recovered runs: %v", err)
		return
	}
	var waiting, other int
	err = c.pool.QueryRow(ctx, `WITH msgs AS (
			SELECT s.id || ':' || (m->>'tool_call_id') AS call_key
			FROM sessions s, jsonb_array_elements(session_history(s.id)) m
			WHERE s.run_id = ANY($1::uuid[]) AND m->>'role' = 'tool'),
		orphan AS (SELECT a.* FROM tool_audit a WHERE a.run_id = ANY($1::uuid[])
			AND NOT EXISTS (SELECT 1 FROM msgs WHERE msgs.call_key = a.call_key))
		SELECT count(*) FILTER (WHERE o.tool = 'delegate' AND EXISTS (SELECT 1 FROM delegations d
				WHERE d.run_id = o.run_id AND o.call_key = d.parent_session || ':' || d.tool_call_id)),
			count(*) FILTER (WHERE NOT (o.tool = 'delegate' AND EXISTS (SELECT 1 FROM delegations d
				WHERE d.run_id = o.run_id AND o.call_key = d.parent_session || ':' || d.tool_call_id)))
		FROM orphan o`, ids).Scan(&waiting, &other)
	if err != nil {
		r.fail("audit of recovered runs: %v", err)
		return
	}
	if other > 0 {
		rows, err := c.pool.Query(ctx, `SELECT a.tool || ' ' || a.call_key || ' session ' || coalesce(s.status, '?') || ' ' || coalesce(s.role, '')
			FROM tool_audit a LEFT JOIN sessions s ON a.call_key LIKE s.id || ':%'
			WHERE a.run_id = ANY($1::uuid[]) AND a.tool <> 'delegate' AND NOT EXISTS (SELECT 1 FROM sessions s2, jsonb_array_elements(session_history(s2.id)) m
				WHERE s2.run_id = a.run_id AND m->>'role' = 'tool' AND s2.id || ':' || (m->>'tool_call_id') = a.call_key) LIMIT 5`, ids)
		if err == nil {
			for rows.Next() {
				var x string
				if rows.Scan(&x) == nil {
					say("  audit row without a result: %s", x)
				}
			}
			rows.Close()
		}
	}
	r.check(unaudited == 0 && other == 0, "runs ended via recovery: every executed tool call audited; audit rows without a result are only the %d delegate calls the supervisor never resumed to answer (other: %d, unaudited: %d)", waiting, other, unaudited)
}

// describeStuck prints where the recovered runs had stopped: which of their
// sessions and delegations were left waiting for a task the failover lost.
func describeStuck(ctx context.Context, c *cluster, ids []string) {
	rows, err := c.pool.Query(ctx, `SELECT what, count(*) FROM (
			SELECT 'supervisor session ' || s.status AS what FROM sessions s WHERE s.run_id = ANY($1::uuid[]) AND s.role = 'supervisor'
			UNION ALL SELECT 'worker session ' || s.status FROM sessions s WHERE s.run_id = ANY($1::uuid[]) AND s.role <> 'supervisor'
			UNION ALL SELECT 'delegation ' || d.status FROM delegations d WHERE d.run_id = ANY($1::uuid[])
			UNION ALL SELECT 'run with no supervisor session' FROM runs r WHERE r.id = ANY($1::uuid[])
				AND NOT EXISTS (SELECT 1 FROM sessions s WHERE s.run_id = r.id AND s.role = 'supervisor')) x
		GROUP BY what ORDER BY what`, ids)
	if err != nil {
		say("  recovered runs: %v", err)
		return
	}
	defer rows.Close()
	var parts []string
	for rows.Next() {
		var what string
		var n int
		if rows.Scan(&what, &n) == nil {
			parts = append(parts, fmt.Sprintf("%d %s", n, what))
		}
	}
	say("  where the recovered runs had stopped: %s", strings.Join(parts, ", "))
}
