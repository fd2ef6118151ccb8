package fleet_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/fleet"
	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/internal/testdb"
	"github.com/aetherium-engine/aetherium/internal/testinfra"
	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/store"
)

func types(evs []fleettest.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Type
	}
	return out
}

// requireSubsequence asserts want appears in got in order (other events may interleave).
func requireSubsequence(t *testing.T, got, want []string) {
	t.Helper()
	i := 0
	for _, g := range got {
		if i < len(want) && g == want[i] {
			i++
		}
	}
	require.Equal(t, len(want), i, "event sequence %v lacks %v in order (matched %d)", got, want, i)
}

func TestDemoRunEndToEnd(t *testing.T) {
	t.Parallel()
	f := fleettest.Start(t, fleettest.Options{})
	id := f.Submit("demo", "Greet the user in a file", map[string]any{"topic": "greetings"})
	evs := f.Follow(id, 0, 60*time.Second)

	requireSubsequence(t, types(evs), []string{
		"run.queued", "run.started", "agent.message", "tool.call", "progress",
		"delegation.created", "agent.turn_started", "tool.call", "tool.call",
		"delegation.finished", "progress", "run.completed",
	})
	// The reply's own tool.call comes before the terminal event, so a follower
	// (whose stream ends at the terminal event) sees it.
	reply := evs[len(evs)-2]
	require.Equal(t, "tool.call", reply.Type)
	require.Contains(t, string(reply.Data), `"tool":"reply"`)
	last := evs[len(evs)-1]
	var term struct{ Status, Result string }
	require.NoError(t, json.Unmarshal(last.Data, &term))
	require.Equal(t, "completed", term.Status)
	require.Equal(t, "hello.txt is written", term.Result)
	for i := 1; i < len(evs); i++ {
		require.Greater(t, evs[i].ID, evs[i-1].ID, "event ids increase")
	}

	run := f.GetRun(id)
	require.Equal(t, "completed", run.Status)
	require.Positive(t, run.TokensUsed)

	ds, err := f.Store.RunDelegations(context.Background(), id)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.Equal(t, "writer", ds[0].Agent)
	require.Equal(t, store.DelegationCompleted, ds[0].Status)
	require.Equal(t, "wrote hello.txt", ds[0].Result)

	content, err := os.ReadFile(filepath.Join(f.Cfg.Workspaces, id, "hello.txt"))
	require.NoError(t, err)
	require.Equal(t, "hello from the aetherium fleet\n", string(content))

	// Resuming the stream after an event replays only what followed it.
	tail := f.Follow(id, evs[len(evs)-3].ID, 10*time.Second)
	require.Equal(t, types(evs[len(evs)-2:]), types(tail))

	var dl struct {
		Delegations []store.Delegation `json:"delegations"`
	}
	code, _ := f.Do("GET", "/api/runs/"+id+"/delegations", nil, &dl)
	require.Equal(t, http.StatusOK, code)
	require.Len(t, dl.Delegations, 1)
}

// The same demo with every Redis client of the fleet (asynq's queue, the
// worker server's wake-hooked client, leases, mailboxes, events) on a Redis
// Cluster of three masters (no CROSSSLOT) and through Sentinel. The cluster is
// shared by the test binary, so this is the only fleet test that uses it (the
// fleet's keys have fixed prefixes).
func TestDemoRunEndToEndOnClusterAndSentinel(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		url    func(t *testing.T) string
		client func(rdb redis.UniversalClient) bool
	}{
		{"cluster", func(t *testing.T) string { return testdb.RedisCluster(t) },
			func(rdb redis.UniversalClient) bool { _, ok := rdb.(*redis.ClusterClient); return ok }},
		{"sentinel", func(t *testing.T) string { return testdb.RedisSentinel(t, 2) },
			func(rdb redis.UniversalClient) bool { c, ok := rdb.(*redis.Client); return ok && c.Options().DB == 2 }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url := tc.url(t)
			f := fleettest.Start(t, fleettest.Options{Configure: func(c *config.Config) { c.RedisURL = url }})
			require.True(t, tc.client(f.Redis), "the fleet's client is of the URL's shape")
			id := f.Submit("demo", "Greet the user in a file", map[string]any{"topic": "greetings"})
			evs := f.Follow(id, 0, 60*time.Second)
			requireSubsequence(t, types(evs), []string{"run.queued", "run.started", "delegation.created", "delegation.finished", "run.completed"})
			require.Equal(t, "completed", f.GetRun(id).Status)
			content, err := os.ReadFile(filepath.Join(f.Cfg.Workspaces, id, "hello.txt"))
			require.NoError(t, err)
			require.Equal(t, "hello from the aetherium fleet\n", string(content))
		})
	}
}

