package lease_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/internal/testdb"
	"github.com/aetherium-engine/aetherium/lease"
)

type env struct {
	url string
	cfg lease.Config
}

// matrix runs body against each Redis shape (testdb.RedisMatrix: a private
// single node, and the shared Redis Cluster under a per-test prefix); proc
// returns a manager with its own client, as a separate worker process would
// have.
func matrix(t *testing.T, cfg lease.Config, body func(t *testing.T, e *env)) {
	t.Helper()
	testdb.EachRedis(t, func(t *testing.T, tg testdb.RedisTarget) {
		c := cfg
		c.Prefix = tg.Prefix + ":lease"
		body(t, &env{url: tg.URL, cfg: c})
	})
}

func (e *env) proc(t *testing.T, metrics *lease.Metrics) *lease.Manager {
	t.Helper()
	m, err := lease.New(testdb.Connect(t, e.url), e.cfg, lease.Options{Metrics: metrics})
	require.NoError(t, err)
	return m
}

func allEvents(t *testing.T, m *lease.Manager) []lease.Event {
	t.Helper()
	evs, err := m.Events(context.Background(), "", 1_000_000)
	require.NoError(t, err)
	return evs
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		services []lease.Service
		err      string
	}{
		{"empty name", []lease.Service{{Name: ""}}, "service name"},
		{"upper case", []lease.Service{{Name: "ComfyUI"}}, "service name"},
		{"duplicate", []lease.Service{{Name: "comfyui"}, {Name: "comfyui"}}, "declared twice"},
		{"ttl too short", []lease.Service{{Name: "tts", TTL: time.Millisecond}}, "too short"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := lease.New(nil, lease.Config{Services: tc.services}, lease.Options{})
			require.ErrorContains(t, err, tc.err)
		})
	}
	_, err := lease.New(nil, lease.Config{Prefix: "a{b}", Services: []lease.Service{{Name: "s"}}}, lease.Options{})
	require.ErrorContains(t, err, "must not contain", "a brace in the prefix would break the family's hash tag")
	declared := []lease.Service{{Name: "qwen-tts"}, {Name: "comfyui", Capacity: 3}}
	m, err := lease.New(nil, lease.Config{Services: declared}, lease.Options{})
	require.NoError(t, err)
	require.Equal(t, []lease.Service{{Name: "qwen-tts"}, {Name: "comfyui", Capacity: 3}}, declared,
		"New fills the defaults into its own copy: the caller's slice may be shared by other managers")
	svcs := m.Services()
	require.Equal(t, "comfyui", svcs[0].Name)
	require.Equal(t, 3, svcs[0].Capacity)
	require.Equal(t, 1, svcs[1].Capacity, "default capacity")
	require.Equal(t, 2*time.Minute, svcs[1].TTL, "default ttl")
	require.Equal(t, "aetherium-gpu-qwen-tts", svcs[1].Container)
	require.Equal(t, 5*time.Minute, svcs[1].IdleStop)
}

