package fair_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/internal/testdb"
	"github.com/aetherium-engine/aetherium/queue/fair"
)

type env struct {
	url string
	cfg fair.Config
	// cluster: the shared Redis Cluster (else a private single node).
	cluster bool
}

// matrix runs body against each Redis shape (a private single node, and the
// shared Redis Cluster under a per-test prefix); proc returns a dispatcher
// with its own client, as a separate process would have.
func matrix(t *testing.T, cfg fair.Config, body func(t *testing.T, e *env)) {
	t.Helper()
	testdb.EachRedis(t, func(t *testing.T, tg testdb.RedisTarget) {
		c := cfg
		c.Prefix = tg.Prefix + ":fair"
		body(t, &env{url: tg.URL, cfg: c, cluster: tg.Name == "cluster"})
	})
}

func (e *env) proc(t *testing.T) *fair.Dispatcher {
	t.Helper()
	d, err := fair.New(testdb.Connect(t, e.url), e.cfg)
	require.NoError(t, err)
	return d
}

var ctx = context.Background()

func task(id, key string, prio int) fair.Task {
	return fair.Task{ID: id, Key: key, Weight: 1, Priority: prio, Spec: []byte("spec:" + id)}
}

func submit(t *testing.T, d *fair.Dispatcher, ts ...fair.Task) []fair.Dispatched {
	t.Helper()
	var out []fair.Dispatched
	for _, tk := range ts {
		got, err := d.Submit(ctx, tk)
		require.NoError(t, err)
		out = append(out, got...)
	}
	return out
}

func ids(ds []fair.Dispatched) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.ID)
	}
	return out
}

func stats(t *testing.T, d *fair.Dispatcher) fair.Stats {
	t.Helper()
	s, err := d.Stats(ctx)
	require.NoError(t, err)
	return s
}

func heartbeat(t *testing.T, d *fair.Dispatcher, worker string, capacity int, running ...string) []fair.Dispatched {
	t.Helper()
	got, err := d.Heartbeat(ctx, worker, capacity, running)
	require.NoError(t, err)
	return got
}

func done(t *testing.T, d *fair.Dispatcher, id string) []fair.Dispatched {
	t.Helper()
	got, err := d.Done(ctx, id)
	require.NoError(t, err)
	return got
}

func inFlight(t *testing.T, d *fair.Dispatcher, key string) int {
	t.Helper()
	n, err := d.InFlightOf(ctx, key)
	require.NoError(t, err)
	return n
}

func cancel(t *testing.T, d *fair.Dispatcher, id string) bool {
	t.Helper()
	ok, err := d.Cancel(ctx, id)
	require.NoError(t, err)
	return ok
}