// snapshot captures everything a duplicate delivery must not change.
type snapshot struct {
	events, delegations int
	tokens              int64
	status              string
	sessions            map[string]int
}

func takeSnapshot(t *testing.T, st *store.Store, runID string) snapshot {
	t.Helper()
	ctx := context.Background()
	s := snapshot{sessions: map[string]int{}}
	require.NoError(t, st.Pool.QueryRow(ctx, `SELECT count(*) FROM run_events WHERE run_id = $1`, runID).Scan(&s.events))
	require.NoError(t, st.Pool.QueryRow(ctx, `SELECT count(*) FROM delegations WHERE run_id = $1`, runID).Scan(&s.delegations))
	require.NoError(t, st.Pool.QueryRow(ctx, `SELECT tokens_used, status FROM runs WHERE id = $1`, runID).Scan(&s.tokens, &s.status))
	rows, err := st.Pool.Query(ctx, `SELECT id, jsonb_array_length(session_history(id)) FROM sessions WHERE run_id = $1`, runID)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var id string
		var n int
		require.NoError(t, rows.Scan(&id, &n))
		s.sessions[id] = n
	}
	return s
}

func TestDuplicateDeliveryIsNoop(t *testing.T) {
	t.Parallel()
	// No worker server: the test delivers tasks to the handlers itself. FIFO
	// dispatch: with no worker heartbeating, the fair dispatcher would hold the
	// tasks in their lines (window 0) and asynq, whose task ids this checks,
	// would never see them (queue/fair's TestIdempotency covers its own).
	f := fleettest.Start(t, fleettest.Options{NoWorker: true, Configure: func(c *config.Config) { c.Fairness.Dispatch = queue.DispatchFIFO }})
	ctx := context.Background()
	mux := f.Worker.Mux()
	id := f.Submit("demo", "Greet", map[string]any{"topic": "x"})

	// First delivery: the supervisor plans and delegates, then waits.
	require.NoError(t, mux.ProcessTask(ctx, queue.SuperviseTask(id)))
	afterFirst := takeSnapshot(t, f.Store, id)
	require.Equal(t, 1, afterFirst.delegations)
	// Same task again: nothing changes (no second model call, no second delegation).
	require.NoError(t, mux.ProcessTask(ctx, queue.SuperviseTask(id)))
	require.Equal(t, afterFirst, takeSnapshot(t, f.Store, id))

	ds, err := f.Store.RunDelegations(ctx, id)
	require.NoError(t, err)
	require.NoError(t, mux.ProcessTask(ctx, queue.TurnTask(ds[0].ID)))
	afterTurn := takeSnapshot(t, f.Store, id)
	require.NoError(t, mux.ProcessTask(ctx, queue.TurnTask(ds[0].ID)))
	require.Equal(t, afterTurn, takeSnapshot(t, f.Store, id), "second delivery of the finished turn is a no-op")

	// Resume the supervisor to the end, then deliver everything once more.
	require.NoError(t, mux.ProcessTask(ctx, queue.SuperviseTask(id)))
	done := takeSnapshot(t, f.Store, id)
	require.Equal(t, "completed", done.status)
	require.NoError(t, mux.ProcessTask(ctx, queue.SuperviseTask(id)))
	require.NoError(t, mux.ProcessTask(ctx, queue.TurnTask(ds[0].ID)))
	require.Equal(t, done, takeSnapshot(t, f.Store, id))
	var terminal int
	require.NoError(t, f.Store.Pool.QueryRow(ctx, `SELECT count(*) FROM run_events WHERE run_id = $1 AND type LIKE 'run.completed'`, id).Scan(&terminal))
	require.Equal(t, 1, terminal)

	// Enqueueing the same deterministic TaskID twice keeps one task.
	require.NoError(t, f.Queue.Supervise(ctx, queue.Route{Key: store.LocalOwner, Priority: queue.DefaultPriority}, id, "dup-check"))
	require.NoError(t, f.Queue.Supervise(ctx, queue.Route{Key: store.LocalOwner, Priority: queue.DefaultPriority}, id, "dup-check"))
	info, err := f.Inspector().GetTaskInfo(queue.QueueSupervisor, "supervise:"+id+":dup-check")
	require.NoError(t, err)
	require.Equal(t, "supervise:"+id+":dup-check", info.ID)
}

