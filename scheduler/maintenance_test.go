package scheduler_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/events"
	"github.com/aetherium-engine/aetherium/internal/testdb"
	"github.com/aetherium-engine/aetherium/internal/testlog"

	"github.com/aetherium-engine/aetherium/lease"
	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/sandbox"
	"github.com/aetherium-engine/aetherium/scheduler"
	"github.com/aetherium-engine/aetherium/store"
)

// releases is a sandbox that only counts its releases.
type releases struct {
	sandbox.Executor
	mu   sync.Mutex
	runs []string
}

func (r *releases) Release(_ context.Context, run string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs = append(r.runs, run)
	return nil
}

func (r *releases) released() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.runs...)
}

// A run's terminal event enqueues its run:cleanup once (the task id is the run's),
// a non-terminal event none; the maintenance handler on the worker's server then
// releases the run's GPU lease and its sandbox, once, and then calls the
// post-run hook (AfterRelease).
func TestRunCleanupOnTerminalEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	redisURL := testdb.Redis(t)
	st := testdb.Store(t)
	opt, err := asynq.ParseRedisURI(redisURL)
	require.NoError(t, err)
	ropt, err := redis.ParseURL(redisURL)
	require.NoError(t, err)
	rdb := redis.NewClient(ropt)
	t.Cleanup(func() { _ = rdb.Close() })
	leases, err := lease.New(rdb, lease.Config{Services: []lease.Service{{Name: "gpu", Capacity: 1}}}, lease.Options{})
	require.NoError(t, err)

	runID := "3f1c1a52-5a51-4a0e-9b5e-000000000001"
	require.NoError(t, st.CreateRun(ctx, store.Run{ID: runID, Prompt: "p", Team: []byte(`{}`), Variables: []byte(`{}`), Owner: store.LocalOwner}))
	_, err = leases.Acquire(ctx, "gpu", runID)
	require.NoError(t, err)
	_, err = leases.Acquire(ctx, "gpu", "another-run")
	require.ErrorIs(t, err, lease.ErrWaiting, "the run holds the only slot")

	q := newEnqueuer(t, opt)
	hook := scheduler.OnEvent(q)
	require.NoError(t, hook(ctx, events.Stored{ID: 1, RunID: runID, Type: "tool.call"}))
	require.NoError(t, hook(ctx, events.Stored{ID: 2, RunID: runID, Type: events.RunCompleted}))
	require.NoError(t, hook(ctx, events.Stored{ID: 3, RunID: runID, Type: events.RunCompleted}), "a duplicate is no error")
	info, err := asynq.NewInspector(opt).GetQueueInfo(queue.QueueMaintenance)
	require.NoError(t, err)
	require.Equal(t, 1, info.Size, "one cleanup task for the run, none for the non-terminal event")

	var mu sync.Mutex
	ran := map[string]int{}
	var after []string // the post-run hook's calls
	exec := &releases{}
	srv := asynq.NewServer(opt, asynq.Config{Concurrency: 2, Queues: map[string]int{queue.QueueMaintenance: 1},
		TaskCheckInterval: 20 * time.Millisecond, LogLevel: asynq.ErrorLevel})
	mux := asynq.NewServeMux()
	scheduler.NewMaintenance(scheduler.Config{}, scheduler.MaintenanceDeps{Store: st, Queue: q, Leases: leases, Executor: exec,
		Log: testlog.Logger(t), Fail: func(context.Context, string, string, string) {},
		AfterRelease: func(ctx context.Context, id string) error {
			st, err := leases.State(ctx, "gpu")
			mu.Lock()
			defer mu.Unlock()
			for _, h := range st.Holders {
				if h.Holder == id {
					err = errors.New("the post-run hook ran while the run still held its lease")
				}
			}
			after = append(after, id)
			return err
		},
		Ran: func(typ, id string) {
			mu.Lock()
			defer mu.Unlock()
			ran[typ+" "+id]++
		}}).Register(mux)
	require.NoError(t, srv.Start(mux))
	t.Cleanup(srv.Shutdown)

	require.Eventually(t, func() bool { return len(exec.released()) > 0 }, 5*time.Second, 20*time.Millisecond)
	_, err = leases.Acquire(ctx, "gpu", "another-run")
	require.NoError(t, err, "the finished run's lease was released")
	time.Sleep(200 * time.Millisecond) // a second delivery would have come by now
	require.Equal(t, []string{runID}, exec.released())
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, map[string]int{queue.TypeRunCleanup + " " + queue.CleanupTaskID(runID): 1}, ran)
	require.Equal(t, []string{runID}, after, "the post-run hook ran once, after the release (else the cleanup would have been retried)")
}

// Config: Defaults is WithDefaults plus the metrics listener; Validate names the key.
func TestConfigDefaultsAndValidate(t *testing.T) {
	t.Parallel()
	d := scheduler.Defaults()
	require.Equal(t, scheduler.Config{Period: scheduler.DefaultPeriod, StuckAfter: scheduler.DefaultStuckAfter, ResumeAfter: scheduler.DefaultResumeAfter,
		MetricsAddr: scheduler.DefaultMetricsAddr, QueuedAfter: scheduler.DefaultQueuedAfter,
		AuditRetention: scheduler.DefaultAuditRetention}, d)
	require.Empty(t, scheduler.Config{}.WithDefaults().MetricsAddr, "an empty metrics address stays off")
	require.Equal(t, time.Minute, scheduler.Config{Period: time.Minute}.WithDefaults().Period, "a set field is kept")
	for _, tc := range []struct {
		name string
		cfg  scheduler.Config
		want string
	}{
		{"defaults", d, ""},
		{"metrics off", scheduler.Config{}, ""},
		{"bad metrics addr", scheduler.Config{MetricsAddr: "nope"}, "scheduler.metrics_addr"},
		{"negative period", scheduler.Config{Period: -time.Second}, "scheduler.period"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.want)
		})
	}
}