// parallel runs body in n goroutines (g = 0..n-1) and fails t with the first
// error any returned.
func parallel(t *testing.T, n int, body func(g int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for g := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- body(g)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// familyKeys lists every Redis key of the family, on every master of a cluster.
func familyKeys(t *testing.T, e *env) []string {
	t.Helper()
	rdb := testdb.Connect(t, e.url)
	var mu sync.Mutex
	var keys []string
	scan := func(ctx context.Context, c *redis.Client) error {
		it := c.Scan(ctx, 0, "{"+e.cfg.Prefix+"}*", 1000).Iterator()
		for it.Next(ctx) {
			mu.Lock()
			keys = append(keys, it.Val())
			mu.Unlock()
		}
		return it.Err()
	}
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		require.NoError(t, c.ForEachMaster(ctx, scan))
	case *redis.Client:
		require.NoError(t, scan(ctx, c))
	default:
		t.Fatalf("client %T", rdb)
	}
	return keys
}

func TestConfig(t *testing.T) {
	t.Parallel()
	c := fair.Config{}.WithDefaults()
	require.Equal(t, fair.Config{Prefix: fair.DefaultPrefix, Aging: fair.DefaultAging, DispatchLease: fair.DefaultDispatchLease,
		RunLease: fair.DefaultRunLease, WorkerTTL: fair.DefaultWorkerTTL, Scan: fair.DefaultScan}, c)
	require.NoError(t, c.Validate())
	for _, tc := range []struct {
		cfg  fair.Config
		want string
	}{
		{fair.Config{Prefix: "a{b"}, "must not contain"},
		{fair.Config{Aging: -time.Second}, "aging"},
		{fair.Config{DispatchLease: -1}, "dispatch_lease"},
		{fair.Config{RunLease: -time.Minute}, "run_lease"},
		{fair.Config{WorkerTTL: -1}, "worker_ttl"},
		{fair.Config{WorkerTTL: time.Microsecond}, "below a millisecond"},
		{fair.Config{Scan: -1}, "scan"},
	} {
		require.ErrorContains(t, tc.cfg.Validate(), tc.want)
		_, err := fair.New(nil, tc.cfg)
		require.ErrorContains(t, err, tc.want)
	}
}

func TestNormalizeKey(t *testing.T) {
	t.Parallel()
	require.Equal(t, "tenant-1", fair.NormalizeKey("tenant-1"))
	long := fair.NormalizeKey(strings.Repeat("x", 1<<20))
	require.Len(t, long, 66)
	require.True(t, strings.HasPrefix(long, "h:"))
	require.NotEqual(t, long, fair.NormalizeKey(long), "a raw key cannot take a hashed key's name")
	require.Equal(t, strings.Repeat("y", fair.MaxKey), fair.NormalizeKey(strings.Repeat("y", fair.MaxKey)))
}

// Bad arguments fail before Redis is touched, with ErrInvalid naming the field.
func TestInvalidArguments(t *testing.T) {
	t.Parallel()
	d, err := fair.New(nil, fair.Config{})
	require.NoError(t, err)
	ok := fair.Task{ID: "a", Key: "k", Weight: 1, Priority: 3}
	for _, tc := range []struct {
		name string
		mod  func(*fair.Task)
		want string
	}{
		{"empty id", func(t *fair.Task) { t.ID = "" }, "id is empty"},
		{"long id", func(t *fair.Task) { t.ID = strings.Repeat("i", fair.MaxID+1) }, "id is 513 bytes"},
		{"zero weight", func(t *fair.Task) { t.Weight = 0 }, "weight 0"},
		{"negative weight", func(t *fair.Task) { t.Weight = -3 }, "weight -3"},
		{"huge weight", func(t *fair.Task) { t.Weight = fair.MaxWeight + 1 }, "weight"},
		{"negative limit", func(t *fair.Task) { t.Limit = -1 }, "limit -1"},
		{"priority 0", func(t *fair.Task) { t.Priority = 0 }, "priority 0"},
		{"priority 6", func(t *fair.Task) { t.Priority = 6 }, "priority 6"},
		{"spec", func(t *fair.Task) { t.Spec = make([]byte, fair.MaxSpec+1) }, "spec is"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tk := ok
			tc.mod(&tk)
			_, err := d.Submit(ctx, tk)
			require.ErrorIs(t, err, fair.ErrInvalid)
			require.ErrorContains(t, err, tc.want)
		})
	}
	_, err = d.Heartbeat(ctx, "w", -1, nil)
	require.ErrorIs(t, err, fair.ErrInvalid)
	_, err = d.Heartbeat(ctx, "", 1, nil)
	require.ErrorIs(t, err, fair.ErrInvalid)
	_, err = d.Heartbeat(ctx, "w", 1, []string{""})
	require.ErrorIs(t, err, fair.ErrInvalid)
	_, err = d.Heartbeat(ctx, "w", 1, make([]string, fair.MaxRunning+1))
	require.ErrorContains(t, err, "running lists")
	require.ErrorIs(t, d.Started(ctx, "w", "", "k"), fair.ErrInvalid)
	require.ErrorIs(t, d.Started(ctx, "", "a", "k"), fair.ErrInvalid)
	require.ErrorIs(t, d.Leave(ctx, ""), fair.ErrInvalid)
	_, err = d.Done(ctx, "")
	require.ErrorIs(t, err, fair.ErrInvalid)
	_, err = d.Cancel(ctx, "")
	require.ErrorIs(t, err, fair.ErrInvalid)
}

// Keys and ids with braces, colons, newlines and a megabyte stay inside the
// family: every Redis key starts with the family's tag, hostile keys are
// hashed, and dispatch works on both shapes (no CROSSSLOT on the cluster).
func TestHostileKeys(t *testing.T) {
	t.Parallel()
	matrix(t, fair.Config{}, func(t *testing.T, e *env) {
		d := e.proc(t)
		keys := []string{"a:b", "}{x}", "{" + e.cfg.Prefix + "}:k:victim", "new\nline", "\x00\xff", strings.Repeat("m", 1<<20), "h:0000", ""}
		var ts []fair.Task
		for i, k := range keys {
			ts = append(ts, task(fmt.Sprintf("id-%d}{:\n%d", i, i), k, 3))
		}
		require.Empty(t, submit(t, d, ts...), "no worker yet")
		require.Equal(t, len(keys), stats(t, d).Keys)
		got := heartbeat(t, d, "w", 100)
		require.Len(t, got, len(keys))
		seen := map[string]bool{}
		for _, g := range got {
			require.LessOrEqual(t, len(g.Key), fair.MaxKey)
			seen[g.Key] = true
			require.Equal(t, "spec:"+g.ID, string(g.Spec))
		}
		for _, k := range keys {
			require.True(t, seen[fair.NormalizeKey(k)], "key %.20q", k)
		}
		for _, k := range familyKeys(t, e) {
			require.True(t, strings.HasPrefix(k, "{"+e.cfg.Prefix+"}:"), k)
			require.Less(t, len(k), 1024, "no megabyte key name")
		}
		for _, g := range got {
			require.NoError(t, d.Started(ctx, "w", g.ID, ""))
			done(t, d, g.ID)
		}
		require.Equal(t, fair.Stats{Window: 100}, stats(t, d))
	})
}

