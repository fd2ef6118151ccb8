package governor_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/internal/testdb"
	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/llm/governor"
)

// env is one Redis shape with a per-test key prefix; worker opens a Governor
// on its own client, as a separate worker process would.
type env struct {
	url, prefix string
	rdb         redis.UniversalClient // for looking at keys
}

// setup runs body against each Redis shape (testdb.EachRedis: a private
// single node, and the shared Redis Cluster under a per-test prefix).
func setup(t *testing.T, body func(t *testing.T, e *env)) {
	t.Helper()
	testdb.EachRedis(t, func(t *testing.T, tg testdb.RedisTarget) {
		e := &env{url: tg.URL, prefix: tg.Prefix + ":"}
		e.rdb = testdb.Connect(t, tg.URL)
		body(t, e)
	})
}

// worker is a Governor on a fresh client, enabled, with the test's prefix, a
// 5 s window (long enough that a loaded machine does not see it slide during a
// test that does not sleep) and a 20 ms guard unless cfg sets them.
func (e *env) worker(t testing.TB, cfg governor.Config) *governor.Governor {
	t.Helper()
	cfg.Enabled = true
	cfg.KeyPrefix = e.prefix
	if cfg.Window == 0 {
		cfg.Window = 5 * time.Second
	}
	if cfg.Guard == 0 {
		cfg.Guard = 20 * time.Millisecond
	}
	g, err := governor.New(testdb.Connect(t, e.url), cfg)
	require.NoError(t, err)
	return g
}

// key is a key of provider as doc.go lists them.
func (e *env) key(provider, rest string) string {
	return "{" + e.prefix + "gov:" + provider + "}:" + rest
}

func call(model string, tokens int) governor.Call {
	return governor.Call{Provider: "p", Model: model, Tokens: tokens}
}

func admit(t *testing.T, g *governor.Governor, c governor.Call) *governor.Reservation {
	t.Helper()
	r, err := g.Admit(context.Background(), c)
	require.NoError(t, err)
	require.NotNil(t, r)
	return r
}

// held asserts c is held back by limit and returns the wait.
func held(t *testing.T, g *governor.Governor, c governor.Call, limit string) time.Duration {
	t.Helper()
	r, err := g.Admit(context.Background(), c)
	require.Nil(t, r)
	var w *llm.WaitError
	require.ErrorAs(t, err, &w)
	require.ErrorIs(t, err, llm.ErrRateLimited)
	require.Equal(t, limit, w.Limit)
	require.Positive(t, w.After)
	return w.After
}

func limits(l ...governor.Limit) governor.Config { return governor.Config{Limits: l} }

func TestBurstAdmitsExactlyRPMThenWaitsForTheOldest(t *testing.T) {
	t.Parallel()
	setup(t, func(t *testing.T, e *env) {
		g := e.worker(t, limits(governor.Limit{Provider: "p", RPM: 5}))
		start := time.Now()
		for range 5 {
			admit(t, g, call("m", 1))
		}
		after := held(t, g, call("m", 1), "p/* rpm")
		span := 5020 * time.Millisecond // window + guard
		require.LessOrEqual(t, after, span)
		require.GreaterOrEqual(t, after, span-time.Since(start)-5*time.Millisecond)
		n, err := e.rdb.ZCard(context.Background(), e.key("p", "*:log")).Result()
		require.NoError(t, err)
		require.EqualValues(t, 5, n, "the refused call left no entry")
		ttl, err := e.rdb.PTTL(context.Background(), e.key("p", "*:log")).Result()
		require.NoError(t, err)
		require.Positive(t, ttl, "idle keys vanish")
		require.LessOrEqual(t, ttl, span+time.Second)
	})
}

func TestRefillFreesOneEntryAtATime(t *testing.T) {
	t.Parallel()
	setup(t, func(t *testing.T, e *env) {
		g := e.worker(t, governor.Config{Window: 400 * time.Millisecond, Limits: []governor.Limit{{Provider: "p", RPM: 2}}})
		admit(t, g, call("", 1))
		time.Sleep(200 * time.Millisecond)
		admit(t, g, call("", 1))
		after := held(t, g, call("", 1), "p/* rpm")
		require.LessOrEqual(t, after, 220*time.Millisecond, "the first entry leaves first")
		time.Sleep(after + 5*time.Millisecond)
		admit(t, g, call("", 1))
		after = held(t, g, call("", 1), "p/* rpm") // the second entry is still in
		require.Greater(t, after, 50*time.Millisecond)
	})
}

