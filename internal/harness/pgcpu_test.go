package harness

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/internal/testdb"
)

// fakeProc is one process of a fixture /proc; CPU in ticks (1/100 s).
type fakeProc struct {
	pid, ppid                    int
	comm, cmdline                string
	utime, stime, cutime, cstime int
	start                        uint64
	// runNS, when set, is the process's schedstat time on a CPU (ns).
	runNS uint64
}

// title is a process title as PostgreSQL writes it over argv, NUL-padded.
func title(t string) string { return "postgres: 15/main: " + t + strings.Repeat("\x00", 16) }

// writeProcs makes dir a /proc holding exactly procs.
func writeProcs(t *testing.T, dir string, procs []fakeProc) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range ents {
		require.NoError(t, os.RemoveAll(filepath.Join(dir, e.Name())))
	}
	for _, p := range procs {
		d := filepath.Join(dir, strconv.Itoa(p.pid))
		require.NoError(t, os.MkdirAll(d, 0o755))
		// Fields 3-22 and a few more, as the kernel writes them.
		stat := fmt.Sprintf("%d (%s) S %d %d %d 0 -1 4194304 100 0 0 0 %d %d %d %d 20 0 1 0 %d 1000 10 0 0 0\n",
			p.pid, p.comm, p.ppid, p.pid, p.pid, p.utime, p.stime, p.cutime, p.cstime, p.start)
		require.NoError(t, os.WriteFile(filepath.Join(d, "stat"), []byte(stat), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(d, "cmdline"), []byte(p.cmdline), 0o644))
		if p.runNS > 0 {
			require.NoError(t, os.WriteFile(filepath.Join(d, "schedstat"), fmt.Appendf(nil, "%d 12345 42\n", p.runNS), 0o644))
		}
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "stat"), []byte("cpu 1 2 3 4\n"), 0o644))
}

const postmasterArgv = "/usr/lib/postgresql/15/bin/postgres\x00-D\x00/var/lib/postgresql/15/main\x00"

// cluster is a postmaster (pid 100) and its children, each having used cpu
// ticks; bench and other are the client backends' databases.
func cluster(cpu int) []fakeProc {
	return []fakeProc{
		{pid: 100, ppid: 1, comm: "postgres", cmdline: postmasterArgv, utime: cpu, start: 10},
		{pid: 101, ppid: 100, comm: "postgres", cmdline: title("postgres aetherium_bench 127.0.0.1(5555) idle"), utime: 10 * cpu, stime: cpu, start: 20},
		{pid: 102, ppid: 100, comm: "postgres", cmdline: title("postgres aeth_test_ci 127.0.0.1(5556) SELECT"), utime: 7 * cpu, start: 21},
		{pid: 103, ppid: 100, comm: "postgres", cmdline: title("walwriter"), utime: 2 * cpu, start: 11},
		{pid: 104, ppid: 100, comm: "postgres", cmdline: title("checkpointer"), utime: cpu, start: 11},
		{pid: 105, ppid: 100, comm: "postgres", cmdline: title("autovacuum worker aetherium_bench"), utime: cpu, start: 22},
		{pid: 106, ppid: 100, comm: "postgres", cmdline: title("autovacuum worker aeth_test_ci"), utime: 3 * cpu, start: 23},
		{pid: 107, ppid: 100, comm: "postgres", cmdline: title("parallel worker for PID 101 "), utime: 4 * cpu, start: 24},
		{pid: 108, ppid: 100, comm: "postgres", cmdline: title("parallel worker for PID 102 "), utime: 5 * cpu, start: 25},
		{pid: 109, ppid: 100, comm: "postgres", cmdline: title("logger"), utime: cpu, start: 11},
		{pid: 110, ppid: 100, comm: "postgres", cmdline: title("walsender replicator 10.0.0.2(4000) streaming 0/3000000"), utime: cpu, start: 26},
		{pid: 111, ppid: 100, comm: "postgres", cmdline: title("logical replication launcher"), utime: cpu, start: 11},
		// Another cluster, whose backend's database has the bench's name.
		{pid: 200, ppid: 1, comm: "postgres", cmdline: postmasterArgv, utime: cpu, start: 12},
		{pid: 201, ppid: 200, comm: "postgres", cmdline: title("postgres aetherium_bench 127.0.0.1(6000) idle"), utime: 50 * cpu, start: 27},
		// Not PostgreSQL.
		{pid: 300, ppid: 1, comm: "redis-server", cmdline: "redis-server\x00", utime: 40 * cpu, start: 13},
	}
}

