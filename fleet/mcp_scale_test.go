package fleet_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/store"
)

// The scale proofs of issue 50: a stateless 2026-07-28 request may be served by
// any API process, and a call waiting for a human costs PostgreSQL nothing
// while it waits, whether its client holds a progress stream open or polls a
// task (docs/mcp.md, "Two protocol generations on one endpoint").

const modernVersion = "2026-07-28"

// modern speaks the stateless 2026-07-28 revision over raw HTTP, as mcp-go
// v1.6.0 puts it on the wire: every request names its version, method and tool
// in headers and carries the version and the client's capabilities in _meta.
type modern struct {
	endpoint string
	secret   string
	client   *http.Client
	ids      atomic.Int64
}

func newModern(endpoint, secret string) *modern {
	// Hundreds of requests at once to one host: the default keeps only two idle
	// connections per host and would dial for nearly every request.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 512, 512
	return &modern{endpoint: endpoint, secret: secret, client: &http.Client{Transport: tr}}
}

// rpcError is a JSON-RPC error.
type rpcError struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data"`
}

// modernResult is what the 2026-07-28 results of this file carry: a tool
// result, a task (tools/call answered as a task, tasks/get, tasks/cancel), or
// both.
type modernResult struct {
	ResultType string `json:"resultType"`
	IsError    bool   `json:"isError"`
	Content    []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	Meta           map[string]any `json:"_meta"`
	TaskID         string         `json:"taskId"`
	Status         string         `json:"status"`
	StatusMessage  string         `json:"statusMessage"`
	PollIntervalMs int64          `json:"pollIntervalMs"`
}

func (r modernResult) text() string {
	var b strings.Builder
	for _, c := range r.Content {
		b.WriteString(c.Text)
	}
	return b.String()
}

// request is one modern request's options.
type request struct {
	method, name string
	params       map[string]any
	// tasks declares the tasks extension in the client's capabilities.
	tasks bool
	// progressToken asks for progress notifications.
	progressToken string
	// onNotify sees each notification of an SSE answer.
	onNotify func(method string, params json.RawMessage)
}

