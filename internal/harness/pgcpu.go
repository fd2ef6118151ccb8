package harness

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

// PostgreSQL's CPU attributed to the bench (issue 45). Summing every `postgres`
// process on the machine let a CI run or another test on the same machine (the
// same cluster or another) into the bench's figures: the PostgreSQL CPU per model
// turn moved 1.6 → 2.9 ms between two runs of the same code. A PGMeter counts
// one cluster — the one serving the bench's connection — and within it only:
//
//   - the client backends of the bench's databases, and the parallel workers of
//     those backends (a backend's title reads `postgres: [cluster: ]user db addr
//     state`);
//   - the cluster's shared helpers, which do the bench's writes but cannot be
//     split by database: walwriter (flushes the WAL of asynchronous commits),
//     checkpointer and background writer (write the dirty pages back),
//     autovacuum launcher, autovacuum workers of the bench's databases (or of no
//     database the title names), logical replication launcher (idle without
//     subscriptions; kept because it is the cluster's, not another client's),
//     stats collector (PostgreSQL ≤ 14: receives every backend's counters) and
//     I/O workers (PostgreSQL ≥ 18: read for every backend). On a shared cluster
//     they also carry other databases' writes, so they are reported apart.
//
// Not counted: other databases' backends and autovacuum workers, walsenders, the
// logger, the archiver, other background workers, and the postmaster itself.
// Nor are processes that exited during a window: /proc then loses their CPU,
// which moves into the postmaster's cutime/cstime when it reaps them — whose
// they were is no longer known, so that amount is reported (PGCPU.Exited), not
// counted. The bench's pools keep their connections through a window (pgxpool
// closes a connection after an hour, or idle for 30 minutes; the bench resets
// its pools only between windows), so the bench's backends live through it;
// PGCPU.BenchExited counts those that did not.

// PostgresGroup is the CPUMeter group a PGMeter fills.
const PostgresGroup = "postgres"

// PGMeter attributes one PostgreSQL cluster's CPU to the given databases. Its
// zero value, or one whose Unavailable is set, measures nothing.
type PGMeter struct {
	proc        string
	postmaster  int
	pmStart     uint64
	clusterName string
	databases   []string
	unavailable string
}

// pgBackend is what the server says of one of the bench's connections.
type pgBackend struct {
	pid         int
	clusterName string
	database    string
	// port is the connection's local TCP port ("" on a Unix socket): the
	// backend's title must show it, so a process that merely has the pid in
	// this PID namespace is not taken for it.
	port string
}

// NewPGMeter finds the cluster serving pool (its backend's parent) under proc
// (/proc, or a fixture directory) and meters the CPU of databases in it. When
// the cluster's processes cannot be seen from here the meter says why
// (Unavailable) and measures nothing; an error is a failed query.
func NewPGMeter(ctx context.Context, pool *pgxpool.Pool, proc string, databases ...string) (*PGMeter, error) {
	c, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("pg cpu meter: %w", err)
	}
	defer c.Release()
	var b pgBackend
	if err := c.QueryRow(ctx, `SELECT pg_backend_pid(), current_setting('cluster_name'), current_database()`).Scan(&b.pid, &b.clusterName, &b.database); err != nil {
		return nil, fmt.Errorf("pg cpu meter: the bench's backend: %w", err)
	}
	if a, ok := c.Conn().PgConn().Conn().LocalAddr().(*net.TCPAddr); ok {
		b.port = strconv.Itoa(a.Port)
	}
	return attachPGMeter(proc, b, databases), nil
}

