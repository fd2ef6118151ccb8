package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"gopkg.in/yaml.v3"

	"github.com/aetherium-engine/aetherium/internal/harness"
	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/llm/llmtest"
	"github.com/aetherium-engine/aetherium/templates"
)

// Section 9 (issue 38, long sessions): one run, one agent, Turns model turns,
// each a read_file call whose result is an 8 KiB chunk, against the fake
// OpenAI API with a context window. It measures, per step, the bytes written
// to PostgreSQL and the step's latency, and checks the bounds: no
// request over the window, the run completes, bytes per step at the last turns
// ≤ 1.2 × at turn 10, step latency p50 of the last 50 turns ≤ 1.2 × turns
// 10–60.
//
// How a step is measured: the fake calls the bench's Answer function for
// every model request it accepts. The previous step's saves have committed
// when the next request arrives (the agent saves, runs the tool, saves, then
// asks the model again), so at each request's arrival the bench samples, in
// one query, the WAL insert position (pg_current_wal_insert_lsn) and — when
// pg_stat_statements is loaded — the WAL bytes of the bench database's
// statements. Step t's bytes are the difference between arrival t+1 and
// arrival t; its latency is the time between those arrivals (the fake answers
// at once: no latency configured). On the private PostgreSQL (-long-pg
// private, the default) the cluster's WAL is the bench's alone, and
// pg_stat_statements is preloaded; on the shared one WAL bytes include the
// traffic of everyone else on the server.
//
// Turns are counted from the request itself, not from a counter of calls: each
// chunk begins with a marker line naming its number, and the newest tool
// result in the request names the last chunk read, so the next turn is that
// plus one — whatever compaction did to the older history, and however often
// a request is retried.

const (
	// longModel has no price: on today's main a step whose model call costs
	// more than 2^31 picodollars ($0.0021, ~14k input tokens of gpt-4o-mini)
	// cannot be saved — saveStepSession's `$10 <> 0` makes PostgreSQL type the
	// cost parameter int4 — so a priced model fails the run near turn 7.
	longModel       = "bench-long-32k"
	longChunkBytes  = 8 << 10
	longChunkDir    = "chunks"
	longMarker      = "aetherium-bench long-session chunk "
	longMaxTokens   = 256
	longLatencyWin  = 50
	longBytesWin    = 10
	longProgressGap = 50
)

// LongResult is section 9.
type LongResult struct {
	Turns      int    `json:"turns"`
	ChunkBytes int    `json:"chunk_bytes"`
	Window     int    `json:"context_window_tokens"`
	Enforced   bool   `json:"window_enforced_by_fake"`
	Postgres   string `json:"postgres"`
	// Measure names the per-step byte figure: "pg_stat_statements wal_bytes"
	// or "WAL (pg_current_wal_insert_lsn)".
	Measure   string  `json:"bytes_measure"`
	RunStatus string  `json:"run_status"`
	RunError  string  `json:"run_error,omitempty"`
	Completed bool    `json:"completed"`
	Reached   int     `json:"turns_reached"`
	Seconds   float64 `json:"seconds"`
	// The fake's view.
	Requests         int `json:"requests"`
	Answered         int `json:"answered"`
	OtherStatus      int `json:"other_status"`
	Retries          int `json:"retried_turns"`
	CounterFallbacks int `json:"counter_fallbacks,omitempty"`
	LargestTokens    int `json:"largest_request_tokens"`
	LargestBytes     int `json:"largest_request_bytes"`
	OverWindow       int `json:"requests_over_window"`
	FirstOverWindow  int `json:"first_turn_over_window,omitempty"`
	WindowRefusals   int `json:"window_refusals"`
	// Summaries are the compactions' summary requests; FakeMaxInput the
	// largest input the fake counted (its own count, llm/tokens).
	Summaries    int `json:"summary_requests"`
	FakeMaxInput int `json:"fake_max_input_tokens"`
	// Windows of turns (inclusive) and their figures.
	BytesEarly, BytesLate       [2]int          `json:"-"`
	LatEarly, LatLate           [2]int          `json:"-"`
	BytesEarlyMean              float64         `json:"bytes_per_step_early_mean"`
	BytesLateMean               float64         `json:"bytes_per_step_late_mean"`
	BytesEarlyMedian            float64         `json:"bytes_per_step_early_median"`
	BytesLateMedian             float64         `json:"bytes_per_step_late_median"`
	BytesRatio                  float64         `json:"bytes_ratio"`
	WALEarlyMedian              float64         `json:"wal_bytes_per_step_early_median"`
	WALLateMedian               float64         `json:"wal_bytes_per_step_late_median"`
	LatEarlyP50MS, LatLateP50MS float64         `json:"-"`
	LatRatio                    float64         `json:"latency_ratio"`
	TotalWAL                    int64           `json:"total_wal_bytes"`
	TotalStmtWAL                int64           `json:"total_statement_wal_bytes,omitempty"`
	TopStatements               []LongStatement `json:"top_statements,omitempty"`
	// Steps are the per-turn samples (turn t: the step from request t to t+1).
	Steps []LongStep `json:"steps"`
	Pass  bool       `json:"pass"`
	Fails []string   `json:"fails,omitempty"`
	// LoadAvg is the machine's 1-minute load average at the section's start
	// and end (the latency figures move with other work on the machine).
	LoadAvg [2]string `json:"load_avg"`
}