// do sends one modern request and reads its answer, JSON or SSE, to the
// response of its id.
func (c *modern) do(ctx context.Context, r request) (modernResult, error) {
	id := c.ids.Add(1)
	caps := map[string]any{}
	if r.tasks {
		caps["extensions"] = map[string]any{"io.modelcontextprotocol/tasks": map[string]any{}}
	}
	meta := map[string]any{
		"io.modelcontextprotocol/protocolVersion":    modernVersion,
		"io.modelcontextprotocol/clientCapabilities": caps,
	}
	if r.progressToken != "" {
		meta["progressToken"] = r.progressToken
	}
	params := map[string]any{"_meta": meta}
	for k, v := range r.params {
		params[k] = v
	}
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": r.method, "params": params})
	if err != nil {
		return modernResult{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.endpoint, bytes.NewReader(body))
	if err != nil {
		return modernResult{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+c.secret)
	req.Header.Set("MCP-Protocol-Version", modernVersion)
	req.Header.Set("Mcp-Method", r.method)
	if r.name != "" {
		req.Header.Set("Mcp-Name", r.name)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return modernResult{}, err
	}
	defer resp.Body.Close()
	var msg struct {
		ID     *int64          `json:"id"`
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
		Result json.RawMessage `json:"result"`
		Error  *rpcError       `json:"error"`
	}
	answer := func() (modernResult, error) {
		if msg.Error != nil {
			return modernResult{}, fmt.Errorf("%s %s: HTTP %d: JSON-RPC error %d: %s %s", r.method, r.name, resp.StatusCode, msg.Error.Code, msg.Error.Message, msg.Error.Data)
		}
		var out modernResult
		if err := json.Unmarshal(msg.Result, &out); err != nil {
			return modernResult{}, fmt.Errorf("%s %s: result %s: %w", r.method, r.name, msg.Result, err)
		}
		return out, nil
	}
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		raw, err := io.ReadAll(resp.Body)
		if err != nil {
			return modernResult{}, err
		}
		if err := json.Unmarshal(raw, &msg); err != nil {
			return modernResult{}, fmt.Errorf("%s %s: HTTP %d: %q: %w", r.method, r.name, resp.StatusCode, raw, err)
		}
		return answer()
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 8<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data:")
		if !ok {
			continue
		}
		msg.ID, msg.Method, msg.Params, msg.Result, msg.Error = nil, "", nil, nil, nil
		if err := json.Unmarshal([]byte(strings.TrimSpace(data)), &msg); err != nil {
			return modernResult{}, fmt.Errorf("%s %s: bad SSE message %q: %w", r.method, r.name, data, err)
		}
		if msg.Method != "" && msg.ID == nil {
			if r.onNotify != nil {
				r.onNotify(msg.Method, msg.Params)
			}
			continue
		}
		if msg.ID != nil && *msg.ID == id {
			return answer()
		}
	}
	if err := sc.Err(); err != nil {
		return modernResult{}, err
	}
	return modernResult{}, fmt.Errorf("%s %s: the SSE stream ended without the response", r.method, r.name)
}

// callTool is a modern tools/call.
func (c *modern) callTool(ctx context.Context, tool string, args map[string]any, r request) (modernResult, error) {
	r.method, r.name = "tools/call", tool
	r.params = map[string]any{"name": tool, "arguments": args}
	return c.do(ctx, r)
}

// task is a modern tasks/get or tasks/cancel of one task. Our server wants
// the task's id in Mcp-Name as well (modern.go; mcp-go names only tools/call,
// prompts/get and resources/read there).
func (c *modern) task(ctx context.Context, method, id string) (modernResult, error) {
	return c.do(ctx, request{method: method, name: id, params: map[string]any{"taskId": id}, tasks: true})
}

// A second API role of the fleet, with its own events hub and MCP server,
// serves the same principal's MCP run: a call made through it runs on the
// fleet's workers, and a Restricted one waits for an approval decided through
// the first API, whose resume reaches the second process's wait through Redis.
func TestMCPSecondAPIServesTheSameFleet(t *testing.T) {
	t.Parallel()
	m := setup(t, func(c *config.Config) { c.Security.ApprovalWindow = 10 * time.Minute })
	second := m.StartAPI()
	require.NotEqual(t, m.MCPURL, second.MCPURL)
	require.NotSame(t, m.EventsHub(), second.EventsHub(), "a process of its own")

	first, err := m.connect(t, aliceSecret, nil)
	require.NoError(t, err)
	wrote := m.call(t, first, "write_file", map[string]any{"path": "shared.txt", "content": "from the first api"})
	require.False(t, wrote.IsError, text(wrote))

	other := m
	other.endpoint = second.MCPURL + "/mcp/ide"
	cs, err := other.connect(t, aliceSecret, nil)
	require.NoError(t, err)
	read := m.call(t, cs, "read_file", map[string]any{"path": "shared.txt"})
	require.False(t, read.IsError, text(read))
	require.Contains(t, text(read), "from the first api")
	require.Equal(t, wrote.Meta["aetherium/run_id"], read.Meta["aetherium/run_id"], "one live MCP run per principal and profile, whichever process serves")

	done := make(chan *mcp.CallToolResult, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "download_pdf", Arguments: map[string]any{"url": "http://127.0.0.1:1/second.pdf"}})
		if err != nil {
			res = refusalResult(err)
		}
		done <- res
	}()
	pending := m.pendingApproval(t)
	m.decide(t, pending.ID, "approve")
	select {
	case res := <-done:
		require.False(t, res.IsError, text(res))
		require.Contains(t, text(res), "downloaded http://127.0.0.1:1/second.pdf")
		require.Equal(t, "approver", m.audit(t, res).ApprovedBy)
	case <-time.After(30 * time.Second):
		t.Fatal("the second api's wait was not woken by the decision")
	}
}

func refusalResult(err error) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}
}

// roundRobin is a reverse proxy that sends each request to the next backend in
// turn, as a load balancer in front of API replicas would without affinity.
type roundRobin struct {
	backends []*url.URL
	next     atomic.Uint64
	served   []atomic.Int64
}

func newRoundRobin(t *testing.T, backends ...string) (*roundRobin, string) {
	t.Helper()
	rr := &roundRobin{served: make([]atomic.Int64, len(backends))}
	for _, b := range backends {
		u, err := url.Parse(b)
		require.NoError(t, err)
		rr.backends = append(rr.backends, u)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 512, 512
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			i := int((rr.next.Add(1) - 1) % uint64(len(rr.backends)))
			rr.served[i].Add(1)
			r.SetURL(rr.backends[i])
			r.Out.Host = r.In.Host // as a load balancer that keeps the Host the client named
		},
		Transport: tr,
		// SSE answers (progress waits) pass through as they are written.
		FlushInterval: -1,
	}
	srv := httptest.NewServer(proxy)
	t.Cleanup(srv.Close)
	return rr, srv.URL
}

