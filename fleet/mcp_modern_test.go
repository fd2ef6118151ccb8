package fleet_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/api"
	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/mcpserver"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/templates"
)

// The 2026-07-28 generation, spoken raw: the envelope rules, tasks, withdrawal
// and the client's own approval, against a real fleet.

const bobSecret = "mcp-bob-secret"

// rpc is one modern exchange's answer: the HTTP status, the JSON-RPC message
// (the last one of an event stream) and every notification before it.
type rpc struct {
	status        int
	result        map[string]any
	err           map[string]any
	notifications []map[string]any
}

// modernRequest builds a 2026-07-28 request with the headers the spec requires.
func modernRequest(t *testing.T, endpoint, secret, method, name string, params map[string]any, caps map[string]any) *http.Request {
	t.Helper()
	if params == nil {
		params = map[string]any{}
	}
	meta, _ := params["_meta"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
	}
	meta["io.modelcontextprotocol/protocolVersion"] = mcpserver.Version20260728
	if caps == nil {
		caps = map[string]any{}
	}
	meta["io.modelcontextprotocol/clientCapabilities"] = caps
	params["_meta"] = meta
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 7, "method": method, "params": params})
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, endpoint, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+secret)
	req.Header.Set("Mcp-Protocol-Version", mcpserver.Version20260728)
	req.Header.Set("Mcp-Method", method)
	if name != "" {
		req.Header.Set("Mcp-Name", name)
	}
	return req
}

func send(t *testing.T, req *http.Request) rpc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	require.NoError(t, err)
	defer resp.Body.Close()
	out := rpc{status: resp.StatusCode}
	var msgs []map[string]any
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				var m map[string]any
				require.NoError(t, json.Unmarshal([]byte(data), &m))
				msgs = append(msgs, m)
			}
		}
	} else {
		raw, _ := io.ReadAll(resp.Body)
		var m map[string]any
		require.NoError(t, json.Unmarshal(raw, &m), "status %d: %s", resp.StatusCode, raw)
		msgs = append(msgs, m)
	}
	require.NotEmpty(t, msgs)
	last := msgs[len(msgs)-1]
	out.notifications = msgs[:len(msgs)-1]
	out.result, _ = last["result"].(map[string]any)
	out.err, _ = last["error"].(map[string]any)
	return out
}

func (m mcpFleet) modern(t *testing.T, secret, method, name string, params, caps map[string]any) rpc {
	t.Helper()
	return send(t, modernRequest(t, m.endpoint, secret, method, name, params, caps))
}

var tasksCap = map[string]any{"extensions": map[string]any{"io.modelcontextprotocol/tasks": map[string]any{}}}

func errCode(r rpc) float64 {
	if r.err == nil {
		return 0
	}
	c, _ := r.err["code"].(float64)
	return c
}

func resultText(res map[string]any) string {
	var b strings.Builder
	content, _ := res["content"].([]any)
	for _, c := range content {
		if m, ok := c.(map[string]any); ok {
			s, _ := m["text"].(string)
			b.WriteString(s)
		}
	}
	return b.String()
}

func setupModern(t *testing.T) mcpFleet {
	return setup(t, func(c *config.Config) {
		c.API.Tokens = append(c.API.Tokens, api.Token{Name: "bob", SHA256: api.HashToken(bobSecret), Roles: []string{api.RoleSubmit, api.RoleRead}})
		c.MCP.TaskAfter = 300 * time.Millisecond
		c.MCP.TaskPoll = 100 * time.Millisecond
		c.MCP.Poll = 300 * time.Millisecond
		c.MCP.AllowedOrigins = []string{"https://ide.example"}
		ide := c.MCP.Profiles["ide"]
		self := ide
		self.ApproveInClient = true
		self.Node = templates.Node{Tools: []string{"download_pdf"}}
		self.Project, self.ProjectOwner = "", ""
		c.MCP.Profiles["self"] = self
	})
}

