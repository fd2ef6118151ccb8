package fleet_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	mgclient "github.com/mark3labs/mcp-go/client"
	mgtransport "github.com/mark3labs/mcp-go/client/transport"
	mg "github.com/mark3labs/mcp-go/mcp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/mcpserver"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/templates"
)

// Interoperability (issue 50): the endpoint as the clients people really use
// see it, the official go-sdk (2025 sessions) and mark3labs/mcp-go v1.6.0 (the
// reference of the 2026-07-28 wire format), at their defaults, and every
// revision spoken raw. One fleet per test function; the subtests that share it
// run in order, since each finds "its" approval among the fleet's.

const (
	ixModern = "2026-07-28"
	ixTasks  = "io.modelcontextprotocol/tasks"
	// ixSelf is a second profile of the same catalog whose principal approves
	// its own Restricted calls in its client.
	ixSelf = "self"
)

// ixSetup is setup plus the approve_in_client profile.
func ixSetup(t *testing.T) mcpFleet {
	t.Helper()
	return setup(t, func(c *config.Config) {
		c.MCP.Profiles[ixSelf] = mcpserver.Profile{
			Node: templates.Node{Tools: mcpCatalog}, Project: mcpProject, ProjectOwner: "alice",
			AllowedDomains: []string{"127.0.0.1"}, ApproveInClient: true,
		}
		// A waiting call must outlive the test, so only the test's own decisions
		// (and withdrawals) end them.
		c.Security.ApprovalWindow = 10 * time.Minute
	})
}

// ixNextPending waits for a pending approval of download_pdf not in seen, and
// adds it.
func (m mcpFleet) ixNextPending(t *testing.T, seen map[string]bool) store.Approval {
	t.Helper()
	var got store.Approval
	require.Eventually(t, func() bool {
		list, err := m.Store.ListApprovals(context.Background(), store.ApprovalPending, "", 100)
		require.NoError(t, err)
		for _, a := range list {
			if !seen[a.ID] && a.Tool == "download_pdf" {
				got = a
				return true
			}
		}
		return false
	}, 20*time.Second, 20*time.Millisecond, "a pending approval of the call")
	seen[got.ID] = true
	return got
}

// ixAudit is the audit row of an MCP call.
func (m mcpFleet) ixAudit(t *testing.T, runID, callID string) store.AuditRow {
	t.Helper()
	var row store.AuditRow
	require.Eventually(t, func() bool {
		rows, err := m.Store.RunAudit(context.Background(), runID, 1000)
		require.NoError(t, err)
		for _, r := range rows {
			if r.CallKey == "m:"+callID+":"+callID {
				row = r
				return true
			}
		}
		return false
	}, 10*time.Second, 20*time.Millisecond, "the audit row of call %s", callID)
	return row
}

// ixWithdrawn asserts what a withdrawal leaves: the call done as withdrawn, its
// approval cancelled and gone from the inbox (GET /api/approvals), a decision
// of it refused, and an audit row that says so.
func (m mcpFleet) ixWithdrawn(t *testing.T, a store.Approval) {
	t.Helper()
	callID := strings.TrimPrefix(a.SessionID, "m:")
	require.Eventually(t, func() bool {
		c, err := m.Store.GetMCPCall(context.Background(), callID)
		require.NoError(t, err)
		return c.Status == store.MCPCallDone
	}, 10*time.Second, 20*time.Millisecond, "the call is withdrawn at once")
	c, err := m.Store.GetMCPCall(context.Background(), callID)
	require.NoError(t, err)
	require.Equal(t, "withdrawn", c.Decision)
	require.True(t, c.IsError)

	code, raw := m.ixGet(t, approverSecret, "/api/approvals?status=pending&run_id="+a.RunID)
	require.Equal(t, http.StatusOK, code, string(raw))
	var list struct {
		Approvals []store.Approval `json:"approvals"`
	}
	require.NoError(t, json.Unmarshal(raw, &list))
	require.Empty(t, list.Approvals, "no approval of the run is pending")
	closed, err := m.Store.GetApproval(context.Background(), a.ID)
	require.NoError(t, err)
	require.Equal(t, store.ApprovalCancelled, closed.Status)
	code, raw = m.post(t, approverSecret, "/api/approvals/"+a.ID+"/approve", `{"reason":"too late"}`)
	require.Equal(t, http.StatusConflict, code, "a withdrawn call's approval cannot be decided: %s", raw)

	row := m.ixAudit(t, a.RunID, callID)
	require.Equal(t, "approval", row.DenyLayer)
	require.Contains(t, row.DenyReason, "withdrawn")
	require.Empty(t, row.ApprovedBy)
}

