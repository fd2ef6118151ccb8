package fleettest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aetherium-engine/aetherium/internal/testlog"

	"github.com/hibiken/asynq"

	"github.com/aetherium-engine/aetherium/api"
	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/egress"
	"github.com/aetherium-engine/aetherium/fleet"
	"github.com/aetherium-engine/aetherium/internal/testinfra"
	"github.com/aetherium-engine/aetherium/wsquota"
)

// Options adjust a test fleet.
type Options struct {
	// Configure edits the config before the fleet opens.
	Configure func(*config.Config)
	// Fleet options (models, tool middleware).
	Fleet fleet.Options
	// NoWorker starts only the API (tests that drive workers themselves).
	NoWorker bool
	// Log replaces the test logger.
	Log *slog.Logger
}

// Fleet is a running in-process fleet on private Redis and Postgres.
type Fleet struct {
	*fleet.Fleet
	URL string // API base URL
	// MCPURL is the MCP listener's base URL (profiles at MCPURL+"/mcp/<name>"),
	// empty when the config names no MCP profile.
	MCPURL string
	// API is the in-process API server.
	API *api.Server
	t   testing.TB
	// client checks every answer against the OpenAPI document.
	client *http.Client
	// StopWorker stops the worker role (graceful, like SIGTERM); nil with NoWorker.
	StopWorker func()
	// opts and log open the fleet's further API processes (StartAPI) as the
	// first was opened: the same catalog (ExtraTools) and log.
	opts Options
	log  *slog.Logger
	// apis are the further API processes' stores: Transactions resets their
	// pools too, so their backends publish what they did.
	apisMu sync.Mutex
	apis   []*fleet.Fleet
}

// Config returns a config on a fresh database and a private Redis.
func Config(t testing.TB) config.Config {
	t.Helper()
	cfg := config.Default()
	cfg.DatabaseURL = Database(t)
	cfg.RedisURL = Redis(t)
	cfg.Workspaces = t.TempDir()
	// Quota workspaces are mounted filesystems on loop devices: they must go before
	// the directory can (cleanups run last-registered first, so this runs before
	// TempDir's removal and after the fleet that was started later has stopped).
	ws := cfg.Workspaces
	t.Cleanup(func() {
		if err := wsquota.UnmountAll(ws); err != nil {
			t.Errorf("unmount the test's workspaces: %v", err)
		}
	})
	cfg.Templates = RepoPath(t, "templates")
	cfg.API.Addr = "127.0.0.1:0"
	cfg.API.MCPAddr = "127.0.0.1:0"
	cfg.Worker.TaskCheckInterval = 20 * time.Millisecond
	cfg.Worker.ShutdownTimeout = 2 * time.Second
	cfg.Worker.Concurrency = 8
	cfg.Worker.MetricsAddr, cfg.Scheduler.MetricsAddr = "", ""
	cfg.Security.PermissionsFile = RepoPath(t, "config/permissions.yaml")
	// A test is one user who submits and decides, as under `aetherium dev`; the
	// tests of the self-approval rule turn it off.
	cfg.Security.AllowSelfApproval = true
	return cfg
}

// RepoPath returns an absolute path inside the repository (tests run in their
// package directory).
func RepoPath(t testing.TB, rel string) string {
	t.Helper()
	root, err := testinfra.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, rel)
}

// Logger writes slog output to the test log (testlog.Logger, which tests that
// need no fleet import directly).
func Logger(t testing.TB) *slog.Logger { return testlog.Logger(t) }

// Start runs api + worker in-process on private infrastructure.
func Start(t testing.TB, opts Options) *Fleet {
	t.Helper()
	cfg := Config(t)
	if opts.Configure != nil {
		opts.Configure(&cfg)
	}
	return StartWith(t, cfg, opts)
}

// StartWith runs api + worker with an explicit config.
func StartWith(t testing.TB, cfg config.Config, opts Options) *Fleet {
	t.Helper()
	ctx := context.Background()
	if opts.Fleet.Executor == nil {
		// A container per run is costly; tests that run commands pass an executor.
		opts.Fleet.NoSandbox = true
	}
	log := opts.Log
	if log == nil {
		log = Logger(t)
	}
	f, err := fleet.Open(ctx, cfg, log, opts.Fleet)
	if err != nil {
		t.Fatalf("open fleet: %v", err)
	}
	t.Cleanup(f.Close)
	srv := f.API()
	ln, err := net.Listen("tcp", cfg.API.Addr)
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	f.RegisterEndpoint(ctx, egress.EndpointAPI, ln.Addr().String())
	go func() { _ = srv.App.Listener(ln) }()
	t.Cleanup(func() { _ = srv.App.ShutdownWithTimeout(2 * time.Second); _ = srv.Close() })
	tf := &Fleet{Fleet: f, URL: "http://" + ln.Addr().String(), API: srv, t: t, client: Client(t, nil), opts: opts, log: log}
	if mcfg := cfg.MCPConfig(); mcfg.Enabled() {
		tf.MCPURL, _ = startMCP(t, f, mcfg.Addr)
	}
	if !opts.NoWorker {
		tf.StopWorker = tf.StartWorker()
	}
	return tf
}

