package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"gopkg.in/yaml.v3"

	"github.com/aetherium-engine/aetherium/internal/harness"
	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/llm/llmtest"
	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/templates"
)

// GovernorResult is section 8: model traffic against a rate-limited provider.
// The same load — Runs single-agent runs submitted at once, each one model call
// of the OpenAI wire — on Procs worker processes (the real binary) against the
// fake upstream (llmtest.Upstream in the bench process) limited to RPM requests
// and TPM tokens per minute, once with the fleet's governor (llm.limits set to
// exactly the fake's limits) and once without (AETHERIUM_LLM_GOVERNOR=off).
type GovernorResult struct {
	Runs        int            `json:"runs"`
	RPM         int            `json:"rpm"`
	TPM         int            `json:"tpm"`
	Procs       int            `json:"procs"`
	Concurrency int            `json:"concurrency_per_proc"`
	MaxTokens   int            `json:"max_tokens"`
	Model       string         `json:"model"`
	Modes       []GovernorMode `json:"modes"`
}

// GovernorMode is one mode's measurements.
type GovernorMode struct {
	Governor string `json:"governor"`
	// Seconds is the wall time from the first submission to the last run's end
	// (PostgreSQL's created_at and finished_at).
	Seconds   float64        `json:"seconds"`
	Completed int            `json:"completed"`
	Failed    int            `json:"failed"`
	Other     int            `json:"other"`
	Reasons   map[string]int `json:"fail_reasons,omitempty"`
	Errors    []string       `json:"fail_errors,omitempty"`
	// The fake's counts: every request, the 200s, the 429s.
	Requests    int     `json:"requests"`
	Answered    int     `json:"answered"`
	RateLimited int     `json:"rate_limited"`
	OtherStatus int     `json:"other_status"`
	Share429    float64 `json:"share_429"`
	// PeakWindowRequests and PeakWindowTokens are the most requests and tokens
	// (input + max_tokens, as the fake counts them for TPM) accepted within any
	// 60 s window; PeakConcurrency the most requests in flight at once.
	PeakWindowRequests int `json:"peak_window_requests"`
	PeakWindowTokens   int `json:"peak_window_tokens"`
	PeakConcurrency    int `json:"peak_concurrency"`
	// CountedPerCall is the fake's TPM count per accepted call (input +
	// max_tokens); UsagePerCall is the usage it billed (input + output).
	CountedPerCall float64 `json:"counted_tokens_per_call"`
	UsagePerCall   float64 `json:"usage_tokens_per_call"`
	// The workers' metrics, summed over the processes.
	WorkerCalls map[string]float64 `json:"worker_llm_requests"`
	WorkerWaits map[string]float64 `json:"worker_llm_waits"`
	// WaitingEvents counts agent.waiting events (once per wait, not per park).
	WaitingEvents int `json:"waiting_events"`
	// Active handlers (asynq active tasks of the supervisor and workers queues),
	// sampled every SampleEvery while runs were in flight, against Slots.
	Samples      int     `json:"active_samples"`
	ActiveMedian int     `json:"active_median"`
	ActiveP90    int     `json:"active_p90"`
	ActiveMax    int     `json:"active_max"`
	ActiveMean   float64 `json:"active_mean"`
	Slots        int     `json:"slots"`
	// TimedOut: not every run was terminal at the wait's end.
	TimedOut bool `json:"timed_out,omitempty"`
}

// keepLogs copies the worker processes' logs to <out>/<name>.
func keepLogs(e *env, name string, procs []*harness.Proc) {
	dir := filepath.Join(e.o.out, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return
	}
	for _, p := range procs {
		if p == nil {
			continue
		}
		if raw, err := os.ReadFile(p.Log); err == nil {
			_ = os.WriteFile(filepath.Join(dir, filepath.Base(p.Log)), raw, 0o644)
		}
	}
}

const (
	govModel       = "gpt-4o-mini"
	govSampleEvery = 250 * time.Millisecond
)

// governorTeam is one agent with no tools and no workers: the fake's default
// answer, the final text "done.", ends the run in one model call. MaxTokens keeps
// each call's estimate (prompt + max_tokens) well inside TPM / RPM.
func governorTeam(maxTokens int) templates.Template {
	return templates.Template{
		Name: "governor-bench", Description: "bench section 8: one model call per run",
		Model:      llm.ModelConfig{Provider: "openai", Model: govModel, MaxTokens: maxTokens},
		Supervisor: templates.Node{Name: "solo", Prompt: "Answer in one word."},
		Workers:    []templates.Node{},
		Budget:     templates.Budget{MaxTokens: 1 << 40},
	}
}