// LongStep is one step's figures.
type LongStep struct {
	Turn      int     `json:"turn"`
	Tokens    int     `json:"request_tokens"`
	Bytes     int     `json:"request_bytes"`
	WAL       int64   `json:"wal_bytes"`
	StmtWAL   int64   `json:"statement_wal_bytes"`
	LatencyMS float64 `json:"latency_ms"`
}

// LongStatement is one statement's share of the WAL (pg_stat_statements).
type LongStatement struct {
	Query    string `json:"query"`
	Calls    int64  `json:"calls"`
	WALBytes int64  `json:"wal_bytes"`
}

// longSample is what the bench records at a request's arrival.
type longSample struct {
	at      time.Time
	wal     int64
	stmtWAL int64
	tokens  int
	bytes   int
}

// longDriver is the fake's Answer: it reads the turn from the request, records
// the arrival and answers the next read_file call, or the final answer.
type longDriver struct {
	turns  int
	window int
	db     *pgxpool.Pool
	dbName string
	pgss   bool

	mu        sync.Mutex
	seen      map[int]longSample
	maxTurn   int
	retries   int
	fallbacks int
	largestT  int
	largestB  int
	over      int
	firstOver int
	broken    string
	sampleErr error
	// summaries counts the compactions' summary requests.
	summaries int
}

func (d *longDriver) answer(req llmtest.UpstreamRequest) llmtest.UpstreamAnswer {
	if len(req.Tools) == 0 {
		// A compaction's summary request (the engine offers no tools with it).
		d.mu.Lock()
		d.summaries++
		n := d.maxTurn
		d.mu.Unlock()
		return llmtest.UpstreamAnswer{Text: fmt.Sprintf("Read chunk files 1 to %d, one per turn, as asked; each held its marker line. Next: the following chunk.", n)}
	}
	turn, ok, bad := 0, false, ""
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role != "tool" {
			continue
		}
		k, found := chunkOf(req.Messages[i].Text)
		if found {
			turn, ok = k+1, true
		} else {
			bad = truncate(req.Messages[i].Text, 300)
		}
		break
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case ok:
	case bad != "":
		// A tool result without a marker: the read failed. Stop the run
		// rather than loop.
		d.broken = bad
		return llmtest.UpstreamAnswer{Text: "bench: the tool failed: " + bad}
	case d.maxTurn >= 2:
		// No tool result left in the request (compaction dropped even the
		// newest one): fall back on the count.
		d.fallbacks++
		turn = d.maxTurn + 1
	default:
		turn = 1
	}
	if _, dup := d.seen[turn]; dup {
		d.retries++
	} else {
		d.record(turn, req)
	}
	if turn > d.turns {
		return llmtest.UpstreamAnswer{Text: "done."}
	}
	args, _ := json.Marshal(map[string]string{"path": chunkPath(turn)})
	return llmtest.UpstreamAnswer{Tool: "read_file", Args: string(args)}
}