func (m mcpFleet) ixGet(t *testing.T, secret, path string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, m.URL+path, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+secret)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, raw
}

// ixAnswer is one HTTP exchange with the endpoint: the status, the headers, and
// the JSON-RPC messages of the body (one JSON object, or an event stream's).
type ixAnswer struct {
	status int
	header http.Header
	msgs   []map[string]any
}

// final is the response message (the last one carrying an id).
func (a ixAnswer) final(t *testing.T) map[string]any {
	t.Helper()
	for i := len(a.msgs) - 1; i >= 0; i-- {
		if _, ok := a.msgs[i]["id"]; ok {
			return a.msgs[i]
		}
	}
	t.Fatalf("no response message (HTTP %d): %v", a.status, a.msgs)
	return nil
}

func (a ixAnswer) result(t *testing.T) map[string]any {
	t.Helper()
	f := a.final(t)
	res, ok := f["result"].(map[string]any)
	require.True(t, ok, "a result, not %v", f)
	return res
}

// errorCode is the JSON-RPC error's code (0 without one).
func (a ixAnswer) errorCode(t *testing.T) int {
	t.Helper()
	e, _ := a.final(t)["error"].(map[string]any)
	code, _ := e["code"].(float64)
	return int(code)
}

// ixRequest is a JSON-RPC request with the given headers (and the bearer token).
func ixRequest(ctx context.Context, t *testing.T, endpoint, secret string, header map[string]string, msg map[string]any) *http.Request {
	t.Helper()
	body, err := json.Marshal(msg)
	require.NoError(t, err)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+secret)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	return req
}

// ixDo sends req and reads its whole answer.
func ixDo(t *testing.T, req *http.Request) ixAnswer {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	a := ixAnswer{status: resp.StatusCode, header: resp.Header}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		events := ixEvents(resp.Body)
		for m := range events {
			a.msgs = append(a.msgs, m)
		}
		return a
	}
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	if len(bytes.TrimSpace(raw)) > 0 {
		var m map[string]any
		if json.Unmarshal(raw, &m) == nil {
			a.msgs = append(a.msgs, m)
		} else {
			a.msgs = append(a.msgs, map[string]any{"text": string(raw)})
		}
	}
	return a
}

// ixEvents reads the JSON messages of an event stream as they arrive.
func ixEvents(body io.Reader) <-chan map[string]any {
	out := make(chan map[string]any, 64)
	go func() {
		defer close(out)
		sc := bufio.NewScanner(body)
		sc.Buffer(make([]byte, 1<<20), 4<<20)
		var data strings.Builder
		for sc.Scan() {
			line := sc.Text()
			if v, ok := strings.CutPrefix(line, "data:"); ok {
				data.WriteString(strings.TrimPrefix(v, " "))
				continue
			}
			if line == "" && data.Len() > 0 {
				var m map[string]any
				if json.Unmarshal([]byte(data.String()), &m) == nil {
					out <- m
				}
				data.Reset()
			}
		}
	}()
	return out
}

