package scheduler_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/events"
	"github.com/aetherium-engine/aetherium/internal/testdb"
	"github.com/aetherium-engine/aetherium/internal/testlog"
	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/scheduler"
	"github.com/aetherium-engine/aetherium/store"
)

// A running run whose next step lived in Redis only (restored onto an empty
// Redis, lost with a failover) shows no sign of life: the stuck-run tick
// wakes its supervisor and each open delegation with a step task named by the
// stall, once, instead of failing it an hour later. A run with a step under
// way, an approval pending, a recent event, or not running is left alone.
func TestStalledRunsAreWoken(t *testing.T) {
	t.Parallel()
	const resumeAfter = time.Minute
	cases := []struct {
		name  string
		shape func(t *testing.T, st *store.Store, runID, sessionID string)
		woken bool
	}{
		{"quiet past resume_after", nil, true},
		{"a step holds its session's lease", func(t *testing.T, st *store.Store, runID, sessionID string) {
			_, err := st.Pool.Exec(context.Background(), `UPDATE sessions SET lease_token = 'live', lease_until = now() + interval '1 minute' WHERE id = $1`, sessionID)
			require.NoError(t, err)
		}, false},
		{"an approval is pending", func(t *testing.T, st *store.Store, runID, sessionID string) {
			_, _, err := st.RequestApproval(context.Background(), store.Approval{ID: "apr_" + runID[:8], RunID: runID, SessionID: sessionID,
				CallID: "c9", Agent: "lead", Tool: "run_shell", Tier: "restricted", Why: "w"}, time.Hour)
			require.NoError(t, err)
		}, false},
		{"an event within resume_after", func(t *testing.T, st *store.Store, runID, sessionID string) {
			_, err := st.Pool.Exec(context.Background(), `UPDATE run_events SET created_at = now() WHERE run_id = $1`, runID)
			require.NoError(t, err)
		}, false},
		{"an MCP client's session", func(t *testing.T, st *store.Store, runID, sessionID string) {
			_, err := st.Pool.Exec(context.Background(), `UPDATE runs SET template = $2 WHERE id = $1`, runID, store.MCPTemplatePrefix+"ide")
			require.NoError(t, err)
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			redisURL := testdb.Redis(t)
			st := testdb.Store(t)
			opt, err := asynq.ParseRedisURI(redisURL)
			require.NoError(t, err)
			mux := asynq.NewServeMux()
			scheduler.NewMaintenance(scheduler.Config{ResumeAfter: resumeAfter}, scheduler.MaintenanceDeps{Store: st, Queue: newEnqueuer(t, opt), Log: testlog.Logger(t),
				Fail: func(context.Context, string, string, string) { t.Error("no run is stuck") }}).Register(mux)

			id := uuid.NewString()
			require.NoError(t, st.CreateRun(ctx, store.Run{ID: id, Prompt: "p", Team: json.RawMessage(`{}`), Variables: json.RawMessage(`{}`), Owner: "alice", FairKey: "alice"}))
			ok, err := st.StartRun(ctx, id)
			require.NoError(t, err)
			require.True(t, ok)
			sup := queue.SupervisorSession(id).String()
			// The supervisor's session, its last step's lease long expired.
			_, err = st.Pool.Exec(ctx, `INSERT INTO sessions (id, run_id, agent, role, status, lease_token, lease_until)
				VALUES ($1, $2, 'lead', 'supervisor', 'waiting', 'gone', now() - interval '1 minute')`, sup, id)
			require.NoError(t, err)
			open := store.Delegation{ID: "del_open_" + id[:8], RunID: id, ParentSession: sup, ToolCallID: "c1", Agent: "writer", Task: "t"}
			done := store.Delegation{ID: "del_done_" + id[:8], RunID: id, ParentSession: sup, ToolCallID: "c2", Agent: "writer", Task: "t"}
			for _, d := range []store.Delegation{open, done} {
				_, err = st.InsertDelegation(ctx, d)
				require.NoError(t, err)
			}
			_, err = st.FinishDelegation(ctx, done.ID, store.DelegationCompleted, "ok", "")
			require.NoError(t, err)
			var last int64
			require.NoError(t, st.Pool.QueryRow(ctx, `INSERT INTO run_events (run_id, key, type) VALUES ($1, 'k', 'run.started') RETURNING id`, id).Scan(&last))
			_, err = st.Pool.Exec(ctx, `UPDATE runs SET updated_at = now() - interval '2 minutes' WHERE id = $1;`, id)
			require.NoError(t, err)
			_, err = st.Pool.Exec(ctx, `UPDATE run_events SET created_at = now() - interval '2 minutes' WHERE run_id = $1`, id)
			require.NoError(t, err)
			if tc.shape != nil {
				tc.shape(t, st, id, sup)
			}

			ins := asynq.NewInspector(opt)
			t.Cleanup(func() { _ = ins.Close() })
			for range 2 { // the second tick finds the stall's tasks there
				require.NoError(t, mux.ProcessTask(ctx, asynq.NewTask(queue.TypeStuckRuns, nil)))
			}
			key := fmt.Sprintf("resume:%d", last)
			sinfo, serr := ins.GetTaskInfo(queue.QueueSupervisor, queue.SuperviseTaskID(id, key))
			_, terr := ins.GetTaskInfo(queue.QueueWorkers, queue.TurnTaskID(open.ID, key))
			_, derr := ins.GetTaskInfo(queue.QueueWorkers, queue.TurnTaskID(done.ID, key))
			absent := func(err error) bool {
				return errors.Is(err, asynq.ErrTaskNotFound) || errors.Is(err, asynq.ErrQueueNotFound)
			}
			require.True(t, absent(derr), "a finished delegation is not woken: %v", derr)
			if !tc.woken {
				require.True(t, absent(serr), "the supervisor is not woken: %v", serr)
				require.True(t, absent(terr), "the open delegation is not woken: %v", terr)
				return
			}
			require.NoError(t, serr, "the supervisor is woken")
			require.Equal(t, queue.TypeSupervise, sinfo.Type)
			require.NoError(t, terr, "the open delegation's turn is woken")
			for _, q := range []string{queue.QueueSupervisor, queue.QueueWorkers} {
				qi, err := ins.GetQueueInfo(q)
				require.NoError(t, err)
				require.Equal(t, 1, qi.Size, "one task per stall in %s, not one per tick", q)
			}
		})
	}
}