func TestTPMCountsTokensAndDoneCorrectsThem(t *testing.T) {
	t.Parallel()
	setup(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		g := e.worker(t, governor.Config{Window: 2 * time.Second, Limits: []governor.Limit{{Provider: "p", Model: "m", TPM: 1000}}})
		r1 := admit(t, g, call("m", 600))
		require.Equal(t, 600, r1.Tokens())
		after := held(t, g, call("m", 600), "p/m tpm")
		require.Greater(t, after, time.Second, "600 tokens leave only with the first entry")
		admit(t, g, call("other-model", 5000)) // no line for it, no provider-wide line

		require.NoError(t, g.Done(ctx, r1, 100))
		r2 := admit(t, g, call("m", 600)) // 100 + 600
		require.NoError(t, g.Done(ctx, r2, 0), "unknown usage keeps the estimate")
		tok, err := e.rdb.Get(ctx, e.key("p", "m:m:tok")).Int()
		require.NoError(t, err)
		require.Equal(t, 700, tok)
		held(t, g, call("m", 301), "p/m tpm")
		admit(t, g, call("m", 300))
	})
}

func TestAnEstimateOverTPMNeverFits(t *testing.T) {
	t.Parallel()
	setup(t, func(t *testing.T, e *env) {
		g := e.worker(t, limits(governor.Limit{Provider: "p", TPM: 1000, RPM: 100}))
		r, err := g.Admit(context.Background(), call("m", 1001))
		require.Nil(t, r)
		require.ErrorIs(t, err, governor.ErrNeverFits)
		require.NotErrorIs(t, err, llm.ErrRateLimited, "not a wait")
		require.ErrorContains(t, err, "p/* tpm is 1000")
		admit(t, g, call("m", 1000)) // exactly the limit fits
	})
}

func TestConcurrencySlotsFreeOnDoneOrExpire(t *testing.T) {
	t.Parallel()
	setup(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		g := e.worker(t, governor.Config{ConcurrencyTTL: 600 * time.Millisecond, Limits: []governor.Limit{{Provider: "p", Model: "m", Concurrency: 2}}})
		r1 := admit(t, g, call("m", 10))
		admit(t, g, call("m", 10)) // abandoned: its worker "dies"
		after := held(t, g, call("m", 10), "p/m concurrency")
		require.LessOrEqual(t, after, 600*time.Millisecond, "the soonest slot expiry, under the poll")

		require.NoError(t, g.Done(ctx, r1, 10))
		r3 := admit(t, g, call("m", 10))
		held(t, g, call("m", 10), "p/m concurrency")
		require.NoError(t, g.Done(ctx, r3, 10))
		admit(t, g, call("m", 10))
		held(t, g, call("m", 10), "p/m concurrency")

		time.Sleep(610 * time.Millisecond) // both left slots expire
		admit(t, g, call("m", 10))
		admit(t, g, call("m", 10))
	})
}

func TestASlotLivesNoLongerThanItsCallsDeadline(t *testing.T) {
	t.Parallel()
	setup(t, func(t *testing.T, e *env) {
		g := e.worker(t, limits(governor.Limit{Provider: "p", Concurrency: 1})) // slots live 10 minutes
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_, err := g.Admit(ctx, call("m", 1)) // and its worker dies
		require.NoError(t, err)
		after := held(t, g, call("m", 1), "p/* concurrency")
		require.LessOrEqual(t, after, 120*time.Millisecond, "deadline + guard")
		time.Sleep(after + 5*time.Millisecond)
		admit(t, g, call("m", 1))
	})
}

func TestAFullConcurrencyLimitWaitsAtMostThePoll(t *testing.T) {
	t.Parallel()
	setup(t, func(t *testing.T, e *env) {
		g := e.worker(t, limits(governor.Limit{Provider: "p", Concurrency: 1})) // slots live 10 minutes
		admit(t, g, call("m", 1))
		require.Equal(t, governor.ConcurrencyPoll, held(t, g, call("m", 1), "p/* concurrency"))
	})
}

