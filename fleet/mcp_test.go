package fleet_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/api"
	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/egress"
	"github.com/aetherium-engine/aetherium/fleet"
	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/mcpserver"
	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/templates"
	"github.com/aetherium-engine/aetherium/tools"
)

// The tokens of the MCP tests: alice calls tools, reader only lists them,
// approver decides approvals (and may not use the profile at all).
const (
	aliceSecret    = "mcp-alice-secret"
	readerSecret   = "mcp-reader-secret"
	approverSecret = "mcp-approver-secret"
	mcpProject     = "mcp-proj"
)

// mcpCatalog is the ide profile's catalog: exactly its tools list.
var mcpCatalog = []string{"download_pdf", "edit_file", "list_files", "read_file", "todo", "write_file"}

type mcpFleet struct {
	*fleettest.Fleet
	endpoint string
	// dispatched counts the router's dispatches per call id (outside the gate).
	dispatched *dispatches
}

type dispatches struct {
	mu sync.Mutex
	n  map[string]int
}

func (d *dispatches) middleware(next tools.Handler) tools.Handler {
	return tools.HandlerFunc(func(ctx context.Context, call tools.Call) (tools.Result, error) {
		d.mu.Lock()
		d.n[call.ID]++
		d.mu.Unlock()
		return next.Handle(ctx, call)
	})
}

func (d *dispatches) of(id string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.n[id]
}

// setup starts a fleet serving the ide profile (project mcp-proj, a rule that
// refuses secrets/, the Restricted download_pdf stood in) with the three tokens.
func setup(t *testing.T, configure ...func(*config.Config)) mcpFleet {
	t.Helper()
	rules := filepath.Join(t.TempDir(), "permissions.yaml")
	require.NoError(t, os.WriteFile(rules, []byte(`
rules:
  - match: {tool: write_file, path_pattern: "^secrets/"}
    action: always_deny
    reason: "secrets/ is off limits"
`), 0o644))
	d := &dispatches{n: map[string]int{}}
	f := fleettest.Start(t, fleettest.Options{
		Configure: func(c *config.Config) {
			c.Security.PermissionsFile = rules
			c.API.Tokens = []api.Token{
				{Name: "alice", SHA256: api.HashToken(aliceSecret), Roles: []string{api.RoleSubmit, api.RoleRead}},
				{Name: "reader", SHA256: api.HashToken(readerSecret), Roles: []string{api.RoleRead}},
				{Name: "approver", SHA256: api.HashToken(approverSecret), Roles: []string{api.RoleApprove}},
			}
			c.MCP.Profiles = map[string]mcpserver.Profile{"ide": {
				Node:         templates.Node{Tools: mcpCatalog},
				Project:      mcpProject,
				ProjectOwner: "alice",
				// The stood-in download_pdf's URLs are loopback.
				AllowedDomains: []string{"127.0.0.1"},
			}}
			c.MCP.ProgressEvery = 100 * time.Millisecond
			for _, f := range configure {
				f(c)
			}
		},
		Fleet: fleet.Options{ExtraTools: withStandInPDF, Middleware: []tools.Middleware{d.middleware}},
	})
	_, err := f.Store.CreateProject(context.Background(), store.Project{Slug: mcpProject, Name: mcpProject, Owner: "alice"})
	require.NoError(t, err)
	require.NotEmpty(t, f.MCPURL, "the profile starts the MCP listener")
	return mcpFleet{Fleet: f, endpoint: f.MCPURL + "/mcp/ide", dispatched: d}
}

// projectWorkspace is the workspace id of the profile's project.
func (m mcpFleet) projectWorkspace(t *testing.T) string {
	t.Helper()
	p, err := m.Store.GetProject(context.Background(), mcpProject)
	require.NoError(t, err)
	return p.Workspace
}

type bearer struct {
	secret string
	next   http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.secret)
	return b.next.RoundTrip(r)
}

