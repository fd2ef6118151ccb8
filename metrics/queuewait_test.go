package metrics_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/internal/testdb"

	"github.com/aetherium-engine/aetherium/metrics"
	"github.com/aetherium-engine/aetherium/queue"
)

// On a real asynq server: a task the Enqueuer enqueued due now is observed in
// aetherium_task_queue_wait_seconds under its queue and type; a scheduled task
// (an approval's expiry) is not, since its wait is its schedule.
func TestQueueWaitObservesTasksDueNow(t *testing.T) {
	t.Parallel()
	opt, err := asynq.ParseRedisURI(testdb.Redis(t))
	require.NoError(t, err)
	m := setup(t)
	srv := asynq.NewServer(opt, asynq.Config{Concurrency: 2, Queues: queue.Weights(), TaskCheckInterval: 20 * time.Millisecond, LogLevel: asynq.ErrorLevel})
	mux := asynq.NewServeMux()
	mux.Use(m.TaskMiddleware(func(error) string { return "ok" }))
	done := make(chan string, 2)
	for _, typ := range []string{queue.TypeSupervise, queue.TypeApprovalExpire} {
		mux.HandleFunc(typ, func(ctx context.Context, _ *asynq.Task) error {
			// The handler learns when the middleware started it (the worker
			// times its first model call from it).
			if _, ok := metrics.TaskStart(ctx); !ok {
				done <- "no task start: " + typ
				return nil
			}
			done <- typ
			return nil
		})
	}
	require.NoError(t, srv.Start(mux))
	t.Cleanup(srv.Shutdown)
	client := asynq.NewClient(opt)
	t.Cleanup(func() { _ = client.Close() })
	q, err := queue.NewEnqueuer(client, queue.Config{})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, q.Supervise(ctx, queue.Route{Key: "alice", Priority: queue.DefaultPriority}, "r1", "start"))
	require.NoError(t, q.ExpireApproval(ctx, "apr_1", time.Now().Add(200*time.Millisecond)))
	for range 2 {
		select {
		case got := <-done:
			require.NotContains(t, got, "no task start")
		case <-time.After(20 * time.Second):
			t.Fatal("tasks not processed")
		}
	}
	hs := httptest.NewServer(m.Handler())
	t.Cleanup(hs.Close)
	body := scrape(t, hs.URL)
	require.Contains(t, body, `aetherium_task_queue_wait_seconds_count{queue="supervisor",type="run:supervise"} 1`)
	require.NotContains(t, body, `aetherium_task_queue_wait_seconds_count{queue="supervisor",type="approval:expire"}`)
	require.Contains(t, body, `aetherium_task_duration_seconds_count{queue="supervisor",type="approval:expire"} 1`, "the expiry was handled")
}