// record samples the WAL at turn's arrival (d.mu held).
func (d *longDriver) record(turn int, req llmtest.UpstreamRequest) {
	s := longSample{at: time.Now(), tokens: promptTokens(req.Body), bytes: len(req.Body)}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var err error
	if d.db == nil { // the unit test's driver
	} else if d.pgss {
		err = d.db.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint,
			COALESCE((SELECT sum(wal_bytes) FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = $1)), 0)::bigint`, d.dbName).Scan(&s.wal, &s.stmtWAL)
	} else {
		err = d.db.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint`).Scan(&s.wal)
	}
	if err != nil && d.sampleErr == nil {
		d.sampleErr = fmt.Errorf("turn %d: WAL sample: %w", turn, err)
	}
	d.seen[turn] = s
	d.maxTurn = max(d.maxTurn, turn)
	if s.tokens > d.largestT {
		d.largestT = s.tokens
	}
	d.largestB = max(d.largestB, s.bytes)
	if d.window > 0 && s.tokens > d.window {
		d.over++
		if d.firstOver == 0 {
			d.firstOver = turn
		}
	}
	if turn%longProgressGap == 0 {
		prev, okp := d.seen[turn-1]
		msg := ""
		if okp {
			msg = fmt.Sprintf("; last step %s WAL, %s", humanBytes(s.wal-prev.wal), s.at.Sub(prev.at).Round(time.Millisecond))
			if d.pgss {
				msg += fmt.Sprintf(", %s by statements", humanBytes(s.stmtWAL-prev.stmtWAL))
			}
		}
		progress("  … long session: turn %d of %d, request %d tokens (%s)%s", turn, d.turns, s.tokens, humanBytes(int64(s.bytes)), msg)
	}
}

// chunkOf reads the chunk number of a tool result.
func chunkOf(text string) (int, bool) {
	i := strings.Index(text, longMarker)
	if i < 0 {
		return 0, false
	}
	rest := text[i+len(longMarker):]
	j := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' })
	if j <= 0 {
		return 0, false
	}
	n, err := strconv.Atoi(rest[:j])
	return n, err == nil
}

func chunkPath(turn int) string { return fmt.Sprintf("%s/c%04d.txt", longChunkDir, turn) }

// chunk is turn's file: the marker line, then base64 of seeded random bytes
// (incompressible, and different for every turn, so neither TOAST's
// compression nor the WAL's full-page images make the history look smaller
// than it is), exactly longChunkBytes long.
func chunk(turn, turns int) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s%d of %d\n", longMarker, turn, turns)
	rng := rand.New(rand.NewPCG(uint64(turn), 38))
	raw := make([]byte, 57)
	for b.Len() < longChunkBytes {
		for i := range raw {
			raw[i] = byte(rng.Uint32())
		}
		b.WriteString(base64.StdEncoding.EncodeToString(raw))
		b.WriteByte('\n')
	}
	return b.Bytes()[:longChunkBytes]
}

// promptTokens counts a request's input tokens by the fake's rule: the
// compacted "tools" and "messages" fields' bytes over four, rounded up.
func promptTokens(body []byte) int {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return (len(body) + 3) / 4
	}
	n := 0
	for _, k := range []string{"tools", "messages"} {
		if raw, ok := m[k]; ok {
			var c bytes.Buffer
			if json.Compact(&c, raw) == nil {
				n += c.Len()
			} else {
				n += len(raw)
			}
		}
	}
	return (n + 3) / 4
}

// longUpstreamConfig is the fake of section 9.
//
// longUpstreamConfig is the fake OpenAI API of section 9: with a window, a
// request over it is answered the provider's real context-length error
// (counted in its stats: windowRefusals).
func longUpstreamConfig(window int, answer func(llmtest.UpstreamRequest) llmtest.UpstreamAnswer) (cfg llmtest.UpstreamConfig, enforced bool) {
	cfg = llmtest.UpstreamConfig{Wire: llmtest.WireOpenAI, Answer: answer,
		// No prompt cache: its bookkeeping of every prefix is not what is measured.
		CacheMinTokens: 1 << 40}
	if window > 0 {
		cfg.ContextWindow = map[string]int{longModel: window}
	}
	return cfg, window > 0
}

// windowRefusals is how many requests the fake refused as over the window.
func windowRefusals(s llmtest.UpstreamStats) int {
	return s.ContextLength
}

// longTeam is one agent that may read files; its model is the fake's (its
// window is llm.windows', writeLongConfig).
func longTeam() templates.Template {
	return templates.Template{
		Name: "long-session-bench", Description: "bench section 9: one long session of read_file turns",
		Model: llm.ModelConfig{Provider: "openai", Model: longModel, MaxTokens: longMaxTokens},
		Supervisor: templates.Node{Name: "reader", Prompt: "Read the chunk files you are asked for, one at a time, then answer done.",
			MCPServers: []string{"workspace"}, Tools: []string{"read_file"}},
		Workers: []templates.Node{},
		Budget:  templates.Budget{MaxTokens: 1 << 50},
	}
}

