package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/aetherium-engine/aetherium/fleet"
	"github.com/aetherium-engine/aetherium/internal/harness"
	"github.com/aetherium-engine/aetherium/internal/testinfra"
	"github.com/aetherium-engine/aetherium/tracing"
)

// TracingResult is the cost of tracing (issue 42, docs/traces.md): section 2's
// gated tool-call workload and section 5's one-at-a-time demo runs, each
// measured with tracing off and on in the same bench run, alternately (off,
// on, on, off …) so a drift of the shared machine falls on both. The traced
// rounds export over OTLP/HTTP to the sink: by default a receiver in the bench
// that reads and drops each export (the fleet's own cost, as with a collector
// on another machine), or the Jaeger of scripts/services.sh, whose ingestion
// then competes for the same cores.
type TracingResult struct {
	// Skipped says why nothing was measured ("" when measured).
	Skipped  string `json:"skipped,omitempty"`
	Sink     string `json:"sink"`
	Endpoint string `json:"endpoint"`
	Rounds   int    `json:"rounds"`
	// Exports and ExportBytes are what the null sink received (0 with Jaeger):
	// the proof that the traced rounds' spans left the fleet.
	Exports     int64 `json:"exports,omitempty"`
	ExportBytes int64 `json:"export_bytes,omitempty"`
	// Section 2: gated tool calls per second (every round's calls over every
	// round's seconds), off and on; Overhead2 = off/on − 1.
	ToolRuns    int     `json:"tool_runs"`
	ToolOffPerS float64 `json:"tool_off_per_s"`
	ToolOnPerS  float64 `json:"tool_on_per_s"`
	Overhead2   float64 `json:"overhead_2"`
	// The bench process's CPU per gated call in section 2's rounds (the fleet
	// runs in it: what tracing adds is there, the null sink's reads too),
	// off and on; CPUOverhead2 = on/off − 1. CPU time, not wall: a busy
	// machine slows both modes' rounds unevenly but not their CPU per call.
	ToolCPUOffUS float64 `json:"tool_cpu_off_us"`
	ToolCPUOnUS  float64 `json:"tool_cpu_on_us"`
	CPUOverhead2 float64 `json:"cpu_overhead_2"`
	// Section 5: the median end-to-end latency of demo runs one at a time,
	// SeqRuns pairs (one run on each of an untraced and a traced fleet, side by
	// side), off and on; Overhead5 = on/off − 1.
	SeqRuns     int     `json:"seq_runs"`
	SeqOffP50MS float64 `json:"seq_off_p50_ms"`
	SeqOnP50MS  float64 `json:"seq_on_p50_ms"`
	Overhead5   float64 `json:"overhead_5"`
}

// tracingTarget is the bench's budget for the overhead of tracing on.
const tracingTarget = 0.03

// The sinks of -tracing-sink.
const (
	sinkNull   = "null"
	sinkJaeger = "jaeger"
)

// nullOTLP is an OTLP/HTTP receiver that reads each export and drops it,
// answering an empty ExportTraceServiceResponse (a valid one: every field
// default), so the exporter's whole path runs and nothing else does. A
// request to any other path is a 404 and not counted: an exporter posting to
// the wrong URL shows as no exports.
type nullOTLP struct {
	url            string
	srv            *http.Server
	requests, size atomic.Int64
}

func startNullOTLP() (*nullOTLP, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("null otlp receiver: %w", err)
	}
	n := &nullOTLP{url: "http://" + ln.Addr().String()}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.Copy(io.Discard, r.Body)
		n.requests.Add(1)
		n.size.Add(b)
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	})
	n.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = n.srv.Serve(ln) }()
	return n, nil
}

func (n *nullOTLP) close() {
	if n != nil {
		_ = n.srv.Close()
	}
}

// tracingOn is the tracing section of a config with tracing on, exporting to
// otlp.
func tracingOn(otlp string) tracing.Config {
	return tracing.Config{Enabled: true, Exporter: tracing.ExporterHTTP, Endpoint: otlp, ServiceName: "aetherium-bench"}.WithDefaults()
}

