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
	"github.com/aetherium-engine/aetherium/retention"
	"github.com/aetherium-engine/aetherium/scheduler"
	"github.com/aetherium-engine/aetherium/store"
)

// The maintenance:retention tick runs the retention sweep: a run finished past
// retention.runs goes, a younger one and a live one stay. Without a sweeper the
// tick does nothing.
func TestRetentionTick(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := testdb.Store(t)
	run := func(status string, finishedAgo time.Duration) string {
		id := uuid.NewString()
		require.NoError(t, st.CreateRun(ctx, store.Run{ID: id, Prompt: "p", Team: json.RawMessage(`{}`), Variables: json.RawMessage(`{}`)}))
		_, err := st.Pool.Exec(ctx, `UPDATE runs SET status = $2, finished_at = now() - $3::interval WHERE id = $1`, id, status, finishedAgo.String())
		require.NoError(t, err)
		return id
	}
	old, young, live := run(store.RunCompleted, 48*time.Hour), run(store.RunFailed, time.Hour), run(store.RunRunning, 48*time.Hour)

	bare := asynq.NewServeMux()
	scheduler.NewMaintenance(scheduler.Config{}, scheduler.MaintenanceDeps{Store: st, Log: testlog.Logger(t)}).Register(bare)
	require.NoError(t, bare.ProcessTask(ctx, asynq.NewTask(queue.TypeRetention, nil)))
	_, err := st.GetRun(ctx, old)
	require.NoError(t, err, "no sweeper: nothing deleted")

	mux := asynq.NewServeMux()
	sw := retention.New(retention.Config{Runs: 24 * time.Hour}, retention.Deps{Store: st, Log: testlog.Logger(t)})
	scheduler.NewMaintenance(scheduler.Config{}, scheduler.MaintenanceDeps{Store: st, Log: testlog.Logger(t), Retention: sw}).Register(mux)
	require.NoError(t, mux.ProcessTask(ctx, asynq.NewTask(queue.TypeRetention, nil)))
	_, err = st.GetRun(ctx, old)
	require.ErrorIs(t, err, store.ErrNotFound)
	for _, id := range []string{young, live} {
		_, err := st.GetRun(ctx, id)
		require.NoError(t, err)
	}
}