func without(procs []fakeProc, pids ...int) []fakeProc {
	var out []fakeProc
	for _, p := range procs {
		if !slices.Contains(pids, p.pid) {
			out = append(out, p)
		}
	}
	return out
}

// rounded makes a PGCPU comparable: its seconds to the tick.
func rounded(p PGCPU) PGCPU {
	r := func(v float64) float64 { return math.Round(v*100) / 100 }
	p.Backends, p.Helpers, p.Excluded, p.Exited = r(p.Backends), r(p.Helpers), r(p.Excluded), r(p.Exited)
	return p
}

var benchBackend = pgBackend{pid: 101, clusterName: "15/main", database: "aetherium_bench", port: "5555"}

func TestPGMeterAttributesTheClustersCPU(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		start, stop []fakeProc
		want        PGCPU
	}{
		{
			// Every process used 1 tick per unit more by the end: the bench's
			// backend 11 and its parallel worker 4; walwriter 2, checkpointer 1,
			// the bench database's autovacuum worker 1, the logical replication
			// launcher 1; the rest is another database's (7+3+5), the logger's,
			// the walsender's and the postmaster's (1 each).
			name:  "the bench's backends and the shared helpers, not the other database's",
			start: cluster(1), stop: cluster(2),
			want: PGCPU{Backends: 0.15, Helpers: 0.05, Excluded: 0.18},
		},
		{
			name:  "a backend that began within the window counts whole",
			start: cluster(1),
			stop: append(cluster(2), fakeProc{pid: 112, ppid: 100, comm: "postgres",
				cmdline: title("postgres aetherium_bench_dbos 127.0.0.1(5557) idle"), utime: 30, start: 30}),
			want: PGCPU{Backends: 0.45, Helpers: 0.05, Excluded: 0.18},
		},
		{
			// The bench's backend 101 exits; the postmaster reaps it (22 ticks
			// of its life into cutime): unattributed, and the bench is told.
			name:  "a bench backend that exited is reported, not counted",
			start: cluster(1),
			stop: func() []fakeProc {
				ps := without(cluster(2), 101)
				ps[0].cutime = 22
				return ps
			}(),
			// The parallel worker's leader is gone: it is no longer the bench's.
			want: PGCPU{Helpers: 0.05, Excluded: 0.22, Exited: 0.22, BenchExited: 1},
		},
		{
			name:  "a reused pid is a new process",
			start: cluster(1),
			stop: func() []fakeProc {
				ps := cluster(2)
				ps[2].start = 99 // 102: another database's backend, again
				return ps
			}(),
			want: PGCPU{Backends: 0.15, Helpers: 0.05, Excluded: 0.25},
		},
		{
			// update_process_title = off: the title names no database.
			name:  "an autovacuum worker of no named database is a shared helper",
			start: cluster(1),
			stop: func() []fakeProc {
				ps := cluster(2)
				ps[6].cmdline = title("autovacuum worker")
				return ps
			}(),
			want: PGCPU{Backends: 0.15, Helpers: 0.08, Excluded: 0.15},
		},
		{
			// The bench's backend ran 0.1 s by the scheduler's count, which
			// the ticks (11 of them) overstate.
			name: "the scheduler's nanoseconds where the kernel keeps them",
			start: func() []fakeProc {
				ps := cluster(1)
				ps[1].runNS = 1_234_567_890
				return ps
			}(),
			stop: func() []fakeProc {
				ps := cluster(2)
				ps[1].runNS = 1_334_567_890
				return ps
			}(),
			want: PGCPU{Backends: 0.14, Helpers: 0.05, Excluded: 0.18},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			writeProcs(t, dir, tc.start)
			m := attachPGMeter(dir, benchBackend, []string{"aetherium_bench", "aetherium_bench_dbos"})
			require.Empty(t, m.Unavailable())
			w := m.Start()
			writeProcs(t, dir, tc.stop)
			require.Equal(t, tc.want, rounded(w.Stop()))
		})
	}
}