func benchGovernor(ctx context.Context, e *env, res *Result) error {
	o := e.o
	r := &res.Governor
	*r = GovernorResult{Runs: o.govRuns, RPM: o.govRPM, TPM: o.govTPM, Procs: o.govProcs, Concurrency: o.govConc, MaxTokens: o.govMaxTokens, Model: govModel}
	// The governor first: its Redis windows are its own, and the off mode uses none.
	for _, mode := range []string{"on", "off"} {
		m, err := governorMode(ctx, e, r, mode)
		if err != nil {
			return fmt.Errorf("governor %s: %w", mode, err)
		}
		r.Modes = append(r.Modes, m)
	}
	return nil
}

func governorMode(ctx context.Context, e *env, r *GovernorResult, mode string) (GovernorMode, error) {
	m := GovernorMode{Governor: mode, Slots: r.Procs * r.Concurrency}
	up, err := llmtest.StartUpstream(llmtest.UpstreamConfig{Wire: llmtest.WireOpenAI, RPM: r.RPM, TPM: r.TPM})
	if err != nil {
		return m, err
	}
	defer up.Close()

	cfgPath := filepath.Join(e.tmp, "aetherium-governor.yaml")
	if err := writeGovernorConfig(e, cfgPath, r); err != nil {
		return m, err
	}
	procs := make([]*harness.Proc, r.Procs)
	metricsAddrs := make([]string, r.Procs)
	errs := make([]error, r.Procs)
	var wg sync.WaitGroup
	for i := range r.Procs {
		addr, err := freeAddr()
		if err != nil {
			return m, err
		}
		metricsAddrs[i] = addr
		wg.Add(1)
		go func() {
			defer wg.Done()
			procs[i], errs[i] = harness.StartWorker(e.bin, cfgPath, filepath.Join(e.tmp, fmt.Sprintf("worker-governor-%s-%d.log", mode, i)),
				"AETHERIUM_OPENAI_BASE_URL="+up.URL, "AETHERIUM_OPENAI_API_KEY=bench-key", "AETHERIUM_OPENAI_MODEL="+govModel,
				"AETHERIUM_LLM_GOVERNOR="+mode, "AETHERIUM_WORKER_METRICS_ADDR="+addr)
		}()
	}
	wg.Wait()
	// Registered first, so it runs after the workers stopped: their logs outlive
	// the bench's temporary directory.
	defer keepLogs(e, "governor-logs", procs)
	defer stopWorkers(procs)
	for _, err := range errs {
		if err != nil {
			return m, err
		}
	}

	ins := asynq.NewInspector(e.queueOpt)
	defer ins.Close()
	stopSampling := sampler(govSampleEvery, func() (int, bool) {
		active := 0
		for _, q := range []string{queue.QueueSupervisor, queue.QueueWorkers} {
			if qi, err := ins.GetQueueInfo(q); err == nil {
				active += qi.Active
			}
		}
		return active, true
	})

	progress("governor %s: %d runs at once, %d worker processes × %d, fake limited to %d requests and %d tokens per minute", mode, r.Runs, r.Procs, r.Concurrency, r.RPM, r.TPM)
	team := governorTeam(r.MaxTokens)
	ids, err := harness.SubmitMany(ctx, r.Runs, 16, 0, func(ctx context.Context, i int) (string, error) {
		return e.client.SubmitTeam(ctx, team, fmt.Sprintf("bench %d", i))
	})
	var counts harness.RunCounts
	if err == nil {
		// The limit alone takes Runs/RPM minutes; leave room for a slow drain.
		expect := time.Duration(float64(r.Runs)/float64(max(r.RPM, 1))*float64(time.Minute)) + time.Minute
		last := time.Now()
		counts, err = harness.WaitTerminal(ctx, e.db, ids, expect+expect/2+time.Minute, func(c harness.RunCounts) {
			if time.Since(last) >= 5*time.Second {
				last = time.Now()
				s := up.Stats()
				progress("  … governor %s: %d/%d runs finished; fake: %d requests, %d answered, %d answered 429", mode, c.Terminal(), len(ids), s.Requests, s.Answered, s.RateLimited)
			}
		})
	}
	samples := stopSampling()
	if errors.Is(err, harness.ErrTimeout) {
		// Report what happened rather than nothing: the runs still in flight
		// are counted as neither completed nor failed.
		progress("governor %s: %v", mode, err)
		m.TimedOut = true
		err = nil
	}
	if err != nil {
		return m, err
	}
	if m.TimedOut {
		if counts, err = harness.CountRuns(ctx, e.db, ids); err != nil {
			return m, err
		}
	}
	for i, addr := range metricsAddrs {
		calls, waits, err := scrapeLLM(ctx, addr)
		if err != nil {
			return m, fmt.Errorf("worker %d metrics: %w", i, err)
		}
		m.WorkerCalls = addCounts(m.WorkerCalls, calls)
		m.WorkerWaits = addCounts(m.WorkerWaits, waits)
	}
	up.Close()
	s := up.Stats()

	m.Completed, m.Failed = counts.ByStatus["completed"], counts.ByStatus["failed"]
	m.Other = counts.Total - m.Completed - m.Failed
	if len(counts.Reasons) > 0 {
		m.Reasons, m.Errors = counts.Reasons, counts.Errors
	}
	m.Requests, m.Answered, m.RateLimited = s.Requests, s.Answered, s.RateLimited
	m.OtherStatus = s.Requests - s.Answered - s.RateLimited
	m.Share429 = ratio(float64(s.RateLimited), float64(s.Requests))
	m.PeakWindowRequests, m.PeakWindowTokens, m.PeakConcurrency = s.PeakWindowRequests, s.PeakWindowTokens, s.PeakConcurrency
	var usage int
	for _, ms := range s.Models {
		usage += ms.Usage.InputTokens + ms.Usage.OutputTokens
	}
	if s.Answered > 0 {
		m.UsagePerCall = float64(usage) / float64(s.Answered)
		in := 0
		for _, ms := range s.Models {
			in += ms.Usage.InputTokens
		}
		m.CountedPerCall = float64(in)/float64(s.Answered) + float64(r.MaxTokens)
	}
	if m.WaitingEvents, err = e.countEvents(ctx, ids, "agent.waiting"); err != nil {
		return m, err
	}
	elapsed, err := span(ctx, e, ids)
	if err != nil {
		return m, err
	}
	m.Seconds = elapsed.Seconds()
	m.Samples = len(samples)
	if len(samples) > 0 {
		sorted := append([]int(nil), samples...)
		sort.Ints(sorted)
		sum := 0
		for _, v := range sorted {
			sum += v
		}
		m.ActiveMedian, m.ActiveP90, m.ActiveMax = sorted[(len(sorted)-1)/2], sorted[min(len(sorted)-1, int(0.9*float64(len(sorted))))], sorted[len(sorted)-1]
		m.ActiveMean = float64(sum) / float64(len(sorted))
	}
	progress("governor %s: %d completed, %d failed in %.1fs; fake: %d requests, %d answered, %d 429 (%.2f %%), peak %d requests and %d tokens in a window, peak %d in flight; active handlers median %d, p90 %d, max %d of %d slots; worker metrics %v waits %v",
		mode, m.Completed, m.Failed, m.Seconds, m.Requests, m.Answered, m.RateLimited, 100*m.Share429, m.PeakWindowRequests, m.PeakWindowTokens, m.PeakConcurrency,
		m.ActiveMedian, m.ActiveP90, m.ActiveMax, m.Slots, m.WorkerCalls, m.WorkerWaits)
	return m, nil
}