// 8 goroutines in each of 2 processes contend for a capacity-2 service. The
// events stream is the fleet-wide record: replaying it proves capacity, token
// order and FIFO hand-off.
func TestContentionRespectsCapacityTokensAndFIFO(t *testing.T) {
	t.Parallel()
	matrix(t, lease.Config{
		Services:     []lease.Service{{Name: "comfyui", Capacity: 2, TTL: 30 * time.Second}},
		WaiterTTL:    30 * time.Second,
		PollInterval: 2 * time.Millisecond,
		EventsMaxLen: 1_000_000,
	}, func(t *testing.T, e *env) {
		reg := prometheus.NewRegistry()
		metrics, err := lease.NewMetrics(reg)
		require.NoError(t, err)
		procs := []*lease.Manager{e.proc(t, metrics), e.proc(t, metrics)}
		const goroutines, rounds = 8, 4
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()

		var active, maxActive atomic.Int32
		var wg sync.WaitGroup
		errs := make(chan error, len(procs)*goroutines)
		for p, m := range procs {
			for g := range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range rounds {
						holder := fmt.Sprintf("run-p%d-g%d-%d", p, g, i)
						gr, err := m.AcquireWait(ctx, "comfyui", holder, time.Minute)
						if err != nil {
							errs <- fmt.Errorf("%s: %w", holder, err)
							return
						}
						n := active.Add(1)
						for {
							old := maxActive.Load()
							if n <= old || maxActive.CompareAndSwap(old, n) {
								break
							}
						}
						time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
						if _, err := m.Renew(ctx, gr); err != nil {
							errs <- fmt.Errorf("%s renew: %w", holder, err)
						}
						active.Add(-1)
						if ok, err := m.Release(ctx, "comfyui", holder, gr.Token); err != nil || !ok {
							errs <- fmt.Errorf("%s release: ok=%v err=%v", holder, ok, err)
						}
					}
				}()
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.LessOrEqual(t, maxActive.Load(), int32(2))

		evs := allEvents(t, procs[0])
		var (
			held       = map[string]bool{}
			queue      []string
			lastToken  uint64
			grants     int
			waitedAny  bool
			maxHolders int
		)
		for _, ev := range evs {
			switch ev.Type {
			case "wait":
				queue = append(queue, ev.Holder)
				waitedAny = true
			case "acquire":
				require.Greater(t, ev.Token, lastToken, "tokens strictly increase in grant order")
				lastToken = ev.Token
				grants++
				if len(queue) > 0 && queue[0] == ev.Holder {
					queue = queue[1:]
				} else {
					require.Empty(t, queue, "%s was granted while %v waited ahead of it", ev.Holder, queue)
				}
				held[ev.Holder] = true
				maxHolders = max(maxHolders, len(held))
			case "release":
				require.True(t, held[ev.Holder], "release of %s which did not hold", ev.Holder)
				delete(held, ev.Holder)
			case "renew":
				require.True(t, held[ev.Holder])
			default:
				t.Fatalf("unexpected event %+v (nothing should expire or be dropped here)", ev)
			}
		}
		require.Equal(t, len(procs)*goroutines*rounds, grants)
		require.LessOrEqual(t, maxHolders, 2, "never more holders than capacity")
		require.Equal(t, 2, maxHolders, "contention filled both slots")
		require.True(t, waitedAny, "contention made holders queue")
		require.Empty(t, held)
		require.Empty(t, queue)

		var mm dto.Metric
		require.NoError(t, metrics.Granted.WithLabelValues("comfyui").Write(&mm))
		require.EqualValues(t, grants, mm.Counter.GetValue(), "each grant counted once fleet-wide")
	})
}

// A holder that stops renewing is reclaimed by the reaper within TTL plus one
// reaper period, and the slot goes to the queued run, which never asked again.
func TestHolderThatStopsRenewingIsReclaimedByReaper(t *testing.T) {
	t.Parallel()
	const ttl, period = 600 * time.Millisecond, 200 * time.Millisecond
	matrix(t, lease.Config{Services: []lease.Service{{Name: "qwen-tts", TTL: ttl}}, WaiterTTL: time.Minute}, func(t *testing.T, e *env) {
		a, b, reaper := e.proc(t, nil), e.proc(t, nil), e.proc(t, nil)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go reaper.RunReaper(ctx, period)

		ga, err := a.Acquire(ctx, "qwen-tts", "run-a")
		require.NoError(t, err)
		_, err = b.Acquire(ctx, "qwen-tts", "run-b")
		var we *lease.WaitError
		require.ErrorAs(t, err, &we)
		require.Equal(t, 1, we.Position)
		require.ErrorIs(t, err, lease.ErrWaiting)

		var expire, handoff *lease.Event
		require.Eventually(t, func() bool {
			for _, ev := range allEvents(t, reaper) {
				switch {
				case ev.Type == "expire" && ev.Holder == "run-a":
					expire = &ev
				case ev.Type == "acquire" && ev.Holder == "run-b":
					handoff = &ev
				}
			}
			return expire != nil && handoff != nil
		}, 10*time.Second, 20*time.Millisecond)
		held := expire.At.Sub(ga.Acquired)
		require.GreaterOrEqual(t, held, ttl)
		// Scheduling jitter of the reaper goroutine under -race gets a fixed allowance.
		require.LessOrEqual(t, held, ttl+period+500*time.Millisecond, "reclaimed within TTL + one reaper period")
		require.Equal(t, ga.Token, expire.Token)
		require.Greater(t, handoff.Token, ga.Token)

		gb, err := b.Acquire(ctx, "qwen-tts", "run-b")
		require.NoError(t, err)
		require.Equal(t, handoff.Token, gb.Token, "the hand-off grant is the one b finds")

		_, err = a.Renew(ctx, ga)
		require.ErrorIs(t, err, lease.ErrLost)
		ok, err := a.Release(ctx, "qwen-tts", "run-a", ga.Token)
		require.NoError(t, err)
		require.False(t, ok, "a stale holder's release is a no-op")
		_, live, err := a.Validate(ctx, "qwen-tts", ga.Token, string(ga.Secret))
		require.NoError(t, err)
		require.False(t, live, "the stale token is fenced off")
		holder, live, err := a.Validate(ctx, "qwen-tts", gb.Token, string(gb.Secret))
		require.NoError(t, err)
		require.True(t, live)
		require.Equal(t, "run-b", holder)
	})
}

