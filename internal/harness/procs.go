package harness

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"gopkg.in/yaml.v3"
)

// FleetConfig is what the harness sets in the aetherium.yaml of the processes it
// starts; zero fields keep the product defaults.
type FleetConfig struct {
	RedisURL    string
	DatabaseURL string
	Workspaces  string
	Templates   string
	Permissions string
	APIAddr     string
	BodyLimit   int
	// MaxRunsInFlight is api.max_runs_in_flight (0: the product default).
	MaxRunsInFlight int
	// Worker knobs.
	Concurrency       int
	ScriptLatency     time.Duration
	ShutdownTimeout   time.Duration
	StepLease         time.Duration
	TaskCheckInterval time.Duration
	MaxRetry          int
	// SchedulerPeriod is the maintenance tick.
	SchedulerPeriod time.Duration
	// StuckAfter is scheduler.stuck_after: runs with no event for this long fail
	// as stuck (the recovery of runs whose tasks were lost).
	StuckAfter time.Duration
	// ResumeAfter is scheduler.resume_after: running runs with no sign of life
	// for this long are woken (the recovery of runs whose step task was lost).
	ResumeAfter time.Duration
	// Sections are more keys of the config, by section (worker, llm, ...),
	// merged over the ones above.
	Sections map[string]map[string]any
}

// Write renders the config as an aetherium.yaml at path. Metrics listeners are off
// (several processes share the machine) and run_shell gets the local executor (no
// workload here runs commands, and the per-run container cleanup would otherwise
// put the Docker engine in the measurements).
func (c FleetConfig) Write(path string) error {
	worker := map[string]any{"metrics_addr": ""}
	set := func(m map[string]any, k string, v any, zero bool) {
		if !zero {
			m[k] = v
		}
	}
	set(worker, "concurrency", c.Concurrency, c.Concurrency == 0)
	set(worker, "script_latency", c.ScriptLatency.String(), c.ScriptLatency == 0)
	set(worker, "shutdown_timeout", c.ShutdownTimeout.String(), c.ShutdownTimeout == 0)
	set(worker, "step_lease", c.StepLease.String(), c.StepLease == 0)
	set(worker, "task_check_interval", c.TaskCheckInterval.String(), c.TaskCheckInterval == 0)
	set(worker, "max_retry", c.MaxRetry, c.MaxRetry == 0)
	sched := map[string]any{"metrics_addr": ""}
	set(sched, "period", c.SchedulerPeriod.String(), c.SchedulerPeriod == 0)
	set(sched, "stuck_after", c.StuckAfter.String(), c.StuckAfter == 0)
	set(sched, "resume_after", c.ResumeAfter.String(), c.ResumeAfter == 0)
	api := map[string]any{}
	set(api, "addr", c.APIAddr, c.APIAddr == "")
	set(api, "body_limit", c.BodyLimit, c.BodyLimit == 0)
	set(api, "max_runs_in_flight", c.MaxRunsInFlight, c.MaxRunsInFlight == 0)
	doc := map[string]any{
		"redis_url": c.RedisURL, "database_url": c.DatabaseURL, "workspaces": c.Workspaces, "templates": c.Templates,
		"worker": worker, "scheduler": sched, "api": api,
		"security": map[string]any{"permissions_file": c.Permissions},
		"sandbox":  map[string]any{"kind": "local", "allow_local": true},
	}
	for name, keys := range c.Sections {
		sec, _ := doc[name].(map[string]any)
		if sec == nil {
			sec = map[string]any{}
		}
		for k, v := range keys {
			sec[k] = v
		}
		doc[name] = sec
	}
	raw, err := yaml.Marshal(doc)
	if err != nil {
		return err
	}
	return os.WriteFile(path, raw, 0o644)
}

// Proc is one aetherium process (api, worker or scheduler).
type Proc struct {
	Role string
	Log  string
	cmd  *exec.Cmd
	done chan struct{}
	mu   sync.Mutex
	err  error
}

// StartProc runs `bin role` with AETHERIUM_CONFIG=config, its output in logPath.
// AETHERIUM_* variables of this process are not passed on: the config file decides,
// with env (KEY=value) on top.
func StartProc(bin, role, config, logPath string, env ...string) (*Proc, error) {
	return startProc(nil, bin, role, config, logPath, env...)
}

