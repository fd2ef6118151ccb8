package fleet_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/api"
	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/fleet"
	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/schedules"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/submit"
)

// simClock is the schedulers' simulated clock: tests move it, nobody sleeps.
type simClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *simClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *simClock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

// scheduleFleet starts a fleet without workers (runs stay in flight until a
// test ends them) whose schedules may fire every second.
func scheduleFleet(t *testing.T, configure func(*config.Config)) *fleettest.Fleet {
	t.Helper()
	return fleettest.Start(t, fleettest.Options{NoWorker: true, Configure: func(c *config.Config) {
		c.Schedules.MinInterval = time.Second
		c.Schedules.ResubmitAfter = 5 * time.Second
		c.Schedules.LateAfter = 10 * time.Second
		if configure != nil {
			configure(c)
		}
	}})
}

// newSchedule stores a schedule of the demo template whose first tick is first.
func newSchedule(t *testing.T, f *fleettest.Fleet, name, cron string, first time.Time, edit func(*store.Schedule)) store.Schedule {
	t.Helper()
	sc := store.Schedule{Owner: store.LocalOwner, Name: name, Cron: cron, TimeZone: "UTC", Template: "demo", Prompt: "tick",
		Variables: json.RawMessage(`{"topic":"t"}`), Overlap: store.OverlapAllowAll, CatchUp: store.CatchUpNone, NextTick: &first, NextFireAt: &first}
	if edit != nil {
		edit(&sc)
	}
	out, err := f.Store.CreateSchedule(context.Background(), sc)
	require.NoError(t, err)
	return out
}

// schedulerProcess opens another scheduler role on the fleet's database and
// Redis (its own pool and clients, as another process would have) and builds
// its schedule loop on clock.
func schedulerProcess(t *testing.T, f *fleettest.Fleet, name string, clock *simClock, onClaimed func(context.Context, []store.ScheduleFire)) *schedules.Scheduler {
	t.Helper()
	sf, err := fleet.OpenScheduler(context.Background(), f.Cfg, fleettest.Logger(t).With("scheduler", name), fleet.Options{NoSandbox: true})
	require.NoError(t, err)
	t.Cleanup(sf.Close)
	s, err := sf.Schedules(schedules.Deps{Now: clock.Now, Name: name, OnClaimed: onClaimed})
	require.NoError(t, err)
	return s
}

func fires(t *testing.T, f *fleettest.Fleet, id string) []store.ScheduleFire {
	t.Helper()
	out, err := f.Store.ListScheduleFires(context.Background(), id, time.Time{}, 100_000)
	require.NoError(t, err)
	return out
}