func TestMCPModernEnvelope(t *testing.T) {
	t.Parallel()
	m := setupModern(t)
	m.endpoint = m.MCPURL + "/mcp/ide"

	t.Run("server/discover lists 2026-07-28 first and the tasks extension", func(t *testing.T) {
		r := m.modern(t, aliceSecret, "server/discover", "", nil, nil)
		require.Equal(t, http.StatusOK, r.status)
		require.Equal(t, "complete", r.result["resultType"])
		versions, _ := r.result["supportedVersions"].([]any)
		require.Equal(t, []any{"2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"}, versions)
		caps, _ := r.result["capabilities"].(map[string]any)
		require.Contains(t, caps["extensions"], "io.modelcontextprotocol/tasks")
	})
	t.Run("tools/list is sorted and cacheable", func(t *testing.T) {
		r := m.modern(t, aliceSecret, "tools/list", "", nil, nil)
		require.Equal(t, http.StatusOK, r.status)
		var names []string
		for _, tl := range r.result["tools"].([]any) {
			names = append(names, tl.(map[string]any)["name"].(string))
		}
		require.Equal(t, mcpCatalog, names)
		require.Equal(t, "private", r.result["cacheScope"])
		require.NotZero(t, r.result["ttlMs"])
	})
	faults := []struct {
		name   string
		mutate func(*http.Request)
		status int
		code   float64
	}{
		{"Mcp-Name differs from the body", func(r *http.Request) { r.Header.Set("Mcp-Name", "read_file") }, 400, -32020},
		{"Mcp-Method differs from the body", func(r *http.Request) { r.Header.Set("Mcp-Method", "tools/list") }, 400, -32020},
		{"the version header differs from _meta", func(r *http.Request) { r.Header.Set("Mcp-Protocol-Version", "2027-01-01") }, 400, -32020},
		{"no version header", func(r *http.Request) { r.Header.Del("Mcp-Protocol-Version") }, 400, -32020},
		{"Last-Event-ID", func(r *http.Request) { r.Header.Set("Last-Event-ID", "3") }, 400, -32020},
	}
	for _, f := range faults {
		t.Run(f.name, func(t *testing.T) {
			req := modernRequest(t, m.endpoint, aliceSecret, "tools/call", "write_file", map[string]any{"name": "write_file",
				"arguments": map[string]any{"path": "never.md", "content": "x"}}, nil)
			f.mutate(req)
			r := send(t, req)
			require.Equal(t, f.status, r.status)
			require.Equal(t, f.code, errCode(r), "%v", r.err)
		})
	}
	t.Run("an unsupported modern version names the supported ones", func(t *testing.T) {
		req := modernRequest(t, m.endpoint, aliceSecret, "tools/list", "", nil, nil)
		body := bytes.ReplaceAll(mustRead(t, req), []byte("2026-07-28"), []byte("2027-01-01"))
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.ContentLength = int64(len(body))
		req.Header.Set("Mcp-Protocol-Version", "2027-01-01")
		r := send(t, req)
		require.Equal(t, http.StatusBadRequest, r.status)
		require.Equal(t, float64(-32022), errCode(r))
		require.Contains(t, r.err["data"].(map[string]any)["supported"], "2026-07-28")
	})
	t.Run("unknown method", func(t *testing.T) {
		r := m.modern(t, aliceSecret, "resources/teleport", "", nil, nil)
		require.Equal(t, http.StatusNotFound, r.status)
		require.Equal(t, float64(-32601), errCode(r))
	})
	t.Run("a legacy request without a session is 400 with a JSON-RPC body", func(t *testing.T) {
		req, err := http.NewRequest(http.MethodPost, m.endpoint, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+aliceSecret)
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Content-Type", "application/json")
		r := send(t, req)
		require.Equal(t, http.StatusBadRequest, r.status)
		require.Equal(t, float64(-32600), errCode(r))
	})
	t.Run("a legacy session's unknown method is -32601", func(t *testing.T) {
		cs, err := m.connect(t, aliceSecret, nil)
		require.NoError(t, err)
		req, err := http.NewRequest(http.MethodPost, m.endpoint, strings.NewReader(`{"jsonrpc":"2.0","id":9,"method":"tools/teleport"}`))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+aliceSecret)
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", cs.ID())
		req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
		r := send(t, req)
		require.Equal(t, float64(-32601), errCode(r), "%v", r.err)
	})
	port := m.MCPURL[strings.LastIndex(m.MCPURL, ":")+1:]
	for _, o := range []struct {
		origin, host string
		status       int
	}{
		{"https://evil.example", "", http.StatusForbidden},
		// DNS rebinding: the attacker's name resolves to the listener, so Host
		// and Origin agree, and name the attacker.
		{"http://evil.example:" + port, "evil.example:" + port, http.StatusForbidden},
		{"null", "", http.StatusForbidden},
		{"file://", "", http.StatusForbidden},
		{"http://127.0.0.1.evil.example:" + port, "127.0.0.1.evil.example:" + port, http.StatusForbidden},
		{"https://ide.example", "", http.StatusOK},
		{"http://127.0.0.1:" + port, "", http.StatusOK},
		{"http://localhost:" + port, "", http.StatusOK},
		{"http://[::1]:" + port, "", http.StatusOK},
		{"", "", http.StatusOK},
	} {
		t.Run("origin "+o.origin, func(t *testing.T) {
			req := modernRequest(t, m.endpoint, aliceSecret, "ping", "", nil, nil)
			if o.origin != "" {
				req.Header.Set("Origin", o.origin)
			}
			if o.host != "" {
				req.Host = o.host
			}
			require.Equal(t, o.status, send(t, req).status)
		})
	}
	t.Run("a Standard call is one stateless request, audited once", func(t *testing.T) {
		r := m.modern(t, aliceSecret, "tools/call", "write_file", map[string]any{"name": "write_file",
			"arguments": map[string]any{"path": "modern.md", "content": "stateless"}}, nil)
		require.Equal(t, http.StatusOK, r.status, "%v", r.err)
		require.Equal(t, "complete", r.result["resultType"])
		require.NotEqual(t, true, r.result["isError"], resultText(r.result))
		meta := r.result["_meta"].(map[string]any)
		rows, err := m.Store.RunAudit(context.Background(), meta["aetherium/run_id"].(string), 1000)
		require.NoError(t, err)
		n := 0
		for _, row := range rows {
			if row.CallKey == "m:"+meta["aetherium/call_id"].(string)+":"+meta["aetherium/call_id"].(string) {
				n++
			}
		}
		require.Equal(t, 1, n)
	})
	t.Run("invalid arguments are a tool error, audited, and queue nothing", func(t *testing.T) {
		r := m.modern(t, aliceSecret, "tools/call", "write_file", map[string]any{"name": "write_file",
			"arguments": map[string]any{"content": 3}}, nil)
		require.Equal(t, http.StatusOK, r.status, "%v", r.err)
		require.Equal(t, true, r.result["isError"])
		require.Contains(t, resultText(r.result), "invalid arguments for write_file")
		meta := r.result["_meta"].(map[string]any)
		require.Equal(t, "arguments", meta["aetherium/layer"])
		var calls int
		require.NoError(t, m.Store.Pool.QueryRow(context.Background(), `SELECT count(*) FROM mcp_calls WHERE id = $1`, meta["aetherium/call_id"]).Scan(&calls))
		require.Zero(t, calls, "nothing was queued")
		rows, err := m.Store.RunAudit(context.Background(), meta["aetherium/run_id"].(string), 1000)
		require.NoError(t, err)
		found := false
		for _, row := range rows {
			if row.CallKey == "m:"+meta["aetherium/call_id"].(string)+":"+meta["aetherium/call_id"].(string) {
				require.Equal(t, "denied", row.Decision)
				require.Equal(t, "arguments", row.DenyLayer)
				found = true
			}
		}
		require.True(t, found, "the refusal is audited")
	})
	t.Run("a new session handle is a run of its own", func(t *testing.T) {
		r := m.modern(t, aliceSecret, "tools/call", "todo", map[string]any{"name": "todo",
			"arguments": map[string]any{"action": "write", "items": []string{"apart"}}, "_meta": map[string]any{"aetherium/session": "new"}}, nil)
		require.Equal(t, http.StatusOK, r.status, "%v", r.err)
		meta := r.result["_meta"].(map[string]any)
		handle, _ := meta["aetherium/session"].(string)
		require.True(t, strings.HasPrefix(handle, "s_"), "%v", meta)
		again := m.modern(t, aliceSecret, "tools/call", "todo", map[string]any{"name": "todo",
			"arguments": map[string]any{"action": "read"}, "_meta": map[string]any{"aetherium/session": handle}}, nil)
		require.Equal(t, meta["aetherium/run_id"], again.result["_meta"].(map[string]any)["aetherium/run_id"])
		require.Contains(t, resultText(again.result), "apart")
		def := m.modern(t, aliceSecret, "tools/call", "todo", map[string]any{"name": "todo", "arguments": map[string]any{"action": "read"}}, nil)
		require.NotEqual(t, meta["aetherium/run_id"], def.result["_meta"].(map[string]any)["aetherium/run_id"])
	})
}

