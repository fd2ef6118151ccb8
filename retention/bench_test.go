package retention_test

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/internal/testdb"
	"github.com/aetherium-engine/aetherium/retention"
	"github.com/aetherium-engine/aetherium/store"
)

// BenchmarkRetentionSweep is issue 46's retention drill: it deletes
// AETHERIUM_RETENTION_BENCH_RUNS (default 100,000) finished runs — each with 2
// sessions, 10 messages, 20 events, a delegation, an approval and 2 model calls,
// inserted by SQL — with the Sweeper (adaptive batches of at most
// AETHERIUM_RETENTION_BENCH_BATCH, default 500; AETHERIUM_RETENTION_BENCH_EXPORT=1
// archives each run first), while 20 live runs each append events and update
// their run row in a loop, as steps do. It reports:
//
//   - the lock waits of every backend of the database, from pg_locks sampled
//     every 2 ms (each wait's length is now − waitstart when last seen): the
//     wait live work experiences, whatever it waits on;
//
//   - the live writers' latency before and during the sweep and their ratio
//     (issue 46: within 1.5×);
//
//   - the sweep's transactions (each holds its rows locked throughout).
//
//     go test ./retention -run '^$' -bench RetentionSweep -benchtime 1x
func BenchmarkRetentionSweep(b *testing.B) {
	n := envInt(b, "AETHERIUM_RETENTION_BENCH_RUNS", 100000)
	batch := envInt(b, "AETHERIUM_RETENTION_BENCH_BATCH", 500)
	const live = 20
	ctx := context.Background()
	for range b.N {
		b.StopTimer()
		st := testdb.Store(b)
		t0 := time.Now()
		seedFinished(b, st, n)
		if os.Getenv("AETHERIUM_RETENTION_BENCH_VACUUM_TRUNCATE") == "1" {
			// The A/B of migration 00038: VACUUM may truncate the tables again.
			for _, table := range []string{"runs", "run_events", "sessions", "session_messages", "session_compactions", "delegations", "approvals", "llm_calls"} {
				_, err := st.Pool.Exec(ctx, `ALTER TABLE `+table+` RESET (vacuum_truncate)`)
				require.NoError(b, err)
			}
		}
		b.Logf("seeded %d finished runs in %s", n, time.Since(t0).Round(time.Millisecond))
		lives := make([]string, live)
		for i := range lives {
			lives[i] = uuid.NewString()
			require.NoError(b, st.CreateRun(ctx, store.Run{ID: lives[i], Prompt: "live", Team: []byte(`{}`), Variables: []byte(`{}`)}))
		}
		cfg := retention.Config{Runs: 24 * time.Hour, BatchSize: batch, MaxBatches: 1 << 20}
		if os.Getenv("AETHERIUM_RETENTION_BENCH_EXPORT") == "1" {
			cfg.ExportDir = b.TempDir()
		}
		sw := retention.New(cfg, retention.Deps{Store: st})
		baseWaits := lockWaits(b, st)
		baseline := liveWriters(b, st, lives, func() { time.Sleep(10 * time.Second) })
		base := baseWaits()
		b.StartTimer()
		start := time.Now()
		waits := lockWaits(b, st)
		var rep retention.Report
		during := liveWriters(b, st, lives, func() {
			var err error
			rep, err = sw.Sweep(ctx)
			require.NoError(b, err)
		})
		elapsed := time.Since(start)
		sweepWaits := waits()
		b.StopTimer()
		require.EqualValues(b, n, rep.Runs)
		b.ReportMetric(float64(n)/elapsed.Seconds(), "runs/s")
		all, liveWaits := durations(sweepWaits, false), durations(sweepWaits, true)
		b.ReportMetric(float64(len(all)), "lock-waits")
		b.ReportMetric(ms(pct(all, 100)), "lock-wait-max-ms")
		// Issue 46's bar: the live runs' lock waits on runs/run_events, p99 ≤ 50 ms.
		b.ReportMetric(float64(len(liveWaits)), "live-lock-waits")
		b.ReportMetric(ms(pct(liveWaits, 99)), "live-lock-wait-p99-ms")
		// The bar is what the drill checks (CI runs it small); the latency
		// ratio is reported, not checked: on shared cores it is the machine's.
		require.LessOrEqual(b, pct(liveWaits, 99), 50*time.Millisecond, "issue 46: live writes' p99 lock wait")
		b.ReportMetric(ms(pct(rep.RunBatchHolds, 50)), "batch-tx-p50-ms")
		b.ReportMetric(ms(pct(rep.RunBatchHolds, 99)), "batch-tx-p99-ms")
		b.ReportMetric(ms(pct(baseline, 50)), "live-write-p50-ms-before")
		b.ReportMetric(ms(pct(baseline, 99)), "live-write-p99-ms-before")
		b.ReportMetric(ms(pct(during, 50)), "live-write-p50-ms-during")
		b.ReportMetric(ms(pct(during, 99)), "live-write-p99-ms-during")
		b.ReportMetric(float64(pct(during, 50))/float64(max(1, pct(baseline, 50))), "live-p50-ratio")
		b.ReportMetric(float64(pct(during, 99))/float64(max(1, pct(baseline, 99))), "live-p99-ratio")
		b.Logf("%d runs in %d batches (at most %d) in %s, %d exported; live writes: %d before, %d during; lock waits: %d before (max %s), %d during",
			n, rep.Batches, batch, elapsed.Round(time.Millisecond), rep.Exported, len(baseline), len(during),
			len(base), pct(durations(base, false), 100), len(sweepWaits))
		if l, err := os.ReadFile("/proc/loadavg"); err == nil {
			b.Logf("load average: %s", l)
		}
	}
}