// writeLongConfig is the harness's config plus worker.max_steps high enough
// for every turn.
//
// The fleet learns the fake model's window from llm.windows.
func writeLongConfig(path string, c harness.FleetConfig, turns, window int) error {
	if err := c.Write(path); err != nil {
		return err
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	doc := map[string]any{}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return err
	}
	w, _ := doc["worker"].(map[string]any)
	if w == nil {
		w = map[string]any{}
	}
	w["max_steps"] = 2*turns + 50
	doc["worker"] = w
	if window > 0 {
		l, _ := doc["llm"].(map[string]any)
		if l == nil {
			l = map[string]any{}
		}
		l["windows"] = map[string]any{"models": map[string]any{longModel: map[string]any{"context": window, "output": longMaxTokens * 4}}}
		doc["llm"] = l
	}
	if raw, err = yaml.Marshal(doc); err != nil {
		return err
	}
	return os.WriteFile(path, raw, 0o644)
}

// longWindows are the turn windows of the figures, scaled down for a short run.
func longWindows(turns int) (bytesEarly, bytesLate, latEarly, latLate [2]int) {
	bytesEarly, bytesLate = [2]int{5, 15}, [2]int{turns - longBytesWin, turns}
	if turns >= 10+2*longLatencyWin+10 {
		return bytesEarly, bytesLate, [2]int{10, 10 + longLatencyWin}, [2]int{turns - longLatencyWin, turns}
	}
	w := max((turns-10)/3, 1)
	return bytesEarly, bytesLate, [2]int{10, 10 + w}, [2]int{turns - w, turns}
}

// longDB is the PostgreSQL of section 9 and the API on it.
type longDB struct {
	kind   string
	dbURL  string
	dbName string
	db     *pgxpool.Pool
	client *harness.Client
	pgss   bool
	close  []func()
}

func (l *longDB) Close() {
	for i := len(l.close) - 1; i >= 0; i-- {
		l.close[i]()
	}
}

// openLongDB starts the private PostgreSQL (pg_stat_statements preloaded) with
// an API process on it, or uses the bench's shared database and API.
func openLongDB(ctx context.Context, e *env) (*longDB, error) {
	l := &longDB{kind: e.o.longPG}
	if l.kind == "shared" {
		l.dbURL, l.dbName, l.db, l.client = e.dbURL, e.o.database, e.db, e.client
		var n int
		if err := e.db.QueryRow(ctx, `SELECT count(*) FROM pg_settings WHERE name = 'shared_preload_libraries' AND setting LIKE '%pg_stat_statements%'`).Scan(&n); err == nil && n > 0 {
			if _, err := e.db.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err == nil {
				l.pgss = true
			}
		}
		return l, nil
	}
	if l.kind != "private" {
		return nil, fmt.Errorf("-long-pg %q: want private or shared", l.kind)
	}
	// Not under e.tmp: the postgres user must reach it, and MkdirTemp makes
	// e.tmp 0700.
	dir, err := os.MkdirTemp("", "aetherium-bench-long-pg-")
	if err != nil {
		return nil, err
	}
	l.close = append(l.close, func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		l.Close()
		return nil, err
	}
	progress("long session: starting a private PostgreSQL with pg_stat_statements")
	pg, err := harness.StartPrivatePostgres(dir)
	if err != nil {
		l.Close()
		return nil, err
	}
	l.close = append(l.close, pg.Stop)
	conn, err := pgxpool.New(ctx, pg.Admin)
	if err != nil {
		l.Close()
		return nil, err
	}
	_, err = conn.Exec(ctx, `ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'`)
	conn.Close()
	if err != nil {
		l.Close()
		return nil, err
	}
	if err := pg.Restart(ctx, 0); err != nil {
		l.Close()
		return nil, err
	}
	l.dbName = "aetherium_bench_long"
	if l.dbURL, err = harness.CreateDatabase(ctx, pg.Admin, l.dbName); err != nil {
		l.Close()
		return nil, err
	}
	if l.db, err = pgxpool.New(ctx, l.dbURL); err != nil {
		l.Close()
		return nil, err
	}
	l.close = append(l.close, l.db.Close)
	if _, err := l.db.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		l.Close()
		return nil, fmt.Errorf("pg_stat_statements: %w", err)
	}
	l.pgss = true
	addr, err := freeAddr()
	if err != nil {
		l.Close()
		return nil, err
	}
	cfgPath := filepath.Join(e.tmp, "aetherium-long-api.yaml")
	c := longFleetConfig(e, l.dbURL)
	c.APIAddr = addr
	if err := writeLongConfig(cfgPath, c, e.o.longTurns, e.o.longWindow); err != nil {
		l.Close()
		return nil, err
	}
	api, err := harness.StartAPI(e.bin, cfgPath, filepath.Join(e.tmp, "api-long.log"), addr)
	if err != nil {
		l.Close()
		return nil, err
	}
	l.close = append(l.close, func() { api.Stop(10 * time.Second) })
	l.client = harness.NewClient("http://" + addr)
	return l, nil
}