// tracedFleet opens an in-process fleet like the bench's own, with tracing on
// or off, and serves its API: in the traced runs the API's submit span is the
// root of each run's trace, as in production. close stops both.
func tracedFleet(ctx context.Context, e *env, on bool) (*fleet.Fleet, *harness.Client, func(), error) {
	return tracedFleetOn(ctx, e, on, e.redisURL)
}

// tracedFleetOn is tracedFleet on the Redis at redisURL.
func tracedFleetOn(ctx context.Context, e *env, on bool, redisURL string) (*fleet.Fleet, *harness.Client, func(), error) {
	cfg := e.fleet.Cfg
	cfg.RedisURL = redisURL
	cfg.Tracing = tracing.Config{}.WithDefaults()
	if on {
		cfg.Tracing = tracingOn(e.otlpEndpoint())
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	fl, err := fleet.Open(ctx, cfg, log, fleet.Options{NoSandbox: true})
	if err != nil {
		return nil, nil, nil, err
	}
	srv := fl.API()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fl.Close()
		return nil, nil, nil, err
	}
	go func() { _ = srv.App.Listener(ln) }()
	stop := func() { _ = srv.App.ShutdownWithTimeout(2 * time.Second); _ = srv.Close(); fl.Close() }
	return fl, harness.NewClient("http://" + ln.Addr().String()), stop, nil
}

// tracingReady says why the overhead cannot be measured ("" when it can).
func tracingReady(ctx context.Context, e *env) string {
	if e.o.tracingRounds <= 0 {
		return "-tracing-rounds 0"
	}
	switch e.o.tracingSink {
	case sinkNull:
		if e.sink == nil {
			n, err := startNullOTLP()
			if err != nil {
				return err.Error()
			}
			e.sink = n
		}
		return ""
	case sinkJaeger:
	default:
		return fmt.Sprintf("-tracing-sink %q: want %s or %s", e.o.tracingSink, sinkNull, sinkJaeger)
	}
	j := testinfra.JaegerAt()
	j.OTLP = e.o.jaegerOTLP
	if err := j.Up(ctx); err != nil {
		return fmt.Sprintf("no Jaeger answers (%v): run scripts/services.sh", err)
	}
	return ""
}

// otlpEndpoint is the collector the traced rounds export to.
func (e *env) otlpEndpoint() string {
	if e.o.tracingSink == sinkNull && e.sink != nil {
		return e.sink.url
	}
	return e.o.jaegerOTLP
}

// noteSink records the sink and, for the null one, what it received so far.
func (e *env) noteSink(r *TracingResult) {
	r.Sink, r.Endpoint, r.Rounds = e.o.tracingSink, e.otlpEndpoint(), e.o.tracingRounds
	if e.sink != nil {
		r.Exports, r.ExportBytes = e.sink.requests.Load(), e.sink.size.Load()
	}
}

// rounds are the modes of the alternating rounds: off, on, on, off, off, on, …
func rounds(n int) []bool {
	var out []bool
	for i := range n {
		if i%2 == 0 {
			out = append(out, false, true)
		} else {
			out = append(out, true, false)
		}
	}
	return out
}