func TestSharesCapOneTeamOrPrincipalWhileOthersStillGetIn(t *testing.T) {
	t.Parallel()
	setup(t, func(t *testing.T, e *env) {
		g := e.worker(t, limits(governor.Limit{Provider: "p", Model: "m", RPM: 10, Concurrency: 100, TeamShare: 30, PrincipalShare: 5}))
		as := func(team, principal string) governor.Call {
			return governor.Call{Provider: "p", Model: "m", Team: team, Principal: principal, Tokens: 1}
		}
		for range 3 { // 30% of 10
			admit(t, g, as("a", ""))
		}
		held(t, g, as("a", ""), "p/m team=a rpm")
		for range 3 {
			admit(t, g, as("b", ""))
		}
		held(t, g, as("b", ""), "p/m team=b rpm")

		// 5% of 10 rounds down to 0: at least 1.
		admit(t, g, as("", "alice"))
		held(t, g, as("", "alice"), "p/m principal=alice rpm")
		admit(t, g, as("", "bob"))
		admit(t, g, as("", ""))       // nobody named: only the line's own limit: 9 of 10
		admit(t, g, as("c", "carol")) // 10 of 10
		held(t, g, as("d", "dave"), "p/m rpm")
	})
}

func TestAdmissionIsAllOrNothing(t *testing.T) {
	t.Parallel()
	setup(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		g := e.worker(t, governor.Config{Window: 2 * time.Second, Limits: []governor.Limit{
			{Provider: "p", RPM: 100, Concurrency: 10},
			{Provider: "p", Model: "m", TPM: 100, TeamShare: 50},
		}})
		c := governor.Call{Provider: "p", Model: "m", Team: "a", Tokens: 40}
		admit(t, g, c)
		c.Tokens = 20
		held(t, g, c, "p/m team=a tpm") // 40 + 20 > 50
		for key, want := range map[string]int64{
			"*:log": 1, "*:conc": 1, "m:m:log": 1, "m:m|t:a:log": 1,
		} {
			n, err := e.rdb.ZCard(ctx, e.key("p", key)).Result()
			require.NoError(t, err)
			require.Equal(t, want, n, key)
		}
		c.Team = "b"
		admit(t, g, c)
	})
}

// The scripts take every instant from Redis TIME, and the Go side computes
// only durations: there is no Go clock to skew. Two workers (separate
// clients) therefore see one window: what one admits, the other counts, and
// the waits they are told agree.
func TestTwoWorkersShareOneClock(t *testing.T) {
	t.Parallel()
	setup(t, func(t *testing.T, e *env) {
		cfg := governor.Config{Limits: []governor.Limit{{Provider: "p", RPM: 4}}}
		w1, w2 := e.worker(t, cfg), e.worker(t, cfg)
		admit(t, w1, call("", 1))
		admit(t, w2, call("", 1))
		admit(t, w1, call("", 1))
		admit(t, w2, call("", 1))
		start := time.Now()
		a1 := held(t, w1, call("", 1), "p/* rpm")
		a2 := held(t, w2, call("", 1), "p/* rpm")
		between := time.Since(start)
		require.LessOrEqual(t, a2, a1+time.Millisecond, "the second worker is told the same instant, later")
		require.LessOrEqual(t, a1-a2, between+2*time.Millisecond)
	})
}

