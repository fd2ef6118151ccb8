package scheduler_test

import (
	"context"
	"encoding/json"
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

const stuckAfter = time.Minute

// stuckEnv is a store, the stuck-run tick's handler, and the runs its Fail
// (store.FinishRun and the terminal event, as the worker's FailRun) ended.
type stuckEnv struct {
	st  *store.Store
	mux *asynq.ServeMux
	mu  sync.Mutex
	ids []string
}

func setupStuck(t *testing.T) *stuckEnv {
	t.Helper()
	e := &stuckEnv{st: testdb.Store(t), mux: asynq.NewServeMux()}
	rec := &events.Recorder{Store: e.st}
	scheduler.NewMaintenance(scheduler.Config{StuckAfter: stuckAfter}, scheduler.MaintenanceDeps{Store: e.st, Log: testlog.Logger(t),
		Fail: func(ctx context.Context, id, reason, msg string) {
			e.mu.Lock()
			e.ids = append(e.ids, id)
			e.mu.Unlock()
			_, _, err := e.st.FinishRun(ctx, id, store.RunFailed, "", msg, reason)
			require.NoError(t, err)
			r, err := e.st.GetRun(ctx, id)
			require.NoError(t, err)
			require.NoError(t, rec.EmitTerminal(ctx, r))
		}}).Register(e.mux)
	return e
}

// idleFor makes a run look untouched for d (no event since, as CreateRun left it).
func (e *stuckEnv) idleFor(t *testing.T, runID string, d time.Duration) {
	t.Helper()
	_, err := e.st.Pool.Exec(context.Background(), `UPDATE runs SET updated_at = now() - $2::interval WHERE id = $1`, runID, d.String())
	require.NoError(t, err)
}

// The stuck-run detector fails a job that made no progress for
// scheduler.stuck_after (closing its open delegation with it), but not an MCP
// client's session: its run is running with no event for as long as the
// client sits idle, whatever its profile or handle.
func TestStuckRunsSkipMCPSessions(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		template string // "" for a job; else an MCP run's
		idle     time.Duration
		failed   bool
	}{
		{"a job idle past stuck_after", "", 2 * stuckAfter, true},
		{"a job idle for less", "", stuckAfter / 2, false},
		{"an MCP session idle past stuck_after", store.MCPTemplatePrefix + "ide", 2 * stuckAfter, false},
		{"an MCP session of a handle idle past stuck_after", store.MCPTemplatePrefix + "ide#h1", 10 * stuckAfter, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setupStuck(t)
			ctx := context.Background()
			id := uuid.NewString()
			require.NoError(t, e.st.CreateRun(ctx, store.Run{ID: id, Prompt: "p", Template: tc.template, Team: json.RawMessage(`{}`),
				Variables: json.RawMessage(`{}`), Owner: "alice"}))
			ok, err := e.st.StartRun(ctx, id)
			require.NoError(t, err)
			require.True(t, ok)
			del := store.Delegation{ID: "del_" + id[:8], RunID: id, ParentSession: "s:" + id, ToolCallID: "c1", Agent: "writer", Task: "t"}
			_, err = e.st.InsertDelegation(ctx, del)
			require.NoError(t, err)
			e.idleFor(t, id, tc.idle)

			require.NoError(t, e.mux.ProcessTask(ctx, asynq.NewTask(queue.TypeStuckRuns, nil)))

			r, err := e.st.GetRun(ctx, id)
			require.NoError(t, err)
			d, err := e.st.GetDelegation(ctx, del.ID)
			require.NoError(t, err)
			if !tc.failed {
				require.Empty(t, e.ids)
				require.Equal(t, store.RunRunning, r.Status)
				require.Equal(t, store.DelegationPending, d.Status)
				return
			}
			require.Equal(t, []string{id}, e.ids)
			require.Equal(t, store.RunFailed, r.Status)
			require.Equal(t, "stuck", r.Reason)
			require.Equal(t, store.DelegationFailed, d.Status, "the stuck run's delegation ends with it")
			evs, err := e.st.EventsAfter(ctx, id, 0, 10)
			require.NoError(t, err)
			require.Len(t, evs, 2)
			require.Equal(t, events.DelegationFinished, evs[0].Type)
			require.Equal(t, events.RunFailed, evs[1].Type)
		})
	}
}