// progress collects the progress notifications a client receives.
type progress struct {
	mu   sync.Mutex
	msgs []string
}

func (p *progress) add(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.msgs = append(p.msgs, req.Params.Message)
}

func (p *progress) all() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.msgs...)
}

// connect opens an MCP session with the SDK's own client.
func (m mcpFleet) connect(t *testing.T, secret string, p *progress) (*mcp.ClientSession, error) {
	t.Helper()
	opts := &mcp.ClientOptions{}
	if p != nil {
		opts.ProgressNotificationHandler = p.add
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "aetherium-test", Version: "1"}, opts)
	cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{
		Endpoint: m.endpoint, HTTPClient: &http.Client{Transport: bearer{secret, http.DefaultTransport}}, MaxRetries: 1,
	}, nil)
	if err == nil {
		t.Cleanup(func() { _ = cs.Close() })
	}
	return cs, err
}

func (m mcpFleet) call(t *testing.T, cs *mcp.ClientSession, tool string, args any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	require.NoError(t, err)
	return res
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// audit returns the audit row of the call an MCP result names.
func (m mcpFleet) audit(t *testing.T, res *mcp.CallToolResult) store.AuditRow {
	t.Helper()
	callID, _ := res.Meta["aetherium/call_id"].(string)
	runID, _ := res.Meta["aetherium/run_id"].(string)
	require.NotEmpty(t, callID, "the result names its call: %+v", res.Meta)
	rows, err := m.Store.RunAudit(context.Background(), runID, 1000)
	require.NoError(t, err)
	for _, r := range rows {
		if r.CallKey == "m:"+callID+":"+callID {
			return r
		}
	}
	t.Fatalf("no audit row for call %s in run %s (%d rows)", callID, runID, len(rows))
	return store.AuditRow{}
}

func TestMCPListsExactlyTheProfileCatalog(t *testing.T) {
	t.Parallel()
	m := setup(t)
	for _, c := range []struct{ name, secret string }{{"caller", aliceSecret}, {"read-only", readerSecret}} {
		t.Run(c.name, func(t *testing.T) {
			cs, err := m.connect(t, c.secret, nil)
			require.NoError(t, err)
			res, err := cs.ListTools(context.Background(), nil)
			require.NoError(t, err)
			var names []string
			for _, tl := range res.Tools {
				names = append(names, tl.Name)
				require.NotNil(t, tl.InputSchema)
			}
			require.Equal(t, mcpCatalog, names)
		})
	}
}

func TestMCPAuth(t *testing.T) {
	t.Parallel()
	m := setup(t)
	post := func(secret string) int {
		req, err := http.NewRequest("POST", m.endpoint, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if secret != "" {
			req.Header.Set("Authorization", "Bearer "+secret)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		name   string
		secret string
		want   int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"unknown token", "not-a-token", http.StatusUnauthorized},
		{"token without read or submit", approverSecret, http.StatusForbidden},
		{"caller", aliceSecret, http.StatusOK},
	} {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, post(c.secret))
		})
	}
	t.Run("the SDK client is refused without a role", func(t *testing.T) {
		_, err := m.connect(t, approverSecret, nil)
		require.Error(t, err)
	})
	t.Run("a read-only token cannot call", func(t *testing.T) {
		cs, err := m.connect(t, readerSecret, nil)
		require.NoError(t, err)
		res := m.call(t, cs, "list_files", map[string]any{})
		require.True(t, res.IsError)
		require.Contains(t, text(res), `lacks role "submit"`)
	})
}

