package scheduler_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/internal/testdb"
	"github.com/aetherium-engine/aetherium/internal/testlog"

	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/scheduler"
)

// Two scheduler replicas enqueue every tick; each periodic task runs once per tick.
func TestTwoReplicasRunEachTickOnce(t *testing.T) {
	t.Parallel()
	redisURL := testdb.Redis(t)
	st := testdb.Store(t)
	opt, err := asynq.ParseRedisURI(redisURL)
	require.NoError(t, err)
	period := time.Second
	cfg := scheduler.Config{Period: period}

	var mu sync.Mutex
	runs := map[string]int{}         // task id → times run
	perType := map[string][]string{} // type → task ids
	srv := asynq.NewServer(opt, asynq.Config{Concurrency: 4, Queues: map[string]int{queue.QueueMaintenance: 1},
		TaskCheckInterval: 20 * time.Millisecond, LogLevel: asynq.ErrorLevel})
	mux := asynq.NewServeMux()
	scheduler.NewMaintenance(cfg, scheduler.MaintenanceDeps{Store: st, Queue: newEnqueuer(t, opt), Log: testlog.Logger(t),
		Fail: func(context.Context, string, string, string) {},
		Ran: func(typ, id string) {
			mu.Lock()
			defer mu.Unlock()
			if runs[id] == 0 {
				perType[typ] = append(perType[typ], id)
			}
			runs[id]++
		}}).Register(mux)
	require.NoError(t, srv.Start(mux))
	t.Cleanup(srv.Shutdown)

	ctx, cancel := context.WithTimeout(context.Background(), 5500*time.Millisecond)
	defer cancel()
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		q := newEnqueuer(t, opt)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = scheduler.New(cfg, scheduler.Deps{Queue: q, Log: testlog.Logger(t)}).Run(ctx)
		}()
	}
	wg.Wait()
	time.Sleep(500 * time.Millisecond) // let the last tick's tasks finish

	mu.Lock()
	defer mu.Unlock()
	for id, n := range runs {
		require.Equal(t, 1, n, "task %s ran %d times", id, n)
	}
	for _, typ := range queue.MaintenanceTasks() {
		require.GreaterOrEqual(t, len(perType[typ]), 5, "%s ran on %d ticks in ~5.5s", typ, len(perType[typ]))
		require.LessOrEqual(t, len(perType[typ]), 7)
	}
}

// newEnqueuer is an Enqueuer on its own asynq client (one per scheduler replica).
func newEnqueuer(t *testing.T, opt asynq.RedisConnOpt) *queue.Enqueuer {
	t.Helper()
	c := asynq.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	q, err := queue.NewEnqueuer(c, queue.Config{})
	require.NoError(t, err)
	return q
}
