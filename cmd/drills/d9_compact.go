package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/aetherium-engine/aetherium/internal/harness"
	"github.com/aetherium-engine/aetherium/llm"
)

// The long-session drill's sizes: each writer session grows by about
// compactTurnBytes a turn against a window of compactWindow tokens (the
// script model's, from llm.windows), so it is compacted every few turns.
const (
	compactTurns     = 24
	compactTurnBytes = 1200
	compactWindow    = 4000
)

// drillCompact: kill -9 the worker while it compacts a session (issue 38). The
// writer sessions of a few runs outgrow the script model's (configured) window
// and are compacted every few turns; the drill kills the only worker the
// moment one of its logs shows a compaction begun and not saved (the summary
// call in flight), restarts it, and checks that every run completed with its
// full history exactly the script's — no message lost or duplicated — and
// its audit trail whole.
func drillCompact(ctx context.Context, e *env, r *report) error {
	c, err := newCluster(ctx, e, "compact", clusterOpts{workers: 1, concurrency: 4, latency: 150 * time.Millisecond,
		fleet: func(fc *harness.FleetConfig) {
			fc.Sections = map[string]map[string]any{
				"worker": {"keep_turns": 2, "summary_tokens": 200},
				"llm":    {"windows": map[string]any{"models": map[string]any{"script": map[string]any{"context": compactWindow, "output": 200}}}},
			}
		}})
	if err != nil {
		return err
	}
	defer c.close()
	n := max(3, e.o.runs/5)
	team := harness.Writer(compactTurns, compactTurnBytes)
	ids, err := harness.SubmitMany(ctx, n, 4, 0, func(ctx context.Context, i int) (string, error) {
		return c.client.SubmitTeam(ctx, team, fmt.Sprintf("drill compact run %d", i))
	})
	if !r.check(err == nil, "the API accepted %d runs of %d-turn writer sessions%s", n, compactTurns, errText(err)) {
		return nil
	}
	victim := c.workers[0]
	deadline := time.Now().Add(2 * time.Minute)
	inFlight := 0
	for time.Now().Before(deadline) && inFlight == 0 {
		inFlight = len(victim.LogLines(`"compacting session"`)) - len(victim.LogLines(`"session compacted"`)) - len(victim.LogLines(`"compaction summary unusable"`))
		if inFlight == 0 {
			time.Sleep(2 * time.Millisecond)
		}
	}
	killedAt := time.Now()
	victim.Kill()
	say("kill -9 worker pid %d with %d compaction(s) in flight (begun, not saved)", victim.Pid(), inFlight)
	r.check(inFlight > 0, "the kill came mid-compaction: %d summary call(s) in flight", inFlight)
	time.Sleep(time.Second)
	restarted, err := c.startWorker()
	if err != nil {
		return err
	}
	c.workers[0] = restarted
	say("restarted the worker as pid %d; waiting for asynq to hand back the dead worker's tasks (about a minute)", restarted.Pid())
	if !waitRuns(ctx, c, r, ids, 4*time.Minute) {
		return nil
	}
	say("all runs terminal %.0fs after the kill", time.Since(killedAt).Seconds())
	verifyHistories(ctx, c, r, ids)
	c.alive(r)
	return nil
}

// verifyHistories checks each writer session's full stored history against
// the script: every turn's call once, each answered once right after it, in
// the script's order; compactions recorded; one audit row per call.
func verifyHistories(ctx context.Context, c *cluster, r *report, ids []string) {
	rows, err := c.pool.Query(ctx, `SELECT s.id, session_history(s.id),
			(SELECT count(*) FROM session_compactions AS k WHERE k.session_id = s.id),
			(SELECT count(*) FROM tool_audit AS a WHERE a.run_id = s.run_id AND a.tool = 'write_file'),
			(SELECT count(DISTINCT a.call_key) FROM tool_audit AS a WHERE a.run_id = s.run_id AND a.tool = 'write_file')
		FROM sessions AS s WHERE s.run_id = ANY($1::uuid[]) AND s.agent = 'writer'`, ids)
	if err != nil {
		r.fail("read the writer sessions: %v", err)
		return
	}
	defer rows.Close()
	sessions, exact, compacted, audited := 0, 0, 0, 0
	var bad []string
	for rows.Next() {
		var id string
		var raw []byte
		var comps, audit, distinct int
		if err := rows.Scan(&id, &raw, &comps, &audit, &distinct); err != nil {
			r.fail("scan a writer session: %v", err)
			return
		}
		sessions++
		var hist []llm.Message
		if err := json.Unmarshal(raw, &hist); err != nil {
			r.fail("session %s history: %v", id, err)
			return
		}
		if why := scriptOrder(hist); why == "" {
			exact++
		} else if len(bad) < 3 {
			bad = append(bad, id+": "+why)
		}
		if comps > 0 {
			compacted++
		}
		if audit == compactTurns && distinct == compactTurns {
			audited++
		}
	}
	if err := rows.Err(); err != nil {
		r.fail("read the writer sessions: %v", err)
		return
	}
	n := len(ids)
	r.check(sessions == n && exact == n, "full histories equal the script's: %d of %d writer sessions (%d turns each, every call answered once, in order)%s",
		exact, n, compactTurns, strings.Join(append([]string{""}, bad...), "; "))
	r.check(compacted == n, "every writer session was compacted (%d of %d), the rows summarized still stored", compacted, n)
	r.check(audited == n, "the audit trail is whole: %d of %d runs have exactly %d write_file rows, one per call", audited, n, compactTurns)
}

// scriptOrder is "" when hist is the Writer script's session: prompt, task,
// then per turn i its write_file call of f<i>.txt and that call's result, then
// the answer; else what differs.
func scriptOrder(hist []llm.Message) string {
	if len(hist) != 2+2*compactTurns+1 {
		return fmt.Sprintf("%d messages, want %d", len(hist), 2+2*compactTurns+1)
	}
	for i := range compactTurns {
		call, res := hist[2+2*i], hist[3+2*i]
		var args struct {
			Path string `json:"path"`
		}
		if call.Role != llm.RoleAssistant || len(call.ToolCalls) != 1 || json.Unmarshal(call.ToolCalls[0].Args, &args) != nil || args.Path != fmt.Sprintf("f%d.txt", i+1) {
			return fmt.Sprintf("message %d is not turn %d's call", 2+2*i, i+1)
		}
		if res.Role != llm.RoleTool || res.ToolCallID != call.ToolCalls[0].ID || res.IsError {
			return fmt.Sprintf("message %d is not turn %d's result", 3+2*i, i+1)
		}
	}
	if last := hist[len(hist)-1]; last.Role != llm.RoleAssistant || last.Content != "written" {
		return "the last message is not the answer"
	}
	return ""
}