// attachPGMeter checks that b's pid under proc is b's backend and its parent a
// postmaster, and meters that postmaster's children.
func attachPGMeter(proc string, b pgBackend, databases []string) *PGMeter {
	m := &PGMeter{proc: proc, clusterName: b.clusterName, databases: databases}
	elsewhere := "PostgreSQL runs on another host or in another PID namespace (a container), or " + proc + " hides its processes"
	st, err := readProcStat(proc, b.pid)
	if errors.Is(err, fs.ErrNotExist) {
		m.unavailable = fmt.Sprintf("the bench's backend (pid %d) is no process here: %s", b.pid, elsewhere)
		return m
	}
	if err != nil {
		m.unavailable = fmt.Sprintf("the bench's backend: %v", err)
		return m
	}
	title, _ := readTitle(proc, b.pid, b.clusterName)
	f := strings.Fields(title)
	addr := "[local]"
	if b.port != "" {
		addr = "(" + b.port + ")"
	}
	if st.comm != "postgres" || len(f) < 3 || f[1] != b.database || !strings.HasSuffix(f[2], addr) {
		m.unavailable = fmt.Sprintf("process %d here (%s %q) is not the bench's backend: %s", b.pid, st.comm, title, elsewhere)
		return m
	}
	pm, err := readProcStat(proc, st.ppid)
	if err != nil || pm.comm != "postgres" {
		m.unavailable = fmt.Sprintf("the parent (pid %d) of the bench's backend %d is not a PostgreSQL postmaster (%s, %v)", st.ppid, b.pid, pm.comm, err)
		return m
	}
	m.postmaster, m.pmStart = st.ppid, pm.start
	return m
}

// Unavailable says why the meter cannot attribute the cluster's CPU ("" when it can).
func (m *PGMeter) Unavailable() string {
	if m == nil || m.postmaster == 0 && m.unavailable == "" {
		return "no PostgreSQL cluster located"
	}
	return m.unavailable
}

// Counts says what the meter's figure is.
func (m *PGMeter) Counts() string {
	if u := m.Unavailable(); u != "" {
		return "PostgreSQL CPU is not metered: " + u
	}
	name := ""
	if m.clusterName != "" {
		name = " " + m.clusterName
	}
	return fmt.Sprintf("PostgreSQL CPU counts one cluster%s (postmaster pid %d): the backends of databases %s and their parallel workers, "+
		"plus the cluster's shared helpers (walwriter, checkpointer, background writer, autovacuum launcher and these databases' autovacuum workers, "+
		"logical replication launcher, stats collector or I/O workers where the version has them), which also carry other databases' writes; "+
		"not counted: other databases' backends, other clusters, the postmaster, logger, archiver, walsenders, other background workers, "+
		"and processes that exited during a measurement (their CPU is reported as unattributed)",
		name, m.postmaster, strings.Join(m.databases, ", "))
}

// PGCPU is one window's PostgreSQL CPU seconds, by what the meter made of them.
type PGCPU struct {
	// Backends: the bench's databases' backends and their parallel workers.
	Backends float64 `json:"bench_backends_s"`
	// Helpers: the cluster's shared helpers (see PGMeter).
	Helpers float64 `json:"shared_helpers_s"`
	// Excluded: live processes of the cluster not counted (other databases,
	// the postmaster, …).
	Excluded float64 `json:"not_counted_live_s"`
	// Exited: the whole lives of the cluster's processes that exited during the
	// window (the postmaster's reaped children), anyone's: not counted.
	Exited float64 `json:"unattributed_exited_s"`
	// BenchExited is how many of the bench's backends alive at the start were
	// gone at the end: their CPU in the window is in Exited, not in Backends.
	BenchExited int `json:"bench_backends_exited"`
	// Unavailable says why nothing was measured.
	Unavailable string `json:"unavailable,omitempty"`
}

// Counted is the bench's PostgreSQL CPU: its backends and the shared helpers.
func (p PGCPU) Counted() float64 { return p.Backends + p.Helpers }

func (p PGCPU) describe(wall float64) string {
	if p.Unavailable != "" {
		return "postgres not metered (" + p.Unavailable + ")"
	}
	s := fmt.Sprintf("postgres %.2f cores (bench's backends %.2f + shared helpers %.2f; not counted: other processes of the cluster %.2f, exited %.2f",
		p.Counted()/wall, p.Backends/wall, p.Helpers/wall, p.Excluded/wall, p.Exited/wall)
	if p.BenchExited > 0 {
		s += fmt.Sprintf(", of them %d of the bench's backends: its figure is low", p.BenchExited)
	}
	return s + ")"
}

// pgProc is one process of the cluster at one moment.
type pgProc struct {
	pid   int
	start uint64
	cpu   float64
	title string
}

type pgProcID struct {
	pid   int
	start uint64
}

