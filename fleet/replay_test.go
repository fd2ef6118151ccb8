package fleet_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/fleet"
	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/replay"
	"github.com/aetherium-engine/aetherium/retention"
	"github.com/aetherium-engine/aetherium/sandbox"
	"github.com/aetherium-engine/aetherium/security"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/tools"
)

// replayFleet is a fleet whose live tool dispatches are counted (a replay
// must add none) and its finished demo runs.
type replayFleet struct {
	*fleettest.Fleet
	// dispatched counts the live router's dispatches by run (runs of one
	// fleet go on side by side).
	mu         *sync.Mutex
	dispatched map[string]int
}

func setupReplay(t *testing.T, opts fleettest.Options) replayFleet {
	t.Helper()
	f := replayFleet{mu: &sync.Mutex{}, dispatched: map[string]int{}}
	count := func(next tools.Handler) tools.Handler {
		return tools.HandlerFunc(func(ctx context.Context, call tools.Call) (tools.Result, error) {
			f.mu.Lock()
			f.dispatched[call.Session.RunID]++
			f.mu.Unlock()
			return next.Handle(ctx, call)
		})
	}
	opts.Fleet.Middleware = append(opts.Fleet.Middleware, count)
	f.Fleet = fleettest.Start(t, opts)
	return f
}

// demoRun submits the demo template and waits for it to complete.
func (f replayFleet) demoRun(t *testing.T) string {
	t.Helper()
	return f.settled(t, f.Submit("demo", "Greet the user in a file", map[string]any{"topic": "greetings"}))
}

// settled waits for run id to complete and its record to settle.
func (f replayFleet) settled(t *testing.T, id string) string {
	t.Helper()
	require.Equal(t, store.RunCompleted, f.WaitTerminal(id, 60*time.Second).Status)
	// The run's post-run work (its cleanup) writes after the terminal event:
	// the record is settled when its events stop changing.
	last := -1
	require.Eventually(t, func() bool {
		evs, err := f.Store.EventsAfter(context.Background(), id, 0, 10_000)
		require.NoError(t, err)
		settled := len(evs) == last
		last = len(evs)
		return settled
	}, 20*time.Second, 300*time.Millisecond)
	return id
}

// trace is what a replay must leave as it found it.
type replayTrace struct {
	audit, events, approvals, dispatched int
	// run is the run's row as it reads: its status, result and last change.
	run      string
	messages map[string]int
}

func (f replayFleet) trace(t *testing.T, id string) replayTrace {
	t.Helper()
	ctx := context.Background()
	audit, err := f.Store.RunAudit(ctx, id, 10_000)
	require.NoError(t, err)
	evs, err := f.Store.EventsAfter(ctx, id, 0, 10_000)
	require.NoError(t, err)
	apprs, err := f.Store.ListApprovals(ctx, "", id, 1000)
	require.NoError(t, err)
	run, err := f.Store.GetRun(ctx, id)
	require.NoError(t, err)
	sums, err := f.Store.RunSessions(ctx, id)
	require.NoError(t, err)
	msgs := map[string]int{}
	for _, s := range sums {
		msgs[s.ID] = s.Messages
	}
	return replayTrace{audit: len(audit), events: len(evs), approvals: len(apprs), dispatched: f.runDispatches(id), run: run.Status + " " + run.Result + " " + run.UpdatedAt.String(), messages: msgs}
}