// resume_after leaves a stalled run time to be woken before it is failed: at
// most half of stuck_after, whether it was set or defaulted, and whichever
// order the config layer filled them in (the failover drills set only
// stuck_after: 150s over a config whose defaults were filled first).
func TestResumeAfterIsAtMostHalfOfStuckAfter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  scheduler.Config
		want time.Duration
	}{
		{"defaults", scheduler.Config{}, scheduler.DefaultResumeAfter},
		{"a short stuck_after", scheduler.Config{StuckAfter: time.Minute}, 30 * time.Second},
		{"defaults filled before the file's stuck_after", func() scheduler.Config {
			c := scheduler.Defaults()
			c.StuckAfter = 150 * time.Second
			return c
		}(), 75 * time.Second},
		{"a resume_after as long as stuck_after", scheduler.Config{StuckAfter: time.Minute, ResumeAfter: time.Minute}, 30 * time.Second},
		{"a shorter resume_after is kept", scheduler.Config{StuckAfter: time.Hour, ResumeAfter: 10 * time.Second}, 10 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := tc.cfg.WithDefaults()
			require.Equal(t, tc.want, c.ResumeAfter)
			require.NoError(t, c.Validate())
		})
	}
}

// A run's end and its terminal event are two writes. An end whose event never
// came (the ender died between them and its redelivery was in Redis only, or a
// restored dump caught the gap) is announced by the stuck-runs tick once the
// grace (30 s) has passed: the event is stored and the end is heard once. An
// end inside the grace is its ender's to announce.
func TestUnannouncedEndsAreAnnounced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := testdb.Store(t)
	rec := &events.Recorder{Store: st}
	var mu sync.Mutex
	var announced []string
	mux := asynq.NewServeMux()
	scheduler.NewMaintenance(scheduler.Config{}, scheduler.MaintenanceDeps{Store: st, Log: testlog.Logger(t),
		Fail: func(context.Context, string, string, string) { t.Error("no run is stuck") },
		AnnounceEnd: func(ctx context.Context, id string) {
			mu.Lock()
			announced = append(announced, id)
			mu.Unlock()
			r, err := st.GetRun(ctx, id)
			require.NoError(t, err)
			require.NoError(t, rec.EmitTerminal(ctx, r))
		}}).Register(mux)
	end := func(ago time.Duration) string {
		id := uuid.NewString()
		require.NoError(t, st.CreateRun(ctx, store.Run{ID: id, Prompt: "p", Team: json.RawMessage(`{}`), Variables: json.RawMessage(`{}`), Owner: "alice"}))
		changed, _, err := st.FinishRun(ctx, id, store.RunCompleted, "done", "", "")
		require.NoError(t, err)
		require.True(t, changed)
		_, err = st.Pool.Exec(ctx, `UPDATE runs SET finished_at = now() - $2::interval WHERE id = $1`, id, ago.String())
		require.NoError(t, err)
		return id
	}
	lost, fresh := end(2*time.Minute), end(0)
	heard := end(2 * time.Minute)
	r, err := st.GetRun(ctx, heard)
	require.NoError(t, err)
	require.NoError(t, rec.EmitTerminal(ctx, r), "its ender announced this one")

	for range 2 { // the second tick finds nothing left to announce
		require.NoError(t, mux.ProcessTask(ctx, asynq.NewTask(queue.TypeStuckRuns, nil)))
	}
	require.Equal(t, []string{lost}, announced)
	for id, want := range map[string]int{lost: 1, heard: 1, fresh: 0} {
		var n int
		require.NoError(t, st.Pool.QueryRow(ctx, `SELECT count(*) FROM run_events WHERE run_id = $1 AND type = 'run.completed'`, id).Scan(&n))
		require.Equal(t, want, n, "terminal events of %s", id)
	}
}