// benchTracingTools is section 2's part: the gated tool-call workload with
// tracing off and on.
func benchTracingTools(ctx context.Context, e *env, res *Result) error {
	r := &res.Tracing
	if r.Skipped = tracingReady(ctx, e); r.Skipped != "" {
		progress("tracing overhead: skipped: %s", r.Skipped)
		return nil
	}
	runs := max(1, e.o.toolRuns/2)
	team := harness.ToolLoop(e.o.toolTurns, e.o.toolCalls, "todo", map[string]any{"action": "read"})
	want := harness.ExpectOf(team).Times(runs)
	var calls, secs, cpu [2]float64
	own := e.client
	defer func() { e.client = own }()
	for k, on := range rounds(e.o.tracingRounds) {
		fl, client, stop, err := tracedFleet(ctx, e, on)
		if err != nil {
			return err
		}
		e.client = client
		// The first round of each mode is profiled (the profiler's cost falls
		// on both): where tracing's cost goes, by pprof -diff_base.
		profile := ""
		if e.o.profile && k < 2 {
			profile = filepath.Join(e.o.out, "profiles", "tracing-"+onOff(on)+".cpu.pprof")
		}
		w, err := fleetWorkload(ctx, e, fl, team, runs, profile)
		if err == nil {
			err = fl.Tracing.ForceFlush(ctx)
		}
		stop()
		if err != nil {
			return fmt.Errorf("tracing %v: %w", on, err)
		}
		i := b2i(on)
		calls[i] += float64(want.ToolCalls)
		secs[i] += w.elapsed.Seconds()
		cpu[i] += w.cpu.Groups["bench"]
		progress("tracing overhead (2), tracing %s: %d gated calls in %.2fs = %.0f/s", onOff(on), want.ToolCalls, w.elapsed.Seconds(), float64(want.ToolCalls)/w.elapsed.Seconds())
	}
	e.noteSink(r)
	r.ToolRuns = runs
	r.ToolOffPerS, r.ToolOnPerS = calls[0]/secs[0], calls[1]/secs[1]
	r.Overhead2 = r.ToolOffPerS/r.ToolOnPerS - 1
	r.ToolCPUOffUS, r.ToolCPUOnUS = 1e6*cpu[0]/calls[0], 1e6*cpu[1]/calls[1]
	r.CPUOverhead2 = r.ToolCPUOnUS/r.ToolCPUOffUS - 1
	progress("tracing overhead (2): %.0f calls/s off, %.0f on: on/off = %.3f, overhead %+.1f %% (target ≤ %.0f %%); fleet CPU per call %.0f µs off, %.0f µs on (%+.1f %%)",
		r.ToolOffPerS, r.ToolOnPerS, r.ToolOnPerS/r.ToolOffPerS, 100*r.Overhead2, 100*tracingTarget, r.ToolCPUOffUS, r.ToolCPUOnUS, 100*r.CPUOverhead2)
	return nil
}