func longFleetConfig(e *env, dbURL string) harness.FleetConfig {
	return harness.FleetConfig{Concurrency: 4, RedisURL: e.redisURL, DatabaseURL: dbURL, Workspaces: filepath.Join(e.tmp, "workspaces"),
		Templates: filepath.Join(e.root, "templates"), Permissions: filepath.Join(e.root, "config", "permissions.yaml"), ShutdownTimeout: 5 * time.Second}
}

func benchLong(ctx context.Context, e *env, res *Result) error {
	o := e.o
	r := &res.Long
	*r = LongResult{Turns: o.longTurns, ChunkBytes: longChunkBytes, Window: o.longWindow, Postgres: o.longPG}
	r.BytesEarly, r.BytesLate, r.LatEarly, r.LatLate = longWindows(o.longTurns)
	start := time.Now()
	r.LoadAvg[0] = loadAvg()

	l, err := openLongDB(ctx, e)
	if err != nil {
		return err
	}
	defer l.Close()
	r.Measure = "WAL (pg_current_wal_insert_lsn)"
	if l.pgss {
		r.Measure = "pg_stat_statements wal_bytes"
	}

	d := &longDriver{turns: o.longTurns, window: o.longWindow, db: l.db, dbName: l.dbName, pgss: l.pgss, seen: map[int]longSample{}}
	ucfg, enforced := longUpstreamConfig(o.longWindow, d.answer)
	r.Enforced = enforced
	up, err := llmtest.StartUpstream(ucfg)
	if err != nil {
		return err
	}
	defer up.Close()

	// Submitted with no worker running, so its workspace holds the chunks
	// before the first step.
	id, err := l.client.SubmitTeam(ctx, longTeam(), fmt.Sprintf("Read %s/c0001.txt to c%04d.txt in turn, then answer done.", longChunkDir, o.longTurns))
	if err != nil {
		return err
	}
	ws := filepath.Join(e.tmp, "workspaces", id, longChunkDir)
	if err := os.MkdirAll(ws, 0o755); err != nil {
		return err
	}
	for t := 1; t <= o.longTurns; t++ {
		if err := os.WriteFile(filepath.Join(ws, filepath.Base(chunkPath(t))), chunk(t, o.longTurns), 0o644); err != nil {
			return err
		}
	}

	cfgPath := filepath.Join(e.tmp, "aetherium-long.yaml")
	if err := writeLongConfig(cfgPath, longFleetConfig(e, l.dbURL), o.longTurns, o.longWindow); err != nil {
		return err
	}
	// Plain-directory workspaces (no quota): the bench wrote the chunks into
	// the run's directory already.
	w, err := harness.StartWorker(e.bin, cfgPath, filepath.Join(e.tmp, "worker-long.log"),
		"AETHERIUM_OPENAI_BASE_URL="+up.URL, "AETHERIUM_OPENAI_API_KEY=bench-key", "AETHERIUM_OPENAI_MODEL="+longModel,
		"AETHERIUM_WORKSPACE_QUOTA=0")
	if err != nil {
		return err
	}
	procs := []*harness.Proc{w}
	defer keepLogs(e, "long-logs", procs)
	defer stopWorkers(procs)

	progress("long session: %d turns of %d-byte read_file results, window %d tokens (enforced by the fake: %v), PostgreSQL %s, per-step bytes from %s",
		o.longTurns, longChunkBytes, o.longWindow, enforced, l.kind, r.Measure)
	counts, err := harness.WaitTerminal(ctx, l.db, []string{id}, o.longTimeout, nil)
	timedOut := errors.Is(err, harness.ErrTimeout)
	if err != nil && !timedOut {
		return err
	}
	if timedOut {
		progress("long session: %v", err)
		r.RunStatus = "timed out"
	}
	r.Seconds = time.Since(start).Seconds()
	var status, reason, msg string
	_ = l.db.QueryRow(ctx, `SELECT status, COALESCE(reason, ''), COALESCE(error, '') FROM runs WHERE id = $1`, id).Scan(&status, &reason, &msg)
	if !timedOut {
		r.RunStatus = status
	}
	if reason != "" || msg != "" {
		r.RunError = strings.TrimSpace(reason + " " + truncate(msg, 300))
	}
	_ = counts
	r.LoadAvg[1] = loadAvg()
	up.Close()
	s := up.Stats()
	r.Requests, r.Answered = s.Requests, s.Answered
	r.OtherStatus = s.Requests - s.Answered
	r.WindowRefusals = windowRefusals(s)
	r.FakeMaxInput = s.Models[longModel].MaxInputTokens
	if l.pgss {
		r.TopStatements, _ = topStatements(ctx, l.db, l.dbName)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.sampleErr != nil {
		progress("long session: %v", d.sampleErr)
	}
	r.Retries, r.CounterFallbacks = d.retries, d.fallbacks
	r.LargestTokens, r.LargestBytes, r.OverWindow, r.FirstOverWindow = d.largestT, d.largestB, d.over, d.firstOver
	r.Summaries = d.summaries
	// Turn t is done when request t+1 arrives: the last request seen began a
	// turn that did not end, unless it asked for the final answer.
	r.Reached = max(min(d.maxTurn-1, o.longTurns), 0)
	r.Completed = r.RunStatus == "completed" && d.maxTurn > o.longTurns && d.broken == ""
	if d.broken != "" {
		r.RunError = strings.TrimSpace(r.RunError + " tool failed: " + d.broken)
	}
	for t := 1; t < d.maxTurn; t++ {
		a, ok1 := d.seen[t]
		b, ok2 := d.seen[t+1]
		if !ok1 || !ok2 {
			continue
		}
		r.Steps = append(r.Steps, LongStep{Turn: t, Tokens: a.tokens, Bytes: a.bytes, WAL: b.wal - a.wal, StmtWAL: b.stmtWAL - a.stmtWAL,
			LatencyMS: float64(b.at.Sub(a.at).Microseconds()) / 1000})
	}
	if first, ok := d.seen[1]; ok {
		if last, ok := d.seen[d.maxTurn]; ok {
			r.TotalWAL, r.TotalStmtWAL = last.wal-first.wal, last.stmtWAL-first.stmtWAL
		}
	}
	r.figures(l.pgss)
	progress("long session: %s in %.0f s, %d turns; bytes/step %s → %s (×%.2f), step p50 %.0f → %.0f ms (×%.2f), largest request %d tokens; %s",
		r.RunStatus, r.Seconds, r.Reached, humanBytes(int64(r.BytesEarlyMedian)), humanBytes(int64(r.BytesLateMedian)), r.BytesRatio,
		r.LatEarlyP50MS, r.LatLateP50MS, r.LatRatio, r.LargestTokens, passWord(r.Pass))
	return nil
}

// figures computes the windows' figures and the verdict.
func (r *LongResult) figures(pgss bool) {
	pick := func(w [2]int, f func(LongStep) float64) []float64 {
		var out []float64
		for _, s := range r.Steps {
			if s.Turn >= w[0] && s.Turn <= w[1] {
				out = append(out, f(s))
			}
		}
		return out
	}
	bytesOf := func(s LongStep) float64 {
		if pgss {
			return float64(s.StmtWAL)
		}
		return float64(s.WAL)
	}
	walOf := func(s LongStep) float64 { return float64(s.WAL) }
	latOf := func(s LongStep) float64 { return s.LatencyMS }
	be, bl := pick(r.BytesEarly, bytesOf), pick(r.BytesLate, bytesOf)
	r.BytesEarlyMean, r.BytesLateMean = mean(be), mean(bl)
	r.BytesEarlyMedian, r.BytesLateMedian = median(be), median(bl)
	r.WALEarlyMedian, r.WALLateMedian = median(pick(r.BytesEarly, walOf)), median(pick(r.BytesLate, walOf))
	r.BytesRatio = ratio(r.BytesLateMedian, r.BytesEarlyMedian)
	r.LatEarlyP50MS, r.LatLateP50MS = median(pick(r.LatEarly, latOf)), median(pick(r.LatLate, latOf))
	r.LatRatio = ratio(r.LatLateP50MS, r.LatEarlyP50MS)
	r.Fails = nil
	if r.OverWindow > 0 || r.WindowRefusals > 0 {
		r.Fails = append(r.Fails, fmt.Sprintf("%d requests over the %d-token window (first at turn %d), %d refused by the fake", r.OverWindow, r.Window, r.FirstOverWindow, r.WindowRefusals))
	}
	if !r.Completed {
		r.Fails = append(r.Fails, fmt.Sprintf("the run did not complete (%s, %d of %d turns)", r.RunStatus, r.Reached, r.Turns))
	}
	if len(bl) == 0 || r.BytesRatio > 1.2 {
		r.Fails = append(r.Fails, fmt.Sprintf("bytes per step ×%.2f > 1.2", r.BytesRatio))
	}
	if r.LatLateP50MS == 0 || r.LatRatio > 1.2 {
		r.Fails = append(r.Fails, fmt.Sprintf("step latency p50 ×%.2f > 1.2", r.LatRatio))
	}
	r.Pass = len(r.Fails) == 0
}

func topStatements(ctx context.Context, db *pgxpool.Pool, dbName string) ([]LongStatement, error) {
	rows, err := db.Query(ctx, `SELECT query, calls, wal_bytes::bigint FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = $1) AND wal_bytes > 0 ORDER BY wal_bytes DESC LIMIT 5`, dbName)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []LongStatement
	for rows.Next() {
		var s LongStatement
		if err := rows.Scan(&s.Query, &s.Calls, &s.WALBytes); err != nil {
			return nil, err
		}
		s.Query = truncate(strings.Join(strings.Fields(s.Query), " "), 90)
		out = append(out, s)
	}
	return out, rows.Err()
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<20 || n <= -(1<<20):
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	case n >= 10<<10 || n <= -(10<<10):
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// loadAvg is the 1-minute load average ("?" where unreadable).
func loadAvg() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	if f := strings.Fields(string(raw)); len(f) > 0 {
		return f[0]
	}
	return "?"
}

func passWord(ok bool) string {
	if ok {
		return "PASS"
	}
	return "FAIL"
}

// markdown renders section 9.
func (r LongResult) markdown() string {
	if r.Turns == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n### 9. Long sessions (issue 38)\n\n")
	enf := "**not enforced by the fake** (`llmtest.UpstreamConfig` has no context window yet): the bench counts the requests over it"
	if r.Enforced {
		enf = "enforced by the fake (a request over it is answered the provider's context-length error)"
	}
	fmt.Fprintf(&b, "One run, one agent, %d turns, each a `read_file` of a distinct %d-byte chunk (incompressible base64), then a final answer, on one worker process against the fake OpenAI API (`llmtest.Upstream`); context window %d tokens, %s. PostgreSQL: %s. Bytes per step: %s, sampled at each model request's arrival (step t = request t → request t+1); step latency: the time between those arrivals (the fake answers at once).\n\n",
		r.Turns, r.ChunkBytes, r.Window, enf, pgWord(r.Postgres), r.Measure)
	b.WriteString("| figure | measured | bound | verdict |\n|---|---|---|---|\n")
	row := func(what, val, bound, verdict string) {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", what, val, bound, verdict)
	}
	row("run completed", fmt.Sprintf("%v (%s; %d of %d turns; %.0f s)", r.Completed, r.RunStatus+errSuffix(r.RunError), r.Reached, r.Turns, r.Seconds), "completes", passWord(r.Completed))
	row("largest request the fake saw", fmt.Sprintf("%d tokens (%s)", r.LargestTokens, humanBytes(int64(r.LargestBytes))), fmt.Sprintf("≤ %d tokens", r.Window),
		passWord(r.OverWindow == 0 && r.WindowRefusals == 0))
	over := fmt.Sprintf("%d of %d", r.OverWindow, r.Requests)
	if r.FirstOverWindow > 0 {
		over += fmt.Sprintf(" (first at turn %d)", r.FirstOverWindow)
	}
	row("requests over the window / refused by the fake", fmt.Sprintf("%s / %d", over, r.WindowRefusals), "0", passWord(r.OverWindow == 0 && r.WindowRefusals == 0))
	row("largest input the fake counted (its llm/tokens count) / compactions' summary requests", fmt.Sprintf("%d / %d", r.FakeMaxInput, r.Summaries), "", "")
	row(fmt.Sprintf("bytes per step, turns %d–%d (median; mean)", r.BytesEarly[0], r.BytesEarly[1]), fmt.Sprintf("%s; %s", humanBytes(int64(r.BytesEarlyMedian)), humanBytes(int64(r.BytesEarlyMean))), "", "")
	row(fmt.Sprintf("bytes per step, turns %d–%d (median; mean)", r.BytesLate[0], r.BytesLate[1]), fmt.Sprintf("%s; %s", humanBytes(int64(r.BytesLateMedian)), humanBytes(int64(r.BytesLateMean))), "", "")
	row("bytes per step, late ÷ early (medians)", fmt.Sprintf("**×%.2f**", r.BytesRatio), "≤ 1.2", passWord(r.BytesRatio > 0 && r.BytesRatio <= 1.2))
	if r.Measure != "WAL (pg_current_wal_insert_lsn)" {
		row("cluster WAL per step (medians, early → late)", fmt.Sprintf("%s → %s", humanBytes(int64(r.WALEarlyMedian)), humanBytes(int64(r.WALLateMedian))), "", "")
	}
	row(fmt.Sprintf("step latency p50, turns %d–%d", r.LatEarly[0], r.LatEarly[1]), fmt.Sprintf("%.0f ms", r.LatEarlyP50MS), "", "")
	row(fmt.Sprintf("step latency p50, turns %d–%d", r.LatLate[0], r.LatLate[1]), fmt.Sprintf("%.0f ms", r.LatLateP50MS), "", "")
	row("step latency, late ÷ early", fmt.Sprintf("**×%.2f**", r.LatRatio), "≤ 1.2", passWord(r.LatRatio > 0 && r.LatRatio <= 1.2))
	total := humanBytes(r.TotalWAL)
	if r.Measure != "WAL (pg_current_wal_insert_lsn)" {
		total += fmt.Sprintf(" (statements: %s)", humanBytes(r.TotalStmtWAL))
	}
	row("WAL over the whole run", total, "", "")
	row("requests / answered / retried turns", fmt.Sprintf("%d / %d / %d", r.Requests, r.Answered, r.Retries), "", "")
	row("machine load average (1 min), start → end", fmt.Sprintf("%s → %s", r.LoadAvg[0], r.LoadAvg[1]), "", "")
	fmt.Fprintf(&b, "\n**Section 9: %s**", passWord(r.Pass))
	if len(r.Fails) > 0 {
		fmt.Fprintf(&b, " — %s", strings.Join(r.Fails, "; "))
	}
	b.WriteString("\n")
	if len(r.TopStatements) > 0 {
		b.WriteString("\nThe statements that wrote the most WAL (pg_stat_statements):\n\n| statement | calls | WAL |\n|---|---|---|\n")
		for _, s := range r.TopStatements {
			fmt.Fprintf(&b, "| `%s` | %d | %s |\n", strings.ReplaceAll(s.Query, "|", "\\|"), s.Calls, humanBytes(s.WALBytes))
		}
	}
	if len(r.Steps) > 0 {
		b.WriteString("\nPer step, every 50 turns (and the last):\n\n| turn | request tokens | statement WAL | cluster WAL | latency |\n|---|---|---|---|---|\n")
		for i, s := range r.Steps {
			if s.Turn == 1 || s.Turn%50 == 0 || s.Turn == 10 || i == len(r.Steps)-1 {
				fmt.Fprintf(&b, "| %d | %d | %s | %s | %.0f ms |\n", s.Turn, s.Tokens, humanBytes(s.StmtWAL), humanBytes(s.WAL), s.LatencyMS)
			}
		}
	}
	return b.String()
}

func pgWord(kind string) string {
	if kind == "private" {
		return "a private cluster started by the bench (`-long-pg private`; its WAL is the bench's alone), pg_stat_statements preloaded"
	}
	return "the shared server (`-long-pg shared`; its WAL includes other clients')"
}

func errSuffix(s string) string {
	if s == "" {
		return ""
	}
	return ": " + s
}