// writeGovernorConfig is the harness's worker config plus the llm section: the
// governor's limit line set to exactly the fake's limits (the mode comes from
// AETHERIUM_LLM_GOVERNOR).
func writeGovernorConfig(e *env, path string, r *GovernorResult) error {
	c := harness.FleetConfig{Concurrency: r.Concurrency, RedisURL: e.redisURL, DatabaseURL: e.dbURL, Workspaces: filepath.Join(e.tmp, "workspaces"),
		Templates: filepath.Join(e.root, "templates"), Permissions: filepath.Join(e.root, "config", "permissions.yaml"), ShutdownTimeout: 5 * time.Second}
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
	doc["llm"] = map[string]any{
		"limits": []map[string]any{{"provider": "openai", "rpm": r.RPM, "tpm": r.TPM}},
	}
	if raw, err = yaml.Marshal(doc); err != nil {
		return err
	}
	return os.WriteFile(path, raw, 0o644)
}

// freeAddr is a loopback address with a port free a moment ago.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// scrapeLLM reads a worker's aetherium_llm_requests_total by outcome and
// aetherium_llm_waits_total by cause.
func scrapeLLM(ctx context.Context, addr string) (calls, waits map[string]float64, err error) {
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	calls, waits = map[string]float64{}, map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		var into map[string]float64
		var label string
		switch {
		case strings.HasPrefix(line, "aetherium_llm_requests_total{"):
			into, label = calls, "outcome"
		case strings.HasPrefix(line, "aetherium_llm_waits_total{"):
			into, label = waits, "cause"
		default:
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		into[labelValue(line, label)] += v
	}
	return calls, waits, sc.Err()
}

