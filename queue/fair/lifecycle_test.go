package fair_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/queue/fair"
)

// A dispatched task nobody Started within DispatchLease goes back to the head
// of its line, out of the window meanwhile, and keeps its Spec and its wait.
func TestDispatchLeaseExpiryReturnsToHead(t *testing.T) {
	t.Parallel()
	matrix(t, fair.Config{DispatchLease: 200 * time.Millisecond}, func(t *testing.T, e *env) {
		d := e.proc(t)
		submit(t, d, task("a1", "A", 3), task("a2", "A", 3))
		got := heartbeat(t, d, "w", 1)
		require.Equal(t, []string{"a1"}, ids(got))
		time.Sleep(300 * time.Millisecond)
		got, err := d.Pump(ctx)
		require.NoError(t, err)
		require.Equal(t, []string{"a1"}, ids(got), "back at the head, dispatched again")
		require.Equal(t, "spec:a1", string(got[0].Spec))
		require.GreaterOrEqual(t, got[0].Waited, 250*time.Millisecond)
		require.Equal(t, fair.Stats{Pending: 1, Keys: 1, InFlight: 1, Window: 1}, stats(t, d))
		// Started late, after its lease expired and it went back in line (no
		// window to dispatch it again): it leaves the line rather than being
		// dispatched twice.
		require.NoError(t, d.Leave(ctx, "w"))
		time.Sleep(300 * time.Millisecond)
		got, err = d.Pump(ctx)
		require.NoError(t, err)
		require.Empty(t, got)
		require.Equal(t, fair.Stats{Pending: 2, Keys: 1}, stats(t, d))
		require.NoError(t, d.Started(ctx, "w", "a1", "A"))
		require.Equal(t, fair.Stats{Pending: 1, Keys: 1, InFlight: 1}, stats(t, d))
		require.Empty(t, heartbeat(t, d, "w", 1, "a1"), "the window is full")
		require.Equal(t, []string{"a2"}, ids(done(t, d, "a1")))
	})
}

// A Started task whose worker stops heartbeating releases its slot after
// RunLease; a heartbeat naming it keeps it.
func TestRunLeaseExpiryReleasesSlot(t *testing.T) {
	t.Parallel()
	matrix(t, fair.Config{RunLease: 600 * time.Millisecond, WorkerTTL: 10 * time.Second}, func(t *testing.T, e *env) {
		d := e.proc(t)
		submit(t, d, task("a1", "A", 3), task("a2", "A", 3))
		require.Equal(t, []string{"a1"}, ids(heartbeat(t, d, "w", 1)))
		require.NoError(t, d.Started(ctx, "w", "a1", "A"))
		require.NoError(t, d.Started(ctx, "w", "a1", "A"), "twice is fine")
		for range 6 {
			time.Sleep(100 * time.Millisecond)
			require.Empty(t, heartbeat(t, d, "w", 1, "a1"), "the heartbeat extends a1's lease")
		}
		time.Sleep(800 * time.Millisecond)
		got := heartbeat(t, d, "w", 1)
		require.Equal(t, []string{"a2"}, ids(got), "a1 expired, its slot went to a2")
		require.Equal(t, 1, inFlight(t, d, "A"))
		require.Empty(t, done(t, d, "a1"), "a late Done of the dropped entry is a no-op")
		require.Equal(t, 1, inFlight(t, d, "A"))
		// asynq redelivers a1: Started registers it again, over the window.
		require.NoError(t, d.Started(ctx, "w", "a1", "A"))
		require.Equal(t, fair.Stats{InFlight: 2, Window: 1}, stats(t, d))
		done(t, d, "a1")
		done(t, d, "a2")
		require.Equal(t, fair.Stats{Window: 1}, stats(t, d))
	})
}

// Priority 5 submitted behind 500 priority-3 tasks goes first, in its own key
// and in another.
func TestPriorityGoesFirst(t *testing.T) {
	t.Parallel()
	matrix(t, fair.Config{}, func(t *testing.T, e *env) {
		d := e.proc(t)
		for i := range 500 {
			submit(t, d, task(fmt.Sprintf("a%d", i), "A", 3))
		}
		submit(t, d, task("urgent-a", "A", 5), task("urgent-b", "B", 5), task("b-low", "B", 1))
		got := heartbeat(t, d, "w", 3)
		require.ElementsMatch(t, []string{"urgent-a", "urgent-b", "a0"}, ids(got))
		require.Equal(t, 5, got[0].Priority)
		require.Equal(t, 3, got[2].Priority)
	})
}