func mustRead(t *testing.T, req *http.Request) []byte {
	raw, err := io.ReadAll(req.Body)
	require.NoError(t, err)
	return raw
}

// pendingOf is the pending approval of an MCP call.
func (m mcpFleet) pendingOf(t *testing.T, callID string) store.Approval {
	t.Helper()
	var a store.Approval
	require.Eventually(t, func() bool {
		c, err := m.Store.GetMCPCall(context.Background(), callID)
		require.NoError(t, err)
		if c.ApprovalID == "" {
			return false
		}
		a, err = m.Store.GetApproval(context.Background(), c.ApprovalID)
		require.NoError(t, err)
		return true
	}, 30*time.Second, 20*time.Millisecond)
	return a
}

func (m mcpFleet) pendingCount(t *testing.T) int {
	list, err := m.Store.ListApprovals(context.Background(), store.ApprovalPending, "", 100)
	require.NoError(t, err)
	return len(list)
}

// Restricted calls of the 2026-07-28 generation wait without a held stream:
// as a task the fleet's approver decides, withdrawn by tasks/cancel or by a
// client that goes away, or decided in the client's own form.
func TestMCPModernApprovals(t *testing.T) {
	t.Parallel()
	m := setupModern(t)
	ide, self := m.MCPURL+"/mcp/ide", m.MCPURL+"/mcp/self"
	pdf := func(file string) map[string]any {
		return map[string]any{"name": "download_pdf", "arguments": map[string]any{"url": "http://127.0.0.1:1/" + file}}
	}
	task := func(t *testing.T, file string) string {
		r := send(t, modernRequest(t, ide, aliceSecret, "tools/call", "download_pdf", pdf(file), tasksCap))
		require.Equal(t, http.StatusOK, r.status, "%v", r.err)
		require.Equal(t, "task", r.result["resultType"], "%v", r.result)
		return r.result["taskId"].(string)
	}
	get := func(t *testing.T, secret, id string) rpc {
		return send(t, modernRequest(t, ide, secret, "tasks/get", id, map[string]any{"taskId": id}, tasksCap))
	}

	t.Run("a task decided by the fleet's approver", func(t *testing.T) {
		id := task(t, "t1.pdf")
		a := m.pendingOf(t, id)
		r := get(t, aliceSecret, id)
		require.Equal(t, "working", r.result["status"])
		require.Contains(t, r.result["statusMessage"], a.ID)
		require.Equal(t, float64(-32602), errCode(get(t, bobSecret, id)), "another principal's task is unknown")
		m.decide(t, a.ID, "approve")
		require.Eventually(t, func() bool { return get(t, aliceSecret, id).result["status"] == "completed" }, 30*time.Second, 50*time.Millisecond)
		res := get(t, aliceSecret, id).result["result"].(map[string]any)
		require.Contains(t, resultText(res), "downloaded http://127.0.0.1:1/t1.pdf")
	})
	t.Run("tasks/cancel withdraws the call and its approval", func(t *testing.T) {
		id := task(t, "t2.pdf")
		a := m.pendingOf(t, id)
		r := send(t, modernRequest(t, ide, aliceSecret, "tasks/cancel", id, map[string]any{"taskId": id}, tasksCap))
		require.Equal(t, "complete", r.result["resultType"], "%v", r.err)
		require.Equal(t, "cancelled", get(t, aliceSecret, id).result["status"])
		closed, err := m.Store.GetApproval(context.Background(), a.ID)
		require.NoError(t, err)
		require.Equal(t, store.ApprovalCancelled, closed.Status)
		code, raw := m.post(t, approverSecret, "/api/approvals/"+a.ID+"/approve", `{}`)
		require.Equal(t, http.StatusConflict, code, string(raw))
		rows, err := m.Store.RunAudit(context.Background(), a.RunID, 1000)
		require.NoError(t, err)
		var row store.AuditRow
		for _, r := range rows {
			if r.CallKey == "m:"+id+":"+id {
				row = r
			}
		}
		require.Equal(t, "denied", row.Decision)
		require.Contains(t, row.DenyReason, "withdrawn by the MCP client")
		require.Zero(t, m.pendingCount(t))
	})
	t.Run("a client that goes away during the progress wait withdraws", func(t *testing.T) {
		params := pdf("t3.pdf")
		params["_meta"] = map[string]any{"progressToken": "p3"}
		req := modernRequest(t, ide, aliceSecret, "tools/call", "download_pdf", params, nil)
		ctx, cancel := context.WithCancel(context.Background())
		resp, err := http.DefaultClient.Do(req.WithContext(ctx))
		require.NoError(t, err)
		require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
		line, err := bufio.NewReader(resp.Body).ReadString('\n')
		require.NoError(t, err)
		require.Contains(t, line, "event: message")
		var callID string
		require.NoError(t, m.Store.Pool.QueryRow(context.Background(),
			`SELECT id FROM mcp_calls WHERE args LIKE '%t3.pdf%'`).Scan(&callID))
		cancel()
		_ = resp.Body.Close()
		require.Eventually(t, func() bool {
			c, err := m.Store.GetMCPCall(context.Background(), callID)
			require.NoError(t, err)
			return c.Decision == store.MCPDecisionWithdrawn
		}, 10*time.Second, 20*time.Millisecond)
		require.Zero(t, m.pendingCount(t))
	})
	t.Run("the client's own human approves in a form", func(t *testing.T) {
		elicit := map[string]any{"elicitation": map[string]any{"form": map[string]any{}}}
		r := send(t, modernRequest(t, self, aliceSecret, "tools/call", "download_pdf", pdf("t4.pdf"), elicit))
		require.Equal(t, "input_required", r.result["resultType"], "%v %v", r.result, r.err)
		state := r.result["requestState"].(string)
		reqs := r.result["inputRequests"].(map[string]any)
		require.Len(t, reqs, 1)
		var key string
		for k, v := range reqs {
			key = k
			p := v.(map[string]any)["params"].(map[string]any)
			require.Equal(t, "form", p["mode"])
			require.Contains(t, p["message"], "download_pdf")
			require.Contains(t, p["message"], "t4.pdf")
		}
		require.True(t, strings.HasPrefix(key, "approval:apr_") || strings.HasPrefix(key, "approval:"), key)
		retry := pdf("t4.pdf")
		retry["requestState"] = state
		retry["inputResponses"] = map[string]any{key: map[string]any{"action": "accept", "content": map[string]any{"decision": "approve", "reason": "mine"}}}
		r = send(t, modernRequest(t, self, aliceSecret, "tools/call", "download_pdf", retry, elicit))
		require.Equal(t, "complete", r.result["resultType"], "%v %v", r.result, r.err)
		require.NotEqual(t, true, r.result["isError"], resultText(r.result))
		require.Contains(t, resultText(r.result), "downloaded")
		meta := r.result["_meta"].(map[string]any)
		rows, err := m.Store.RunAudit(context.Background(), meta["aetherium/run_id"].(string), 1000)
		require.NoError(t, err)
		found := false
		for _, row := range rows {
			if row.Tool == "download_pdf" && row.Decision == "allowed" {
				require.Equal(t, "alice (mcp client)", row.ApprovedBy)
				found = true
			}
		}
		require.True(t, found)
	})
	t.Run("a retry with other arguments decides nothing", func(t *testing.T) {
		elicit := map[string]any{"elicitation": map[string]any{}}
		r := send(t, modernRequest(t, self, aliceSecret, "tools/call", "download_pdf", pdf("t5.pdf"), elicit))
		require.Equal(t, "input_required", r.result["resultType"], "%v %v", r.result, r.err)
		retry := pdf("t5-other.pdf")
		retry["requestState"] = r.result["requestState"]
		for k := range r.result["inputRequests"].(map[string]any) {
			retry["inputResponses"] = map[string]any{k: map[string]any{"action": "accept", "content": map[string]any{"decision": "approve"}}}
		}
		bad := send(t, modernRequest(t, self, aliceSecret, "tools/call", "download_pdf", retry, elicit))
		require.Equal(t, float64(-32602), errCode(bad))
		// Cancel in the form: the call is withdrawn.
		cancelled := pdf("t5.pdf")
		cancelled["requestState"] = r.result["requestState"]
		for k := range r.result["inputRequests"].(map[string]any) {
			cancelled["inputResponses"] = map[string]any{k: map[string]any{"action": "cancel"}}
		}
		out := send(t, modernRequest(t, self, aliceSecret, "tools/call", "download_pdf", cancelled, elicit))
		require.Equal(t, true, out.result["isError"])
		require.Contains(t, resultText(out.result), "withdrawn")
		require.Zero(t, m.pendingCount(t))
	})
	t.Run("a 2025 session's client decides in elicitation/create", func(t *testing.T) {
		var asked []string
		client := mcp.NewClient(&mcp.Implementation{Name: "aetherium-test", Version: "1"}, &mcp.ClientOptions{
			ElicitationHandler: func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
				asked = append(asked, r.Params.Message)
				return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"decision": "deny", "reason": "not today"}}, nil
			},
		})
		cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{
			Endpoint: self, HTTPClient: &http.Client{Transport: bearer{aliceSecret, http.DefaultTransport}}, MaxRetries: 1,
		}, nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = cs.Close() })
		res := m.call(t, cs, "download_pdf", map[string]any{"url": "http://127.0.0.1:1/t6.pdf"})
		require.True(t, res.IsError, text(res))
		require.Contains(t, text(res), "rejected by a human reviewer (alice (mcp client)): not today")
		require.Len(t, asked, 1)
		require.Contains(t, asked[0], "t6.pdf")
		require.Zero(t, m.pendingCount(t))
	})
	t.Run("subscriptions/listen pushes a task's state", func(t *testing.T) {
		id := task(t, "t7.pdf")
		a := m.pendingOf(t, id)
		req := modernRequest(t, ide, aliceSecret, "subscriptions/listen", "", map[string]any{"notifications": map[string]any{"taskIds": []string{id}}}, tasksCap)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		resp, err := http.DefaultClient.Do(req.WithContext(ctx))
		require.NoError(t, err)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		next := func() map[string]any {
			for sc.Scan() {
				if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
					var msg map[string]any
					require.NoError(t, json.Unmarshal([]byte(data), &msg))
					return msg
				}
			}
			t.Fatalf("the stream ended: %v", sc.Err())
			return nil
		}
		ack := next()
		require.Equal(t, "notifications/subscriptions/acknowledged", ack["method"])
		require.Equal(t, []any{id}, ack["params"].(map[string]any)["notifications"].(map[string]any)["taskIds"])
		m.decide(t, a.ID, "approve")
		for {
			msg := next()
			require.Equal(t, "notifications/tasks", msg["method"])
			if msg["params"].(map[string]any)["status"] == "completed" {
				break
			}
		}
	})
	t.Run("a requested log level streams the call's progress as log lines", func(t *testing.T) {
		params := pdf("t8.pdf")
		params["_meta"] = map[string]any{"io.modelcontextprotocol/logLevel": "info"}
		done := make(chan rpc, 1)
		go func() { done <- send(t, modernRequest(t, ide, aliceSecret, "tools/call", "download_pdf", params, nil)) }()
		var callID string
		require.Eventually(t, func() bool {
			return m.Store.Pool.QueryRow(context.Background(), `SELECT id FROM mcp_calls WHERE args LIKE '%t8.pdf%'`).Scan(&callID) == nil
		}, 10*time.Second, 20*time.Millisecond)
		a := m.pendingOf(t, callID)
		m.decide(t, a.ID, "approve")
		r := <-done
		require.Equal(t, "complete", r.result["resultType"])
		var lines []string
		for _, n := range r.notifications {
			if n["method"] == "notifications/message" {
				lines = append(lines, n["params"].(map[string]any)["data"].(string))
			}
		}
		require.GreaterOrEqual(t, len(lines), 2, "%v", lines)
		require.Contains(t, lines[0], "queued as call "+callID)
		require.Contains(t, lines[1], a.ID)
	})
	t.Run("a lost announcement is caught by the process's one sweep", func(t *testing.T) {
		id := task(t, "t9.pdf")
		a := m.pendingOf(t, id)
		require.Equal(t, "working", get(t, aliceSecret, id).result["status"], "cached and watched now")
		// A change nobody announces (the worker's publish lost): only the sweep sees it.
		_, err := m.Store.Pool.Exec(context.Background(), `UPDATE mcp_calls SET status = 'done', decision = 'allowed',
			result = 'finished unannounced', updated_at = now(), finished_at = now() WHERE id = $1`, id)
		require.NoError(t, err)
		require.Eventually(t, func() bool { return get(t, aliceSecret, id).result["status"] == "completed" }, 10*time.Second, 50*time.Millisecond)
		_, err = m.Store.Pool.Exec(context.Background(), `UPDATE approvals SET status = 'cancelled' WHERE id = $1`, a.ID)
		require.NoError(t, err)
	})
}