// Three scheduler processes over 1,000 simulated seconds, two schedules firing
// every second, one scheduler killed between its claim and its submit: every
// tick is claimed once (the fires' UNIQUE (schedule, tick)) and starts exactly
// one run (its idempotency key), the killed scheduler's ticks included, which
// the survivors resubmit after resubmit_after.
func TestSchedulesFireEachTickOnceAcrossSchedulers(t *testing.T) {
	t.Parallel()
	f := scheduleFleet(t, nil)
	ctx := context.Background()
	start := time.Now().UTC().Truncate(time.Second)
	clock := &simClock{now: start}
	a := newSchedule(t, f, "a", "* * * * * *", start.Add(time.Second), nil)
	b := newSchedule(t, f, "b", "* * * * * *", start.Add(time.Second), func(s *store.Schedule) { s.Jitter = 400 * time.Millisecond })

	// The clock moves step seconds a pass: each claim takes every schedule's
	// due ticks of the last step at once, as a scheduler that runs behind does
	// (on time while within late_after), so 1,000 ticks need 250 passes, not 1,000.
	const ticks, step, killAt = 1000, 4, 400
	killCtx, kill := context.WithCancel(ctx)
	var killedClaims atomic.Int64
	survivors := []*schedules.Scheduler{schedulerProcess(t, f, "s1", clock, nil), schedulerProcess(t, f, "s2", clock, nil)}
	victim := schedulerProcess(t, f, "s3", clock, func(_ context.Context, claimed []store.ScheduleFire) {
		if clock.Now().Sub(start) >= killAt*time.Second {
			killedClaims.Add(int64(len(claimed)))
			kill() // killed between its claim and its submit
		}
	})
	for elapsed := step; elapsed <= ticks+12; elapsed += step {
		clock.Advance(step * time.Second)
		var wg sync.WaitGroup
		if killCtx.Err() == nil {
			if elapsed >= killAt {
				_, _ = victim.RunOnce(killCtx) // alone: it claims this pass's ticks, then dies
			} else {
				wg.Go(func() { _, _ = victim.RunOnce(killCtx) })
			}
		}
		for _, s := range survivors {
			wg.Go(func() {
				_, err := s.RunOnce(ctx)
				require.NoError(t, err)
			})
		}
		wg.Wait()
	}
	require.Positive(t, killedClaims.Load(), "the victim claimed ticks before it died")
	for _, sc := range []store.Schedule{a, b} {
		fs := fires(t, f, sc.ID)
		byTick := map[int64]store.ScheduleFire{}
		runs := map[string]bool{}
		for _, fr := range fs {
			require.Equal(t, store.FireSubmitted, fr.Status, "tick %s: %s %s", fr.Tick, fr.Reason, fr.Detail)
			require.NotContains(t, byTick, fr.Tick.Unix())
			byTick[fr.Tick.Unix()] = fr
			require.False(t, runs[fr.RunID], "run %s started by two ticks", fr.RunID)
			runs[fr.RunID] = true
		}
		for i := int64(1); i <= ticks; i++ {
			require.Contains(t, byTick, start.Unix()+i, "tick %d of %s fired", i, sc.Name)
		}
		// Each tick's idempotency key (schedule:<id>:<tick>) names the run its
		// fire recorded, and that run exists.
		var n int
		require.NoError(t, f.Store.Pool.QueryRow(ctx, `SELECT count(*) FROM schedule_fires f
			JOIN run_idempotency k ON k.owner = $2 AND k.key = 'schedule:' || f.schedule_id || ':' || extract(epoch FROM f.tick)::bigint
				AND k.run_id = f.run_id
			JOIN runs r ON r.id = f.run_id
			WHERE f.schedule_id = $1`, sc.ID, store.LocalOwner).Scan(&n))
		require.Equal(t, len(runs), n)
		require.Equal(t, len(fs), len(runs), "one run per fired tick")
	}
	var total int
	require.NoError(t, f.Store.Pool.QueryRow(ctx, `SELECT count(*) FROM runs`).Scan(&total))
	require.Equal(t, len(fires(t, f, a.ID))+len(fires(t, f, b.ID)), total, "one run per fired tick, no more")
	var killed int
	require.NoError(t, f.Store.Pool.QueryRow(ctx, `SELECT count(*) FROM schedule_fires WHERE claimed_by = 's3' AND run_id IS NOT NULL AND attempts >= 1`).Scan(&killed))
	require.Positive(t, killed, "the victim's claimed ticks were submitted by the survivors")
}