// startProc is StartProc with the command run through prefix (e.g. ip netns
// exec, which execs the program: the process is still the binary's).
func startProc(prefix []string, bin, role, config, logPath string, env ...string) (*Proc, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	argv := append(append(append([]string{}, prefix...), bin), role)
	cmd := exec.Command(argv[0], argv[1:]...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AETHERIUM_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "AETHERIUM_CONFIG="+config, "AETHERIUM_LOG_LEVEL=info")
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdout, cmd.Stderr = f, f
	// Its own process group: a Ctrl-C of the harness is the harness's to handle.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", role, err)
	}
	p := &Proc{Role: role, Log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		f.Close()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(p.done)
	}()
	return p, nil
}

// Pid is the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Exited reports whether the process has ended, and how.
func (p *Proc) Exited() (bool, error) {
	select {
	case <-p.done:
		p.mu.Lock()
		defer p.mu.Unlock()
		return true, p.err
	default:
		return false, nil
	}
}

// Kill sends SIGKILL and waits for the process to be gone.
func (p *Proc) Kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Pause stops the process in its tracks (SIGSTOP), as a long GC pause or a frozen
// VM would; Resume lets it go on (SIGCONT).
func (p *Proc) Pause() { _ = p.cmd.Process.Signal(syscall.SIGSTOP) }

// Resume continues a paused process.
func (p *Proc) Resume() { _ = p.cmd.Process.Signal(syscall.SIGCONT) }

// Stop sends SIGTERM (graceful shutdown) and waits up to timeout before SIGKILL.
func (p *Proc) Stop(timeout time.Duration) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.Kill()
	}
}

// WaitLog waits until the process's log contains marker (its start-up line).
func (p *Proc) WaitLog(marker string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		raw, _ := os.ReadFile(p.Log)
		if bytes.Contains(raw, []byte(marker)) {
			return nil
		}
		if exited, err := p.Exited(); exited {
			return fmt.Errorf("%s exited before %q (%v); log %s:\n%s", p.Role, marker, err, p.Log, tail(raw, 2000))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: no %q after %s; log %s:\n%s", p.Role, marker, timeout, p.Log, tail(raw, 2000))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// LogLines returns the lines of the process's log that contain s.
func (p *Proc) LogLines(s string) []string {
	f, err := os.Open(p.Log)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		if strings.Contains(sc.Text(), s) {
			out = append(out, sc.Text())
		}
	}
	return out
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// StartWorker starts a worker process and waits until it takes tasks.
func StartWorker(bin, config, logPath string, env ...string) (*Proc, error) {
	return StartWorkerVia(nil, bin, config, logPath, env...)
}

// StartWorkerVia is StartWorker with the command run through prefix (Netns.Exec:
// a worker in a network namespace of its own).
func StartWorkerVia(prefix []string, bin, config, logPath string, env ...string) (*Proc, error) {
	p, err := startProc(prefix, bin, "worker", config, logPath, env...)
	if err != nil {
		return nil, err
	}
	if err := p.WaitLog(`"worker started"`, 60*time.Second); err != nil {
		p.Kill()
		return nil, err
	}
	return p, nil
}

// StartScheduler starts a scheduler process.
func StartScheduler(bin, config, logPath string) (*Proc, error) {
	p, err := StartProc(bin, "scheduler", config, logPath)
	if err != nil {
		return nil, err
	}
	if err := p.WaitLog(`"scheduler started"`, 60*time.Second); err != nil {
		p.Kill()
		return nil, err
	}
	return p, nil
}

// StartAPI starts an api process listening on addr and waits for /healthz.
func StartAPI(bin, config, logPath, addr string) (*Proc, error) {
	p, err := StartProc(bin, "api", config, logPath)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/healthz", nil)
		resp, err := http.DefaultClient.Do(req)
		cancel()
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return p, nil
			}
		}
		if exited, perr := p.Exited(); exited {
			raw, _ := os.ReadFile(logPath)
			return nil, fmt.Errorf("api exited (%v); log:\n%s", perr, tail(raw, 2000))
		}
		if time.Now().After(deadline) {
			p.Kill()
			return nil, fmt.Errorf("api on %s did not answer /healthz: %v", addr, err)
		}
		time.Sleep(30 * time.Millisecond)
	}
}