func TestFeedbackBlocksEveryWorker(t *testing.T) {
	t.Parallel()
	setup(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		w1, w2 := e.worker(t, governor.Config{}), e.worker(t, governor.Config{})

		start := time.Now()
		d, err := w1.Feedback(ctx, "p", "m", 429, 300*time.Millisecond, nil)
		require.NoError(t, err)
		require.Equal(t, 300*time.Millisecond, d)
		after := held(t, w2, call("m", 1), "p/m blocked by the provider")
		require.LessOrEqual(t, after, 300*time.Millisecond)
		require.GreaterOrEqual(t, after, 300*time.Millisecond-time.Since(start)-5*time.Millisecond)
		admit(t, w2, call("other", 1)) // a model's 429 blocks that model

		// x-ratelimit headers: the exhausted limit's reset.
		lim := &llm.RateLimits{RequestsLimit: 100, RequestsRemaining: 0, RequestsReset: 2 * time.Second, TokensLimit: 1000, TokensRemaining: 5, TokensReset: 5 * time.Second}
		d, err = w1.Feedback(ctx, "q", "", 429, 0, lim)
		require.NoError(t, err)
		require.Equal(t, 2*time.Second, d)
		held(t, w2, governor.Call{Provider: "q", Model: "any", Tokens: 1}, "q/* blocked by the provider")

		// A shorter block does not shorten a longer one.
		d, err = w1.Feedback(ctx, "q", "", 429, 10*time.Millisecond, nil)
		require.NoError(t, err)
		require.Greater(t, d, time.Second)

		// A success saying remaining 0 blocks too; one with room does not.
		lim = &llm.RateLimits{RequestsRemaining: 3, TokensRemaining: 0, TokensReset: 200 * time.Millisecond}
		d, err = w1.Feedback(ctx, "r", "m", 200, 0, lim)
		require.NoError(t, err)
		require.Equal(t, 200*time.Millisecond, d)
		held(t, w2, governor.Call{Provider: "r", Model: "m", Tokens: 1}, "r/m blocked by the provider")
		d, err = w1.Feedback(ctx, "s", "m", 200, 0, &llm.RateLimits{RequestsRemaining: 3, TokensRemaining: 7, TokensReset: time.Minute})
		require.NoError(t, err)
		require.Zero(t, d)
		admit(t, w2, governor.Call{Provider: "s", Model: "m", Tokens: 1})

		// Overloads block no one.
		d, err = w1.Feedback(ctx, "t", "m", 529, time.Minute, nil)
		require.NoError(t, err)
		require.Zero(t, d)
		admit(t, w2, governor.Call{Provider: "t", Model: "m", Tokens: 1})

		time.Sleep(310 * time.Millisecond)
		admit(t, w2, call("m", 1))
	})
}

func TestGarbageFeedbackIsClampedOrIgnored(t *testing.T) {
	t.Parallel()
	setup(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		g := e.worker(t, governor.Config{})
		d, err := g.Feedback(ctx, "p", "day", 429, 24*time.Hour, nil)
		require.NoError(t, err)
		require.Equal(t, governor.MaxPenalty, d)
		ttl, err := e.rdb.PTTL(ctx, e.key("p", "block:m:day")).Result()
		require.NoError(t, err)
		require.LessOrEqual(t, ttl, governor.MaxPenalty)
		require.Greater(t, ttl, governor.MaxPenalty-time.Minute)

		garbage := &llm.RateLimits{RequestsLimit: -1, RequestsRemaining: 0, RequestsReset: -time.Hour, TokensLimit: -1, TokensRemaining: -1}
		d, err = g.Feedback(ctx, "p", "neg", 429, -5*time.Second, garbage)
		require.NoError(t, err)
		require.Equal(t, governor.DefaultPenalty, d, "negative hints are ignored: the default")
		after := held(t, g, call("neg", 1), "p/neg blocked by the provider")
		require.LessOrEqual(t, after, governor.DefaultPenalty)

		d, err = g.Feedback(ctx, "p", "ok", 200, 0, garbage)
		require.NoError(t, err)
		require.Zero(t, d, "a success with a garbled reset blocks nothing")
		admit(t, g, call("ok", 1))
	})
}

func TestSetConfigKeepsTheLastGoodOne(t *testing.T) {
	t.Parallel()
	setup(t, func(t *testing.T, e *env) {
		g := e.worker(t, limits(governor.Limit{Provider: "p", RPM: 1}))
		admit(t, g, call("", 1))
		held(t, g, call("", 1), "p/* rpm")

		good := g.Config()
		bad := good
		bad.Limits = []governor.Limit{{Provider: "p", RPM: -3}}
		require.ErrorContains(t, g.SetConfig(bad), "llm.limits[0]: rpm -3 is negative")
		require.Equal(t, good, g.Config())
		held(t, g, call("", 1), "p/* rpm")

		next := good
		next.Limits = []governor.Limit{{Provider: "p", RPM: 3}}
		require.NoError(t, g.SetConfig(next))
		admit(t, g, call("", 1))
		admit(t, g, call("", 1))
		held(t, g, call("", 1), "p/* rpm")

		next.Enabled = false
		require.NoError(t, g.SetConfig(next))
		admit(t, g, call("", 1))

		g2, err := governor.New(nil, governor.Config{})
		require.NoError(t, err, "disabled without Redis is fine")
		require.ErrorIs(t, g2.SetConfig(governor.Config{Enabled: true}), governor.ErrInvalidConfig)
	})
}

