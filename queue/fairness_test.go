package queue_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/internal/redisconn"
	"github.com/aetherium-engine/aetherium/internal/testdb"
	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/queue/fair"
)

func intp(n int) *int { return &n }

func TestFairnessValidate(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		f    queue.Fairness
		want string
	}{
		{"defaults", queue.Fairness{}, ""},
		{"weights and limits", queue.Fairness{Keys: map[string]queue.KeyPolicy{"alice": {Weight: intp(3), Runs: 5, Turns: 10}}}, ""},
		{"weight 0", queue.Fairness{Keys: map[string]queue.KeyPolicy{"alice": {Weight: intp(0)}}}, `fairness.keys["alice"].weight: must be at least 1, got 0`},
		{"negative weight", queue.Fairness{Default: queue.KeyPolicy{Weight: intp(-2)}}, "fairness.default.weight: must be at least 1, got -2"},
		{"negative runs", queue.Fairness{Keys: map[string]queue.KeyPolicy{"bob": {Runs: -1}}}, `fairness.keys["bob"].runs`},
		{"negative turns", queue.Fairness{Default: queue.KeyPolicy{Turns: -1}}, "fairness.default.turns"},
		{"empty key", queue.Fairness{Keys: map[string]queue.KeyPolicy{"": {}}}, "fairness.keys: a key must be 1-128 bytes, got 0"},
		{"long key", queue.Fairness{Keys: map[string]queue.KeyPolicy{strings.Repeat("k", 129): {}}}, "got 129"},
		{"priority 6", queue.Fairness{MaxPriority: map[string]int{"submit": 6}}, `fairness.max_priority["submit"]: must be 1-5, got 6`},
		{"priority 0", queue.Fairness{MaxPriority: map[string]int{"submit": 0}}, "got 0"},
		{"negative aging", queue.Fairness{Aging: -time.Second}, "fairness.aging"},
		{"dispatch", queue.Fairness{Dispatch: "lifo"}, `fairness.dispatch: "lifo" is not fair or fifo`},
	} {
		err := c.f.Validate()
		if c.want == "" {
			require.NoError(t, err, c.name)
			continue
		}
		require.ErrorContains(t, err, c.want, c.name)
	}
}

func TestFairnessPolicyAndPriority(t *testing.T) {
	t.Parallel()
	f := queue.Fairness{
		Default:     queue.KeyPolicy{Weight: intp(2), Runs: 7},
		Keys:        map[string]queue.KeyPolicy{"alice": {Weight: intp(3), Turns: 4}, "bob": {Runs: 1}},
		MaxPriority: map[string]int{"submit": 3, "approve": 4},
	}
	for _, c := range []struct {
		key                 string
		weight, runs, turns int
	}{
		{"alice", 3, 0, 4},
		{"bob", 2, 1, 0}, // named without a weight: the default's
		{"carol", 2, 7, 0},
	} {
		w, r, tu := f.Policy(c.key)
		require.Equal(t, []int{c.weight, c.runs, c.turns}, []int{w, r, tu}, c.key)
	}
	w, _, _ := queue.Fairness{}.Policy("anyone")
	require.Equal(t, queue.DefaultWeight, w)
	require.Equal(t, 3, f.MaxPriorityOf([]string{"submit", "read"}), "an unnamed role grants nothing")
	require.Equal(t, 4, f.MaxPriorityOf([]string{"submit", "approve"}))
	require.Equal(t, 5, f.MaxPriorityOf([]string{"admin"}))
	require.Equal(t, 5, f.MaxPriorityOf(nil), "no authentication")

	require.Equal(t, "alice", queue.Key("alice"))
	long := queue.Key(strings.Repeat("x", 1<<20))
	require.Len(t, long, 2+64)
	require.True(t, strings.HasPrefix(long, "h:"))
	require.NotEqual(t, long, queue.Key(strings.Repeat("x", 1<<20-1)))
}