// Each overlap policy, on a schedule firing every second whose runs stay in
// flight (no worker) until the test ends them.
func TestScheduleOverlapPolicies(t *testing.T) {
	t.Parallel()
	type step struct {
		// finish ends the previous run before the tick.
		finish bool
		// want is the tick's fire status and reason after the pass.
		status, reason string
	}
	for _, c := range []struct {
		overlap string
		steps   []step
		// cancelled: the first run ends cancelled by the second tick.
		cancelled bool
	}{
		{overlap: store.OverlapSkip, steps: []step{{status: store.FireSubmitted}, {status: store.FireSkipped, reason: schedules.ReasonOverlap},
			{finish: true, status: store.FireSubmitted}}},
		{overlap: store.OverlapQueueOne, steps: []step{{status: store.FireSubmitted}, {status: store.FireDeferred},
			{status: store.FireSkipped, reason: schedules.ReasonQueueFull}}},
		{overlap: store.OverlapCancelPrevious, steps: []step{{status: store.FireSubmitted}, {status: store.FireSubmitted}}, cancelled: true},
		{overlap: store.OverlapAllowAll, steps: []step{{status: store.FireSubmitted}, {status: store.FireSubmitted}, {status: store.FireSubmitted}}},
	} {
		t.Run(c.overlap, func(t *testing.T) {
			t.Parallel()
			f := scheduleFleet(t, nil)
			ctx := context.Background()
			start := time.Now().UTC().Truncate(time.Second)
			clock := &simClock{now: start}
			sc := newSchedule(t, f, c.overlap, "* * * * * *", start.Add(time.Second), func(s *store.Schedule) { s.Overlap = c.overlap })
			s := schedulerProcess(t, f, "s1", clock, nil)
			var runIDs []string
			for i, st := range c.steps {
				if st.finish {
					_, _, err := f.Store.FinishRun(ctx, runIDs[len(runIDs)-1], store.RunCompleted, "done", "", "")
					require.NoError(t, err)
				}
				clock.Advance(time.Second)
				_, err := s.RunOnce(ctx)
				require.NoError(t, err)
				fs := fires(t, f, sc.ID)
				require.Len(t, fs, i+1)
				got := fs[0] // latest tick first
				require.Equal(t, st.status, got.Status, "tick %d: %s", i+1, got.Detail)
				require.Equal(t, st.reason, got.Reason, "tick %d", i+1)
				if got.RunID != "" {
					runIDs = append(runIDs, got.RunID)
				}
			}
			if c.cancelled {
				r, err := f.Store.GetRun(ctx, runIDs[0])
				require.NoError(t, err)
				require.Equal(t, store.RunCancelled, r.Status)
				require.Contains(t, r.Error+r.Reason, "schedule")
			}
			if c.overlap == store.OverlapQueueOne {
				// The previous run ends: the waiting tick starts at the next pass.
				_, _, err := f.Store.FinishRun(ctx, runIDs[0], store.RunCompleted, "done", "", "")
				require.NoError(t, err)
				clock.Advance(time.Second)
				_, err = s.RunOnce(ctx)
				require.NoError(t, err)
				fs := fires(t, f, sc.ID)
				deferred := fs[len(fs)-2] // the second tick
				require.Equal(t, store.FireSubmitted, deferred.Status)
				require.NotEmpty(t, deferred.RunID)
				require.Equal(t, store.FireDeferred, fs[0].Status, "the fourth tick waits for the second's run")
			}
		})
	}
}