// 1,000 stateless tools/call requests spread over two API processes, each
// request to the next: every one is answered, and run and audited exactly once,
// whichever process took it. Nothing of a call lives in the process that
// received it.
func TestMCPStatelessCallsSpreadOverTwoAPIs(t *testing.T) {
	t.Parallel()
	const clients, perClient = 20, 50
	m := setup(t, func(c *config.Config) {
		// All 20 clients are alice: the per-principal bound must not refuse them.
		c.MCP.MaxCallsInFlight = 4 * clients
	})
	second := m.StartAPI()
	// Two API processes take the requests; one more worker server keeps the
	// workers from being the only queue (1,000 calls on 2 cores: ~150 calls/s).
	m.StartWorker()
	rr, proxyURL := newRoundRobin(t, m.MCPURL, second.MCPURL)
	c := newModern(proxyURL+"/mcp/ide", aliceSecret)

	var (
		mu     sync.Mutex
		ids    = map[string]int{}
		errs   []string
		failed atomic.Int64
		wg     sync.WaitGroup
	)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	start := time.Now()
	for cl := range clients {
		wg.Go(func() {
			for n := range perClient {
				path := fmt.Sprintf("scale/c%02d/%03d.txt", cl, n)
				res, err := c.callTool(ctx, "write_file", map[string]any{"path": path, "content": path}, request{})
				if err == nil && (res.ResultType != "complete" || res.IsError) {
					err = fmt.Errorf("write %s: resultType %q isError %v: %s", path, res.ResultType, res.IsError, res.text())
				}
				id, _ := res.Meta["aetherium/call_id"].(string)
				if err == nil && id == "" {
					err = fmt.Errorf("write %s: no aetherium/call_id in %v", path, res.Meta)
				}
				mu.Lock()
				if err != nil {
					failed.Add(1)
					if len(errs) < 5 {
						errs = append(errs, err.Error())
					}
				} else {
					ids[id]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	total := clients * perClient
	a, b := rr.served[0].Load(), rr.served[1].Load()
	t.Logf("%d stateless calls in %s: %.0f calls/s; first api served %d (%.0f%%), second %d (%.0f%%); %d errors",
		total, elapsed.Round(time.Millisecond), float64(total)/elapsed.Seconds(), a, 100*float64(a)/float64(total), b, 100*float64(b)/float64(total), failed.Load())
	require.Zero(t, failed.Load(), "errors: %v", errs)
	require.Len(t, ids, total, "every answer names a call of its own")
	require.GreaterOrEqual(t, a, int64(total*30/100), "the first api served a substantial share")
	require.GreaterOrEqual(t, b, int64(total*30/100), "the second api served a substantial share")

	// Each call ran once and has exactly one audit row (its call key m:<id>:<id>).
	rows, err := m.Store.Pool.Query(ctx, `SELECT call_key, count(*) FROM tool_audit WHERE call_key LIKE 'm:%' GROUP BY call_key`)
	require.NoError(t, err)
	audited := map[string]int{}
	for rows.Next() {
		var key string
		var n int
		require.NoError(t, rows.Scan(&key, &n))
		audited[key] = n
	}
	require.NoError(t, rows.Err())
	require.Len(t, audited, total, "no audit row of a call nobody asked for")
	for id := range ids {
		require.Equal(t, 1, audited["m:"+id+":"+id], "audit rows of call %s", id)
	}
	var done, all int
	require.NoError(t, m.Store.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'done'), count(*) FROM mcp_calls`).Scan(&done, &all))
	require.Equal(t, total, all)
	require.Equal(t, total, done)
}

// txRate measures PostgreSQL's transactions per second over a window of d.
func txRate(m mcpFleet, d time.Duration) (n int64, rate float64) {
	before := m.Transactions()
	start := time.Now()
	time.Sleep(d)
	n = m.Transactions() - before
	return n, float64(n) / time.Since(start).Seconds()
}

// 200 Restricted calls waiting for a human, 100 as tasks their clients poll and
// 100 as progress waits held open, cost PostgreSQL no more transactions than
// the same fleet idle: a wait is woken by the events hub, a task poll reads the
// process's cache of the call. Every request goes to the next of two API
// processes, so a task is polled, and withdrawn, by a process that did not
// create it. Then all 200 are withdrawn by their clients (tasks/cancel,
// closing the stream), and no pending approval is left behind.
func TestMCPWaitingCallsCostNoQueries(t *testing.T) {
	t.Parallel()
	const tasks, streams = 100, 100
	const window, sweep = 6 * time.Second, 2 * time.Second
	m := setup(t, func(c *config.Config) {
		c.MCP.MaxCallsInFlight = 2 * (tasks + streams)
		// Nobody decides: the approvals outlive the test.
		c.Security.ApprovalWindow = 10 * time.Minute
		// The safety net of every waiting call and polled task is one query per
		// process per mcp.poll (the sweep): at 2 s instead of 30 s it runs about
		// three times per process in the window, and is measured with the rest.
		c.MCP.Poll = sweep
	})
	second := m.StartAPI()
	backends := []string{m.MCPURL, second.MCPURL}
	rr, proxyURL := newRoundRobin(t, backends...)
	c := newModern(proxyURL+"/mcp/ide", aliceSecret)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// The MCP run exists and both processes' pools are warm before anything is
	// measured.
	for i := range backends {
		res, err := c.callTool(ctx, "write_file", map[string]any{"path": fmt.Sprintf("warm-%d.txt", i), "content": "x"}, request{})
		require.NoError(t, err)
		require.False(t, res.IsError, res.text())
	}
	time.Sleep(500 * time.Millisecond)

	idleN, idle := txRate(m, window)

	// 100 calls answered as tasks, then polled at the interval the server asks.
	taskIDs := make([]string, tasks)
	var wg sync.WaitGroup
	var startErrs atomic.Int64
	var firstErr atomic.Value
	for i := range tasks {
		wg.Go(func() {
			res, err := c.callTool(ctx, "download_pdf", map[string]any{"url": fmt.Sprintf("http://127.0.0.1:1/task-%03d.pdf", i)}, request{tasks: true})
			if err == nil && (res.ResultType != "task" || res.TaskID == "") {
				err = fmt.Errorf("task %d: resultType %q taskId %q: %s", i, res.ResultType, res.TaskID, res.text())
			}
			if err != nil {
				startErrs.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
				return
			}
			taskIDs[i] = res.TaskID
		})
	}
	wg.Wait()
	require.Zero(t, startErrs.Load(), "%v", firstErr.Load())

	// 100 progress waits, each an SSE answer held open until withdrawn.
	streamCtx, closeStreams := context.WithCancel(ctx)
	defer closeStreams()
	progressed := make([]atomic.Int64, streams)
	var streamsDone sync.WaitGroup
	var streamErrs atomic.Int64
	for i := range streams {
		streamsDone.Go(func() {
			_, err := c.callTool(streamCtx, "download_pdf", map[string]any{"url": fmt.Sprintf("http://127.0.0.1:1/wait-%03d.pdf", i)}, request{
				progressToken: fmt.Sprintf("wait-%03d", i),
				onNotify: func(method string, _ json.RawMessage) {
					if method == "notifications/progress" {
						progressed[i].Add(1)
					}
				},
			})
			if streamCtx.Err() == nil {
				// An answer before the withdrawal: the wait did not hold.
				streamErrs.Add(1)
				firstErr.CompareAndSwap(nil, fmt.Sprintf("stream %d answered while waiting: %v", i, err))
			}
		})
	}
	require.Eventually(t, func() bool {
		var waiting int
		if err := m.Store.Pool.QueryRow(ctx, `SELECT count(*) FROM mcp_calls WHERE status = 'waiting'`).Scan(&waiting); err != nil || waiting < tasks+streams {
			return false
		}
		for i := range progressed {
			if progressed[i].Load() == 0 {
				return false
			}
		}
		return true
	}, 45*time.Second, 100*time.Millisecond, "all 200 calls park on their approvals and every stream has progress")

	// A process reads a task's row at its first poll there, caches it and
	// watches the call on the hub. Once more it finds the entry stale without
	// any change of the call and reads again at the next poll: when the hub
	// confirms the subscription (events.Hub wakes a channel's watchers on its
	// "subscribe": an announcement may have fallen between the read and it).
	// That is once per task and process, not per poll: it is spent here, on
	// both processes, before the window.
	getAll := func() {
		for _, b := range backends {
			direct := newModern(b+"/mcp/ide", aliceSecret)
			for _, id := range taskIDs {
				wg.Go(func() {
					if _, err := direct.task(ctx, "tasks/get", id); err != nil {
						startErrs.Add(1)
						firstErr.CompareAndSwap(nil, err.Error())
					}
				})
			}
			wg.Wait()
		}
		require.Zero(t, startErrs.Load(), "%v", firstErr.Load())
	}
	getAll()
	time.Sleep(500 * time.Millisecond) // the subscriptions are confirmed
	getAll()

	// Every task is polled at its interval through the measured window.
	pollCtx, stopPolling := context.WithCancel(ctx)
	var polls, pollErrs atomic.Int64
	var pollers sync.WaitGroup
	for _, id := range taskIDs {
		pollers.Go(func() {
			for {
				res, err := c.task(pollCtx, "tasks/get", id)
				if pollCtx.Err() != nil {
					return
				}
				polls.Add(1)
				if err == nil && (res.Status != "working" || !strings.Contains(res.StatusMessage, "approval") || res.PollIntervalMs <= 0) {
					err = fmt.Errorf("task %s: status %q (%s), pollIntervalMs %d", id, res.Status, res.StatusMessage, res.PollIntervalMs)
				}
				if err != nil {
					pollErrs.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				}
				every := time.Duration(res.PollIntervalMs) * time.Millisecond
				if every <= 0 {
					every = time.Second
				}
				select {
				case <-pollCtx.Done():
					return
				case <-time.After(every):
				}
			}
		})
	}
	time.Sleep(time.Second) // every task polled once more before the window
	pollsBefore := polls.Load()
	progressBefore := make([]int64, streams)
	for i := range progressed {
		progressBefore[i] = progressed[i].Load()
	}
	waitN, waiting := txRate(m, window)
	pollsIn := polls.Load() - pollsBefore
	for i := range progressed {
		// The streams were alive through the window, not stalled.
		require.Greater(t, progressed[i].Load(), progressBefore[i], "stream %d had no progress in the window", i)
	}
	stopPolling()
	pollers.Wait()
	t.Logf("PostgreSQL: idle %d tx in %s (%.2f tx/s); with %d tasks and %d progress waits %d tx (%.2f tx/s), during %d task polls; requests per api %d/%d",
		idleN, window, idle, tasks, streams, waitN, waiting, pollsIn, rr.served[0].Load(), rr.served[1].Load())
	require.Zero(t, pollErrs.Load(), "%v", firstErr.Load())
	require.Zero(t, streamErrs.Load(), "%v", firstErr.Load())
	require.Greater(t, pollsIn, int64(tasks), "the tasks were polled through the window")
	// Within ±10 % of idle; idle is a handful of transactions, a band below the
	// noise of the fleet's own timers, so the bound is absolute: the sweeps'
	// own cost (at most two transactions each: pgx prepares the statement on a
	// connection Transactions' reset made new), 10 of noise, and a tenth of the
	// waiting calls for the fleet's periodic jobs (the scheduler's sweeps), which
	// fall into one window or the other (CI on a loaded machine saw 28 against
	// 0 idle). One query per waiting call would add 200, one per task poll
	// pollsIn (~700): both stay far outside.
	sweeps := int64(len(backends) * (int(window/sweep) + 1))
	slack := max(idleN/10, 2*sweeps+10+int64(tasks+streams)/10)
	t.Logf("bound: idle ± %d tx (%d sweeps at mcp.poll %s)", slack, sweeps, sweep)
	require.LessOrEqual(t, waitN, idleN+slack, "waiting calls and task polls query PostgreSQL (idle %d, waiting %d, %d polls)", idleN, waitN, pollsIn)
	require.GreaterOrEqual(t, waitN, idleN-slack, "the idle window was busier than the waiting one: the measurement is not sound")

	// Withdrawal at scale: the clients cancel their tasks and close their streams.
	for _, id := range taskIDs {
		wg.Go(func() {
			res, err := c.task(ctx, "tasks/cancel", id)
			if err == nil && res.ResultType != "complete" {
				err = fmt.Errorf("cancel %s: resultType %q", id, res.ResultType)
			}
			if err != nil {
				startErrs.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
			}
		})
	}
	wg.Wait()
	require.Zero(t, startErrs.Load(), "tasks/cancel: %v", firstErr.Load())
	closeStreams()
	streamsDone.Wait()
	require.Eventually(t, func() bool {
		// Any run: the database is this test's own.
		pending, err := m.Store.ListApprovals(ctx, store.ApprovalPending, "", 1000)
		return err == nil && len(pending) == 0
	}, 30*time.Second, 100*time.Millisecond, "every approval of a withdrawn call is cancelled")
	var withdrawn int
	require.NoError(t, m.Store.Pool.QueryRow(ctx, `SELECT count(*) FROM mcp_calls WHERE status = 'done' AND decision = 'withdrawn'`).Scan(&withdrawn))
	require.Equal(t, tasks+streams, withdrawn)
	for _, id := range taskIDs[:3] {
		res, err := c.task(ctx, "tasks/get", id)
		require.NoError(t, err)
		require.Equal(t, "cancelled", res.Status, "a withdrawn task reads cancelled")
	}
}