// Two workers × many goroutines race for K calls a window: exactly K get in.
func TestTheFleetAdmitsExactlyTheLimitUnderRace(t *testing.T) {
	t.Parallel()
	setup(t, func(t *testing.T, e *env) {
		const k, goroutines, tries = 17, 16, 3
		cfg := governor.Config{Window: 5 * time.Second, Limits: []governor.Limit{{Provider: "p", Model: "m", RPM: k, TPM: 1_000_000}}}
		workers := []*governor.Governor{e.worker(t, cfg), e.worker(t, cfg)}
		var admitted, waited atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, 2*goroutines*tries)
		for _, w := range workers {
			for range goroutines {
				wg.Go(func() {
					for range tries {
						_, err := w.Admit(context.Background(), call("m", 10))
						var we *llm.WaitError
						switch {
						case err == nil:
							admitted.Add(1)
						case errors.As(err, &we):
							waited.Add(1)
						default:
							errs <- err
						}
					}
				})
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.EqualValues(t, k, admitted.Load())
		require.EqualValues(t, 2*goroutines*tries-k, waited.Load())
		tok, err := e.rdb.Get(context.Background(), e.key("p", "m:m:tok")).Int()
		require.NoError(t, err)
		require.Equal(t, 10*k, tok)
	})
}

func TestObserverHearsWaitsAndFeedback(t *testing.T) {
	t.Parallel()
	setup(t, func(t *testing.T, e *env) {
		var mu sync.Mutex
		var heard []string
		cfg := limits(governor.Limit{Provider: "p", RPM: 1})
		cfg.Observer = governor.Observer{
			OnWait: func(limit string, d time.Duration) {
				mu.Lock()
				defer mu.Unlock()
				heard = append(heard, fmt.Sprintf("wait %s %t", limit, d > 0))
			},
			OnFeedback: func(provider, model string, status int, d time.Duration) {
				mu.Lock()
				defer mu.Unlock()
				heard = append(heard, fmt.Sprintf("feedback %s/%s %d %s", provider, model, status, d))
			},
		}
		g := e.worker(t, cfg)
		admit(t, g, call("", 1))
		held(t, g, call("", 1), "p/* rpm")
		reload := g.Config()
		reload.Observer = governor.Observer{} // a reload from YAML has none
		require.NoError(t, g.SetConfig(reload))
		_, err := g.Feedback(context.Background(), "p", "m", 429, 2*time.Second, nil)
		require.NoError(t, err)
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, []string{"wait p/* rpm true", "feedback p/m 429 2s"}, heard, "the observer outlives a reload")
	})
}

// BenchmarkAdmit is one admission and its Done (two script round trips)
// against three keys' log, counter and slots; ping is one round trip, for
// scale.
func BenchmarkAdmit(b *testing.B) {
	url := testdb.Redis(b)
	rdb := testdb.Connect(b, url)
	b.Run("ping", func(b *testing.B) {
		for b.Loop() {
			if err := rdb.Ping(context.Background()).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
	g, err := governor.New(rdb, governor.Config{Enabled: true, Window: time.Second, KeyPrefix: "bench:", Limits: []governor.Limit{
		{Provider: "p", RPM: governor.MaxRPM, TPM: governor.MaxTPM, Concurrency: governor.MaxConcurrency},
		{Provider: "p", Model: "m", RPM: governor.MaxRPM, TPM: governor.MaxTPM, TeamShare: 100},
	}})
	require.NoError(b, err)
	ctx := context.Background()
	c := governor.Call{Provider: "p", Model: "m", Team: "a", Tokens: 500}
	b.Run("admit+done", func(b *testing.B) {
		for b.Loop() {
			r, err := g.Admit(ctx, c)
			if err != nil {
				b.Fatal(err)
			}
			if err := g.Done(ctx, r, 400); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("admit", func(b *testing.B) {
		for b.Loop() {
			if _, err := g.Admit(ctx, c); err != nil {
				b.Fatal(err)
			}
		}
	})
}