// PGWindow is a PGMeter's measurement in progress.
type PGWindow struct {
	m          *PGMeter
	base       map[pgProcID]float64
	benchStart []pgProcID
	reaped     float64
	err        string
}

// Start begins a window.
func (m *PGMeter) Start() *PGWindow {
	w := &PGWindow{m: m, base: map[pgProcID]float64{}}
	if w.err = m.Unavailable(); w.err != "" {
		return w
	}
	pm, procs, err := m.snapshot()
	if err != nil {
		w.err = err.Error()
		return w
	}
	w.reaped = pm.children
	bench := m.benchBackends(procs)
	for _, p := range procs {
		id := pgProcID{p.pid, p.start}
		w.base[id] = p.cpu
		if bench[p.pid] {
			w.benchStart = append(w.benchStart, id)
		}
	}
	return w
}

// Stop ends the window.
func (w *PGWindow) Stop() PGCPU {
	if w.err != "" {
		return PGCPU{Unavailable: w.err}
	}
	pm, procs, err := w.m.snapshot()
	if err != nil {
		return PGCPU{Unavailable: err.Error()}
	}
	out := PGCPU{Exited: pm.children - w.reaped}
	bench := w.m.benchBackends(procs)
	alive := map[pgProcID]bool{}
	for _, p := range procs {
		id := pgProcID{p.pid, p.start}
		alive[id] = true
		// A process the start did not see began within the window: all its
		// CPU is the window's.
		d := p.cpu - w.base[id]
		switch {
		case bench[p.pid]:
			out.Backends += d
		case w.m.helper(p.title):
			out.Helpers += d
		default:
			out.Excluded += d
		}
	}
	for _, id := range w.benchStart {
		if !alive[id] {
			out.BenchExited++
		}
	}
	return out
}

// snapshot reads the postmaster and its children.
func (m *PGMeter) snapshot() (procStat, []pgProc, error) {
	pm, err := readProcStat(m.proc, m.postmaster)
	if err != nil || pm.start != m.pmStart {
		return pm, nil, fmt.Errorf("the postmaster (pid %d) is gone: PostgreSQL restarted (%v)", m.postmaster, err)
	}
	ents, err := os.ReadDir(m.proc)
	if err != nil {
		return pm, nil, fmt.Errorf("pg cpu meter: %w", err)
	}
	var out []pgProc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := readProcStat(m.proc, pid)
		if err != nil || st.ppid != m.postmaster {
			continue // gone meanwhile, or not the cluster's
		}
		title, _ := readTitle(m.proc, pid, m.clusterName)
		out = append(out, pgProc{pid: pid, start: st.start, cpu: onCPU(m.proc, pid, st.own) + st.children, title: title})
	}
	// The postmaster's own time, apart from its reaped children's.
	out = append(out, pgProc{pid: m.postmaster, start: pm.start, cpu: onCPU(m.proc, m.postmaster, pm.own)})
	return pm, out, nil
}

// onCPU is how long a PostgreSQL process (one thread each) has run, in
// seconds: the scheduler's own count in nanoseconds (/proc/<pid>/schedstat)
// where the kernel keeps one, else ticks, the utime + stime read. Ticks are
// samples (a process is charged the whole 10 ms tick it is running at) and
// the bench's windows are a few seconds of some twenty backends: the
// round trip's PostgreSQL CPU, a difference of two windows, moved by a
// millisecond in either direction between runs of the same code.
func onCPU(proc string, pid int, ticks float64) float64 {
	raw, err := os.ReadFile(filepath.Join(proc, strconv.Itoa(pid), "schedstat"))
	if err != nil {
		return ticks
	}
	f := strings.Fields(string(raw))
	if len(f) == 0 {
		return ticks
	}
	ns, err := strconv.ParseUint(f[0], 10, 64)
	if err != nil {
		return ticks
	}
	return float64(ns) / 1e9
}