func TestMCPCallsPassTheGate(t *testing.T) {
	t.Parallel()
	m := setup(t)
	cs, err := m.connect(t, aliceSecret, nil)
	require.NoError(t, err)

	// A Standard write then read, in the project's workspace.
	wrote := m.call(t, cs, "write_file", map[string]any{"path": "notes/hello.txt", "content": "hi from mcp"})
	require.False(t, wrote.IsError, text(wrote))
	read := m.call(t, cs, "read_file", map[string]any{"path": "notes/hello.txt"})
	require.False(t, read.IsError, text(read))
	require.Contains(t, text(read), "hi from mcp")
	onDisk, err := os.ReadFile(filepath.Join(m.Workspaces.Dir(m.projectWorkspace(t)), "notes", "hello.txt"))
	require.NoError(t, err)
	require.Equal(t, "hi from mcp", string(onDisk))
	for _, res := range []*mcp.CallToolResult{wrote, read} {
		row := m.audit(t, res)
		require.Equal(t, "allowed", row.Decision)
		require.Equal(t, "alice", row.Agent)
		require.Equal(t, "mcp", row.Role)
	}
	run, err := m.Store.GetRun(context.Background(), wrote.Meta["aetherium/run_id"].(string))
	require.NoError(t, err)
	require.Equal(t, "mcp:ide", run.Template)
	require.Equal(t, "alice", run.Owner)
	require.Equal(t, mcpProject, run.Project)
	require.Equal(t, run.ID, read.Meta["aetherium/run_id"], "one live run per principal and profile")

	for _, c := range []struct {
		name     string
		tool     string
		args     any
		decision string
		layer    string
		contains string
	}{
		{"refused by a rule", "write_file", map[string]any{"path": "secrets/key.txt", "content": "x"}, "denied", "rules", "denied by rules: secrets/ is off limits"},
		{"path traversal", "read_file", map[string]any{"path": "../../../etc/passwd"}, "error", "", "path escapes the workspace"},
		{"absolute path", "write_file", map[string]any{"path": "/etc/cron.d/x", "content": "x"}, "error", "", "path escapes the workspace"},
		{"malformed arguments", "write_file", map[string]any{"path": 42, "content": []int{1}}, "denied", "arguments", "invalid arguments for write_file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := m.call(t, cs, c.tool, c.args)
			require.True(t, res.IsError, "an MCP tool error: %s", text(res))
			require.Contains(t, text(res), c.contains)
			require.Equal(t, c.decision, res.Meta["aetherium/decision"])
			require.Equal(t, c.layer, res.Meta["aetherium/layer"])
			row := m.audit(t, res)
			require.Equal(t, c.decision, row.Decision)
			require.Equal(t, c.layer, row.DenyLayer)
			if c.layer == "rules" {
				require.Equal(t, "secrets/ is off limits", res.Meta["aetherium/reason"])
				require.Equal(t, "secrets/ is off limits", row.DenyReason)
			}
		})
	}
	_, err = os.Stat(filepath.Join(m.Workspaces.Dir(m.projectWorkspace(t)), "secrets", "key.txt"))
	require.ErrorIs(t, err, os.ErrNotExist, "the refused write never ran")

	t.Run("unknown tool", func(t *testing.T) {
		_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "run_shell", Arguments: map[string]any{"command": "id"}})
		require.ErrorContains(t, err, "run_shell")
	})
	t.Run("a cancelled MCP run is followed by a new one", func(t *testing.T) {
		code, raw := m.post(t, aliceSecret, "/api/runs/"+run.ID+"/cancel", "")
		require.Equal(t, http.StatusOK, code, "the owner cancels its MCP run like any run: %s", raw)
		res := m.call(t, cs, "read_file", map[string]any{"path": "notes/hello.txt"})
		require.False(t, res.IsError, text(res))
		require.NotEqual(t, run.ID, res.Meta["aetherium/run_id"])
		require.Contains(t, text(res), "hi from mcp", "the project's workspace outlives the run")
	})
}

