package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/aetherium-engine/aetherium/internal/harness"
)

// apiCase is one kind of request of the load mix.
type apiCase struct {
	name    string
	hostile bool
	weight  int
	// want is the exact status a hostile request must get (0: any 4xx).
	want int
	// limited marks a valid submission that may also be refused with 429, a
	// Retry-After and a JSON error: the principal's runs in flight are at the limit.
	limited bool
	req     func(base, runID string) (*http.Request, error)
}

func jsonReq(method, url string, body []byte, header ...string) (*http.Request, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return req, nil
}

func apiCases() []apiCase {
	submit := func(body string) func(base, _ string) (*http.Request, error) {
		return func(base, _ string) (*http.Request, error) {
			return jsonReq("POST", base+"/api/orchestrator/run-from-template", []byte(body))
		}
	}
	inline := func(body string) func(base, _ string) (*http.Request, error) {
		return func(base, _ string) (*http.Request, error) {
			return jsonReq("POST", base+"/api/orchestrator/run", []byte(body))
		}
	}
	get := func(path string) func(base, runID string) (*http.Request, error) {
		return func(base, runID string) (*http.Request, error) {
			return jsonReq("GET", base+strings.ReplaceAll(path, "{id}", runID), nil)
		}
	}
	huge := []byte(`{"template":"demo","prompt":"` + strings.Repeat("A", 2<<20) + `"}`)
	longPrompt, _ := json.Marshal(map[string]any{"template": "demo", "prompt": strings.Repeat("p", 70<<10), "variables": map[string]any{"topic": "t"}})
	team, _ := json.Marshal(harness.Crew(1))
	var loop map[string]any
	_ = json.Unmarshal(team, &loop)
	loop["supervisor"].(map[string]any)["prompt"] = "{{range 100000000000}}x{{end}}"
	loopTeam, _ := json.Marshal(map[string]any{"prompt": "p", "team": loop})
	validTeam, _ := json.Marshal(map[string]any{"prompt": "p", "team": json.RawMessage(team)})
	modelTeam := func(model string) func(base, _ string) (*http.Request, error) {
		return func(base, _ string) (*http.Request, error) {
			m := model
			if m == "" { // a new valid name each time: labels must not follow them
				m = "drill/" + uuid.NewString() + strings.Repeat("m", 80)
			}
			raw, _ := json.Marshal(map[string]any{"prompt": "p", "team": crewWithModel(m)})
			return jsonReq("POST", base+"/api/orchestrator/run", raw)
		}
	}
	return []apiCase{
		{name: "submit the demo template", weight: 6, limited: true, req: submit(`{"template":"demo","prompt":"load","variables":{"topic":"load"}}`)},
		{name: "submit an inline team", weight: 3, limited: true, req: inline(string(validTeam))},
		{name: "submit a team with a model name of its own", weight: 2, limited: true, req: modelTeam("")},
		{name: "get a run", weight: 6, req: get("/api/runs/{id}")},
		{name: "list runs", weight: 3, req: get("/api/runs?limit=5&status=completed")},
		{name: "a run's delegations", weight: 3, req: get("/api/runs/{id}/delegations")},
		{name: "tool schemas", weight: 2, req: get("/api/tools/mcp-schemas?servers=workspace&role=worker")},
		{name: "templates", weight: 2, req: get("/api/templates")},
		{name: "healthz", weight: 2, req: get("/healthz")},

		{name: "malformed JSON", hostile: true, weight: 4, want: 400, req: submit(`{"template":"demo","prompt":`)},
		{name: "bytes that are not JSON", hostile: true, weight: 2, want: 400, req: submit("\xff\xfe{\x00}")},
		{name: "a JSON array, not an object", hostile: true, weight: 2, want: 400, req: submit(`["demo"]`)},
		{name: "trailing data", hostile: true, weight: 2, want: 400, req: submit(`{"template":"demo","prompt":"p"} {"x":1}`)},
		{name: "unknown field", hostile: true, weight: 2, want: 400, req: submit(`{"template":"demo","prompt":"p","admin":true}`)},
		{name: "mistyped field", hostile: true, weight: 2, want: 400, req: submit(`{"template":5,"prompt":"p"}`)},
		{name: "empty body", hostile: true, weight: 2, want: 400, req: submit(``)},
		{name: "missing prompt", hostile: true, weight: 2, want: 400, req: submit(`{"template":"demo"}`)},
		{name: "prompt over 64 KiB", hostile: true, weight: 1, want: 400, req: submit(string(longPrompt))},
		{name: "nested 100000 deep", hostile: true, weight: 1, want: 400, req: submit(`{"template":"demo","prompt":"p","variables":{"a":` + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + `}}`)},
		{name: "body over the 1 MiB limit", hostile: true, weight: 1, want: 413, req: func(base, _ string) (*http.Request, error) {
			return jsonReq("POST", base+"/api/orchestrator/run-from-template", huge)
		}},
		{name: "model name of 2,000 characters", hostile: true, weight: 1, want: 400, req: modelTeam(strings.Repeat("m", 2000))},
		{name: "model name with a newline", hostile: true, weight: 1, want: 400, req: modelTeam("gpt\nX-Evil: 1")},
		{name: "unknown template", hostile: true, weight: 3, want: 404, req: submit(`{"template":"no-such-team","prompt":"p"}`)},
		{name: "template name with a path", hostile: true, weight: 2, want: 404, req: submit(`{"template":"../../etc/passwd","prompt":"p"}`)},
		{name: "missing variable", hostile: true, weight: 1, want: 400, req: submit(`{"template":"demo","prompt":"p"}`)},
		{name: "invalid inline team", hostile: true, weight: 2, want: 400, req: inline(`{"prompt":"p","team":{"name":"x","supervisor":{"name":""}}}`)},
		{name: "inline team looping in its prompt template", hostile: true, weight: 1, want: 400, req: inline(string(loopTeam))},
		{name: "bad run id", hostile: true, weight: 3, want: 400, req: get("/api/runs/not-a-uuid")},
		{name: "bad run id with a path", hostile: true, weight: 1, want: 0, req: get("/api/runs/..%2F..%2Fetc%2Fpasswd")},
		{name: "unknown run", hostile: true, weight: 3, want: 404, req: func(base, _ string) (*http.Request, error) {
			return jsonReq("GET", base+"/api/runs/"+uuid.NewString(), nil)
		}},
		{name: "bad Last-Event-ID", hostile: true, weight: 2, want: 400, req: func(base, runID string) (*http.Request, error) {
			return jsonReq("GET", base+"/api/runs/"+runID+"/events", nil, "Last-Event-ID", "-1; DROP TABLE runs")
		}},
		{name: "cancel a bad id", hostile: true, weight: 1, want: 400, req: func(base, _ string) (*http.Request, error) {
			return jsonReq("POST", base+"/api/runs/xyz/cancel", nil)
		}},
		{name: "approve an unknown approval", hostile: true, weight: 1, want: 0, req: func(base, _ string) (*http.Request, error) {
			return jsonReq("POST", base+"/api/approvals/apr_nope/approve", []byte(`{"reason":"x"}`))
		}},
		{name: "bad list limit", hostile: true, weight: 1, want: 400, req: get("/api/runs?limit=-5")},
		{name: "bad list status", hostile: true, weight: 1, want: 400, req: get("/api/runs?status=everything")},
		{name: "bad schema role", hostile: true, weight: 1, want: 400, req: get("/api/tools/mcp-schemas?role=root")},
		{name: "unknown route", hostile: true, weight: 1, want: 404, req: get("/api/admin/shell")},
	}
}