// ixModernCall is a 2026-07-28 request as the spec has it: the version in the
// header and in _meta, the method (and the tool's name) mirrored in headers.
func ixModernCall(ctx context.Context, t *testing.T, endpoint, secret, method, name string, params, meta map[string]any) *http.Request {
	t.Helper()
	if params == nil {
		params = map[string]any{}
	}
	m := map[string]any{"io.modelcontextprotocol/protocolVersion": ixModern,
		"io.modelcontextprotocol/clientCapabilities": map[string]any{},
		"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "raw", "version": "1"}}
	for k, v := range meta {
		m[k] = v
	}
	params["_meta"] = m
	h := map[string]string{"Mcp-Protocol-Version": ixModern, "Mcp-Method": method}
	if name != "" {
		h["Mcp-Name"] = name
	}
	return ixRequest(ctx, t, endpoint, secret, h, map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
}

func ixText(res map[string]any) string {
	var b strings.Builder
	content, _ := res["content"].([]any)
	for _, c := range content {
		if m, ok := c.(map[string]any); ok && m["type"] == "text" {
			b.WriteString(fmt.Sprint(m["text"]))
		}
	}
	return b.String()
}

// The official go-sdk client at its defaults: a 2025 session, the listing's
// metadata, a Standard call, and a Restricted call the fleet's approver decides
// while the client waits with progress.
func TestMCPInteropGoSDK(t *testing.T) {
	t.Parallel()
	m := ixSetup(t)
	cs, err := m.connect(t, aliceSecret, nil)
	require.NoError(t, err)
	require.Equal(t, "aetherium-ide", cs.InitializeResult().ServerInfo.Name)

	t.Run("list", func(t *testing.T) {
		res, err := cs.ListTools(context.Background(), nil)
		require.NoError(t, err)
		byName := map[string]*mcp.Tool{}
		for _, tl := range res.Tools {
			byName[tl.Name] = tl
			require.NotEmpty(t, tl.Title, tl.Name)
			require.NotNil(t, tl.Annotations, tl.Name)
		}
		require.Len(t, byName, len(mcpCatalog))
		require.Equal(t, "Write file", byName["write_file"].Title)
		require.True(t, byName["read_file"].Annotations.ReadOnlyHint)
		require.True(t, *byName["write_file"].Annotations.DestructiveHint)
		require.True(t, *byName["download_pdf"].Annotations.OpenWorldHint)
		require.False(t, *byName["list_files"].Annotations.OpenWorldHint)
	})
	t.Run("standard call", func(t *testing.T) {
		wrote := m.call(t, cs, "write_file", map[string]any{"path": "interop/gosdk.txt", "content": "from the go-sdk"})
		require.False(t, wrote.IsError, text(wrote))
		read := m.call(t, cs, "read_file", map[string]any{"path": "interop/gosdk.txt"})
		require.False(t, read.IsError, text(read))
		require.Contains(t, text(read), "from the go-sdk")
		require.Equal(t, "allowed", m.audit(t, wrote).Decision)
	})
	t.Run("restricted call approved by the fleet", func(t *testing.T) {
		m.restricted(t, "approve", "gosdk.pdf", false, "allowed", "", "downloaded http://127.0.0.1:1/gosdk.pdf")
	})
}

// mgConnect starts an mcp-go client the way its documentation does: a
// streamable HTTP transport with only the bearer header, Start, Initialize.
func mgConnect(t *testing.T, endpoint string, caps mg.ClientCapabilities, opts ...mgclient.ClientOption) (*mgclient.Client, *mg.InitializeResult) {
	t.Helper()
	tr, err := mgtransport.NewStreamableHTTP(endpoint, mgtransport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + aliceSecret}))
	require.NoError(t, err)
	c := mgclient.NewClient(tr, opts...)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, c.Start(ctx))
	t.Cleanup(func() { _ = c.Close() })
	req := mg.InitializeRequest{}
	req.Params.ProtocolVersion = mg.LATEST_PROTOCOL_VERSION
	req.Params.ClientInfo = mg.Implementation{Name: "interop-mcp-go", Version: "1.6.0"}
	req.Params.Capabilities = caps
	res, err := c.Initialize(ctx, req)
	require.NoError(t, err)
	return c, res
}