func TestMCPRestrictedCallWaitsForApproval(t *testing.T) {
	t.Parallel()
	m := setup(t)
	for _, c := range []struct {
		name, verb, file string
		isError          bool
		decision, layer  string
		contains         string
	}{
		{"approved", "approve", "a.pdf", false, "allowed", "", "downloaded http://127.0.0.1:1/a.pdf"},
		{"denied", "deny", "b.pdf", true, "denied", "approval", "denied by approval: rejected by a human reviewer (approver): fine"},
	} {
		t.Run(c.name, func(t *testing.T) {
			m.restricted(t, c.verb, c.file, c.isError, c.decision, c.layer, c.contains)
		})
	}
}

// A Restricted call nobody decides is refused when its approval window closes;
// the client waited for it, with progress, until then.
func TestMCPRestrictedCallTimesOut(t *testing.T) {
	t.Parallel()
	m := setup(t, func(c *config.Config) { c.Security.ApprovalWindow = 1500 * time.Millisecond })
	m.restricted(t, "", "c.pdf", true, "timed_out", "approval", "timed_out: no human decision within the approval window")
}

// A Restricted call waiting for its approval when its MCP run is cancelled ends
// at once (the run's end closes the approval without a decision), long before the
// approval window would.
func TestMCPWaitingCallEndsWithItsRun(t *testing.T) {
	t.Parallel()
	m := setup(t, func(c *config.Config) { c.Security.ApprovalWindow = 10 * time.Minute })
	cs, err := m.connect(t, aliceSecret, nil)
	require.NoError(t, err)
	type outcome struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "download_pdf", Arguments: map[string]any{"url": "http://127.0.0.1:1/d.pdf"}})
		done <- outcome{res, err}
	}()
	pending := m.pendingApproval(t)
	code, raw := m.post(t, aliceSecret, "/api/runs/"+pending.RunID+"/cancel", "")
	require.Equal(t, http.StatusOK, code, string(raw))

	var o outcome
	select {
	case o = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the call still waits after its run was cancelled")
	}
	require.NoError(t, o.err)
	require.True(t, o.res.IsError, text(o.res))
	// The run's end reaches the call one of two ways: the worker finds the run
	// ended, or, when the cancel lands while the gate is still parking the call
	// (CI, loaded), the gate finds the approval it just requested closed by it.
	msg := text(o.res)
	require.True(t, strings.Contains(msg, "run "+pending.RunID+" ended (cancelled") ||
		strings.Contains(msg, "denied by approval: cancelled: the run was cancelled before a decision"), msg)
	call, err := m.Store.GetMCPCall(context.Background(), strings.TrimPrefix(pending.SessionID, "m:"))
	require.NoError(t, err)
	require.Equal(t, store.MCPCallDone, call.Status)
	closed, err := m.Store.GetApproval(context.Background(), pending.ID)
	require.NoError(t, err)
	require.Equal(t, store.ApprovalCancelled, closed.Status)
	require.Zero(t, m.dispatched.of(call.ID)-1, "the tool was dispatched once (to the gate, which parked it), never run after the cancel")
}