// Low priority cannot starve: it gains one level per Aging waited.
func TestAging(t *testing.T) {
	t.Parallel()
	matrix(t, fair.Config{Aging: 200 * time.Millisecond}, func(t *testing.T, e *env) {
		d := e.proc(t)
		submit(t, d, task("old", "A", 1))
		time.Sleep(700 * time.Millisecond) // 1 + 3 levels
		for i := range 20 {
			submit(t, d, task(fmt.Sprintf("hi%d", i), fmt.Sprintf("K%d", i%4), 3))
		}
		require.Equal(t, []string{"old"}, ids(heartbeat(t, d, "w", 1)))
		// Fresh low priority still waits behind fresh higher priority.
		submit(t, d, task("new-low", "A", 1))
		got := done(t, d, "old")
		require.Len(t, got, 1)
		require.Equal(t, 3, got[0].Priority)
	})
}

// A key that arrives late gets its share at once, but banks no credit for its
// idle time: no burst paid by the key that was busy.
func TestIdleKeyBanksNoCredit(t *testing.T) {
	t.Parallel()
	matrix(t, fair.Config{}, func(t *testing.T, e *env) {
		d := e.proc(t)
		for i := range 300 {
			submit(t, d, task(fmt.Sprintf("a%d", i), "A", 3))
		}
		got := heartbeat(t, d, "w", 1)
		for range 200 {
			got = done(t, d, got[0].ID)
		}
		for i := range 50 {
			submit(t, d, task(fmt.Sprintf("b%d", i), "B", 3))
		}
		count := map[string]int{}
		var order []string
		for range 40 {
			got = done(t, d, got[0].ID)
			count[got[0].Key]++
			order = append(order, got[0].Key)
		}
		require.Contains(t, order[:2], "B", "B's share starts at once")
		require.InDelta(t, 20, count["B"], 1, "equal weights share equally, no burst: %v", order)
	})
}

// Keys at their limit are parked (Blocked) and rejoin on Done.
func TestLimitParksAndStats(t *testing.T) {
	t.Parallel()
	matrix(t, fair.Config{}, func(t *testing.T, e *env) {
		d := e.proc(t)
		var ts []fair.Task
		for i := range 5 {
			tk := task(fmt.Sprintf("l%d", i), "L", 4)
			tk.Limit = 2
			ts = append(ts, tk, task(fmt.Sprintf("u%d", i), "U", 2))
		}
		submit(t, d, ts...)
		require.Equal(t, fair.Stats{Pending: 10, Keys: 2}, stats(t, d))
		got := heartbeat(t, d, "w", 4)
		require.ElementsMatch(t, []string{"l0", "l1", "u0", "u1"}, ids(got), "L stops at 2 despite its priority")
		require.Equal(t, fair.Stats{Pending: 6, Keys: 2, InFlight: 4, Window: 4, Blocked: 1}, stats(t, d))
		require.Equal(t, []string{"l2"}, ids(done(t, d, "l0")))
		require.Equal(t, []string{"u2"}, ids(done(t, d, "u0")), "L is at its limit again")
		require.Equal(t, 2, inFlight(t, d, "L"))
	})
}

func TestCancel(t *testing.T) {
	t.Parallel()
	matrix(t, fair.Config{}, func(t *testing.T, e *env) {
		d := e.proc(t)
		submit(t, d, task("a", "K", 3), task("b", "K", 3))
		require.True(t, cancel(t, d, "a"))
		require.False(t, cancel(t, d, "a"), "no longer pending")
		require.Equal(t, []string{"b"}, ids(heartbeat(t, d, "w", 5)))
		require.False(t, cancel(t, d, "b"), "dispatched: left to Done")
		require.False(t, cancel(t, d, "never"))
		done(t, d, "b")
		require.Equal(t, fair.Stats{Window: 5}, stats(t, d))
	})
}