func TestWorkerStoppedMidTurnRunStillCompletes(t *testing.T) {
	t.Parallel()
	f := fleettest.Start(t, fleettest.Options{
		// Every model answer takes 700ms, so the turn is surely mid-flight when the
		// worker is stopped.
		Fleet: fleet.Options{Models: &fleet.ModelFactory{ScriptLatency: 700 * time.Millisecond}},
	})
	id := f.Submit("demo", "Greet", map[string]any{"topic": "x"})
	deadline := time.Now().Add(30 * time.Second)
	for {
		evs, err := f.Store.EventsAfter(context.Background(), id, 0, 100)
		require.NoError(t, err)
		if len(evs) > 0 && evs[len(evs)-1].Type == "agent.turn_started" {
			break
		}
		require.True(t, time.Now().Before(deadline), "writer turn never started")
		time.Sleep(20 * time.Millisecond)
	}
	// SIGTERM-like stop: the in-flight step's context ends after the shutdown
	// timeout and its task goes back to the queue.
	f.StopWorker()
	require.NotEqual(t, "completed", f.GetRun(id).Status)
	f.StartWorker()
	run := f.WaitTerminal(id, 90*time.Second)
	require.Equal(t, "completed", run.Status, run.Error)

	ctx := context.Background()
	ds, err := f.Store.RunDelegations(ctx, id)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.Equal(t, store.DelegationCompleted, ds[0].Status)
	// Each tool call of the writer appears once in its conversation.
	var n int
	require.NoError(t, f.Store.Pool.QueryRow(ctx, `SELECT count(*) FROM sessions s, jsonb_array_elements(session_history(s.id)) m
		WHERE s.run_id = $1 AND s.agent = 'writer' AND m->>'role' = 'tool'`, id).Scan(&n))
	require.Equal(t, 2, n)
	_, err = os.Stat(filepath.Join(f.Cfg.Workspaces, id, "hello.txt"))
	require.NoError(t, err)
}

// team builds an inline team whose writer plays the given script.
// loopback is a team's allowlist entry for the test's fake sites on 127.0.0.1:
// private destinations need the allowlist (security.egress.private: allowlist).
var loopback = map[string]any{"allowed_domains": []string{"127.0.0.1"}}

