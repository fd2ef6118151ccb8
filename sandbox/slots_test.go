package sandbox_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/internal/testdb"
	"github.com/aetherium-engine/aetherium/sandbox"
)

func slotsRedis(t *testing.T) redis.UniversalClient {
	t.Helper()
	opt, err := redis.ParseURL(testdb.Redis(t))
	require.NoError(t, err)
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// The semaphore against a real Redis, with goroutines as concurrent one-shots
// (and two Slots values as two worker processes): never more than the cap hold
// a run's or a principal's slots at once; the N+1th waits and, when none frees up
// in time, fails with ErrOneShotBusy naming the cap; a released slot lets a
// waiter in; a slot never given back (a dead worker) expires.
func TestSlotsCapsConcurrentOneShots(t *testing.T) {
	t.Parallel()
	rdb := slotsRedis(t)
	ctx := context.Background()
	cfg := sandbox.OneShotConfig{MaxPerRun: 2, MaxPerPrincipal: 3, Wait: 300 * time.Millisecond}
	workers := []*sandbox.Slots{sandbox.NewSlots(rdb, cfg), sandbox.NewSlots(rdb, cfg)}
	uniq := time.Now().Format("150405.000000000")

	for _, tc := range []struct {
		name   string
		caller func(i int) sandbox.Caller
		cap    int
		names  string
	}{
		{"per run", func(int) sandbox.Caller { return sandbox.Caller{Run: "r1-" + uniq, Principal: "alice-" + uniq} }, 2, "sandbox.oneshot.max_per_run"},
		// Each try its own run: only the principal's cap binds.
		{"per principal", func(i int) sandbox.Caller {
			return sandbox.Caller{Run: fmt.Sprintf("r2-%d-%s", i, uniq), Principal: "bob-" + uniq}
		}, 3, "sandbox.oneshot.max_per_principal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const tries = 8
			var held, most, busy atomic.Int64
			var wg sync.WaitGroup
			release := make(chan struct{})
			releases := make(chan func(), tries)
			for i := range tries {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rel, err := workers[i%2].Acquire(ctx, tc.caller(i), time.Minute)
					if err != nil {
						require.ErrorIs(t, err, sandbox.ErrOneShotBusy)
						require.Contains(t, err.Error(), tc.names)
						busy.Add(1)
						return
					}
					n := held.Add(1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					releases <- func() { held.Add(-1); rel() }
					<-release
				}()
			}
			// Every try past the cap waited its 300ms and gave up.
			require.Eventually(t, func() bool { return busy.Load() == tries-int64(tc.cap) }, 10*time.Second, 20*time.Millisecond)
			require.EqualValues(t, tc.cap, most.Load(), "never more than the cap at once")

			// A released slot serves the next one-shot at once.
			(<-releases)()
			rel, err := workers[0].Acquire(ctx, tc.caller(0), time.Minute)
			require.NoError(t, err)
			rel()
			close(release)
			for range tc.cap - 1 {
				(<-releases)()
			}
			wg.Wait()
		})
	}

	t.Run("a dead worker's slot comes back", func(t *testing.T) {
		t.Parallel()
		c := sandbox.Caller{Run: "r4-" + uniq}
		one := sandbox.NewSlots(rdb, sandbox.OneShotConfig{MaxPerRun: 1, MaxPerPrincipal: 1, Wait: 100 * time.Millisecond})
		_, err := one.Acquire(ctx, c, -time.Minute+300*time.Millisecond) // never released; expires 300ms on
		require.NoError(t, err)
		_, err = one.Acquire(ctx, c, time.Minute)
		require.ErrorIs(t, err, sandbox.ErrOneShotBusy)
		time.Sleep(400 * time.Millisecond)
		rel, err := one.Acquire(ctx, c, time.Minute)
		require.NoError(t, err, "the expired slot is free again")
		rel()
	})
}

func TestOneShotConfig(t *testing.T) {
	t.Parallel()
	d := sandbox.OneShotConfig{}.WithDefaults()
	require.Equal(t, sandbox.OneShotConfig{MaxPerRun: sandbox.DefaultOneShotsPerRun, MaxPerPrincipal: sandbox.DefaultOneShotsPerPrincipal, Wait: sandbox.DefaultOneShotWait}, d)
	require.NoError(t, d.Validate())
	for _, tc := range []struct {
		cfg  sandbox.OneShotConfig
		want string
	}{
		{sandbox.OneShotConfig{MaxPerRun: 9, MaxPerPrincipal: 8, Wait: time.Second}, "max_per_run (9) must not exceed max_per_principal (8)"},
		{sandbox.OneShotConfig{MaxPerRun: -1, MaxPerPrincipal: 8, Wait: time.Second}, "must be positive"},
		{sandbox.OneShotConfig{MaxPerRun: 1, MaxPerPrincipal: 8, Wait: time.Hour}, "sandbox.oneshot.wait"},
	} {
		require.ErrorContains(t, tc.cfg.Validate(), tc.want)
	}
}
