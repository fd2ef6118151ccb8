package queue_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/internal/redisconn"
	"github.com/aetherium-engine/aetherium/internal/testdb"
	"github.com/aetherium-engine/aetherium/queue"
)

// On a real asynq server whose idle poll is a minute: an announced task starts
// at once (the Waker woke the idle server), one enqueued without an announcement
// waits for the poll, and the next announcement's round finds it too.
func TestWakerStartsAnnouncedTasks(t *testing.T) {
	t.Parallel()
	testdb.EachRedis(t, func(t *testing.T, tg testdb.RedisTarget) {
		wakerStartsAnnouncedTasks(t, tg.URL)
	})
}

// On a cluster the Waker subscribes through one node while the Enqueuer may
// publish through another: classic PUBLISH reaches every node.
func wakerStartsAnnouncedTasks(t *testing.T, url string) {
	rc0, err := redisconn.Parse(url)
	require.NoError(t, err)
	plain := rc0.Client()
	t.Cleanup(func() { _ = plain.Close() })

	ctx, cancel := context.WithCancel(context.Background())
	waker := queue.NewWaker(plain, len(queue.Queues()), time.Minute)
	ran := make(chan struct{})
	go func() { _ = waker.Run(ctx); close(ran) }()
	select {
	case <-waker.Ready():
	case <-time.After(20 * time.Second):
		t.Fatal("the waker never subscribed")
	}
	rc := rc0.Client()
	rc.AddHook(waker.Hook())
	t.Cleanup(func() { _ = rc.Close() })
	srv := asynq.NewServerFromRedisClient(rc, asynq.Config{Concurrency: 2, Queues: queue.Weights(), TaskCheckInterval: time.Millisecond, LogLevel: asynq.ErrorLevel})
	started := make(chan string, 4)
	mux := asynq.NewServeMux()
	mux.HandleFunc(queue.TypeSupervise, func(_ context.Context, task *asynq.Task) error {
		p, err := queue.Decode[queue.SupervisePayload](task)
		if err == nil {
			started <- p.RunID
		}
		return err
	})
	require.NoError(t, srv.Start(mux))
	t.Cleanup(srv.Shutdown)
	// Runs first: a Waker that ended no longer holds the processor, so the
	// shutdown does not wait out the minute.
	t.Cleanup(func() { cancel(); <-ran })

	client := asynq.NewClient(rc0.Asynq())
	t.Cleanup(func() { _ = client.Close() })
	announcing, err := queue.NewEnqueuer(client, queue.Config{Wake: plain})
	require.NoError(t, err)
	silent, err := queue.NewEnqueuer(client, queue.Config{})
	require.NoError(t, err)
	waitStarted := func(want string) {
		t.Helper()
		select {
		case got := <-started:
			require.Equal(t, want, got)
		case <-time.After(20 * time.Second):
			t.Fatalf("%s did not start (the idle poll is a minute)", want)
		}
	}

	// Run ids of this run only: the Cluster is shared by the test binary, and a
	// task id that -count=2 enqueued before is a conflict, not a new task.
	tag := "-" + uuid.NewString()[:8]
	announced, silentID, second := "announced"+tag, "silent"+tag, "second"+tag

	// Let the server go idle (a dequeue round found nothing), then announce.
	time.Sleep(500 * time.Millisecond)
	require.NoError(t, announcing.Supervise(ctx, rt, announced, "k"))
	waitStarted(announced)

	// Idle again (a round right after the task started would find the next one
	// by itself), then a task nobody announces.
	time.Sleep(500 * time.Millisecond)
	require.NoError(t, silent.Supervise(ctx, rt, silentID, "k"))
	select {
	case got := <-started:
		t.Fatalf("%s started without an announcement, before the idle poll", got)
	case <-time.After(time.Second):
	}
	require.NoError(t, announcing.Supervise(ctx, rt, second, "k"))
	got := map[string]bool{}
	for range 2 {
		select {
		case id := <-started:
			got[id] = true
		case <-time.After(20 * time.Second):
			t.Fatal("announced round did not start both tasks")
		}
	}
	require.Equal(t, map[string]bool{silentID: true, second: true}, got)
}