// caseStats tallies one case's answers.
type caseStats struct {
	mu       sync.Mutex
	n        int
	statuses map[int]int
	bad      int
	example  string
	transErr int
}

func (s *caseStats) add(status int, bad bool, example string, transport bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	if transport {
		s.transErr++
	} else {
		s.statuses[status]++
	}
	if bad {
		s.bad++
		if s.example == "" {
			s.example = example
		}
	}
}

// drillAPI: goroutines hammer the API process with a mix of valid requests and
// hostile ones for a while. Every hostile request gets its 4xx with a JSON error,
// valid ones succeed, nothing is a 5xx, the process stays up and its memory stays
// bounded.
func drillAPI(ctx context.Context, e *env, r *report) error {
	c, err := newCluster(ctx, e, "api", clusterOpts{workers: 1, concurrency: 2 * e.o.concurrency, maxRunsInFlight: drillRunsInFlight})
	if err != nil {
		return err
	}
	defer c.close()
	runID, err := c.client.SubmitTemplate(ctx, "demo", "seed", map[string]any{"topic": "seed"})
	if err != nil {
		return err
	}
	base := "http://" + c.apiAddr

	// A run that stays in flight (waiting for an approval nobody gives), followed by
	// drillStreams event streams through the whole load.
	waitingID, err := c.client.SubmitTeam(ctx, waitingTeam(), "wait")
	if err != nil {
		return err
	}
	if err := waitStatus(ctx, c, waitingID, "waiting", 30*time.Second); err != nil {
		return err
	}
	rdb := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", c.redis.Port)})
	defer rdb.Close()
	clients0, err := redisClients(ctx, rdb)
	if err != nil {
		return fmt.Errorf("redis clients: %w", err)
	}
	held := openStreams(ctx, base, waitingID, drillStreams)
	defer held.cancel()
	time.Sleep(500 * time.Millisecond) // every stream's watch is registered
	clients1, err := redisClients(ctx, rdb)
	if err != nil {
		return fmt.Errorf("redis clients: %w", err)
	}
	r.check(held.opened.Load() == drillStreams, "%d event streams open on a run in flight (refused: %d%s)", held.opened.Load(), held.refused.Load(), exampleOf(&held.example))
	r.check(clients1-clients0 <= streamRedisClients, "the streams added %d Redis clients (%d → %d; at most %d)", clients1-clients0, clients0, clients1, streamRedisClients)
	idle, _ := harness.ReadMemory(c.api.Pid())

	cases := apiCases()
	var deck []int
	for i, cs := range cases {
		for range cs.weight {
			deck = append(deck, i)
		}
	}
	stats := make([]*caseStats, len(cases))
	for i := range stats {
		stats[i] = &caseStats{statuses: map[int]int{}}
	}
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	const workers = 32
	stop := time.Now().Add(time.Duration(e.o.loadSeconds) * time.Second)
	inFlight := sampleInFlight(ctx, c, stop)
	var total atomic.Int64
	var wg sync.WaitGroup
	say("load: %d goroutines for %ds, %d kinds of request (%d hostile)", workers, e.o.loadSeconds, len(cases), countHostile(cases))
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; time.Now().Before(stop) && ctx.Err() == nil; i += workers {
				k := deck[i%len(deck)]
				cs := cases[k]
				req, err := cs.req(base, runID)
				if err != nil {
					stats[k].add(0, true, err.Error(), true)
					continue
				}
				resp, err := client.Do(req.WithContext(ctx))
				total.Add(1)
				if err != nil {
					// A client still sending an oversized body may see the connection
					// closed under it after the server has answered 413.
					stats[k].add(0, cs.want != 413, err.Error(), true)
					continue
				}
				raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
				resp.Body.Close()
				bad, why := judge(cs, resp.StatusCode, resp.Header, raw)
				stats[k].add(resp.StatusCode, bad, fmt.Sprintf("HTTP %d %s: %.200s", resp.StatusCode, why, raw), false)
			}
		}()
	}
	wg.Wait()
	elapsed := float64(e.o.loadSeconds)
	say("load: %d requests in %.0fs (%.0f/s)", total.Load(), elapsed, float64(total.Load())/elapsed)

	fivexx := 0
	for i, cs := range cases {
		s := stats[i]
		for code, n := range s.statuses {
			if code >= 500 {
				fivexx += n
			}
		}
		kind := "valid"
		if cs.hostile {
			kind = "hostile"
		}
		detail := statusList(s.statuses)
		if s.transErr > 0 {
			detail += fmt.Sprintf(", %d connection closed while sending", s.transErr)
		}
		if s.n == 0 {
			r.fail("%s %q: never sent", kind, cs.name)
			continue
		}
		if cs.hostile {
			r.check(s.bad == 0, "hostile %-42q ×%-5d → %s, each with a JSON error%s", cs.name, s.n, detail, example(s))
		} else {
			r.check(s.bad == 0, "valid   %-42q ×%-5d → %s%s", cs.name, s.n, detail, example(s))
		}
	}
	r.check(fivexx == 0, "no 5xx answer in %d requests (%d)", total.Load(), fivexx)
	<-inFlight.done
	limited := 0
	for i, cs := range cases {
		if cs.limited {
			limited += stats[i].statuses[http.StatusTooManyRequests]
		}
	}
	r.check(limited > 0, "the limit of %d runs in flight was reached: %d submissions refused with 429 and a Retry-After", drillRunsInFlight, limited)
	r.check(inFlight.max.Load() <= drillRunsInFlight && inFlight.errs.Load() == 0, "runs in flight never over the limit: at most %d seen (limit %d, %d failed samples)", inFlight.max.Load(), drillRunsInFlight, inFlight.errs.Load())
	if n, err := modelSeries(ctx, c.metrics0); err != nil {
		r.fail("worker metrics: %v", err)
	} else {
		r.check(n <= maxModelLabels, "model label values on a worker's /metrics: %d after %d submitted model names (at most %d)", n, stats[modelCase(cases)].statuses[http.StatusAccepted], maxModelLabels)
	}

	// Cancelling the run ends every stream at its terminal event, and the API lets go.
	clients2, _ := redisClients(ctx, rdb)
	if code, raw, err := c.client.Do(ctx, "POST", "/api/runs/"+waitingID+"/cancel", nil); err != nil || code != http.StatusOK {
		r.fail("cancel the waiting run: HTTP %d %s %v", code, raw, err)
	}
	ended := make(chan struct{})
	go func() { held.wg.Wait(); close(ended) }()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
	}
	r.check(held.ended.Load() == drillStreams, "every stream ended at the run's terminal event: %d of %d (Redis clients during the load %d)", held.ended.Load(), drillStreams, clients2)
	c.alive(r)
	ready, _ := c.waitReady(ctx, 10*time.Second)
	r.check(ready, "the API is ready after the load")
	mem, err := harness.ReadMemory(c.api.Pid())
	if err == nil {
		r.check(mem.HWM < int64(e.o.rssLimitMiB)<<10, "API memory bounded: peak RSS %d MiB (idle %d MiB, limit %d MiB)", mem.HWM>>10, idle.RSS>>10, e.o.rssLimitMiB)
	} else {
		r.fail("API memory: %v", err)
	}
	return nil
}