// Two keys always backlogged with weights 3:1 share one slot 3:1.
func TestWeightsShare(t *testing.T) {
	t.Parallel()
	matrix(t, fair.Config{}, func(t *testing.T, e *env) {
		d := e.proc(t)
		const picks = 4000
		for i := range picks {
			submit(t, d, fair.Task{ID: fmt.Sprintf("a%d", i), Key: "A", Weight: 3, Priority: 3},
				fair.Task{ID: fmt.Sprintf("b%d", i), Key: "B", Weight: 1, Priority: 3})
		}
		got := heartbeat(t, d, "w", 1)
		count := map[string]int{}
		for range picks {
			require.Len(t, got, 1)
			count[got[0].Key]++
			got = done(t, d, got[0].ID)
		}
		share := float64(count["A"]) / picks
		require.InDelta(t, 0.75, share, 0.02*0.75, "picks %v", count)
	})
}

// 8 goroutines on two clients race Submit, Started and Done; a key's limit
// holds at every sample, and everything drains.
func TestLimitUnderContention(t *testing.T) {
	t.Parallel()
	matrix(t, fair.Config{}, func(t *testing.T, e *env) {
		procs := []*fair.Dispatcher{e.proc(t), e.proc(t)}
		const limit, goroutines, perG = 3, 8, 40
		heartbeat(t, procs[0], "w1", 10)
		heartbeat(t, procs[1], "w2", 10)
		stop := make(chan struct{})
		var samples, maxSeen atomic.Int64
		sampler := make(chan error, 1)
		go func() {
			for {
				select {
				case <-stop:
					sampler <- nil
					return
				default:
				}
				n, err := procs[0].InFlightOf(ctx, "L")
				if err != nil {
					sampler <- err
					return
				}
				if int64(n) > maxSeen.Load() {
					maxSeen.Store(int64(n))
				}
				samples.Add(1)
			}
		}()
		parallel(t, goroutines, func(g int) error {
			d := procs[g%2]
			var todo []fair.Dispatched
			for i := range perG {
				key := "L"
				lim := limit
				if i%3 == 0 {
					key, lim = fmt.Sprintf("U%d", g), 0
				}
				got, err := d.Submit(ctx, fair.Task{ID: fmt.Sprintf("g%d-%d", g, i), Key: key, Weight: 1 + g%2, Limit: lim, Priority: 1 + i%5})
				if err != nil {
					return err
				}
				todo = append(todo, got...)
				for len(todo) > 2 || (i == perG-1 && len(todo) > 0) {
					x := todo[0]
					todo = todo[1:]
					if err := d.Started(ctx, fmt.Sprintf("w%d", g%2+1), x.ID, x.Key); err != nil {
						return err
					}
					more, err := d.Done(ctx, x.ID)
					if err != nil {
						return err
					}
					todo = append(todo, more...)
				}
			}
			return nil
		})
		close(stop)
		require.NoError(t, <-sampler)
		require.Positive(t, samples.Load())
		require.LessOrEqual(t, maxSeen.Load(), int64(limit))
		t.Logf("%d samples of L's in-flight count, the highest %d (limit %d)", samples.Load(), maxSeen.Load(), limit)
		require.Equal(t, fair.Stats{Window: 20}, stats(t, procs[0]), "everything drained")
	})
}

// The window is the sum of live capacities; a worker whose TTL passes no
// longer counts, and with no live worker nothing is dispatched.
func TestWindow(t *testing.T) {
	t.Parallel()
	matrix(t, fair.Config{WorkerTTL: 400 * time.Millisecond}, func(t *testing.T, e *env) {
		d := e.proc(t)
		var ts []fair.Task
		for i := range 10 {
			ts = append(ts, task(fmt.Sprintf("t%d", i), fmt.Sprintf("k%d", i%3), 3))
		}
		require.Empty(t, submit(t, d, ts...))
		require.Len(t, heartbeat(t, d, "w1", 2), 2)
		require.Len(t, heartbeat(t, d, "w2", 3), 3)
		s := stats(t, d)
		require.Equal(t, fair.Stats{Pending: 5, Keys: 3, InFlight: 5, Window: 5}, s)
		deadline := time.Now().Add(2 * time.Second)
		for stats(t, d).Window != 2 { // w2 stops heartbeating
			require.True(t, time.Now().Before(deadline), "w2's capacity never expired")
			heartbeat(t, d, "w1", 2)
			time.Sleep(50 * time.Millisecond)
		}
		got, err := d.Pump(ctx)
		require.NoError(t, err)
		require.Empty(t, got)
		var inflight []string
		for i := range 10 {
			if n, _ := d.Cancel(ctx, fmt.Sprintf("t%d", i)); !n {
				inflight = append(inflight, fmt.Sprintf("t%d", i))
			}
		}
		require.Len(t, inflight, 5)
		require.Equal(t, 0, stats(t, d).Pending)
		require.NoError(t, d.Leave(ctx, "w1"))
		require.Equal(t, 0, stats(t, d).Window)
		require.Empty(t, submit(t, d, task("late", "k", 3)), "no live worker")
		require.Equal(t, []string{"late"}, ids(heartbeat(t, d, "w1", 6)), "5 in flight, window 6: room for one")
		for _, id := range append(inflight, "late") {
			require.Empty(t, done(t, d, id))
		}
		require.Equal(t, fair.Stats{Window: 6}, stats(t, d))
	})
}