// Each catch-up policy after a simulated downtime of ten minutes (ten ticks
// of a schedule firing every minute, all older than late_after when the
// schedulers come back).
func TestScheduleCatchUpPolicies(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		catchUp string
		limit   int
		fired   int
	}{
		{catchUp: store.CatchUpNone, fired: 0},
		{catchUp: store.CatchUpLast, fired: 1},
		{catchUp: store.CatchUpAll, limit: 3, fired: 3},
		{catchUp: store.CatchUpAll, limit: 50, fired: 10},
	} {
		t.Run(fmt.Sprintf("%s_%d", c.catchUp, c.limit), func(t *testing.T) {
			t.Parallel()
			f := scheduleFleet(t, nil)
			ctx := context.Background()
			start := time.Now().UTC().Truncate(time.Minute)
			clock := &simClock{now: start}
			sc := newSchedule(t, f, "c", "* * * * *", start.Add(time.Minute), func(s *store.Schedule) {
				s.CatchUp, s.CatchUpLimit = c.catchUp, c.limit
			})
			s := schedulerProcess(t, f, "s1", clock, nil)
			clock.Advance(time.Minute)
			_, err := s.RunOnce(ctx)
			require.NoError(t, err)
			require.Len(t, fires(t, f, sc.ID), 1, "the first tick fires on time")
			// Down for ten ticks; back 30s after the tenth (late_after is 10s).
			clock.Advance(10*time.Minute + 30*time.Second)
			p, err := s.RunOnce(ctx)
			require.NoError(t, err)
			require.Equal(t, c.fired, p.Claimed)
			fs := fires(t, f, sc.ID)[:10] // the downtime's ticks, latest first
			var fired, missed int
			for i, fr := range fs {
				switch fr.Status {
				case store.FireSubmitted:
					require.Less(t, i, c.fired, "the latest ticks are the ones caught up")
					fired++
				case store.FireMissed:
					require.Equal(t, schedules.ReasonDowntime, fr.Reason)
					missed++
				default:
					t.Fatalf("tick %s: %s", fr.Tick, fr.Status)
				}
			}
			require.Equal(t, c.fired, fired)
			require.Equal(t, 10-c.fired, missed)
			got, err := f.Store.GetSchedule(ctx, sc.ID)
			require.NoError(t, err)
			require.EqualValues(t, 10-c.fired, got.Missed)
			require.Equal(t, start.Add(12*time.Minute), got.NextTick.UTC(), "the schedule goes on from the next tick")
		})
	}
}

// The owner's roles are read at every tick from api.tokens: a removed token's
// schedule fires nothing (failed, owner_gone) and starts no run; a token that
// lost submit fails forbidden.
func TestScheduleOwnerResolvedAtFireTime(t *testing.T) {
	t.Parallel()
	f := scheduleFleet(t, func(c *config.Config) {
		c.API.Tokens = []api.Token{
			{Name: "alice", SHA256: api.HashToken("alice-secret"), Roles: []string{api.RoleSubmit, api.RoleRead}},
			{Name: "reader", SHA256: api.HashToken("reader-secret"), Roles: []string{api.RoleRead}},
		}
	})
	ctx := context.Background()
	p, err := f.SchedulePrincipal(ctx, "alice")
	require.NoError(t, err)
	require.ElementsMatch(t, []string{api.RoleSubmit, api.RoleRead}, p.Roles)
	start := time.Now().UTC().Truncate(time.Second)
	clock := &simClock{now: start}
	ghost := newSchedule(t, f, "ghost", "* * * * * *", start.Add(time.Second), func(s *store.Schedule) { s.Owner = "bob" })
	reader := newSchedule(t, f, "reader", "* * * * * *", start.Add(time.Second), func(s *store.Schedule) { s.Owner = "reader" })
	s := schedulerProcess(t, f, "s1", clock, nil)
	clock.Advance(time.Second)
	_, err = s.RunOnce(ctx)
	require.NoError(t, err)
	for sc, reason := range map[string]string{ghost.ID: schedules.ReasonOwnerGone, reader.ID: schedules.ReasonForbidden} {
		fs := fires(t, f, sc)
		require.Len(t, fs, 1)
		require.Equal(t, store.FireFailed, fs[0].Status)
		require.Equal(t, reason, fs[0].Reason, fs[0].Detail)
		require.Empty(t, fs[0].RunID)
	}
	var runs int
	require.NoError(t, f.Store.Pool.QueryRow(ctx, `SELECT count(*) FROM runs`).Scan(&runs))
	require.Zero(t, runs)
}