// restricted calls download_pdf and decides its approval through the API (as
// the approver token; verb "" leaves it to time out) while the client waits.
func (m mcpFleet) restricted(t *testing.T, verb, file string, isError bool, decision, layer, contains string) {
	var p progress
	cs, err := m.connect(t, aliceSecret, &p)
	require.NoError(t, err)

	type outcome struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		params := &mcp.CallToolParams{Name: "download_pdf", Arguments: map[string]any{"url": "http://127.0.0.1:1/" + file}}
		params.SetProgressToken("pdf-" + file)
		res, err := cs.CallTool(ctx, params)
		done <- outcome{res, err}
	}()

	pending := m.pendingApproval(t)
	require.Equal(t, "download_pdf", pending.Tool)
	require.Equal(t, "alice", pending.Agent)
	require.Eventually(t, func() bool { return len(p.all()) >= 2 }, 10*time.Second, 20*time.Millisecond,
		"progress notifications arrive while the call waits")
	require.Contains(t, p.all()[0], pending.ID)
	select {
	case o := <-done:
		t.Fatalf("the call returned before its approval: %+v %v", o.res, o.err)
	default:
	}
	// No worker waits with it: the call is parked in PostgreSQL.
	parked, err := m.Store.GetMCPCall(context.Background(), strings.TrimPrefix(pending.SessionID, "m:"))
	require.NoError(t, err)
	require.Equal(t, store.MCPCallWaiting, parked.Status)
	require.Equal(t, pending.ID, parked.ApprovalID)
	q, err := m.Inspector().GetQueueInfo(queue.QueueWorkers)
	require.NoError(t, err)
	require.Zero(t, q.Active, "no worker is blocked on the approval")
	if verb != "" {
		m.decide(t, pending.ID, verb)
	}

	var o outcome
	select {
	case o = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("no outcome after the approval")
	}
	require.NoError(t, o.err)
	require.Equal(t, isError, o.res.IsError, text(o.res))
	require.Contains(t, text(o.res), contains)
	require.Equal(t, layer, o.res.Meta["aetherium/layer"])
	row := m.audit(t, o.res)
	require.Equal(t, decision, row.Decision)
	require.Equal(t, layer, row.DenyLayer)
	require.Equal(t, "restricted", row.Tier)
	if !isError {
		require.Equal(t, "approver", row.ApprovedBy)
	}

	var attempts int
	require.NoError(t, m.Store.Pool.QueryRow(context.Background(), `SELECT attempts FROM mcp_calls WHERE id = $1`, o.res.Meta["aetherium/call_id"]).Scan(&attempts))
	require.Equal(t, 2, attempts, "one delivery parked the call, the decision's resume ran it")
	got := p.all()
	t.Logf("%d progress notifications, the first: %q", len(got), got[0])
}

// pendingApproval waits for the fleet's first pending approval.
func (m mcpFleet) pendingApproval(t *testing.T) store.Approval {
	t.Helper()
	var pending store.Approval
	require.Eventually(t, func() bool {
		list, err := m.Store.ListApprovals(context.Background(), store.ApprovalPending, "", 10)
		require.NoError(t, err)
		if len(list) == 0 {
			return false
		}
		pending = list[0]
		return true
	}, 30*time.Second, 20*time.Millisecond)
	return pending
}

// decide approves or denies an approval through the API as the approver.
func (m mcpFleet) decide(t *testing.T, id, verb string) {
	t.Helper()
	code, raw := m.post(t, approverSecret, "/api/approvals/"+id+"/"+verb, `{"reason":"fine"}`)
	require.Equal(t, http.StatusOK, code, string(raw))
}

// post sends an API request with a bearer token.
func (m mcpFleet) post(t *testing.T, secret, path, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest("POST", m.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+secret)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	raw, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, raw
}

// asynq delivers at least once: a task of a finished call delivered again (a
// late duplicate, a resume racing the first run) finds the call done and does
// not run the tool a second time.
func TestMCPRedeliveredCallRunsOnce(t *testing.T) {
	t.Parallel()
	m := setup(t)
	cs, err := m.connect(t, aliceSecret, nil)
	require.NoError(t, err)
	res := m.call(t, cs, "todo", map[string]any{"action": "write", "items": []string{"once"}})
	require.False(t, res.IsError, text(res))
	callID := res.Meta["aetherium/call_id"].(string)
	require.Equal(t, 1, m.dispatched.of(callID))

	ctx := context.Background()
	for _, key := range []string{"start", "redelivery-1", "redelivery-2"} {
		require.NoError(t, m.Queue.MCPCall(ctx, queue.Route{Key: "mcp-client", Priority: queue.DefaultPriority}, callID, key))
	}
	insp := m.Inspector()
	for _, key := range []string{"redelivery-1", "redelivery-2"} {
		require.Eventually(t, func() bool {
			info, err := insp.GetTaskInfo(queue.QueueWorkers, queue.MCPCallTaskID(callID, key))
			return err == nil && info.State == asynq.TaskStateCompleted
		}, 10*time.Second, 20*time.Millisecond, "the duplicate %s was delivered and handled", key)
	}
	require.Equal(t, 1, m.dispatched.of(callID), "the tool ran once")
	c, err := m.Store.GetMCPCall(ctx, callID)
	require.NoError(t, err)
	require.Equal(t, store.MCPCallDone, c.Status)
	require.Equal(t, 1, c.Attempts)
	var rows int
	require.NoError(t, m.Store.Pool.QueryRow(ctx, `SELECT count(*) FROM tool_audit WHERE call_key = $1`, "m:"+callID+":"+callID).Scan(&rows))
	require.Equal(t, 1, rows)
}

