package webhook_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/events"
	"github.com/aetherium-engine/aetherium/internal/testdb"
	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/webhook"
)

// A delivery whose enqueue was lost — the process that stored the event died
// before its OnEvent ran, or Redis refused the enqueue — is enqueued by the
// sweep once the event is older than the grace. One the event's own path
// enqueued is not enqueued again, an event the hook does not want gets none,
// an event younger than the grace waits (the cursor stops before it), and the
// events from before the hook's first sweep are not replayed.
func TestSweepEnqueuesTheDeliveriesThatWereLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := testdb.Store(t)
	client, inspector := testdb.Asynq(t, testdb.Redis(t))
	q, err := queue.NewEnqueuer(client, queue.Config{})
	require.NoError(t, err)
	d := &webhook.Deliverer{Store: st, Queue: q, Hooks: []webhook.Hook{
		{URL: "http://127.0.0.1:1/hook", Secret: "a-long-webhook-secret", Events: []string{events.RunCompleted, events.ModelAnswered}},
	}}

	run := uuid.NewString()
	require.NoError(t, st.CreateRun(ctx, store.Run{ID: run, Prompt: "p", Team: json.RawMessage(`{}`), Variables: json.RawMessage(`{}`), Owner: "alice"}))
	event := func(key, typ string, age time.Duration) int64 {
		id, inserted, err := st.AppendEvent(ctx, run, key, typ, "", map[string]string{"k": key})
		require.NoError(t, err)
		require.True(t, inserted)
		_, err = st.Pool.Exec(ctx, `UPDATE run_events SET created_at = now() - $2::interval WHERE id = $1`, id, age.String())
		require.NoError(t, err)
		return id
	}
	enqueued := func(id int64) bool {
		_, err := inspector.GetTaskInfo(queue.QueueMaintenance, queue.WebhookTaskID(0, d.Hooks[0].Digest(), id))
		if err != nil {
			require.ErrorIs(t, err, asynq.ErrTaskNotFound)
			return false
		}
		return true
	}
	settled := webhook.SweepGrace + 30*time.Second

	history := event("before", events.ModelAnswered, 10*time.Minute)
	n, err := d.Sweep(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "the first sweep starts after the events of the last moments: the history is not replayed")

	heard := event("heard", events.RunCompleted, settled)
	require.NoError(t, d.OnEvent(ctx, events.Stored{ID: heard, RunID: run, Type: events.RunCompleted}))
	lost := event("lost", events.ModelAnswered, settled)
	unwanted := event("unwanted", events.ToolCall, settled)
	young := event("young", events.ModelAnswered, 0)

	n, err = d.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n, "only the lost delivery is enqueued")
	require.True(t, enqueued(lost))
	require.True(t, enqueued(heard))
	require.False(t, enqueued(unwanted), "the hook does not want tool.call")
	require.False(t, enqueued(young), "younger than the grace: its own path may still enqueue it")
	require.False(t, enqueued(history))

	n, err = d.Sweep(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "a second sweep finds nothing new")

	_, err = st.Pool.Exec(ctx, `UPDATE run_events SET created_at = now() - $2::interval WHERE id = $1`, young, settled.String())
	require.NoError(t, err)
	n, err = d.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n, "the cursor stopped before the young event, and reads it once it settled")
	require.True(t, enqueued(young))

	var key string
	require.NoError(t, st.Pool.QueryRow(ctx, `SELECT hook FROM webhook_cursors`).Scan(&key))
	require.Equal(t, d.Hooks[0].Key(0), key)
	require.NotContains(t, key, "127.0.0.1", "a receiver's URL may be its credential: the cursor names a digest")
}
