package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/aetherium-engine/aetherium/internal/harness"
)

// waitRuns waits until every run of ids is terminal and checks that they completed.
func waitRuns(ctx context.Context, c *cluster, r *report, ids []string, timeout time.Duration) bool {
	start := time.Now()
	last := time.Now()
	counts, err := harness.WaitTerminal(ctx, c.pool, ids, timeout, func(rc harness.RunCounts) {
		if time.Since(last) >= 10*time.Second {
			say("  … %d/%d runs terminal after %.0fs (%v)", rc.Terminal(), len(ids), time.Since(start).Seconds(), rc.ByStatus)
			last = time.Now()
		}
	})
	if !r.check(err == nil, "every one of the %d runs reached a terminal state (%.0fs)%s", len(ids), time.Since(start).Seconds(), errText(err)) {
		return false
	}
	ok := r.check(counts.ByStatus["completed"] == len(ids), "all %d runs completed (%v%s)", len(ids), counts.ByStatus, failures(counts))
	// A run completes inside its reply call, before the supervisor's step saves
	// that call's result: let every step finish before counting what they left.
	// Tasks orphaned by a fault stay "active" until asynq's recoverer hands them
	// back, up to two minutes after it.
	settled := c.settle(ctx, 150*time.Second)
	r.check(settled, "the fleet settled: no step in progress, no task queued, active or waiting to retry")
	return ok
}