func TestReplayOfARecordedRun(t *testing.T) {
	t.Parallel()
	f := setupReplay(t, fleettest.Options{})
	ctx := context.Background()
	id := f.demoRun(t)
	before := f.trace(t, id)
	require.Positive(t, before.audit)
	require.Equal(t, 8, before.dispatched, "the run's own calls, live")

	rep, err := f.Replay(ctx, id, fleet.ReplayOptions{})
	require.NoError(t, err)
	require.False(t, rep.Diverged, "divergence: %+v", rep.Divergence)
	require.Zero(t, rep.Differing)
	require.Zero(t, rep.ToolExecutions)
	require.Equal(t, 2, rep.Sessions) // the supervisor and the writer
	// Every recorded call was judged and let through to the record: the
	// supervisor's 6 calls and the writer's 2, and the writer's final answer.
	require.Equal(t, 9, rep.Steps)
	require.Equal(t, 8, rep.ServedFromRecord)
	require.Len(t, rep.StepList, 9)
	for _, st := range rep.StepList {
		require.True(t, st.Same, "step %d", st.Index)
		require.Equal(t, st.RecordedHash, st.ReplayedHash, "step %d", st.Index)
		require.Len(t, st.ReplayedHash, 64)
	}
	require.Equal(t, before, f.trace(t, id), "a replay changes nothing of the run and runs no tool")

	// Over the API, the same report: the hashes are a function of the record.
	var got replay.Report
	code, body := f.Do(http.MethodPost, "/api/runs/"+id+"/replay", nil, &got)
	require.Equal(t, http.StatusOK, code, string(body))
	require.Equal(t, rep.FinalHash, got.FinalHash)
	require.False(t, got.Diverged)
	require.Equal(t, before, f.trace(t, id))

	// A planted change of the engine: a rule that denies the writer's
	// write_file. The replay names that call, both sides shown.
	perm := filepath.Join(t.TempDir(), "permissions.yaml")
	require.NoError(t, os.WriteFile(perm, []byte(`rules:
  - match: {tool: write_file, path_pattern: "^hello\\.txt$"}
    action: always_deny
    reason: "no greetings"
`), 0o600))
	rules, err := security.LoadRules(perm, nil)
	require.NoError(t, err)
	rep, err = f.Replay(ctx, id, fleet.ReplayOptions{Rules: rules})
	require.NoError(t, err)
	require.True(t, rep.Diverged)
	d := rep.Divergence
	require.NotNil(t, d)
	require.Equal(t, replay.KindCall, d.Kind)
	require.Equal(t, "writer", d.Agent)
	require.Equal(t, 1, d.Turn)
	require.Equal(t, "write_file", d.Tool)
	require.Equal(t, "allowed", d.Recorded.Decision)
	require.Equal(t, "denied", d.Replayed.Decision)
	require.Equal(t, "rules", d.Replayed.Layer)
	require.Equal(t, "no greetings", d.Replayed.Error)
	require.NotEqual(t, d.RecordedHash, d.ReplayedHash)
	require.Equal(t, 1, rep.Differing, "only that call differs")
	require.Equal(t, before, f.trace(t, id))
}

func TestReplayRefusesWhatItCannotReplay(t *testing.T) {
	t.Parallel()
	f := setupReplay(t, fleettest.Options{})
	ctx := context.Background()

	// A run not finished: 409, nothing replayed.
	queued := "01900000-0000-7000-8000-0000000000aa"
	require.NoError(t, f.Store.CreateRun(ctx, store.Run{ID: queued, Status: store.RunQueued, Prompt: "p", Team: []byte(`{}`), Owner: "admin"}))
	code, body := f.Do(http.MethodPost, "/api/runs/"+queued+"/replay", nil, nil)
	require.Equal(t, http.StatusConflict, code, string(body))
	require.Contains(t, string(body), "not finished")

	writer := func(id string) string {
		ds, err := f.Store.RunDelegations(ctx, id)
		require.NoError(t, err)
		require.Len(t, ds, 1)
		return queue.DelegationSession(ds[0].ID).String()
	}
	tests := []struct {
		name    string
		corrupt func(t *testing.T, id string)
		want    string
	}{
		{"a tool message that answers no call", func(t *testing.T, id string) {
			_, err := f.Store.Pool.Exec(ctx, `UPDATE session_messages SET message = jsonb_set(message, '{tool_call_id}', '"call_nobody_made"')
				WHERE session_id = $1 AND seq = (SELECT min(seq) FROM session_messages WHERE session_id = $1 AND message->>'role' = 'tool')`, writer(id))
			require.NoError(t, err)
		}, "call_nobody_made"},
		{"garbage in a message", func(t *testing.T, id string) {
			_, err := f.Store.Pool.Exec(ctx, `UPDATE session_messages SET message = '["not", "a", "message"]'::jsonb WHERE session_id = $1 AND seq = 2`, writer(id))
			require.NoError(t, err)
		}, "corrupt record"},
		{"a session missing", func(t *testing.T, id string) {
			_, err := f.Store.Pool.Exec(ctx, `DELETE FROM sessions WHERE id = $1`, writer(id))
			require.NoError(t, err)
		}, "its session is missing"},
		{"a tool call whose arguments are not JSON", func(t *testing.T, id string) {
			_, err := f.Store.Pool.Exec(ctx, `UPDATE session_messages SET message = jsonb_set(message, '{tool_calls,0,args}', '"}{"')
				WHERE session_id = $1 AND message->>'role' = 'assistant' AND message ? 'tool_calls'`, writer(id))
			require.NoError(t, err)
		}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			id := f.demoRun(t)
			tc.corrupt(t, id)
			before := f.trace(t, id)
			rep, err := f.Replay(ctx, id, fleet.ReplayOptions{})
			if tc.want == "" {
				// Judged, never run: the gate refuses what it cannot read, or
				// the record's answer is served; either way nothing executes.
				require.NoError(t, err)
				require.Zero(t, rep.ToolExecutions)
			} else {
				require.ErrorIs(t, err, replay.ErrCorruptRecord)
				require.ErrorContains(t, err, tc.want)
				code, body := f.Do(http.MethodPost, "/api/runs/"+id+"/replay", nil, nil)
				require.Equal(t, http.StatusUnprocessableEntity, code, string(body))
			}
			require.Equal(t, before, f.trace(t, id))
		})
	}
}

func (f replayFleet) runDispatches(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.dispatched[id]
}