// lockWait is one lock wait a sample saw: how long, who waited (live: one of
// the live writers' statements) and a description naming the holder.
type lockWait struct {
	d    time.Duration
	live bool
	desc string
}

// lockWaits samples pg_locks every 2 ms until the returned func is called,
// which returns every lock wait seen by a backend of this database (pg_locks
// is the whole server's: other tests' databases are left out): each waiting
// lock (backend, lock, waitstart) once, as long as it was seen waiting.
func lockWaits(b *testing.B, st *store.Store) func() []lockWait {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	seen := map[string]lockWait{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			// Each wait: who waits (its statement), on what, and who holds
			// it (pg_blocking_pids: their backend types and statements).
			rows, err := st.Pool.Query(ctx, `SELECT l.pid || ' ' || l.locktype || ' ' || l.mode || ' ' || coalesce(l.relation::regclass::text, '') || ' ' || l.waitstart::text,
					left(a.query, 40), coalesce((SELECT string_agg(b.backend_type || ' [' || left(b.query, 60) || ']', ', ')
						FROM pg_stat_activity b WHERE b.pid = ANY (pg_blocking_pids(l.pid))), ''),
					extract(epoch FROM clock_timestamp() - l.waitstart)
				FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
				WHERE NOT l.granted AND l.waitstart IS NOT NULL AND l.pid <> pg_backend_pid() AND a.datname = current_database()`)
			if err == nil {
				var key, query, holder string
				var secs float64
				_, _ = pgx.ForEachRow(rows, []any{&key, &query, &holder, &secs}, func() error {
					w := seen[key]
					w.d = max(w.d, time.Duration(secs*float64(time.Second)))
					w.live = strings.HasPrefix(query, liveInsert) || strings.HasPrefix(query, liveUpdate)
					if holder != "" || w.desc == "" {
						w.desc = key + " [" + query + "] blocked by " + holder
					}
					seen[key] = w
					return nil
				})
			}
			select {
			case <-ctx.Done():
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	return func() []lockWait {
		cancel()
		<-done
		out := make([]lockWait, 0, len(seen))
		for _, w := range seen {
			b.Logf("lock wait (live %t) %s: %s", w.live, w.desc, w.d)
			out = append(out, w)
		}
		return out
	}
}

// durations are the waits' lengths, the live writers' only when live.
func durations(ws []lockWait, live bool) []time.Duration {
	var out []time.Duration
	for _, w := range ws {
		if w.live || !live {
			out = append(out, w.d)
		}
	}
	return out
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

// The live writers' statements begin so (lockWaits tells their waits apart).
const (
	liveInsert = "INSERT INTO run_events"
	liveUpdate = "UPDATE runs SET updated_at"
)

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
				_, err = tx.Exec(ctx, liveInsert+` (run_id, key, type) VALUES ($1, $2, 'progress')`, id, uuid.NewString())
				require.NoError(b, err)
				_, err = tx.Exec(ctx, liveUpdate+` = now() WHERE id = $1`, id)
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
	return s[min(len(s)-1, len(s)*p/100)] // p=100: the largest
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