// Memory is a process's resident memory from /proc/<pid>/status, in KiB.
type Memory struct {
	RSS, HWM int64
}

// ReadMemory reads VmRSS and VmHWM (peak RSS) of pid.
func ReadMemory(pid int) (Memory, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return Memory{}, err
	}
	var m Memory
	for _, l := range strings.Split(string(raw), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		n, _ := strconv.ParseInt(f[0], 10, 64)
		switch k {
		case "VmRSS":
			m.RSS = n
		case "VmHWM":
			m.HWM = n
		}
	}
	return m, nil
}

// CPUSeconds is the user+system CPU time pid and its waited-for children have
// used: a worker's short-lived children (mkfs.ext4 once took more CPU than the
// worker itself) would otherwise show up as "other processes".
func CPUSeconds(pid int) float64 {
	st, err := readProcStat("/proc", pid)
	if err != nil {
		return 0
	}
	return st.own + st.children
}

// PidsNamed lists the processes whose command name is name.
func PidsNamed(name string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		if err == nil && strings.TrimSpace(string(comm)) == name {
			out = append(out, pid)
		}
	}
	return out
}

// CPUMeter measures the CPU seconds of groups of processes over an interval. Groups
// given by name are re-listed at the end; a process that exited meanwhile is
// not counted. PostgreSQL is a group of its own (PGMeter): its backends come and
// go, and only the bench's share of a shared cluster is the bench's.
type CPUMeter struct {
	start   time.Time
	base    map[int]float64
	machine float64
	groups  map[string]func() []int
	ordered []string
	pg      *PGWindow
}

// machineBusy is the CPU seconds the whole machine has spent outside idle and iowait.
func machineBusy() float64 {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	f := strings.Fields(line)
	busy := 0.0
	for i, v := range f[1:] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		n, _ := strconv.ParseFloat(v, 64)
		busy += n
	}
	return busy / 100
}

// NewCPUMeter starts measuring the groups and, when pg is not nil, the
// PostgresGroup by pg.
func NewCPUMeter(groups map[string]func() []int, order []string, pg *PGMeter) *CPUMeter {
	m := &CPUMeter{start: time.Now(), base: map[int]float64{}, groups: groups, ordered: order, machine: machineBusy()}
	if pg != nil {
		m.pg = pg.Start()
	}
	for _, g := range groups {
		for _, pid := range g() {
			m.base[pid] = CPUSeconds(pid)
		}
	}
	return m
}

// CPUUse is CPU seconds per group over the measured wall time.
type CPUUse struct {
	Wall   float64            `json:"wall_s"`
	Groups map[string]float64 `json:"cpu_s"`
	// Machine is the CPU time of every process on the machine.
	Machine float64 `json:"machine_cpu_s"`
	// Postgres is the PostgresGroup's breakdown, or why it was not measured
	// (then Groups has no PostgresGroup).
	Postgres *PGCPU   `json:"postgres,omitempty"`
	Order    []string `json:"-"`
}

// Stop returns the CPU seconds each group used since NewCPUMeter.
func (m *CPUMeter) Stop() CPUUse {
	u := CPUUse{Wall: time.Since(m.start).Seconds(), Groups: map[string]float64{}, Order: m.ordered, Machine: machineBusy() - m.machine}
	for name, g := range m.groups {
		total := 0.0
		for _, pid := range g() {
			total += CPUSeconds(pid) - m.base[pid]
		}
		u.Groups[name] = total
	}
	if m.pg != nil {
		p := m.pg.Stop()
		u.Postgres = &p
		if p.Unavailable == "" {
			u.Groups[PostgresGroup] = p.Counted()
		}
	}
	return u
}

// String renders "bench 0.6 cores, postgres 0.9 cores (…), …, other processes 0.1 cores".
func (u CPUUse) String() string {
	var parts []string
	wall := max(u.Wall, 1e-9)
	ours := 0.0
	for _, name := range u.Order {
		s := u.Groups[name]
		ours += s
		if name == PostgresGroup && u.Postgres != nil {
			parts = append(parts, u.Postgres.describe(wall))
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %.1f cores", name, s/wall))
	}
	parts = append(parts, fmt.Sprintf("other processes %.1f cores", max(u.Machine-ours, 0)/wall))
	return strings.Join(parts, ", ")
}