// settle waits until no session is leased by a step and the fleet's queues hold no
// pending, active, scheduled or retrying task.
func (c *cluster) settle(ctx context.Context, timeout time.Duration) bool {
	ins := c.inspector()
	defer ins.Close()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		var leased int
		err := c.pool.QueryRow(ctx, `SELECT count(*) FROM sessions WHERE lease_until > now()`).Scan(&leased)
		busy := err != nil || leased > 0
		for _, q := range []string{"supervisor", "workers"} {
			qi, err := ins.GetQueueInfo(q)
			if err != nil {
				continue // a queue nobody used yet
			}
			busy = busy || qi.Pending+qi.Active+qi.Scheduled+qi.Retry > 0
		}
		if !busy {
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return false
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return ": " + err.Error()
}

func failures(c harness.RunCounts) string {
	if len(c.Reasons) == 0 {
		return ""
	}
	return fmt.Sprintf("; failed: %v, e.g. %v", c.Reasons, c.Errors)
}

// verifyCounts checks what the runs left behind against the team's script: the
// delegations, each agent's session (no turn ran twice), the events, and one audit
// row per executed tool call.
func verifyCounts(ctx context.Context, c *cluster, r *report, ids []string) {
	want := harness.ExpectOf(drillTeam())
	n := len(ids)
	db := c.pool

	var dels, completed int
	if err := db.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE status = 'completed') FROM delegations WHERE run_id = ANY($1::uuid[])`, ids).Scan(&dels, &completed); err != nil {
		r.fail("count delegations: %v", err)
		return
	}
	unfinished := ""
	if completed != dels {
		rows, err := db.Query(ctx, `SELECT d.id || ' ' || d.status || ', the delegate call''s result: ' || coalesce((
				SELECT m->>'content' FROM sessions s, jsonb_array_elements(session_history(s.id)) m
				WHERE s.id = d.parent_session AND m->>'role' = 'tool' AND m->>'tool_call_id' = d.tool_call_id LIMIT 1), '(none)')
			FROM delegations d WHERE d.run_id = ANY($1::uuid[]) AND d.status <> 'completed' LIMIT 3`, ids)
		if err == nil {
			for rows.Next() {
				var x string
				if rows.Scan(&x) == nil {
					unfinished += "; " + x
				}
			}
			rows.Close()
		}
	}
	r.check(dels == want.Delegations*n && completed == dels, "delegations: %d, all completed (want %d × %d runs = %d; completed %d%s)", dels, want.Delegations, n, want.Delegations*n, completed, unfinished)

	var twice, never int
	err := db.QueryRow(ctx, `WITH f AS (
			SELECT d.id, (SELECT count(*) FROM run_events e WHERE e.run_id = d.run_id AND e.type = 'delegation.finished' AND e.data->>'delegation_id' = d.id) AS n
			FROM delegations d WHERE d.run_id = ANY($1::uuid[]))
		SELECT count(*) FILTER (WHERE n > 1), count(*) FILTER (WHERE n = 0) FROM f`, ids).Scan(&twice, &never)
	if err != nil {
		r.fail("delegation events: %v", err)
		return
	}
	r.check(twice == 0 && never == 0, "every delegation finished exactly once (finished twice: %d, never: %d)", twice, never)

	// A delegation that ran twice to completion would show more model answers or
	// tool results in its session than its script has.
	rows, err := db.Query(ctx, `SELECT s.id, s.agent,
			(SELECT count(*) FROM jsonb_array_elements(session_history(s.id)) m WHERE m->>'role' = 'assistant'),
			(SELECT count(*) FROM jsonb_array_elements(session_history(s.id)) m WHERE m->>'role' = 'tool'),
			(SELECT string_agg(coalesce(m->>'name', '') || '/' || coalesce(m->>'tool_call_id', ''), ' ') FROM jsonb_array_elements(session_history(s.id)) m WHERE m->>'role' = 'tool')
		FROM sessions s WHERE s.run_id = ANY($1::uuid[])`, ids)
	if err != nil {
		r.fail("sessions: %v", err)
		return
	}
	sessions, wrong := 0, 0
	var example string
	for rows.Next() {
		var id, agent string
		var turns, calls int
		var results *string
		if err := rows.Scan(&id, &agent, &turns, &calls, &results); err != nil {
			rows.Close()
			r.fail("sessions: %v", err)
			return
		}
		sessions++
		if turns != want.Turns[agent] || calls != want.Calls[agent] {
			wrong++
			if wrong <= 3 {
				got := ""
				if results != nil {
					got = *results
				}
				example += fmt.Sprintf("; session %s (%s): %d turns, %d tool results [%s] (want %d, %d)", id, agent, turns, calls, got, want.Turns[agent], want.Calls[agent])
			}
		}
	}
	rows.Close()
	r.check(sessions == n*(1+want.Delegations) && wrong == 0, "sessions: %d, each with exactly its script's model turns and tool results, no turn replayed (wrong: %d%s)", sessions, wrong, example)

	var terminal, answers int
	if err := db.QueryRow(ctx, `SELECT count(*) FILTER (WHERE type IN ('run.completed','run.failed','run.cancelled')), count(*) FILTER (WHERE type = 'agent.message')
		FROM run_events WHERE run_id = ANY($1::uuid[])`, ids).Scan(&terminal, &answers); err != nil {
		r.fail("events: %v", err)
		return
	}
	r.check(terminal == n, "one terminal event per run (%d)", terminal)
	r.check(answers == want.ModelTurns*n, "model answers recorded: %d (want %d × %d)", answers, want.ModelTurns, n)

	verifyAudit(ctx, c, r, ids, want.ToolCalls*n)

	// Informational: how the crash-safety of non-idempotent calls played out.
	var unknown int
	if db.QueryRow(ctx, `SELECT count(*) FROM sessions s, jsonb_array_elements(session_history(s.id)) m
		WHERE s.run_id = ANY($1::uuid[]) AND m->>'role' = 'tool' AND m->>'content' ILIKE '%outcome unknown%'`, ids).Scan(&unknown) == nil && unknown > 0 {
		say("  note: %d non-idempotent call(s) were reported to the model as \"outcome unknown\" (interrupted mid-call, not run again)", unknown)
	}
}

// auditCounts waits (up to a minute) for the audit buffers to flush and counts, over
// the runs of ids, the tool results in sessions, those without an audit row, the
// audit rows, and the rows without a tool result.
func auditCounts(ctx context.Context, c *cluster, ids []string) (msgs, unaudited, rows, orphans int, err error) {
	deadline := time.Now().Add(60 * time.Second)
	for {
		err = c.pool.QueryRow(ctx, `WITH msgs AS (
				SELECT s.id || ':' || (m->>'tool_call_id') AS call_key
				FROM sessions s, jsonb_array_elements(session_history(s.id)) m
				WHERE s.run_id = ANY($1::uuid[]) AND m->>'role' = 'tool')
			SELECT (SELECT count(*) FROM msgs),
				(SELECT count(*) FROM msgs WHERE NOT EXISTS (SELECT 1 FROM tool_audit a WHERE a.call_key = msgs.call_key)),
				(SELECT count(*) FROM tool_audit a WHERE a.run_id = ANY($1::uuid[])),
				(SELECT count(*) FROM tool_audit a WHERE a.run_id = ANY($1::uuid[]) AND NOT EXISTS (SELECT 1 FROM msgs WHERE msgs.call_key = a.call_key))`,
			ids).Scan(&msgs, &unaudited, &rows, &orphans)
		if (err == nil && unaudited == 0) || time.Now().After(deadline) || ctx.Err() != nil {
			return msgs, unaudited, rows, orphans, err
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// verifyAudit checks, once the audit buffers have flushed, that every tool result in
// a session has its audit row (call_key = session id ':' call id) and that the
// audit holds nothing else: no attempt audited twice, none without a result.
func verifyAudit(ctx context.Context, c *cluster, r *report, ids []string, want int) {
	msgs, unaudited, rows, orphans, err := auditCounts(ctx, c, ids)
	if err != nil {
		r.fail("audit: %v", err)
		return
	}
	r.check(msgs == want, "tool calls executed (tool results in sessions): %d (want %d)", msgs, want)
	missing := ""
	if unaudited > 0 {
		rows, err := c.pool.Query(ctx, `SELECT s.id || ':' || (m->>'tool_call_id') || ' ' || (m->>'name')
			FROM sessions s, jsonb_array_elements(session_history(s.id)) m
			WHERE s.run_id = ANY($1::uuid[]) AND m->>'role' = 'tool'
			AND NOT EXISTS (SELECT 1 FROM tool_audit a WHERE a.call_key = s.id || ':' || (m->>'tool_call_id')) LIMIT 5`, ids)
		if err == nil {
			var keys []string
			for rows.Next() {
				var k string
				if rows.Scan(&k) == nil {
					keys = append(keys, k)
				}
			}
			rows.Close()
			missing = "; e.g. " + strings.Join(keys, ", ")
		}
	}
	r.check(unaudited == 0, "every executed tool call has its audit row (missing: %d%s)", unaudited, missing)
	r.check(rows == msgs && orphans == 0, "audit rows: %d = tool calls, none twice, none without a result (extra: %d)", rows, orphans)
}