// benchTracingLatency is section 5's part: demo runs one at a time with
// tracing off and on, paired: two fleets run side by side (API in the bench,
// one worker process each; the traced one on a Redis database of its own, so
// neither takes the other's tasks), and each pair of runs goes to both, one
// after the other, in alternating order. A drift of the shared machine falls
// on both halves of a pair: rounds of 30 runs per mode moved their p50 by ±15 %
// from one round to the next on a busy machine, more than the overhead sought.
func benchTracingLatency(ctx context.Context, e *env, res *Result) error {
	r := &res.Tracing
	if r.Skipped != "" {
		return nil
	}
	if reason := tracingReady(ctx, e); reason != "" {
		r.Skipped = reason
		progress("tracing overhead: skipped: %s", reason)
		return nil
	}
	vars := map[string]any{"topic": "benchmarks"}
	type side struct {
		client *harness.Client
		stop   func()
		procs  []*harness.Proc
		ids    []string
	}
	var sides [2]side
	// stopAll stops the workers, then the APIs: each flushes its spans, so the
	// sink's count, read after, holds them all.
	stopAll := func() {
		for i := range sides {
			stopWorkers(sides[i].procs)
			sides[i].procs = nil
			if sides[i].stop != nil {
				sides[i].stop()
				sides[i].stop = nil
			}
		}
	}
	defer stopAll()
	onDB := e.o.redisDB + 1
	onRedis := redis.NewClient(&redis.Options{Addr: e.o.redisAddr, DB: onDB})
	defer onRedis.Close()
	if err := onRedis.FlushDB(ctx).Err(); err != nil {
		return fmt.Errorf("redis db %d (the traced fleet's): %w", onDB, err)
	}
	defer onRedis.FlushDB(context.Background())
	for i, on := range []bool{false, true} {
		redisURL := e.redisURL
		if on {
			redisURL = fmt.Sprintf("redis://%s/%d", e.o.redisAddr, onDB)
		}
		_, client, stop, err := tracedFleetOn(ctx, e, on, redisURL)
		if err != nil {
			return err
		}
		sides[i].client, sides[i].stop = client, stop
		fc := harness.FleetConfig{Concurrency: e.o.concurrency, RedisURL: redisURL}
		if on {
			t := tracingOn(e.otlpEndpoint())
			fc.Sections = map[string]map[string]any{"tracing": {"enabled": true, "exporter": t.Exporter, "endpoint": t.Endpoint, "service_name": t.ServiceName}}
		}
		if sides[i].procs, err = startWorkersCfg(e, 1, fc, "trace-"+onOff(on)); err != nil {
			return err
		}
	}
	pairs := e.o.seqRuns * e.o.tracingRounds
	for k := range pairs {
		order := []int{0, 1}
		if k%2 == 1 {
			order = []int{1, 0}
		}
		for _, i := range order {
			id, err := sides[i].client.SubmitTemplate(ctx, "demo", fmt.Sprintf("demo %d", k), vars)
			if err == nil {
				_, err = harness.WaitTerminal(ctx, e.db, []string{id}, time.Minute, nil)
			}
			if err != nil {
				return fmt.Errorf("tracing %s: %w", onOff(i == 1), err)
			}
			sides[i].ids = append(sides[i].ids, id)
		}
		if (k+1)%e.o.seqRuns == 0 {
			progress("tracing overhead (5): %d of %d pairs of demo runs", k+1, pairs)
		}
	}
	for i := range sides {
		if err := allCompleted(ctx, e, sides[i].ids); err != nil {
			return err
		}
	}
	stopAll()
	var lats [2][]time.Duration
	for i := range sides {
		lat, err := latencies(ctx, e, sides[i].ids)
		if err != nil {
			return err
		}
		lats[i] = lat
	}
	e.noteSink(r)
	r.SeqRuns = pairs
	r.SeqOffP50MS, r.SeqOnP50MS = ms(percentile(lats[0], 0.5)), ms(percentile(lats[1], 0.5))
	r.Overhead5 = r.SeqOnP50MS/r.SeqOffP50MS - 1
	progress("tracing overhead (5): demo run p50 %.1f ms off, %.1f ms on (%d pairs): on/off = %.3f, overhead %+.1f %% (target ≤ %.0f %%)",
		r.SeqOffP50MS, r.SeqOnP50MS, pairs, r.SeqOnP50MS/r.SeqOffP50MS, 100*r.Overhead5, 100*tracingTarget)
	return nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

// rows adds the overhead's rows to the report's table.
func (t TracingResult) rows(row func(section, what, value, note string)) {
	if t.Skipped != "" || t.Rounds == 0 {
		return
	}
	verdict := func(o float64) string {
		if o <= tracingTarget {
			return fmt.Sprintf("within the %.0f %% target", 100*tracingTarget)
		}
		return fmt.Sprintf("**over the %.0f %% target**", 100*tracingTarget)
	}
	sink := fmt.Sprintf("OTLP/HTTP to Jaeger on the same cores (%s)", t.Endpoint)
	if t.Sink == sinkNull {
		sink = fmt.Sprintf("OTLP/HTTP to a receiver that drops each export (%d exports, %.1f MB)", t.Exports, float64(t.ExportBytes)/1e6)
	}
	if t.ToolRuns > 0 {
		row("2", "tracing overhead: gated tool calls, tracing on vs off", fmt.Sprintf("**%+.1f %%** (%.0f vs %.0f calls/s)", 100*t.Overhead2, t.ToolOnPerS, t.ToolOffPerS),
			fmt.Sprintf("%s; %d rounds each of %d runs, alternated; %s", verdict(t.Overhead2), t.Rounds, t.ToolRuns, sink))
		row("2", "tracing overhead: the fleet process's CPU per gated call, on vs off", fmt.Sprintf("%+.1f %% (%.0f vs %.0f µs)", 100*t.CPUOverhead2, t.ToolCPUOnUS, t.ToolCPUOffUS),
			"the same rounds; CPU time, which a busy machine does not skew as it does the calls per second")
	}
	if t.SeqRuns > 0 {
		row("5", "tracing overhead: demo run one at a time, tracing on vs off", fmt.Sprintf("**%+.1f %%** (p50 %.1f vs %.1f ms)", 100*t.Overhead5, t.SeqOnP50MS, t.SeqOffP50MS),
			fmt.Sprintf("%s; %d pairs of runs, one on each of two fleets side by side, in alternating order; API and worker process traced; %s", verdict(t.Overhead5), t.SeqRuns, sink))
	}
}