func mgText(res *mg.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(mg.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// mgElicit answers every approval form: accept, approve.
type mgElicit struct {
	mu   sync.Mutex
	seen []mg.ElicitationParams
}

func (e *mgElicit) Elicit(_ context.Context, req mg.ElicitationRequest) (*mg.ElicitationResult, error) {
	e.mu.Lock()
	e.seen = append(e.seen, req.Params)
	e.mu.Unlock()
	return &mg.ElicitationResult{ElicitationResponse: mg.ElicitationResponse{
		Action: mg.ElicitationResponseActionAccept, Content: map[string]any{"decision": "approve", "reason": "mine, and fine"},
	}}, nil
}

// mark3labs/mcp-go v1.6.0, the reference client of the 2026-07-28 revision.
func TestMCPInteropMcpGo(t *testing.T) {
	t.Parallel()
	m := ixSetup(t)
	seen := map[string]bool{}
	c, init := mgConnect(t, m.endpoint, mg.ClientCapabilities{})

	t.Run("connects at 2026-07-28", func(t *testing.T) {
		// Its Initialize probes server/discover first; our answer keeps it modern.
		require.Equal(t, ixModern, c.ProtocolVersion())
		require.Equal(t, ixModern, init.ProtocolVersion)
		require.Equal(t, "aetherium-ide", init.ServerInfo.Name)
		require.NotNil(t, init.Capabilities.Tools)
		require.Contains(t, init.Capabilities.Extensions, ixTasks)
	})
	t.Run("lists with annotations", func(t *testing.T) {
		res, err := c.ListTools(context.Background(), mg.ListToolsRequest{})
		require.NoError(t, err)
		var names []string
		byName := map[string]mg.Tool{}
		for _, tl := range res.Tools {
			names = append(names, tl.Name)
			byName[tl.Name] = tl
		}
		require.Equal(t, mcpCatalog, names, "sorted by name")
		require.Equal(t, "Write file", byName["write_file"].Title)
		ro := byName["read_file"].Annotations.ReadOnlyHint
		require.NotNil(t, ro)
		require.True(t, *ro)
		require.True(t, *byName["write_file"].Annotations.DestructiveHint)
		require.True(t, *byName["download_pdf"].Annotations.OpenWorldHint)
	})
	t.Run("standard call", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		req := mg.CallToolRequest{}
		req.Params.Name = "write_file"
		req.Params.Arguments = map[string]any{"path": "interop/mcpgo.txt", "content": "from mcp-go"}
		res, err := c.CallTool(ctx, req)
		require.NoError(t, err)
		require.False(t, res.IsError, mgText(res))
		require.Equal(t, "complete", string(res.ResultType))
		onDisk, err := os.ReadFile(filepath.Join(m.Workspaces.Dir(m.projectWorkspace(t)), "interop", "mcpgo.txt"))
		require.NoError(t, err)
		require.Equal(t, "from mcp-go", string(onDisk))
		req.Params.Name, req.Params.Arguments = "read_file", map[string]any{"path": "interop/mcpgo.txt"}
		res, err = c.CallTool(ctx, req)
		require.NoError(t, err)
		require.Contains(t, mgText(res), "from mcp-go")
	})
	t.Run("restricted call as a task approved by the fleet", func(t *testing.T) {
		// mcp-go declares the Tasks extension through its capabilities option;
		// its CallTool reads no task result, so the call goes out on its own
		// transport (with the headers and _meta its client would write) and the
		// task is followed with its client's WaitForTask.
		tc, _ := mgConnect(t, m.endpoint, mg.ClientCapabilities{Extensions: map[string]any{ixTasks: map[string]any{}}})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		params := map[string]any{"name": "download_pdf", "arguments": map[string]any{"url": "http://127.0.0.1:1/mcpgo-task.pdf"},
			"_meta": map[string]any{"io.modelcontextprotocol/protocolVersion": ixModern,
				"io.modelcontextprotocol/clientCapabilities": map[string]any{"extensions": map[string]any{ixTasks: map[string]any{}}}}}
		hdr := http.Header{}
		hdr.Set("Mcp-Method", "tools/call")
		hdr.Set("Mcp-Name", "download_pdf")
		resp, err := tc.GetTransport().SendRequest(ctx, mgtransport.JSONRPCRequest{JSONRPC: "2.0", ID: mg.NewRequestId(int64(900)),
			Method: "tools/call", Params: params, Header: hdr})
		require.NoError(t, err)
		require.Nil(t, resp.Error)
		var created struct {
			ResultType string `json:"resultType"`
			TaskID     string `json:"taskId"`
			Status     string `json:"status"`
		}
		require.NoError(t, json.Unmarshal(resp.Result, &created), string(resp.Result))
		require.Equal(t, "task", created.ResultType, string(resp.Result))
		require.NotEmpty(t, created.TaskID)

		a := m.ixNextPending(t, seen)
		require.Equal(t, "m:"+created.TaskID, a.SessionID, "the task is the call")
		got, err := tc.GetTask(ctx, mg.GetTaskRequest{Params: mg.GetTaskParams{TaskId: created.TaskID}})
		require.NoError(t, err)
		require.Equal(t, mg.TaskStatusWorking, got.Status)
		require.Contains(t, got.StatusMessage, a.ID, "the status names the approval")

		m.decide(t, a.ID, "approve")
		done, err := tc.WaitForTask(ctx, mg.GetTaskRequest{Params: mg.GetTaskParams{TaskId: created.TaskID}}, 100*time.Millisecond)
		require.NoError(t, err)
		require.Equal(t, mg.TaskStatusCompleted, done.Status)
		call, err := m.Store.GetMCPCall(ctx, created.TaskID)
		require.NoError(t, err)
		require.False(t, call.IsError, call.Result)
		require.Contains(t, call.Result, "downloaded http://127.0.0.1:1/mcpgo-task.pdf")
		require.Equal(t, "approver", m.ixAudit(t, a.RunID, created.TaskID).ApprovedBy)
	})
	t.Run("restricted call approved in the client", func(t *testing.T) {
		var e mgElicit
		ec, _ := mgConnect(t, m.MCPURL+"/mcp/"+ixSelf, mg.ClientCapabilities{}, mgclient.WithElicitationHandler(&e))
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		req := mg.CallToolRequest{}
		req.Params.Name = "download_pdf"
		req.Params.Arguments = map[string]any{"url": "http://127.0.0.1:1/mcpgo-self.pdf"}
		// Its CallTool answers the input_required result with the handler and
		// retries: one call from the caller's side.
		res, err := ec.CallTool(ctx, req)
		require.NoError(t, err)
		require.False(t, res.IsError, mgText(res))
		require.Contains(t, mgText(res), "downloaded http://127.0.0.1:1/mcpgo-self.pdf")

		e.mu.Lock()
		forms := append([]mg.ElicitationParams(nil), e.seen...)
		e.mu.Unlock()
		require.Len(t, forms, 1)
		require.Contains(t, forms[0].Message, "download_pdf")
		schema, err := json.Marshal(forms[0].RequestedSchema)
		require.NoError(t, err)
		require.Contains(t, string(schema), `"approve"`)
		require.Contains(t, string(schema), `"deny"`)

		callID, _ := res.Meta.AdditionalFields["aetherium/call_id"].(string)
		runID, _ := res.Meta.AdditionalFields["aetherium/run_id"].(string)
		require.NotEmpty(t, callID, "%+v", res.Meta)
		row := m.ixAudit(t, runID, callID)
		require.Equal(t, "allowed", row.Decision)
		require.Contains(t, row.ApprovedBy, "alice", "the principal approved its own call")
		require.Contains(t, row.ApprovedBy, "mcp client")
	})
}

// Every revision the endpoint speaks, raw: the four 2025 (and 2024) session
// revisions through the go-sdk, and 2026-07-28 stateless.
func TestMCPInteropRevisions(t *testing.T) {
	t.Parallel()
	m := ixSetup(t)
	for _, rev := range []string{"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"} {
		t.Run(rev, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			init := ixDo(t, ixRequest(ctx, t, m.endpoint, aliceSecret, nil, map[string]any{"jsonrpc": "2.0", "id": 1, "method": "initialize",
				"params": map[string]any{"protocolVersion": rev, "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "raw", "version": "1"}}}))
			require.Equal(t, http.StatusOK, init.status)
			require.Equal(t, rev, init.result(t)["protocolVersion"], "the server speaks the client's revision")
			session := init.header.Get("Mcp-Session-Id")
			require.NotEmpty(t, session)
			h := map[string]string{"Mcp-Session-Id": session}
			if rev >= "2025-06-18" {
				// Required from 2025-06-18 on; earlier clients never send it.
				h["Mcp-Protocol-Version"] = rev
			}
			note := ixDo(t, ixRequest(ctx, t, m.endpoint, aliceSecret, h, map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"}))
			require.Equal(t, http.StatusAccepted, note.status)

			list := ixDo(t, ixRequest(ctx, t, m.endpoint, aliceSecret, h, map[string]any{"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
			tools, _ := list.result(t)["tools"].([]any)
			require.Len(t, tools, len(mcpCatalog))

			call := ixDo(t, ixRequest(ctx, t, m.endpoint, aliceSecret, h, map[string]any{"jsonrpc": "2.0", "id": 3, "method": "tools/call",
				"params": map[string]any{"name": "write_file", "arguments": map[string]any{"path": "interop/" + rev + ".txt", "content": rev}}}))
			res := call.result(t)
			require.NotEqual(t, true, res["isError"], ixText(res))
			meta, _ := res["_meta"].(map[string]any)
			require.NotEmpty(t, meta["aetherium/call_id"])
			onDisk, err := os.ReadFile(filepath.Join(m.Workspaces.Dir(m.projectWorkspace(t)), "interop", rev+".txt"))
			require.NoError(t, err)
			require.Equal(t, rev, string(onDisk))
		})
	}
	t.Run(ixModern, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		disc := ixDo(t, ixModernCall(ctx, t, m.endpoint, aliceSecret, "server/discover", "", nil, nil))
		require.Equal(t, http.StatusOK, disc.status)
		d := disc.result(t)
		require.Equal(t, "complete", d["resultType"])
		require.Equal(t, []any{ixModern, "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"}, d["supportedVersions"])
		caps, _ := d["capabilities"].(map[string]any)
		require.Contains(t, caps, "tools")
		ext, _ := caps["extensions"].(map[string]any)
		require.Contains(t, ext, ixTasks)
		dm, _ := d["_meta"].(map[string]any)
		info, _ := dm["io.modelcontextprotocol/serverInfo"].(map[string]any)
		require.Equal(t, "aetherium-ide", info["name"])
		require.Empty(t, disc.header.Get("Mcp-Session-Id"), "stateless: no session")

		list := ixDo(t, ixModernCall(ctx, t, m.endpoint, aliceSecret, "tools/list", "", nil, nil))
		l := list.result(t)
		require.Equal(t, "complete", l["resultType"])
		require.EqualValues(t, 300000, l["ttlMs"])
		require.Equal(t, "private", l["cacheScope"])
		tools, _ := l["tools"].([]any)
		var names []string
		for _, x := range tools {
			tl := x.(map[string]any)
			names = append(names, tl["name"].(string))
			require.NotEmpty(t, tl["title"])
			require.Contains(t, tl, "annotations")
		}
		require.Equal(t, mcpCatalog, names)

		call := ixDo(t, ixModernCall(ctx, t, m.endpoint, aliceSecret, "tools/call", "write_file",
			map[string]any{"name": "write_file", "arguments": map[string]any{"path": "interop/modern.txt", "content": "stateless"}}, nil))
		require.Equal(t, http.StatusOK, call.status)
		res := call.result(t)
		require.Equal(t, "complete", res["resultType"])
		require.NotEqual(t, true, res["isError"], ixText(res))
		onDisk, err := os.ReadFile(filepath.Join(m.Workspaces.Dir(m.projectWorkspace(t)), "interop", "modern.txt"))
		require.NoError(t, err)
		require.Equal(t, "stateless", string(onDisk))
	})
}

// A client that gives up withdraws its call: tasks/cancel, the go-sdk's
// cancellation, a modern progress wait whose connection closes.
func TestMCPInteropWithdrawal(t *testing.T) {
	t.Parallel()
	m := ixSetup(t)
	seen := map[string]bool{}
	pdf := func(name string) map[string]any {
		return map[string]any{"name": "download_pdf", "arguments": map[string]any{"url": "http://127.0.0.1:1/" + name}}
	}

	t.Run("tasks/cancel", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		tasks := map[string]any{"io.modelcontextprotocol/clientCapabilities": map[string]any{"extensions": map[string]any{ixTasks: map[string]any{}}}}
		created := ixDo(t, ixModernCall(ctx, t, m.endpoint, aliceSecret, "tools/call", "download_pdf", pdf("cancel-task.pdf"), tasks)).result(t)
		require.Equal(t, "task", created["resultType"])
		taskID, _ := created["taskId"].(string)
		require.NotEmpty(t, taskID)
		a := m.ixNextPending(t, seen)
		require.Equal(t, "m:"+taskID, a.SessionID)

		cancelled := ixDo(t, ixModernCall(ctx, t, m.endpoint, aliceSecret, "tasks/cancel", taskID, map[string]any{"taskId": taskID}, tasks))
		require.Equal(t, http.StatusOK, cancelled.status)
		require.Zero(t, cancelled.errorCode(t))
		m.ixWithdrawn(t, a)
		got := ixDo(t, ixModernCall(ctx, t, m.endpoint, aliceSecret, "tasks/get", taskID, map[string]any{"taskId": taskID}, tasks)).result(t)
		require.Equal(t, "cancelled", got["status"])
	})
	t.Run("go-sdk cancellation", func(t *testing.T) {
		cs, err := m.connect(t, aliceSecret, nil)
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		errc := make(chan error, 1)
		go func() {
			_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "download_pdf", Arguments: map[string]any{"url": "http://127.0.0.1:1/cancel-sdk.pdf"}})
			errc <- err
		}()
		a := m.ixNextPending(t, seen)
		cancel() // the go-sdk sends notifications/cancelled
		select {
		case err := <-errc:
			require.ErrorIs(t, err, context.Canceled)
		case <-time.After(10 * time.Second):
			t.Fatal("the cancelled call did not return")
		}
		m.ixWithdrawn(t, a)
	})
	t.Run("modern connection closed", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		params := pdf("cancel-conn.pdf")
		req := ixModernCall(ctx, t, m.endpoint, aliceSecret, "tools/call", "download_pdf", params,
			map[string]any{"progressToken": "conn-1"})
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.True(t, strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream"), "a progress wait streams")
		events := ixEvents(resp.Body)
		a := m.ixNextPending(t, seen)
		select {
		case ev := <-events:
			require.Equal(t, "notifications/progress", ev["method"], "%v", ev)
		case <-time.After(10 * time.Second):
			t.Fatal("no progress while the call waits")
		}
		cancel() // the connection closes
		m.ixWithdrawn(t, a)
	})
}

// The answers of the edge: an unknown method in either generation, a foreign
// origin, a header that contradicts the body, a version the server does not know.
func TestMCPInteropErrors(t *testing.T) {
	t.Parallel()
	m := ixSetup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	initMsg := map[string]any{"jsonrpc": "2.0", "id": 1, "method": "initialize",
		"params": map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "raw", "version": "1"}}}
	calls := func() int {
		var n int
		require.NoError(t, m.Store.Pool.QueryRow(ctx, `SELECT count(*) FROM mcp_calls`).Scan(&n))
		return n
	}

	t.Run("unknown method in a session", func(t *testing.T) {
		init := ixDo(t, ixRequest(ctx, t, m.endpoint, aliceSecret, nil, initMsg))
		require.Equal(t, http.StatusOK, init.status)
		h := map[string]string{"Mcp-Session-Id": init.header.Get("Mcp-Session-Id"), "Mcp-Protocol-Version": "2025-06-18"}
		got := ixDo(t, ixRequest(ctx, t, m.endpoint, aliceSecret, h, map[string]any{"jsonrpc": "2.0", "id": 2, "method": "tools/frobnicate"}))
		require.Equal(t, -32601, got.errorCode(t))
	})
	t.Run("unknown method stateless", func(t *testing.T) {
		got := ixDo(t, ixModernCall(ctx, t, m.endpoint, aliceSecret, "tools/frobnicate", "", nil, nil))
		require.Equal(t, -32601, got.errorCode(t))
		require.Equal(t, http.StatusNotFound, got.status)
	})
	t.Run("foreign origin", func(t *testing.T) {
		got := ixDo(t, ixRequest(ctx, t, m.endpoint, aliceSecret, map[string]string{"Origin": "http://evil.example"}, initMsg))
		require.Equal(t, http.StatusForbidden, got.status)
		require.NotZero(t, got.errorCode(t), "a JSON-RPC error body")
		own := ixDo(t, ixRequest(ctx, t, m.endpoint, aliceSecret, map[string]string{"Origin": strings.TrimSuffix(m.MCPURL, "/")}, initMsg))
		require.Equal(t, http.StatusOK, own.status, "the listener's own origin is served")
	})
	t.Run("header mismatch", func(t *testing.T) {
		before := calls()
		got := ixDo(t, ixModernCall(ctx, t, m.endpoint, aliceSecret, "tools/call", "read_file",
			map[string]any{"name": "write_file", "arguments": map[string]any{"path": "interop/never.txt", "content": "x"}}, nil))
		require.Equal(t, -32020, got.errorCode(t))
		require.Equal(t, http.StatusBadRequest, got.status)
		require.Equal(t, before, calls(), "nothing was recorded")
	})
	t.Run("unsupported modern version", func(t *testing.T) {
		req := ixModernCall(ctx, t, m.endpoint, aliceSecret, "tools/list", "", nil, map[string]any{"io.modelcontextprotocol/protocolVersion": "2027-01-01"})
		req.Header.Set("Mcp-Protocol-Version", "2027-01-01")
		got := ixDo(t, req)
		require.Equal(t, -32022, got.errorCode(t))
		e, _ := got.final(t)["error"].(map[string]any)
		data, _ := e["data"].(map[string]any)
		require.Contains(t, data["supported"], ixModern)
	})
}