// The scheduler role end to end on the real clock: a schedule created over
// the API fires within its second, its run's run.queued event names the
// schedule as its trigger, and a worker completes it.
func TestRunSchedulerFiresASchedule(t *testing.T) {
	t.Parallel()
	f := fleettest.Start(t, fleettest.Options{Configure: func(c *config.Config) {
		c.Schedules.MinInterval = time.Second
		c.Schedules.Period = 100 * time.Millisecond
	}})
	var sc struct {
		ID string `json:"id"`
	}
	code, raw := f.Do("POST", "/api/schedules", map[string]any{"name": "every-second", "cron": "* * * * * *", "template": "demo",
		"prompt": "Greet the user in a file", "variables": map[string]any{"topic": "t"}}, &sc)
	require.Equal(t, 201, code, string(raw))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.RunScheduler(ctx) }()
	var runID string
	require.Eventually(t, func() bool {
		for _, fr := range fires(t, f, sc.ID) {
			if fr.RunID != "" {
				runID = fr.RunID
				return true
			}
		}
		return false
	}, 15*time.Second, 50*time.Millisecond)
	code, _ = f.Do("POST", "/api/schedules/"+sc.ID+"/pause", nil, nil)
	require.Equal(t, 200, code)
	cancel()
	require.NoError(t, <-done)
	queued, ok := eventOf(f.Follow(runID, 0, 60*time.Second), "run.queued")
	require.True(t, ok)
	var data struct {
		Trigger string `json:"trigger"`
	}
	require.NoError(t, json.Unmarshal(queued.Data, &data))
	require.Equal(t, "schedule:"+sc.ID, data.Trigger)
	require.Equal(t, store.RunCompleted, f.WaitTerminal(runID, 60*time.Second).Status)
}

// A scheduler that submitted a tick and died before recording its run: when
// another resubmits the tick, the tick's idempotency key gives back that run,
// even though a later tick's run is in flight and the overlap policy is skip.
func TestScheduleRecoveredTickKeepsItsRun(t *testing.T) {
	t.Parallel()
	f := scheduleFleet(t, nil)
	ctx := context.Background()
	start := time.Now().UTC().Truncate(time.Second)
	clock := &simClock{now: start}
	sc := newSchedule(t, f, "skip", "* * * * * *", start.Add(time.Second), func(s *store.Schedule) { s.Overlap = store.OverlapSkip })
	sub := f.Submitter()
	victimCtx, kill := context.WithCancel(ctx)
	var orphan string
	victim := schedulerProcess(t, f, "victim", clock, func(_ context.Context, claimed []store.ScheduleFire) {
		require.Len(t, claimed, 1)
		res, err := sub.Submit(ctx, submit.Request{By: submit.Principal{Name: store.LocalOwner}, Template: "demo", Prompt: "tick",
			Variables: map[string]any{"topic": "t"}, IdempotencyKey: schedules.IdempotencyKey(sc.ID, claimed[0].Tick), Trigger: schedules.Trigger(sc.ID)})
		require.NoError(t, err)
		orphan = res.RunID
		kill() // submitted, then died before recording the run
	})
	survivor := schedulerProcess(t, f, "survivor", clock, nil)
	clock.Advance(time.Second)
	_, _ = victim.RunOnce(victimCtx)
	require.NotEmpty(t, orphan)
	clock.Advance(time.Second)
	_, err := survivor.RunOnce(ctx)
	require.NoError(t, err)
	fs := fires(t, f, sc.ID)
	require.Equal(t, store.FireSubmitted, fs[0].Status, "the second tick: the orphan run is not linked to a fire yet")
	later := fs[0].RunID
	clock.Advance(6 * time.Second) // past resubmit_after
	_, err = survivor.RunOnce(ctx)
	require.NoError(t, err)
	fs = fires(t, f, sc.ID)
	first := fs[len(fs)-1]
	require.Equal(t, store.FireSubmitted, first.Status, "%s %s", first.Reason, first.Detail)
	require.Equal(t, orphan, first.RunID)
	var runs int
	require.NoError(t, f.Store.Pool.QueryRow(ctx, `SELECT count(*) FROM runs`).Scan(&runs))
	require.Equal(t, 2, runs, "the orphan and the second tick's run (%s); the later ticks skipped", later)
	for _, fr := range fs[:len(fs)-2] {
		require.Equal(t, store.FireSkipped, fr.Status, "tick %s", fr.Tick)
	}
}