// privateOpen allowlists every loopback and private address: what a test of the
// fleet's own endpoints needs to show that no allowlist opens them.
var privateOpen = map[string]any{"allowed_domains": []string{"localhost", "127.0.0.0/8", "::1", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7"}}

func team(writer []map[string]any, extra map[string]any) map[string]any {
	t := map[string]any{
		"name":  "inline",
		"model": map[string]any{"provider": "script"},
		"supervisor": map[string]any{
			"name": "boss", "prompt": "coordinate", "mcp_servers": []string{"orchestration"},
		},
		"workers": []map[string]any{{"name": "writer", "prompt": "write", "mcp_servers": []string{"workspace"}}},
		"script": map[string]any{"agents": map[string]any{
			"boss": []map[string]any{
				{"calls": []map[string]any{{"tool": "delegate", "args": map[string]any{"agent": "writer", "task": "go"}}}},
				{"calls": []map[string]any{{"tool": "reply", "args": map[string]any{"message": "done"}}}},
			},
			"writer": writer,
		}},
	}
	for k, v := range extra {
		t[k] = v
	}
	return t
}

func call(tool string, args map[string]any) map[string]any {
	return map[string]any{"calls": []map[string]any{{"tool": tool, "args": args}}}
}

func TestModelMistakesGoBackAsToolErrors(t *testing.T) {
	t.Parallel()
	f := fleettest.Start(t, fleettest.Options{})
	id := f.SubmitTeam(team([]map[string]any{
		call("rm_everything", map[string]any{"path": "/"}),                      // hallucinated tool
		call("create_plan", map[string]any{"steps": []string{"x"}}),             // real tool, not in the writer's catalog
		call("write_file", map[string]any{"path": "ok.txt", "content": "fine"}), // resets the breaker
		call("write_file", map[string]any{"path": 3}),                           // wrong type
		call("write_file", map[string]any{"path": "a.txt"}),                     // missing required content
		call("write_file", map[string]any{"path": "../escape", "content": "x"}),
		call("write_file", map[string]any{"path": "ok.txt", "content": "fine"}),
		{"say": "recovered"},
	}, nil), "test")
	evs := f.Follow(id, 0, 60*time.Second)
	require.Equal(t, "run.completed", evs[len(evs)-1].Type)

	var decisions []string
	for _, e := range evs {
		if e.Type != "tool.call" || e.Agent != "writer" {
			continue
		}
		var d struct{ Tool, Decision, Error string }
		require.NoError(t, json.Unmarshal(e.Data, &d))
		decisions = append(decisions, d.Tool+":"+d.Decision)
		switch d.Tool {
		case "rm_everything":
			require.Contains(t, d.Error, "unknown tool")
		}
	}
	require.Equal(t, []string{
		"rm_everything:denied", "create_plan:denied", "write_file:allowed", "write_file:error", "write_file:error",
		"write_file:error", "write_file:allowed",
	}, decisions)

	// The errors went back to the model as tool messages.
	var msgs string
	require.NoError(t, f.Store.Pool.QueryRow(context.Background(),
		`SELECT session_history(id)::text FROM sessions WHERE run_id = $1 AND agent = 'writer'`, id).Scan(&msgs))
	require.Contains(t, msgs, "invalid tool arguments")
	require.Contains(t, msgs, "missing required field(s): content")
	require.Contains(t, msgs, "escapes the workspace")
	_, err := os.Stat(filepath.Join(f.Cfg.Workspaces, "escape"))
	require.True(t, os.IsNotExist(err))
}

func TestRunFailsCleanly(t *testing.T) {
	t.Parallel()
	f := fleettest.Start(t, fleettest.Options{})
	bad := call("nope", nil)
	cases := []struct {
		name   string
		team   map[string]any
		reason string
		errHas string
	}{
		{"script exhausted", team([]map[string]any{call("write_file", map[string]any{"path": "a", "content": "b"})}, nil), "script_exhausted", "writer"},
		{"circuit breaker", team([]map[string]any{bad, bad, bad, bad, bad, bad}, nil), "circuit_breaker", "5 consecutive failed tool calls"},
		{"token budget", team([]map[string]any{{"say": strings.Repeat("long answer ", 200)}}, map[string]any{"budget": map[string]any{"max_tokens": 50}}), "budget_exceeded", "token budget"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			id := f.SubmitTeam(tc.team, "x")
			evs := f.Follow(id, 0, 60*time.Second)
			last := evs[len(evs)-1]
			require.Equal(t, "run.failed", last.Type)
			run := f.GetRun(id)
			require.Equal(t, "failed", run.Status)
			require.Equal(t, tc.reason, run.Reason)
			require.Contains(t, run.Error, tc.errHas)
		})
	}
}

func TestCancelRun(t *testing.T) {
	t.Parallel()
	f := fleettest.Start(t, fleettest.Options{Fleet: fleet.Options{Models: &fleet.ModelFactory{ScriptLatency: 300 * time.Millisecond}}})
	id := f.Submit("demo", "Greet", map[string]any{"topic": "x"})
	var r fleettest.Run
	code, raw := f.Do("POST", "/api/runs/"+id+"/cancel", nil, &r)
	require.Equal(t, http.StatusOK, code, string(raw))
	require.Equal(t, "cancelled", r.Status)
	evs := f.Follow(id, 0, 30*time.Second)
	require.Equal(t, "run.cancelled", evs[len(evs)-1].Type)
	code, raw = f.Do("POST", "/api/runs/"+id+"/cancel", nil, nil)
	require.Equal(t, http.StatusConflict, code)
	require.Contains(t, string(raw), "already cancelled")
	// Work in flight stops at its next step: the run stays cancelled, no reply lands.
	time.Sleep(1500 * time.Millisecond)
	run := f.GetRun(id)
	require.Equal(t, "cancelled", run.Status)
	require.Empty(t, run.Result)
}

// A supervisor killed after dispatching its delegations but before saving that it
// waits finds them finished on redelivery: the call is answered from them and its
// audit row, lost with the crash, is written then (drill 1 found it missing).
func TestDelegateAuditedAfterCrashMidDispatch(t *testing.T) {
	t.Parallel()
	f := fleettest.Start(t, fleettest.Options{NoWorker: true})
	ctx := context.Background()
	mux := f.Worker.Mux()
	id := f.Submit("demo", "Greet", map[string]any{"topic": "x"})
	require.NoError(t, mux.ProcessTask(ctx, queue.SuperviseTask(id)))

	// The crash: the waiting status and the audit row saved with it never landed.
	tag, err := f.Store.Pool.Exec(ctx, `UPDATE sessions SET status = 'active' WHERE run_id = $1 AND agent = 'supervisor' AND status = 'waiting'`, id)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
	tag, err = f.Store.Pool.Exec(ctx, `DELETE FROM tool_audit WHERE run_id = $1 AND tool = 'delegate'`, id)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())

	ds, err := f.Store.RunDelegations(ctx, id)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.NoError(t, mux.ProcessTask(ctx, queue.TurnTask(ds[0].ID)))
	require.NoError(t, mux.ProcessTask(ctx, queue.SuperviseTask(id)))
	require.Equal(t, "completed", takeSnapshot(t, f.Store, id).status)

	var n int
	require.NoError(t, f.Store.Pool.QueryRow(ctx, `SELECT count(*) FROM tool_audit WHERE run_id = $1 AND tool = 'delegate' AND decision = 'allowed'`, id).Scan(&n))
	require.Equal(t, 1, n, "the delegate call has its audit row")
	ds, err = f.Store.RunDelegations(ctx, id)
	require.NoError(t, err)
	require.Len(t, ds, 1, "redispatching did not delegate twice")
	var results int
	require.NoError(t, f.Store.Pool.QueryRow(ctx, `SELECT count(*) FROM sessions s, jsonb_array_elements(session_history(s.id)) m
		WHERE s.run_id = $1 AND s.agent = 'supervisor' AND m->>'role' = 'tool' AND m->>'tool_call_id' = $2`, id, ds[0].ToolCallID).Scan(&results))
	require.Equal(t, 1, results, "the delegate call has one result")
}

// The dev role opens a fleet on a database nobody migrated yet (the README's demo on
// a fresh machine): Options.Migrate brings the schema up before the fleet id is read.
func TestOpenMigratesAFreshDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, fleettest.AdminURL())
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close(context.Background()) })
	name := fmt.Sprintf("aeth_fresh_%d", time.Now().UnixNano())
	_, err = admin.Exec(ctx, "CREATE DATABASE "+name)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)") })

	cfg := fleettest.Config(t)
	cfg.DatabaseURL = testinfra.WithDB(fleettest.AdminURL(), name)
	f, err := fleet.Open(ctx, cfg, fleettest.Logger(t), fleet.Options{Migrate: true, NoSandbox: true})
	require.NoError(t, err)
	t.Cleanup(f.Close)
	id, err := f.Store.FleetID(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, id)
}