func TestAcquireReleaseSemantics(t *testing.T) {
	t.Parallel()
	matrix(t, lease.Config{Services: []lease.Service{{Name: "comfyui", TTL: time.Minute}, {Name: "comfyui-video", TTL: time.Minute}}}, func(t *testing.T, e *env) {
		m := e.proc(t, nil)
		ctx := context.Background()

		t.Run("acquire is idempotent for a holder", func(t *testing.T) {
			g1, err := m.Acquire(ctx, "comfyui", "r1")
			require.NoError(t, err)
			g2, err := m.Acquire(ctx, "comfyui", "r1")
			require.NoError(t, err)
			require.Equal(t, g1.Token, g2.Token)
			require.False(t, g2.Expires.Before(g1.Expires))
		})
		t.Run("queued holder keeps its place and can leave", func(t *testing.T) {
			_, err := m.Acquire(ctx, "comfyui", "r2")
			require.ErrorIs(t, err, lease.ErrWaiting)
			_, err = m.Acquire(ctx, "comfyui", "r3")
			var we *lease.WaitError
			require.ErrorAs(t, err, &we)
			require.Equal(t, 2, we.Position)
			_, err = m.Acquire(ctx, "comfyui", "r2")
			require.ErrorAs(t, err, &we)
			require.Equal(t, 1, we.Position, "asking again does not lose the place")
			ok, err := m.Release(ctx, "comfyui", "r2", 0)
			require.NoError(t, err)
			require.True(t, ok, "leaving the queue")
			_, err = m.Acquire(ctx, "comfyui", "r3")
			require.ErrorAs(t, err, &we)
			require.Equal(t, 1, we.Position)
		})
		t.Run("release is idempotent and hands the slot on", func(t *testing.T) {
			st, err := m.State(ctx, "comfyui")
			require.NoError(t, err)
			require.Len(t, st.Holders, 1)
			tok := st.Holders[0].Token
			ok, err := m.Release(ctx, "comfyui", "r1", tok+100)
			require.NoError(t, err)
			require.False(t, ok, "a wrong token releases nothing")
			ok, err = m.Release(ctx, "comfyui", "r1", tok)
			require.NoError(t, err)
			require.True(t, ok)
			ok, err = m.Release(ctx, "comfyui", "r1", tok)
			require.NoError(t, err)
			require.False(t, ok)
			st, err = m.State(ctx, "comfyui")
			require.NoError(t, err)
			require.Len(t, st.Holders, 1)
			require.Equal(t, "r3", st.Holders[0].Holder, "the head of the queue got the slot")
			require.Greater(t, st.Holders[0].Token, tok)
			require.Empty(t, st.Waiters)
			require.Equal(t, st.Holders[0].Token, st.LastToken)
		})
		t.Run("acquire all in name order", func(t *testing.T) {
			gs, err := m.AcquireAll(ctx, []string{"comfyui-video", "comfyui", "comfyui-video"}, "r4")
			require.ErrorIs(t, err, lease.ErrWaiting, "comfyui is held by r3")
			require.Empty(t, gs, "comfyui sorts first, so nothing was taken out of order")
			require.NoError(t, m.ReleaseAll(ctx, "r3"))
			gs, err = m.AcquireAll(ctx, []string{"comfyui-video", "comfyui"}, "r4")
			require.NoError(t, err)
			require.Len(t, gs, 2)
			require.Equal(t, "comfyui", gs[0].Service)
			require.NoError(t, m.ReleaseAll(ctx, "r4"))
			require.NoError(t, m.ReleaseAll(ctx, "r4"))
		})
		t.Run("unknown service", func(t *testing.T) {
			_, err := m.Acquire(ctx, "stable-diffusion", "r1")
			require.ErrorIs(t, err, lease.ErrUnknownService)
		})
		t.Run("events name every transition", func(t *testing.T) {
			types := map[string]bool{}
			for _, ev := range allEvents(t, m) {
				types[ev.Type] = true
			}
			for _, want := range []string{"acquire", "wait", "renew", "release", "cancel"} {
				require.True(t, types[want], "no %s event in %v", want, types)
			}
			recent, err := m.RecentEvents(ctx, 2)
			require.NoError(t, err)
			require.Len(t, recent, 2)
			require.Less(t, recent[0].ID, recent[1].ID, "oldest first")
		})
	})
}