// countingExec counts the shell commands the sandbox runs.
type countingExec struct {
	sandbox.Executor
	n atomic.Int64
}

func (c *countingExec) Exec(ctx context.Context, req sandbox.Request) (sandbox.Result, error) {
	c.n.Add(1)
	return c.Executor.Exec(ctx, req)
}

// A run whose calls the gate judged every way — run, refused by the
// capability layer, held for a human and approved — replays with the same
// decisions; the sandbox runs nothing and no approval is asked again.
func TestReplayOfGatedCalls(t *testing.T) {
	t.Parallel()
	local, err := sandbox.NewLocal(sandbox.Config{AllowLocal: true, Timeout: 30 * time.Second})
	require.NoError(t, err)
	x := &countingExec{Executor: local}
	f := setupReplay(t, fleettest.Options{
		Configure: func(c *config.Config) { c.Security.ApprovalWindow = time.Minute },
		Fleet:     fleet.Options{Executor: x},
	})
	ctx := context.Background()
	tm := team([]map[string]any{
		call("run_shell", map[string]any{"command": "echo hi > a.txt"}),
		call("rm_everything", map[string]any{"path": "/"}), // no such tool
		call("run_shell", map[string]any{"command": "rm -rf build"}),
		{"say": "done"},
	}, nil)
	tm["workers"] = []map[string]any{{"name": "writer", "prompt": "w", "mcp_servers": []string{"workspace", "shell"}}}
	id := f.SubmitTeam(tm, "clean up")
	a := pendingApproval(t, f.Fleet, id)
	code, raw := f.Do("POST", "/api/approvals/"+a.ID+"/approve", map[string]string{"reason": "fine"}, nil)
	require.Equal(t, http.StatusOK, code, string(raw))
	f.settled(t, id)
	before, ran := f.trace(t, id), x.n.Load()
	require.EqualValues(t, 2, ran)
	require.Equal(t, 1, before.approvals)

	rep, err := f.Replay(ctx, id, fleet.ReplayOptions{})
	require.NoError(t, err)
	require.False(t, rep.Diverged, "divergence: %+v", rep.Divergence)
	decisions := map[string]string{}
	for _, st := range rep.StepList {
		if st.Agent == "writer" && st.Kind == replay.KindCall {
			decisions[st.CallID] = st.Tool + " " + st.Replayed.Decision + "/" + st.Replayed.Layer
		}
	}
	require.ElementsMatch(t, []string{"run_shell allowed/", "rm_everything denied/capability", "run_shell allowed/"}, values(decisions))
	require.Equal(t, ran, x.n.Load(), "the sandbox ran nothing")
	require.Equal(t, before, f.trace(t, id), "no audit row, event or approval")
}

func values(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// Issue 46: a run archived by retention's export before delete, deleted, and
// imported back (`aetherium runs import`) replays as it did before: the same
// steps, the same hashes, no divergence.
func TestReplayOfAnArchivedAndReimportedRun(t *testing.T) {
	t.Parallel()
	f := setupReplay(t, fleettest.Options{})
	ctx := context.Background()
	id := f.demoRun(t)
	want, err := f.Replay(ctx, id, fleet.ReplayOptions{})
	require.NoError(t, err)
	require.False(t, want.Diverged)
	run, err := f.Store.GetRun(ctx, id)
	require.NoError(t, err)

	dir := t.TempDir()
	later := func() time.Time { return time.Now().Add(100 * 24 * time.Hour) }
	sw := retention.New(retention.Config{Runs: 90 * 24 * time.Hour, ExportDir: dir}, retention.Deps{Store: f.Store, Now: later})
	rep, err := sw.Sweep(ctx)
	require.NoError(t, err)
	require.Contains(t, rep.RunIDs, id)
	_, err = f.Store.GetRun(ctx, id)
	require.ErrorIs(t, err, store.ErrNotFound, "the run is gone")
	_, err = f.Replay(ctx, id, fleet.ReplayOptions{})
	require.Error(t, err, "nothing to replay before the import")

	path, err := retention.ArchivePath(dir, id)
	require.NoError(t, err)
	res, err := retention.ImportFile(ctx, f.Store, path, run.Owner)
	require.NoError(t, err)
	require.Positive(t, res.Rows)

	got, err := f.Replay(ctx, id, fleet.ReplayOptions{})
	require.NoError(t, err)
	require.False(t, got.Diverged, "divergence: %+v", got.Divergence)
	require.Equal(t, want.Steps, got.Steps)
	require.Equal(t, want.FinalHash, got.FinalHash)
	// Over the API too (what `aetherium replay` calls).
	var api replay.Report
	code, body := f.Do(http.MethodPost, "/api/runs/"+id+"/replay", nil, &api)
	require.Equal(t, http.StatusOK, code, string(body))
	require.False(t, api.Diverged)
	require.Equal(t, want.FinalHash, api.FinalHash)
}