// The MCP listener is one of the fleet's own endpoints: an agent that reached
// it would call tools outside its own catalog, so the egress layer refuses it.
func TestAgentsCannotReachTheMCPServer(t *testing.T) {
	t.Parallel()
	m := setup(t)
	mcpAddr := strings.TrimPrefix(m.MCPURL, "http://")
	script := []map[string]any{
		call("http_request", map[string]any{"method": "POST", "url": m.endpoint, "body": `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`}),
		call("http_request", map[string]any{"method": "GET", "url": "http://localhost:" + portOf(t, mcpAddr) + "/mcp/ide"}),
		{"say": "done trying"},
	}
	tm := team(script, nil)
	tm["workers"] = []map[string]any{{"name": "writer", "prompt": "w", "mcp_servers": []string{"research"}}}
	raw, err := json.Marshal(map[string]any{"team": tm, "prompt": "reach the MCP server"})
	require.NoError(t, err)
	code, body := m.post(t, aliceSecret, "/api/orchestrator/run", string(raw))
	require.Equal(t, http.StatusAccepted, code, string(body))
	var sub struct {
		RunID string `json:"run_id"`
	}
	require.NoError(t, json.Unmarshal(body, &sub))
	require.Eventually(t, func() bool {
		r, err := m.Store.GetRun(context.Background(), sub.RunID)
		return err == nil && store.Terminal(r.Status)
	}, 60*time.Second, 50*time.Millisecond)

	m.Audit.Flush()
	rows, err := m.Store.RunAudit(context.Background(), sub.RunID, 100)
	require.NoError(t, err)
	var refused int
	for _, r := range rows {
		if r.Tool == "http_request" {
			require.Equal(t, "denied", r.Decision, "%+v", r)
			require.Equal(t, "egress", r.DenyLayer)
			require.Contains(t, r.DenyReason, egress.EndpointMCP)
			refused++
		}
	}
	require.Equal(t, 2, refused)
}

// A worker that died while running a non-idempotent call leaves its claim to go
// stale; the next delivery takes the call over and the call's intent reports
// "outcome unknown" instead of running the edit a second time.
func TestMCPCallOfADeadWorkerIsNotRepeated(t *testing.T) {
	t.Parallel()
	m := setup(t)
	cs, err := m.connect(t, aliceSecret, nil)
	require.NoError(t, err)
	wrote := m.call(t, cs, "write_file", map[string]any{"path": "count.txt", "content": "1"})
	require.False(t, wrote.IsError, text(wrote))
	runID := wrote.Meta["aetherium/run_id"].(string)

	ctx := context.Background()
	const id = "mcp_deadworker0001"
	args := `{"path":"count.txt","search":"1","replace":"11"}`
	require.NoError(t, m.Store.CreateMCPCall(ctx, store.MCPCall{ID: id, RunID: runID, Profile: "ide", Principal: "alice", Tool: "edit_file", Args: args}, 0))
	// What the dead delivery left: its claim, and the intent it recorded before the edit.
	_, err = m.Store.Pool.Exec(ctx, `UPDATE mcp_calls SET status = 'running', claim = 'dead', claimed_at = now() - interval '1 hour', attempts = 1 WHERE id = $1`, id)
	require.NoError(t, err)
	sum := sha256.Sum256([]byte(args))
	_, err = m.Store.BeginIntent(ctx, "m:"+id+":"+id, runID, "edit_file", hex.EncodeToString(sum[:]))
	require.NoError(t, err)

	require.NoError(t, m.Queue.MCPCall(ctx, queue.Route{Key: "mcp-client", Priority: queue.DefaultPriority}, id, "start"))
	var c store.MCPCall
	require.Eventually(t, func() bool {
		c, err = m.Store.GetMCPCall(ctx, id)
		return err == nil && c.Status == store.MCPCallDone
	}, 30*time.Second, 20*time.Millisecond)
	require.True(t, c.IsError)
	require.Equal(t, "unknown", c.Decision)
	require.Contains(t, c.Result, "it was not run again")
	require.Equal(t, 2, c.Attempts, "the stale claim was taken over once")
	onDisk, err := os.ReadFile(filepath.Join(m.Workspaces.Dir(m.projectWorkspace(t)), "count.txt"))
	require.NoError(t, err)
	require.Equal(t, "1", string(onDisk), "the edit did not run twice")
}

