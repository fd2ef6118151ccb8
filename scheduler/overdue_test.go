package scheduler_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/internal/testdb"
	"github.com/aetherium-engine/aetherium/internal/testlog"
	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/scheduler"
	"github.com/aetherium-engine/aetherium/store"
)

// A waiting run's approval times out by a task that lives in Redis only. On an
// empty Redis (a restore from a database backup, a failover that lost it) the
// maintenance tick enqueues the expiry of every approval still pending past its
// expiry again, so the run does not wait forever; one not yet due is left alone.
func TestOverdueApprovalsGetTheirExpiryTaskAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	redisURL := testdb.Redis(t)
	st := testdb.Store(t)
	opt, err := asynq.ParseRedisURI(redisURL)
	require.NoError(t, err)
	mux := asynq.NewServeMux()
	scheduler.NewMaintenance(scheduler.Config{}, scheduler.MaintenanceDeps{Store: st, Queue: newEnqueuer(t, opt), Log: testlog.Logger(t)}).Register(mux)

	runID := uuid.NewString()
	require.NoError(t, st.CreateRun(ctx, store.Run{ID: runID, Prompt: "p", Team: json.RawMessage(`{}`), Variables: json.RawMessage(`{}`), Owner: "alice"}))
	approval := func(n int, expiredAgo time.Duration) string {
		a, created, err := st.RequestApproval(ctx, store.Approval{ID: "apr_overdue" + runID[:8] + string(rune('a'+n)), RunID: runID,
			SessionID: queue.SupervisorSession(runID).String(), CallID: "c" + string(rune('a'+n)), Agent: "lead", Tool: "run_shell", Tier: "restricted", Why: "w"}, time.Hour)
		require.NoError(t, err)
		require.True(t, created)
		_, err = st.Pool.Exec(ctx, `UPDATE approvals SET expires_at = now() - $2::interval WHERE id = $1`, a.ID, expiredAgo.String())
		require.NoError(t, err)
		return a.ID
	}
	overdue := approval(0, 10*time.Minute)
	due := approval(1, -time.Hour) // expires in an hour

	ins := asynq.NewInspector(opt)
	t.Cleanup(func() { _ = ins.Close() })
	for range 2 { // twice: the task is there already the second time
		require.NoError(t, mux.ProcessTask(ctx, asynq.NewTask(queue.TypeRequeueQueued, nil)))
	}
	info, err := ins.GetTaskInfo(queue.QueueSupervisor, queue.ApprovalExpireTaskID(overdue))
	require.NoError(t, err, "the overdue approval's expiry is enqueued again")
	require.Equal(t, queue.TypeApprovalExpire, info.Type)
	_, err = ins.GetTaskInfo(queue.QueueSupervisor, queue.ApprovalExpireTaskID(due))
	require.ErrorIs(t, err, asynq.ErrTaskNotFound, "an approval not yet due is left to its own task")
}
