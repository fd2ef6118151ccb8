package retention_test

import (
	"context"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/internal/testdb"
	"github.com/aetherium-engine/aetherium/store"
)

// BenchmarkRetentionSweep deletes AETHERIUM_RETENTION_BENCH_RUNS (default
// 10,000) finished runs — each with 2 sessions, 10 messages, 20 events, a
// delegation, an approval and 2 model calls — in batches of
// AETHERIUM_RETENTION_BENCH_BATCH (default 500), while 20 live runs each append
// events and update their run row in a loop, as steps do. It reports the batches'
// lock hold (first DELETE to commit) and the live writers' latency during the
// sweep against the same writers before it: the lock wait the sweep costs them.
//
//	go test ./retention -run '^$' -bench RetentionSweep -benchtime 1x
func BenchmarkRetentionSweep(b *testing.B) {
	n := envInt(b, "AETHERIUM_RETENTION_BENCH_RUNS", 10000)
	batch := envInt(b, "AETHERIUM_RETENTION_BENCH_BATCH", 500)
	const live = 20
	ctx := context.Background()
	for range b.N {
		b.StopTimer()
		st := testdb.Store(b)
		seedFinished(b, st, n)
		lives := make([]string, live)
		for i := range lives {
			lives[i] = uuid.NewString()
			require.NoError(b, st.CreateRun(ctx, store.Run{ID: lives[i], Prompt: "live", Team: []byte(`{}`), Variables: []byte(`{}`)}))
		}
		baseline := liveWriters(b, st, lives, func() { time.Sleep(3 * time.Second) })
		b.StartTimer()
		var holds, totals []time.Duration
		deleted := 0
		start := time.Now()
		// Any backend of this database waiting on a lock, sampled every 2 ms:
		// the direct sign of a writer queued behind the sweep.
		var samples, waiting, maxWaiting atomic.Int64
		sampled := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(sampled)
			for {
				select {
				case <-done:
					return
				case <-time.After(2 * time.Millisecond):
				}
				var w int64
				if err := st.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&w); err != nil {
					continue
				}
				samples.Add(1)
				if w > 0 {
					waiting.Add(1)
				}
				if w > maxWaiting.Load() {
					maxWaiting.Store(w)
				}
			}
		}()
		during := liveWriters(b, st, lives, func() {
			for {
				r, err := st.DeleteRunsBatch(ctx, time.Now().Add(-24*time.Hour), batch, nil)
				require.NoError(b, err)
				if r.Rows == 0 {
					return
				}
				deleted += int(r.Rows)
				holds = append(holds, r.Deleting)
				totals = append(totals, r.Held)
			}
		})
		elapsed := time.Since(start)
		close(done)
		<-sampled
		b.StopTimer()
		b.ReportMetric(float64(waiting.Load())/float64(max(1, samples.Load())), "lock-wait-sample-share")
		b.ReportMetric(float64(maxWaiting.Load()), "lock-waiters-max")
		require.Equal(b, n, deleted)
		b.ReportMetric(float64(n)/elapsed.Seconds(), "runs/s")
		b.ReportMetric(ms(pct(holds, 50)), "batch-hold-p50-ms")
		b.ReportMetric(ms(pct(holds, 99)), "batch-hold-p99-ms")
		b.ReportMetric(ms(pct(totals, 99)), "batch-tx-p99-ms")
		b.ReportMetric(ms(pct(baseline, 50)), "live-write-p50-ms-before")
		b.ReportMetric(ms(pct(baseline, 99)), "live-write-p99-ms-before")
		b.ReportMetric(ms(pct(during, 50)), "live-write-p50-ms-during")
		b.ReportMetric(ms(pct(during, 99)), "live-write-p99-ms-during")
		b.Logf("%d runs in %d batches of %d in %s; live writes: %d before, %d during", n, len(holds), batch, elapsed.Round(time.Millisecond), len(baseline), len(during))
	}
}

// seedFinished inserts n runs finished 100 days ago with their rows, by SQL.
func seedFinished(b *testing.B, st *store.Store, n int) {
	b.Helper()
	ctx := context.Background()
	for i, q := range []string{
		`INSERT INTO runs (id, status, prompt, team, owner, finished_at)
			SELECT gen_random_uuid(), 'completed', 'bench', '{}', 'bench', now() - interval '100 days' - g * interval '1 second' FROM generate_series(1, $1) g`,
		`INSERT INTO sessions (id, run_id, agent, role) SELECT r.id || ':' || a, r.id, a, 'worker' FROM runs r, unnest(ARRAY['sup','w']) a`,
		`INSERT INTO session_messages (session_id, seq, message) SELECT s.id, g, '{"role":"user","content":"a message of some length to look like one"}' FROM sessions s, generate_series(0, 4) g`,
		`INSERT INTO run_events (run_id, key, type, data) SELECT r.id, 'k' || g, 'progress', '{"n":1}' FROM runs r, generate_series(1, 20) g`,
		`INSERT INTO delegations (id, run_id, parent_session, tool_call_id, agent, task) SELECT r.id || ':d', r.id, r.id || ':sup', 'c', 'w', 't' FROM runs r`,
		`INSERT INTO approvals (id, run_id, session_id, call_id, agent, tool, tier, why, expires_at, status) SELECT r.id || ':a', r.id, r.id || ':sup', 'c', 'sup', 't', 'restricted', 'w', now(), 'approved' FROM runs r`,
		`INSERT INTO llm_calls (run_id, session_id, agent, owner, team, provider, model, input_tokens, output_tokens, cached_tokens, cache_write_tokens, cost, priced)
			SELECT r.id, r.id || ':sup', 'sup', 'o', 't', 'p', 'm', 1, 1, 0, 0, 0, true FROM runs r, generate_series(1, 2)`,
		`ANALYZE`,
	} {
		var args []any
		if i == 0 { // the runs: the rest follows them
			args = append(args, n)
		}
		_, err := st.Pool.Exec(ctx, q, args...)
		require.NoError(b, err, q)
	}
}

// liveWriters runs one writer per live run while work runs, each a step's
// writes (an event, the run's updated_at) in a transaction, and returns their
// latencies.
func liveWriters(b *testing.B, st *store.Store, lives []string, work func()) []time.Duration {
	b.Helper()
	ctx := context.Background()
	var stop atomic.Bool
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	for _, id := range lives {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				t0 := time.Now()
				tx, err := st.Pool.Begin(ctx)
				require.NoError(b, err)
				_, err = tx.Exec(ctx, `INSERT INTO run_events (run_id, key, type) VALUES ($1, $2, 'progress')`, id, uuid.NewString())
				require.NoError(b, err)
				_, err = tx.Exec(ctx, `UPDATE runs SET updated_at = now() WHERE id = $1`, id)
				require.NoError(b, err)
				require.NoError(b, tx.Commit(ctx))
				d := time.Since(t0)
				mu.Lock()
				lat = append(lat, d)
				mu.Unlock()
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	work()
	stop.Store(true)
	wg.Wait()
	return lat
}

func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func envInt(b *testing.B, key string, def int) int {
	v := os.Getenv(key)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	require.NoError(b, err, key)
	return n
}