// TestMCPProjectsHaveOwners is issue 34's review through the real MCP listener
// and API with two tenants: a profile's project is its owner's, whoever holds
// the profile. Shapes: the owner's project, another owner named for an existing
// slug, a slug that does not exist yet (and is then taken by the other tenant),
// no project, and a slug deleted and reused by the other tenant while the
// owner's MCP run is live.
func TestMCPProjectsHaveOwners(t *testing.T) {
	t.Parallel()
	const bobSecret = "mcp-bob-secret"
	m := setup(t, func(c *config.Config) {
		c.API.Tokens = append(c.API.Tokens, api.Token{Name: "bob", SHA256: api.HashToken(bobSecret), Roles: []string{api.RoleSubmit, api.RoleRead}})
		c.MCP.Profiles["wrong-owner"] = mcpserver.Profile{Node: templates.Node{Tools: mcpCatalog}, Project: mcpProject, ProjectOwner: "bob"}
		c.MCP.Profiles["later"] = mcpserver.Profile{Node: templates.Node{Tools: mcpCatalog}, Project: "later-proj", ProjectOwner: "alice"}
		c.MCP.Profiles["scratch"] = mcpserver.Profile{Node: templates.Node{Tools: mcpCatalog}}
	})
	ctx := context.Background()
	connect := func(t *testing.T, profile, secret string) *mcp.ClientSession {
		t.Helper()
		client := mcp.NewClient(&mcp.Implementation{Name: "third-party", Version: "1"}, nil)
		cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{
			Endpoint: m.MCPURL + "/mcp/" + profile, HTTPClient: &http.Client{Transport: bearer{secret, http.DefaultTransport}}, MaxRetries: 1,
		}, nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = cs.Close() })
		return cs
	}
	apiCall := func(t *testing.T, secret, method, path, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, m.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+secret)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(raw)
	}
	const secretText = "alice's private notes"
	alice := connect(t, "ide", aliceSecret)
	wrote := m.call(t, alice, "write_file", map[string]any{"path": "notes/a.txt", "content": secretText})
	require.False(t, wrote.IsError, text(wrote))
	aliceRun, _ := wrote.Meta["aetherium/run_id"].(string)
	require.NotEmpty(t, aliceRun)
	ws := m.projectWorkspace(t)

	// Every tool of alice's profile is refused to bob: no read, no write, no listing.
	bob := connect(t, "ide", bobSecret)
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"read_file", map[string]any{"path": "notes/a.txt"}},
		{"list_files", map[string]any{}},
		{"write_file", map[string]any{"path": "notes/a.txt", "content": "bob was here"}},
		{"edit_file", map[string]any{"path": "notes/a.txt", "old_string": "alice", "new_string": "bob"}},
	} {
		res := m.call(t, bob, c.tool, c.args)
		require.True(t, res.IsError, "%s: %s", c.tool, text(res))
		require.Contains(t, text(res), `"bob" may not use project "mcp-proj"`)
		require.NotContains(t, text(res), secretText)
	}
	onDisk, err := os.ReadFile(filepath.Join(m.Workspaces.Dir(ws), "notes", "a.txt"))
	require.NoError(t, err)
	require.Equal(t, secretText, string(onDisk), "bob's refused calls changed nothing")

	// A profile naming the slug with another owner reaches nobody's project.
	for _, secret := range []string{aliceSecret, bobSecret} {
		res := m.call(t, connect(t, "wrong-owner", secret), "read_file", map[string]any{"path": "notes/a.txt"})
		require.True(t, res.IsError, text(res))
		require.Contains(t, text(res), "belongs to someone else")
	}

	// A missing slug is not handed to whoever creates it first.
	later := connect(t, "later", bobSecret)
	res := m.call(t, later, "list_files", map[string]any{})
	require.True(t, res.IsError, text(res))
	require.Contains(t, text(res), "does not exist")
	code, raw := apiCall(t, bobSecret, "POST", "/api/projects", `{"slug":"later-proj"}`)
	require.Equal(t, http.StatusCreated, code, raw)
	for _, secret := range []string{aliceSecret, bobSecret} {
		res := m.call(t, connect(t, "later", secret), "write_file", map[string]any{"path": "x.txt", "content": "x"})
		require.True(t, res.IsError, text(res))
		require.Contains(t, text(res), "belongs to someone else")
	}

	// A profile without a project gives bob a workspace of his own.
	scratch := connect(t, "scratch", bobSecret)
	res = m.call(t, scratch, "list_files", map[string]any{})
	require.False(t, res.IsError, text(res))
	require.NotContains(t, text(res), "notes/a.txt")

	// Bob's API sees none of alice's MCP run or its files.
	code, raw = apiCall(t, bobSecret, "GET", "/api/runs/"+aliceRun+"/files", "")
	require.Equal(t, http.StatusNotFound, code, raw)
	code, raw = apiCall(t, bobSecret, "GET", "/api/runs/"+aliceRun+"/file?path=notes/a.txt", "")
	require.Equal(t, http.StatusNotFound, code, raw)
	require.NotContains(t, raw, secretText)

	// Alice deletes her project while her MCP run is live: the run does not
	// block it, and the deletion is audited.
	code, raw = apiCall(t, aliceSecret, "DELETE", "/api/projects/"+mcpProject+"?confirm="+mcpProject, "")
	require.Equal(t, http.StatusNoContent, code, raw)
	audit, err := m.Store.ProjectAudit(ctx, "", 100)
	require.NoError(t, err)
	require.True(t, slices.ContainsFunc(audit, func(a store.ProjectAuditRow) bool {
		return a.Action == "project.delete" && a.Slug == mcpProject && a.Principal == "alice"
	}), "%+v", audit)

	// Bob takes the slug: alice's profile does not follow the slug to bob's
	// project, and bob's new project has none of alice's files.
	code, raw = apiCall(t, bobSecret, "POST", "/api/projects", `{"slug":"`+mcpProject+`"}`)
	require.Equal(t, http.StatusCreated, code, raw)
	res = m.call(t, alice, "read_file", map[string]any{"path": "notes/a.txt"})
	require.True(t, res.IsError, text(res))
	require.Contains(t, text(res), "belongs to someone else")
	require.NotContains(t, text(res), secretText)
	require.NotEqual(t, ws, m.projectWorkspace(t), "bob's project of the reused slug has a new workspace")
	_, err = os.Stat(filepath.Join(m.Workspaces.Dir(m.projectWorkspace(t)), "notes", "a.txt"))
	require.ErrorIs(t, err, os.ErrNotExist)
}