func TestKeepRenewsUntilStoppedOrLost(t *testing.T) {
	t.Parallel()
	matrix(t, lease.Config{Services: []lease.Service{{Name: "comfyui-qwen", TTL: 300 * time.Millisecond}}}, func(t *testing.T, e *env) {
		m := e.proc(t, nil)
		ctx := context.Background()
		g, err := m.Acquire(ctx, "comfyui-qwen", "r1")
		require.NoError(t, err)

		kctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- m.Keep(kctx, g, 50*time.Millisecond) }()
		time.Sleep(900 * time.Millisecond) // three TTLs
		_, err = m.Renew(ctx, g)
		require.NoError(t, err, "the heartbeat kept the grant alive past its TTL")
		stop()
		require.ErrorIs(t, <-done, context.Canceled)

		done2 := make(chan error, 1)
		go func() { done2 <- m.Keep(ctx, g, 50*time.Millisecond) }()
		_, err = m.Release(ctx, "comfyui-qwen", "r1", g.Token)
		require.NoError(t, err)
		select {
		case err := <-done2:
			require.ErrorIs(t, err, lease.ErrLost)
		case <-time.After(10 * time.Second):
			t.Fatal("Keep did not notice the lost lease")
		}
	})
}

func TestBeginStopOnlyWhenIdle(t *testing.T) {
	t.Parallel()
	matrix(t, lease.Config{Services: []lease.Service{{Name: "comfyui", TTL: time.Minute}}}, func(t *testing.T, e *env) {
		m := e.proc(t, nil)
		ctx := context.Background()
		g, err := m.Acquire(ctx, "comfyui", "r1")
		require.NoError(t, err)
		ok, err := m.BeginStop(ctx, "comfyui", 0, time.Minute)
		require.NoError(t, err)
		require.False(t, ok, "held")
		_, err = m.Release(ctx, "comfyui", "r1", g.Token)
		require.NoError(t, err)
		ok, err = m.BeginStop(ctx, "comfyui", time.Hour, time.Minute)
		require.NoError(t, err)
		require.False(t, ok, "not idle for long enough")
		st, err := m.State(ctx, "comfyui")
		require.NoError(t, err)
		require.NotNil(t, st.IdleSince)
		ok, err = m.BeginStop(ctx, "comfyui", 0, time.Minute)
		require.NoError(t, err)
		require.True(t, ok)
		ok, err = m.BeginStop(ctx, "comfyui", 0, time.Minute)
		require.NoError(t, err)
		require.False(t, ok, "one stopper at a time")
		stopping, err := m.Stopping(ctx, "comfyui")
		require.NoError(t, err)
		require.True(t, stopping)
		require.NoError(t, m.EndStop(ctx, "comfyui"))
		stopping, err = m.Stopping(ctx, "comfyui")
		require.NoError(t, err)
		require.False(t, stopping)
	})
}

func TestGrantHeaderAndContext(t *testing.T) {
	t.Parallel()
	g := lease.Grant{Service: "comfyui", Holder: "r1", Token: 42}
	h := http.Header{}
	g.SetHeader(h)
	require.Equal(t, "42", h.Get(lease.Header))
	require.Empty(t, h.Get(lease.SecretHeader))
	g.Secret = "s3cr3t"
	g.SetHeader(h)
	require.Equal(t, "s3cr3t", h.Get(lease.SecretHeader))
	raw, err := json.Marshal(g)
	require.NoError(t, err)
	require.NotContains(t, string(raw), "s3cr3t", "a marshalled grant carries no secret")
	require.NotContains(t, fmt.Sprintf("%v %+v", g, g), "s3cr3t", "a printed grant carries no secret")
	ctx := lease.WithGrants(context.Background(), g)
	ctx = lease.WithGrants(ctx, lease.Grant{Service: "qwen-tts", Token: 7})
	got, ok := lease.GrantFrom(ctx, "comfyui")
	require.True(t, ok)
	require.EqualValues(t, 42, got.Token)
	_, ok = lease.GrantFrom(ctx, "comfyui-video")
	require.False(t, ok)
	got, ok = lease.GrantFrom(ctx, "qwen-tts")
	require.True(t, ok, "grants added later join the earlier ones")
	require.EqualValues(t, 7, got.Token)
	require.True(t, errors.Is(&lease.WaitError{}, lease.ErrWaiting))
}