// RouteOf reads what the Enqueuer wrote and nothing else.
func TestRouteOf(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		payload string
		want    queue.Route
		ok      bool
	}{
		{`{"route":{"k":"alice","p":5},"run_id":"r1"}`, queue.Route{Key: "alice", Priority: 5}, true},
		{`{"run_id":"r1"}`, queue.Route{}, false},
		{`{"route":{"k":"","p":3}}`, queue.Route{}, false},
		{`{"route":"alice"}`, queue.Route{}, false},
		{`not json "route":`, queue.Route{}, false},
	} {
		got, ok := queue.RouteOf(asynq.NewTask(queue.TypeTurn, []byte(c.payload)))
		require.Equal(t, c.ok, ok, c.payload)
		require.Equal(t, c.want, got, c.payload)
	}
}

// fairFleet is a real asynq server (concurrency 2) whose handlers record the
// order tasks start in, behind a fair dispatcher on a private Redis.
type fairFleet struct {
	q       *queue.Enqueuer
	d       *fair.Dispatcher
	mu      sync.Mutex
	order   []string       // run ids, in start order
	running map[string]int // by key, now
	peak    map[string]int // by key, ever
	done    chan string
	// start begins the worker's heartbeat: until then its window is 0 and
	// everything submitted waits in its line (so a test's submissions do not
	// race the first dispatches).
	start func()
}

func setupFairFleet(t *testing.T, f queue.Fairness, hold time.Duration) *fairFleet {
	t.Helper()
	return setupFairFleetSized(t, f, hold, 2, fair.Config{}, 100*time.Millisecond)
}

// setupFairFleetSized is setupFairFleet with a worker of capacity slots, the
// dispatcher's cfg, and a heartbeat every beat.
func setupFairFleetSized(t *testing.T, f queue.Fairness, hold time.Duration, capacity int, cfg fair.Config, beat time.Duration) *fairFleet {
	t.Helper()
	rc, err := redisconn.Parse(testdb.Redis(t))
	require.NoError(t, err)
	rdb := rc.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	d, err := fair.New(rdb, cfg)
	require.NoError(t, err)
	client := asynq.NewClient(rc.Asynq())
	t.Cleanup(func() { _ = client.Close() })
	q, err := queue.NewEnqueuer(client, queue.Config{Fair: d, Fairness: f})
	require.NoError(t, err)
	ff := &fairFleet{q: q, d: d, running: map[string]int{}, peak: map[string]int{}, done: make(chan string, 1000)}
	srv := asynq.NewServerFromRedisClient(rc.Client(), asynq.Config{Concurrency: capacity, Queues: queue.Weights(), TaskCheckInterval: 5 * time.Millisecond, LogLevel: asynq.ErrorLevel})
	mux := asynq.NewServeMux()
	runner := q.FairRunner("w1", capacity, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NotNil(t, runner)
	mux.Use(runner.Middleware)
	mux.HandleFunc(queue.TypeSupervise, func(_ context.Context, task *asynq.Task) error {
		p, err := queue.Decode[queue.SupervisePayload](task)
		if err != nil {
			return err
		}
		r, _ := queue.RouteOf(task)
		ff.mu.Lock()
		ff.order = append(ff.order, p.RunID)
		ff.running[r.Key]++
		ff.peak[r.Key] = max(ff.peak[r.Key], ff.running[r.Key])
		ff.mu.Unlock()
		time.Sleep(hold)
		ff.mu.Lock()
		ff.running[r.Key]--
		ff.mu.Unlock()
		ff.done <- p.RunID
		return nil
	})
	require.NoError(t, srv.Start(mux))
	t.Cleanup(srv.Shutdown)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	ff.start = func() { go func() { _ = runner.Run(ctx, beat); close(ran) }() }
	t.Cleanup(func() {
		cancel()
		select {
		case <-ran:
		case <-time.After(10 * time.Second):
		}
	})
	return ff
}

func (ff *fairFleet) submit(t *testing.T, key string, prio int, ids ...string) {
	t.Helper()
	for _, id := range ids {
		require.NoError(t, ff.q.Supervise(context.Background(), queue.Route{Key: key, Priority: prio}, id, "start"))
	}
}

func (ff *fairFleet) wait(t *testing.T, n int) []string {
	t.Helper()
	for range n {
		select {
		case <-ff.done:
		case <-time.After(30 * time.Second):
			t.Fatalf("tasks stopped finishing: %v", ff.order)
		}
	}
	ff.mu.Lock()
	defer ff.mu.Unlock()
	return append([]string(nil), ff.order...)
}

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%02d", prefix, i)
	}
	return out
}