func TestIdempotency(t *testing.T) {
	t.Parallel()
	matrix(t, fair.Config{}, func(t *testing.T, e *env) {
		d := e.proc(t)
		submit(t, d, task("a", "K", 3), task("a", "K", 5), task("a", "other", 3))
		require.Equal(t, fair.Stats{Pending: 1, Keys: 1}, stats(t, d))
		got := heartbeat(t, d, "w", 5)
		require.Equal(t, []string{"a"}, ids(got))
		require.Equal(t, 3, got[0].Priority, "the first Submit's")
		require.Empty(t, submit(t, d, task("a", "K", 3)), "dispatched: left as it is")
		require.NoError(t, d.Started(ctx, "w", "a", "K"))
		require.NoError(t, d.Started(ctx, "w", "a", "K"))
		require.Empty(t, submit(t, d, task("a", "K", 3)), "running: left as it is")
		require.Equal(t, fair.Stats{InFlight: 1, Window: 5}, stats(t, d))
		require.Empty(t, done(t, d, "a"))
		require.Empty(t, done(t, d, "a"), "twice")
		require.Empty(t, done(t, d, "unknown"))
		require.Equal(t, fair.Stats{Window: 5}, stats(t, d))
		// Started of an unknown id registers it running for its key.
		require.NoError(t, d.Started(ctx, "w", "retry", "K"))
		require.Equal(t, 1, inFlight(t, d, "K"))
		done(t, d, "retry")
		require.Equal(t, fair.Stats{Window: 5}, stats(t, d))
	})
}

// 10^5 distinct keys submitted and done leave nothing per key behind.
func TestNoStateLeftBehind(t *testing.T) {
	t.Parallel()
	n := 100_000
	if testing.Short() {
		n = 5_000
	}
	matrix(t, fair.Config{}, func(t *testing.T, e *env) {
		n := n
		if e.cluster {
			// The cluster checks where the keys go; the single node carries the
			// 10^5 (each shape costs a script call per submit, start and done).
			n = min(n, 10_000)
		}
		d := e.proc(t)
		heartbeat(t, d, "w", 256)
		// The worker stays live for the whole run (it takes longer than WorkerTTL).
		beat, beating := make(chan struct{}), make(chan struct{})
		t.Cleanup(func() { close(beat); <-beating })
		go func() {
			defer close(beating)
			for {
				select {
				case <-beat:
					return
				case <-time.After(time.Second):
					_, _ = d.Heartbeat(ctx, "w", 256, nil)
				}
			}
		}()
		const goroutines = 16
		parallel(t, goroutines, func(g int) error {
			for i := g; i < n; i += goroutines {
				got, err := d.Submit(ctx, fair.Task{ID: fmt.Sprintf("t%d", i), Key: fmt.Sprintf("tenant-%d", i), Weight: 1 + i%7, Limit: i % 3, Priority: 1 + i%5, Spec: []byte("x")})
				for err == nil && len(got) > 0 {
					x := got[0]
					got = got[1:]
					if i%2 == 0 {
						err = d.Started(ctx, "w", x.ID, x.Key)
					}
					if err == nil {
						var more []fair.Dispatched
						more, err = d.Done(ctx, x.ID)
						got = append(got, more...)
					}
				}
				if err != nil {
					return err
				}
			}
			return nil
		})
		require.Equal(t, fair.Stats{Window: 256}, stats(t, d))
		keys := familyKeys(t, e)
		require.LessOrEqual(t, len(keys), 5, "only the family's fixed keys: %v", keys)
	})
}

// One call dispatches at most Scan tasks; the next call goes on.
func TestBatchIsBoundedByScan(t *testing.T) {
	t.Parallel()
	matrix(t, fair.Config{Scan: 10}, func(t *testing.T, e *env) {
		d := e.proc(t)
		for i := range 25 {
			submit(t, d, task(fmt.Sprintf("t%d", i), fmt.Sprintf("k%d", i%4), 3))
		}
		require.Len(t, heartbeat(t, d, "w", 100), 10)
		got, err := d.Pump(ctx)
		require.NoError(t, err)
		require.Len(t, got, 10)
		got, err = d.Pump(ctx)
		require.NoError(t, err)
		require.Len(t, got, 5)
		require.Equal(t, fair.Stats{InFlight: 25, Window: 100}, stats(t, d))
	})
}

// Started of an id the dispatcher does not know (a retry already running)
// counts against its key's limit even past it — the one exception — and the
// key stays parked until it is back under.
func TestUnknownStartedMayPassTheLimit(t *testing.T) {
	t.Parallel()
	matrix(t, fair.Config{}, func(t *testing.T, e *env) {
		d := e.proc(t)
		tk := task("a", "L", 3)
		tk.Limit = 1
		b := tk
		b.ID = "b"
		submit(t, d, tk, b)
		require.Equal(t, []string{"a"}, ids(heartbeat(t, d, "w", 10)))
		require.NoError(t, d.Started(ctx, "w", "retry", "L"))
		require.Equal(t, 2, inFlight(t, d, "L"))
		require.Empty(t, done(t, d, "a"), "still at its limit: the retry holds it")
		require.Equal(t, 1, stats(t, d).Blocked)
		require.Equal(t, []string{"b"}, ids(done(t, d, "retry")))
	})
}