func TestPGMeterSaysWhyItCannotAttribute(t *testing.T) {
	t.Parallel()
	// By case: the cluster, the bench's connection, what the meter says
	// instead of a figure.
	tests := map[string]struct {
		procs   []fakeProc
		backend pgBackend
		want    string
	}{
		"PostgreSQL elsewhere: no such process": {cluster(1), pgBackend{pid: 4242, clusterName: "15/main", database: "aetherium_bench", port: "5555"},
			"the bench's backend (pid 4242) is no process here: PostgreSQL runs on another host or in another PID namespace"},
		"another PID namespace: the pid is someone else": {cluster(1), pgBackend{pid: 300, clusterName: "15/main", database: "aetherium_bench", port: "5555"},
			"process 300 here (redis-server \"\") is not the bench's backend"},
		"the pid is another connection's backend": {cluster(1), pgBackend{pid: 101, clusterName: "15/main", database: "aetherium_bench", port: "7777"},
			"process 101 here (postgres \"postgres aetherium_bench 127.0.0.1(5555) idle\") is not the bench's backend"},
		"the parent is no postmaster": {func() []fakeProc {
			ps := cluster(1)
			ps[0].comm = "bash"
			return ps
		}(), benchBackend, "the parent (pid 100) of the bench's backend 101 is not a PostgreSQL postmaster"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			writeProcs(t, dir, tc.procs)
			m := attachPGMeter(dir, tc.backend, []string{"aetherium_bench"})
			require.Contains(t, m.Unavailable(), tc.want)
			require.Contains(t, m.Counts(), "PostgreSQL CPU is not metered: "+tc.want)
			got := m.Start().Stop()
			require.Equal(t, PGCPU{Unavailable: m.Unavailable()}, got)
		})
	}
}

func TestPGMeterOverAUnixSocketAndWithoutAClusterName(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ps := cluster(1)
	for i := range ps {
		ps[i].cmdline = strings.Replace(ps[i].cmdline, "15/main: ", "", 1)
	}
	ps[1].cmdline = "postgres: postgres aetherium_bench [local] idle\x00"
	writeProcs(t, dir, ps)
	m := attachPGMeter(dir, pgBackend{pid: 101, database: "aetherium_bench"}, []string{"aetherium_bench"})
	require.Empty(t, m.Unavailable())
	require.Contains(t, m.Counts(), "postmaster pid 100): the backends of databases aetherium_bench")
	w := m.Start()
	writeProcs(t, dir, func() []fakeProc {
		ps := cluster(2)
		for i := range ps {
			ps[i].cmdline = strings.Replace(ps[i].cmdline, "15/main: ", "", 1)
		}
		ps[1].cmdline = "postgres: postgres aetherium_bench [local] idle\x00"
		return ps
	}())
	require.Equal(t, PGCPU{Backends: 0.15, Helpers: 0.05, Excluded: 0.18}, rounded(w.Stop()))
}

func TestPGMeterNoticesARestartedPostmaster(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeProcs(t, dir, cluster(1))
	m := attachPGMeter(dir, benchBackend, []string{"aetherium_bench"})
	w := m.Start()
	ps := cluster(2)
	ps[0].start = 77
	writeProcs(t, dir, ps)
	require.Contains(t, w.Stop().Unavailable, "the postmaster (pid 100) is gone: PostgreSQL restarted")
}

// On the real cluster: a busy query on the bench's database is the bench's; the
// same query on another database of the same cluster is not.
func TestPGMeterCountsTheBenchsDatabaseAndNotAnother(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	open := func(url string) (*pgxpool.Pool, string) {
		pool, err := pgxpool.New(ctx, url)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		var db string
		// The connection the windows use exists before they start.
		require.NoError(t, pool.QueryRow(ctx, `SELECT current_database()`).Scan(&db))
		return pool, db
	}
	ours, oursDB := open(testdb.Database(t))
	other, _ := open(testdb.Database(t))
	m, err := NewPGMeter(ctx, ours, "/proc", oursDB)
	require.NoError(t, err)
	if u := m.Unavailable(); u != "" {
		testdb.Unavailable(t, "pg cpu meter: %s", u)
	}
	// About 0.3 s of one backend's CPU, without parallel workers (they exit
	// before the window ends: unattributed).
	busy := func(pool *pgxpool.Pool) PGCPU {
		c, err := pool.Acquire(ctx)
		require.NoError(t, err)
		defer c.Release()
		_, err = c.Exec(ctx, `SET max_parallel_workers_per_gather = 0`)
		require.NoError(t, err)
		w := m.Start()
		_, err = c.Exec(ctx, `SELECT sum(i) FROM generate_series(1, 2000000) i`)
		require.NoError(t, err)
		return w.Stop()
	}
	got := busy(ours)
	require.Empty(t, got.Unavailable)
	require.Greater(t, got.Backends, 0.1, "%+v", got)
	got = busy(other)
	require.Less(t, got.Backends, 0.05, "%+v", got)
	require.Greater(t, got.Excluded, 0.1, "%+v", got)
}