func labelValue(line, label string) string {
	k := label + `="`
	i := strings.Index(line, k)
	if i < 0 {
		return "?"
	}
	rest := line[i+len(k):]
	if j := strings.IndexByte(rest, '"'); j >= 0 {
		return rest[:j]
	}
	return rest
}

func addCounts(into, from map[string]float64) map[string]float64 {
	if into == nil {
		into = map[string]float64{}
	}
	for k, v := range from {
		into[k] += v
	}
	return into
}

// rows renders section 8 into the result table: the two modes side by side.
func (g GovernorResult) markdown() string {
	if len(g.Modes) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n### 8. Model traffic: the governor under a rate-limited provider\n\n")
	fmt.Fprintf(&b, "%d single-agent runs (one model call each, `max_tokens` %d) submitted at once to %d worker processes × concurrency %d (%d slots), against a fake OpenAI API (`llmtest.Upstream`) limited to %d requests and %d tokens per minute; with the governor the workers' `llm.limits` is `{provider: openai, rpm: %d, tpm: %d}`.\n\n",
		g.Runs, g.MaxTokens, g.Procs, g.Concurrency, g.Procs*g.Concurrency, g.RPM, g.TPM, g.RPM, g.TPM)
	b.WriteString("| | " + strings.Join(modeNames(g.Modes), " | ") + " |\n|---" + strings.Repeat("|---", len(g.Modes)) + "|\n")
	row := func(what string, f func(m GovernorMode) string) {
		cells := make([]string, len(g.Modes))
		for i, m := range g.Modes {
			cells[i] = f(m)
		}
		fmt.Fprintf(&b, "| %s | %s |\n", what, strings.Join(cells, " | "))
	}
	row("model calls answered 429", func(m GovernorMode) string {
		return fmt.Sprintf("**%.2f %%** (%d of %d)", 100*m.Share429, m.RateLimited, m.Requests)
	})
	row("requests sent / answered 200", func(m GovernorMode) string {
		s := fmt.Sprintf("%d / %d", m.Requests, m.Answered)
		if m.OtherStatus > 0 {
			s += fmt.Sprintf(" (%d other statuses)", m.OtherStatus)
		}
		return s
	})
	row("runs completed / failed", func(m GovernorMode) string {
		s := fmt.Sprintf("%d / **%d**", m.Completed, m.Failed)
		if m.Other > 0 {
			s += fmt.Sprintf(" (**%d still running at the wait's end**)", m.Other)
		}
		if len(m.Reasons) > 0 {
			s += fmt.Sprintf(" %v", m.Reasons)
		}
		return s
	})
	row(fmt.Sprintf("peak requests in a 60 s window (limit %d)", g.RPM), func(m GovernorMode) string { return strconv.Itoa(m.PeakWindowRequests) })
	row(fmt.Sprintf("peak tokens in a 60 s window (limit %d)", g.TPM), func(m GovernorMode) string { return strconv.Itoa(m.PeakWindowTokens) })
	row("peak requests in flight at the fake", func(m GovernorMode) string { return strconv.Itoa(m.PeakConcurrency) })
	row("wall time (first submit → last run's end)", func(m GovernorMode) string {
		ideal := float64(g.Runs-g.RPM) / float64(g.RPM) * 60
		return fmt.Sprintf("%.1f s (the limit's floor: %.0f s)", m.Seconds, max(ideal, 0))
	})
	row(fmt.Sprintf("worker slots busy, sampled every %s: median / p90 / max", govSampleEvery), func(m GovernorMode) string {
		return fmt.Sprintf("**%d / %d / %d** of %d (mean %.1f, %d samples)", m.ActiveMedian, m.ActiveP90, m.ActiveMax, m.Slots, m.ActiveMean, m.Samples)
	})
	row("worker `llm_requests_total` by outcome", func(m GovernorMode) string { return countsString(m.WorkerCalls) })
	row("worker `llm_waits_total` by cause", func(m GovernorMode) string { return countsString(m.WorkerWaits) })
	row("`agent.waiting` events (one per wait)", func(m GovernorMode) string { return strconv.Itoa(m.WaitingEvents) })
	row("tokens per call: counted for TPM (input + max_tokens) / billed", func(m GovernorMode) string {
		return fmt.Sprintf("%.0f / %.0f", m.CountedPerCall, m.UsagePerCall)
	})
	return b.String()
}

func modeNames(ms []GovernorMode) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		if m.Governor == "off" {
			out[i] = "governor off (`AETHERIUM_LLM_GOVERNOR=off`)"
		} else {
			out[i] = "governor on"
		}
	}
	return out
}

func countsString(c map[string]float64) string {
	if len(c) == 0 {
		return "—"
	}
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %.0f", k, c[k])
	}
	return strings.Join(parts, ", ")
}