// startMCP serves f's MCP server on addr until the test ends or stop is
// called (idempotent).
func startMCP(t testing.TB, f *fleet.Fleet, addr string) (url string, stop func()) {
	t.Helper()
	msrv, err := f.MCP()
	if err != nil {
		t.Fatalf("mcp server: %v", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("mcp listen: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.RegisterEndpoint(ctx, egress.EndpointMCP, ln.Addr().String())
	done := make(chan struct{})
	go func() { defer close(done); _ = msrv.Serve(ctx, ln, time.Second) }()
	stop = func() { cancel(); <-done }
	t.Cleanup(stop)
	return "http://" + ln.Addr().String(), stop
}

// APIProcess is one more API role of a test fleet (StartAPI).
type APIProcess struct {
	// Fleet is the process's own wiring (fleet.OpenAPI): its store pool, Redis
	// clients, events hub, approvals and catalog.
	*fleet.Fleet
	URL    string // its API's base URL
	MCPURL string // its MCP listener's base URL
	// Stop stops both listeners and closes the process (idempotent; also at cleanup).
	Stop func()
}

// StartAPI starts a second API role for the fleet, as another `aetherium api`
// process on the same PostgreSQL and Redis would be: opened by fleet.OpenAPI
// (the role's own constructor, so it shares no in-memory state with the
// fleet: not the events hub, not the MCP server's caches), its API and its MCP
// server each on their own 127.0.0.1 port. For the tests of what any API
// process may serve (docs/mcp.md, "Two protocol generations on one endpoint").
func (f *Fleet) StartAPI() *APIProcess {
	f.t.Helper()
	return f.StartAPIWith(nil)
}

// StartAPIWith is StartAPI with the fleet's configuration changed by
// configure first (nil: unchanged): another API process configured otherwise,
// such as one whose tokens were revoked or whose keys differ.
func (f *Fleet) StartAPIWith(configure func(*config.Config)) *APIProcess {
	f.t.Helper()
	cfg := f.Cfg
	cfg.API.Tokens = slices.Clone(cfg.API.Tokens)
	if configure != nil {
		configure(&cfg)
	}
	cfg.API.Addr, cfg.API.MCPAddr = "127.0.0.1:0", "127.0.0.1:0"
	ctx, cancel := context.WithCancel(context.Background())
	af, err := fleet.OpenAPI(ctx, cfg, f.log.With("api", "second"), f.opts.Fleet)
	if err != nil {
		cancel()
		f.t.Fatalf("open a second api role: %v", err)
	}
	// As RunAPI in a process without a worker: it watches the permissions file itself.
	if err := af.WatchRules(ctx); err != nil {
		cancel()
		af.Close()
		f.t.Fatalf("second api role: watch rules: %v", err)
	}
	srv := af.API()
	ln, err := net.Listen("tcp", cfg.API.Addr)
	if err != nil {
		cancel()
		af.Close()
		f.t.Fatalf("second api role: listen: %v", err)
	}
	af.RegisterEndpoint(ctx, egress.EndpointAPI, ln.Addr().String())
	go func() { _ = srv.App.Listener(ln) }()
	p := &APIProcess{Fleet: af, URL: "http://" + ln.Addr().String()}
	var stopMCP func()
	if mcfg := cfg.MCPConfig(); mcfg.Enabled() {
		p.MCPURL, stopMCP = startMCP(f.t, af, mcfg.Addr)
	}
	f.apisMu.Lock()
	f.apis = append(f.apis, af)
	f.apisMu.Unlock()
	var once sync.Once
	p.Stop = func() {
		once.Do(func() {
			if stopMCP != nil {
				stopMCP()
			}
			_ = srv.App.ShutdownWithTimeout(2 * time.Second)
			_ = srv.Close()
			cancel()
			f.apisMu.Lock()
			f.apis = slices.DeleteFunc(f.apis, func(x *fleet.Fleet) bool { return x == af })
			f.apisMu.Unlock()
			af.Close()
		})
	}
	f.t.Cleanup(p.Stop)
	return p
}

// StartWorker starts one more worker server on the fleet's Redis; the returned func
// stops it gracefully (idempotent).
func (f *Fleet) StartWorker() func() {
	f.t.Helper()
	srv, mux, cancel := f.WorkerServer()
	if err := srv.Start(mux); err != nil {
		f.t.Fatalf("start worker: %v", err)
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		srv.Stop()
		timer := time.AfterFunc(f.Cfg.Worker.ShutdownTimeout, cancel)
		srv.Shutdown()
		timer.Stop()
		cancel()
	}
	f.t.Cleanup(stop)
	return stop
}

// Inspector returns an asynq inspector on the fleet's Redis.
func (f *Fleet) Inspector() *asynq.Inspector {
	i := asynq.NewInspector(f.RedisOpt)
	f.t.Cleanup(func() { _ = i.Close() })
	return i
}

// Client is an HTTP client for the fleet's API whose every answer is checked
// against the OpenAPI document (Client), failing the test on a mismatch.
func (f *Fleet) Client() *http.Client { return f.client }

// Do sends a request and decodes a JSON answer into out (when non-nil); it returns
// the status code and the raw body. The answer is checked against the OpenAPI
// document.
func (f *Fleet) Do(method, path string, body any, out any) (int, []byte) {
	f.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	case string:
		rd = strings.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			f.t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, f.URL+path, rd)
	if err != nil {
		f.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := f.client.Do(req)
	if err != nil {
		f.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil && len(raw) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			f.t.Fatalf("%s %s: decode %q: %v", method, path, raw, err)
		}
	}
	return resp.StatusCode, raw
}

// Submit posts a run from a template and returns its id.
func (f *Fleet) Submit(template, prompt string, vars map[string]any) string {
	f.t.Helper()
	var out struct {
		RunID string `json:"run_id"`
	}
	code, raw := f.Do("POST", "/api/orchestrator/run-from-template", map[string]any{"template": template, "prompt": prompt, "variables": vars}, &out)
	if code != http.StatusAccepted {
		f.t.Fatalf("submit: HTTP %d: %s", code, raw)
	}
	return out.RunID
}

// SubmitTeam posts a run with an inline team (any JSON-encodable template value).
func (f *Fleet) SubmitTeam(team any, prompt string) string {
	f.t.Helper()
	var out struct {
		RunID string `json:"run_id"`
	}
	code, raw := f.Do("POST", "/api/orchestrator/run", map[string]any{"team": team, "prompt": prompt}, &out)
	if code != http.StatusAccepted {
		f.t.Fatalf("submit: HTTP %d: %s", code, raw)
	}
	return out.RunID
}

// Event is one SSE event as the API sends it.
type Event struct {
	ID    int64           `json:"id"`
	Type  string          `json:"type"`
	Agent string          `json:"agent"`
	Data  json.RawMessage `json:"data"`
}

// Follow reads the run's SSE stream from after until the terminal event (or timeout).
func (f *Fleet) Follow(runID string, after int64, timeout time.Duration) []Event {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", f.URL+"/api/runs/"+runID+"/events", nil)
	if after > 0 {
		req.Header.Set("Last-Event-ID", fmt.Sprint(after))
	}
	resp, err := f.client.Do(req)
	if err != nil {
		f.t.Fatalf("follow: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		raw, _ := io.ReadAll(resp.Body)
		f.t.Fatalf("follow: HTTP %d: %s", resp.StatusCode, raw)
	}
	var out []Event
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 8<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var e Event
		if err := json.Unmarshal([]byte(data), &e); err != nil {
			f.t.Fatalf("follow: bad event %q: %v", data, err)
		}
		out = append(out, e)
		switch e.Type {
		case "run.completed", "run.failed", "run.cancelled":
			return out
		}
	}
	f.t.Fatalf("follow %s: stream ended without a terminal event after %d events (err %v)", runID, len(out), sc.Err())
	return nil
}

// Run is the API's run view.
type Run struct {
	ID         string `json:"id"`
	Status     string `json:"status"`
	Result     string `json:"result"`
	Error      string `json:"error"`
	Reason     string `json:"reason"`
	TokensUsed int64  `json:"tokens_used"`
}

// GetRun fetches a run over the API.
func (f *Fleet) GetRun(id string) Run {
	f.t.Helper()
	var r Run
	code, raw := f.Do("GET", "/api/runs/"+id, nil, &r)
	if code != 200 {
		f.t.Fatalf("get run: HTTP %d: %s", code, raw)
	}
	return r
}

// WaitTerminal polls until the run is terminal.
func (f *Fleet) WaitTerminal(id string, timeout time.Duration) Run {
	f.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		r := f.GetRun(id)
		switch r.Status {
		case "completed", "failed", "cancelled":
			return r
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("run %s still %s after %s", id, r.Status, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