func positions(order []string, prefix string) []int {
	var out []int
	for i, id := range order {
		if strings.HasPrefix(id, prefix) {
			out = append(out, i)
		}
	}
	return out
}

// Through real asynq: a tenant that arrives behind another's backlog starts
// at once (its tasks alternate with the backlog's instead of waiting for it),
// a higher priority goes first, and a key's turn limit holds while the
// window has room.
func TestFairDispatchThroughAsynq(t *testing.T) {
	t.Parallel()
	t.Run("late tenant", func(t *testing.T) {
		t.Parallel()
		ff := setupFairFleet(t, queue.Fairness{}, 20*time.Millisecond)
		ff.submit(t, "a", 3, names("a", 30)...)
		ff.submit(t, "b", 3, names("b", 3)...)
		ff.start()
		order := ff.wait(t, 33)
		pos := positions(order, "b")
		require.Len(t, pos, 3)
		require.Less(t, pos[2], 10, "b's tasks interleave with a's backlog (FIFO would start them at 30-32): %v", order)
	})
	t.Run("priority", func(t *testing.T) {
		t.Parallel()
		ff := setupFairFleet(t, queue.Fairness{}, 20*time.Millisecond)
		ff.submit(t, "a", 3, names("low", 20)...)
		ff.submit(t, "a", 5, names("high", 3)...)
		ff.start()
		order := ff.wait(t, 23)
		pos := positions(order, "high")
		require.Len(t, pos, 3)
		require.Less(t, pos[2], 5, "priority 5 goes ahead of the priority-3 backlog: %v", order)
	})
	t.Run("turn limit", func(t *testing.T) {
		t.Parallel()
		ff := setupFairFleet(t, queue.Fairness{Keys: map[string]queue.KeyPolicy{"a": {Turns: 1}}}, 30*time.Millisecond)
		ff.submit(t, "a", 3, names("a", 8)...)
		ff.start()
		ff.wait(t, 8)
		ff.mu.Lock()
		defer ff.mu.Unlock()
		require.Equal(t, 1, ff.peak["a"], "a key limited to one turn never runs two, though the worker has two slots")
	})
	t.Run("weights", func(t *testing.T) {
		t.Parallel()
		ff := setupFairFleet(t, queue.Fairness{Keys: map[string]queue.KeyPolicy{"a": {Weight: intp(3)}}}, 5*time.Millisecond)
		ff.submit(t, "a", 3, names("a", 60)...)
		ff.submit(t, "b", 3, names("b", 60)...)
		ff.start()
		order := ff.wait(t, 120)
		// While both have work (the first 80 starts: a runs out at 60), a gets
		// three starts for each of b's.
		a := len(positions(order[:60], "a"))
		require.InDelta(t, 45, a, 4, "3:1 of the first 60 starts: %v", order[:60])
	})
}

// A worker with more slots than one dispatch script hands out (Scan) has them
// all filled by its first heartbeat, not Scan of them until a task ends or the
// next beat (here an hour away).
func TestFairHeartbeatFillsTheWindowPastScan(t *testing.T) {
	t.Parallel()
	ff := setupFairFleetSized(t, queue.Fairness{}, 1500*time.Millisecond, 10, fair.Config{Scan: 4}, time.Hour)
	ff.submit(t, "a", 3, names("a", 20)...)
	ff.start()
	require.Eventually(t, func() bool {
		ff.mu.Lock()
		defer ff.mu.Unlock()
		return ff.running["a"] == 10
	}, time.Second, 10*time.Millisecond, "every one of the 10 slots runs a task before the first ends")
}