// A grant's secret: drawn per grant (>= 128 bits), the same for every Acquire
// and Held of the holder while the grant lives, installed for a grant handed
// on by another holder's call or made before secrets existed, and what
// Validate asks for: the public token alone, or with another grant's secret,
// is no live grant.
func TestGrantSecrets(t *testing.T) {
	t.Parallel()
	matrix(t, lease.Config{Services: []lease.Service{{Name: "comfyui", Capacity: 1, TTL: time.Minute}}}, func(t *testing.T, e *env) {
		m := e.proc(t, nil)
		ctx := context.Background()
		a, err := m.Acquire(ctx, "comfyui", "run-a")
		require.NoError(t, err)
		raw, err := base64.RawURLEncoding.DecodeString(string(a.Secret))
		require.NoError(t, err)
		require.GreaterOrEqual(t, len(raw)*8, 128)
		again, err := e.proc(t, nil).Acquire(ctx, "comfyui", "run-a")
		require.NoError(t, err)
		require.Equal(t, a.Secret, again.Secret, "another worker of the holder gets the same secret")
		held, ok, err := m.Held(ctx, "comfyui", "run-a")
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, a.Secret, held.Secret)
		require.Equal(t, a.Token, held.Token)
		_, ok, err = m.Held(ctx, "comfyui", "run-nobody")
		require.NoError(t, err)
		require.False(t, ok)

		// run-b waits; a's release hands the slot on inside a's script.
		_, err = m.Acquire(ctx, "comfyui", "run-b")
		require.ErrorIs(t, err, lease.ErrWaiting)
		_, err = m.Release(ctx, "comfyui", "run-a", a.Token)
		require.NoError(t, err)
		b, err := m.Acquire(ctx, "comfyui", "run-b")
		require.NoError(t, err)
		require.NotEmpty(t, b.Secret)
		require.NotEqual(t, a.Secret, b.Secret)

		for _, tc := range []struct {
			name   string
			token  uint64
			secret string
			live   bool
		}{
			{"token and its secret", b.Token, string(b.Secret), true},
			{"the token alone", b.Token, "", false},
			{"another grant's secret", b.Token, string(a.Secret), false},
			{"a guessed secret", b.Token, string(b.Secret)[:len(b.Secret)-1] + "x", false},
			{"a released grant with its secret", a.Token, string(a.Secret), false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				holder, live, err := m.Validate(ctx, "comfyui", tc.token, tc.secret)
				require.NoError(t, err)
				require.Equal(t, tc.live, live)
				if tc.live {
					require.Equal(t, "run-b", holder)
				}
			})
		}

		// A grant made before secrets existed has no entry: the holder's next
		// Acquire installs one, and from then on that one is asked for.
		secrets := "{" + e.cfg.Prefix + "}:comfyui:secrets"
		rdb := testdb.Connect(t, e.url)
		require.NoError(t, rdb.HDel(ctx, secrets, "run-b").Err())
		_, live, err := m.Validate(ctx, "comfyui", b.Token, string(b.Secret))
		require.NoError(t, err)
		require.False(t, live)
		b2, err := m.Acquire(ctx, "comfyui", "run-b")
		require.NoError(t, err)
		require.Equal(t, b.Token, b2.Token)
		require.NotEqual(t, b.Secret, b2.Secret)
		_, live, err = m.Validate(ctx, "comfyui", b2.Token, string(b2.Secret))
		require.NoError(t, err)
		require.True(t, live)

		// Release drops the secret; the reaper drops one an older process left.
		_, err = m.Release(ctx, "comfyui", "run-b", 0)
		require.NoError(t, err)
		require.NoError(t, rdb.HSet(ctx, secrets, "run-gone", "1|x").Err())
		_, err = m.Reap(ctx)
		require.NoError(t, err)
		n, err := rdb.HLen(ctx, secrets).Result()
		require.NoError(t, err)
		require.Zero(t, n)
	})
}