// benchBackends are the pids of procs that work for the bench's databases:
// their client backends and those backends' parallel workers.
func (m *PGMeter) benchBackends(procs []pgProc) map[int]bool {
	out := map[int]bool{}
	for _, p := range procs {
		if f := strings.Fields(p.title); len(f) >= 3 && !pgAuxTitle(p.title) && slices.Contains(m.databases, f[1]) {
			out[p.pid] = true
		}
	}
	for _, p := range procs {
		if leader, ok := strings.CutPrefix(p.title, "parallel worker for PID "); ok {
			if pid, err := strconv.Atoi(strings.Fields(leader + " x")[0]); err == nil && out[pid] {
				out[p.pid] = true
			}
		}
	}
	return out
}

// pgHelpers are the titles of the cluster's shared helpers, without PostgreSQL
// ≤ 10's " process" suffix ("writer", "wal writer": PostgreSQL ≤ 10's names).
var pgHelpers = []string{"walwriter", "wal writer", "checkpointer", "background writer", "writer",
	"autovacuum launcher", "logical replication launcher", "stats collector"}

// helper reports whether title is a shared helper that works for the bench.
func (m *PGMeter) helper(title string) bool {
	t := strings.TrimSuffix(title, " process")
	if slices.Contains(pgHelpers, t) || strings.HasPrefix(t, "io worker") {
		return true
	}
	if rest, ok := strings.CutPrefix(t, "autovacuum worker"); ok {
		// The title names its database unless update_process_title is off.
		db := strings.Fields(strings.TrimPrefix(strings.TrimSpace(rest), "process"))
		return len(db) == 0 || slices.Contains(m.databases, db[0])
	}
	return false
}

// pgAuxTitle reports whether title is a process of the cluster's own rather
// than a client backend (whose title starts with its user name).
func pgAuxTitle(title string) bool {
	for _, p := range []string{"walsender", "wal sender", "autovacuum", "parallel worker", "logical replication", "io worker", "background writer", "checkpointer", "walwriter", "wal writer", "stats collector", "archiver", "logger", "startup", "walreceiver", "wal receiver", "walsummarizer"} {
		if title == p || strings.HasPrefix(title, p+" ") {
			return true
		}
	}
	return false
}

// readTitle is a child's process title without "postgres: " and the cluster's
// name; ok is false for a process that set none (the postmaster, a child just forked).
func readTitle(proc string, pid int, cluster string) (string, bool) {
	raw, err := os.ReadFile(filepath.Join(proc, strconv.Itoa(pid), "cmdline"))
	if err != nil {
		return "", false
	}
	// The title overwrites argv, padded with NULs.
	t := strings.TrimSpace(strings.ReplaceAll(string(raw), "\x00", " "))
	t, ok := strings.CutPrefix(t, "postgres: ")
	if ok && cluster != "" {
		t, ok = strings.CutPrefix(t, cluster+": ")
	}
	if !ok {
		return "", false
	}
	return t, true
}

// procStat is what the bench reads of /proc/<pid>/stat; CPU in seconds.
type procStat struct {
	comm     string
	ppid     int
	own      float64 // utime + stime
	children float64 // cutime + cstime: waited-for children
	start    uint64  // starttime: tells a reused pid from the process seen before
}

func readProcStat(proc string, pid int) (procStat, error) {
	raw, err := os.ReadFile(filepath.Join(proc, strconv.Itoa(pid), "stat"))
	if err != nil {
		return procStat{}, err
	}
	// "pid (comm) state ppid …": comm may hold spaces and parentheses.
	s := string(raw)
	i, j := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if i < 0 || j < i {
		return procStat{}, fmt.Errorf("%s/%d/stat: %q", proc, pid, s)
	}
	f := strings.Fields(s[j+1:])
	if len(f) < 20 {
		return procStat{}, fmt.Errorf("%s/%d/stat: %d fields", proc, pid, len(f))
	}
	// Fields from 3 (state) on; utime, stime, cutime, cstime are fields 14-17,
	// starttime 22. USER_HZ is 100 on Linux.
	n := func(k int) float64 { v, _ := strconv.ParseFloat(f[k-3], 64); return v / 100 }
	st := procStat{comm: s[i+1 : j], own: n(14) + n(15), children: n(16) + n(17)}
	st.ppid, _ = strconv.Atoi(f[4-3])
	st.start, _ = strconv.ParseUint(f[22-3], 10, 64)
	return st, nil
}