// The end's hooks (the run's cleanup, its webhooks) hold at least once: an
// ender that stored the terminal event and then failed to enqueue the cleanup
// (Redis away) leaves the end unannounced, and the tick runs the hooks again
// from the stored event. Before, the retry found the event stored ("not
// inserted") and took that for heard: the run's mailboxes, leases and sandbox
// were never released.
func TestAnEndWhoseHooksFailedIsAnnouncedAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := testdb.Store(t)
	var mu sync.Mutex
	hooks := map[string][]int64{} // run → event ids the hook was called with
	failing := true
	rec := &events.Recorder{Store: st, OnEvent: func(_ context.Context, e events.Stored) error {
		mu.Lock()
		defer mu.Unlock()
		hooks[e.RunID] = append(hooks[e.RunID], e.ID)
		if failing {
			return errors.New("enqueue run cleanup: redis: connection refused")
		}
		return nil
	}}
	mux := asynq.NewServeMux()
	scheduler.NewMaintenance(scheduler.Config{}, scheduler.MaintenanceDeps{Store: st, Log: testlog.Logger(t),
		Fail: func(context.Context, string, string, string) { t.Error("no run is stuck") },
		AnnounceEnd: func(ctx context.Context, id string) {
			r, err := st.GetRun(ctx, id)
			require.NoError(t, err)
			require.NoError(t, rec.EmitTerminal(ctx, r))
		}}).Register(mux)
	id := uuid.NewString()
	require.NoError(t, st.CreateRun(ctx, store.Run{ID: id, Prompt: "p", Team: json.RawMessage(`{}`), Variables: json.RawMessage(`{}`), Owner: "alice"}))
	_, _, err := st.FinishRun(ctx, id, store.RunFailed, "", "boom", "")
	require.NoError(t, err)
	r, err := st.GetRun(ctx, id)
	require.NoError(t, err)
	require.ErrorContains(t, rec.EmitTerminal(ctx, r), "connection refused")
	_, err = st.Pool.Exec(ctx, `UPDATE runs SET finished_at = now() - interval '2 minutes' WHERE id = $1`, id)
	require.NoError(t, err)

	mu.Lock()
	failing = false
	mu.Unlock()
	for range 2 { // the second tick finds the end heard
		require.NoError(t, mux.ProcessTask(ctx, asynq.NewTask(queue.TypeStuckRuns, nil)))
	}
	require.NoError(t, rec.EmitTerminal(ctx, r), "a late redelivery of the ender")
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, hooks[id], 2, "the failed call and the tick's, then no more")
	require.Equal(t, hooks[id][0], hooks[id][1], "both for the one stored event")
	var n int
	require.NoError(t, st.Pool.QueryRow(ctx, `SELECT count(*) FROM run_events WHERE run_id = $1 AND type = 'run.failed'`, id).Scan(&n))
	require.Equal(t, 1, n)
}