// judge decides whether an answer is right for its case.
func judge(cs apiCase, status int, header http.Header, raw []byte) (bool, string) {
	if status >= 500 {
		return true, "server error"
	}
	if cs.limited && status == http.StatusTooManyRequests {
		if s, err := strconv.Atoi(header.Get("Retry-After")); err != nil || s < 1 {
			return true, "429 without a Retry-After in seconds"
		}
		return jsonError(raw)
	}
	if !cs.hostile {
		if status < 200 || status >= 300 {
			return true, "valid request refused"
		}
		return false, ""
	}
	if status < 400 || status >= 500 {
		return true, "hostile request not refused with a 4xx"
	}
	if cs.want != 0 && status != cs.want {
		return true, fmt.Sprintf("want %d", cs.want)
	}
	return jsonError(raw)
}

// jsonError checks that a refusal carries a JSON error.
func jsonError(raw []byte) (bool, string) {
	var body struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(raw, &body) != nil || body.Error == "" {
		return true, "no JSON error"
	}
	return false, ""
}

// maxModelLabels bounds the model label's values: the configured models and "other".
const maxModelLabels = 8

func modelCase(cs []apiCase) int {
	for i, c := range cs {
		if strings.HasPrefix(c.name, "submit a team with a model name") {
			return i
		}
	}
	return 0
}

func exampleOf(v *atomic.Value) string {
	if s, ok := v.Load().(string); ok {
		return " — e.g. " + s
	}
	return ""
}

// waitStatus waits until the run has status.
func waitStatus(ctx context.Context, c *cluster, runID, status string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var got string
		if err := c.pool.QueryRow(ctx, `SELECT status FROM runs WHERE id = $1`, runID).Scan(&got); err != nil {
			return fmt.Errorf("run %s: %w", runID, err)
		}
		if got == status {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("run %s: status %q after %s, want %q", runID, got, timeout, status)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func countHostile(cs []apiCase) int {
	n := 0
	for _, c := range cs {
		if c.hostile {
			n++
		}
	}
	return n
}

func statusList(m map[int]int) string {
	codes := make([]int, 0, len(m))
	for c := range m {
		codes = append(codes, c)
	}
	sort.Ints(codes)
	parts := make([]string, 0, len(codes))
	for _, c := range codes {
		parts = append(parts, fmt.Sprintf("%d×%d", c, m[c]))
	}
	if len(parts) == 0 {
		return "no answer"
	}
	return strings.Join(parts, ", ")
}

func example(s *caseStats) string {
	if s.example == "" {
		return ""
	}
	return " — e.g. " + s.example
}
