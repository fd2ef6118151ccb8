package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aetherium-engine/aetherium/store"
)

// This file is the 2026-07-28 generation: stateless requests, each carrying its
// protocol version and the client's capabilities in _meta, answered by a thin
// layer of our own because the go-sdk's server speaks only the 2025 revisions.
// Nothing about a request outlives it in this process (the task cache only
// saves queries: any process answers any task from PostgreSQL), so requests can
// be spread over any number of API processes.

// mreq is one modern request being answered.
type mreq struct {
	srv       *Server
	w         http.ResponseWriter
	r         *http.Request
	id        json.RawMessage
	method    string
	params    json.RawMessage
	profile   string
	p         Profile
	caps      clientCaps
	logLevel  string
	principal string
	roles     map[string]bool
	stream    *sseWriter
}

// clientCaps are the per-request capabilities the server acts on.
type clientCaps struct {
	Tasks       bool
	Elicitation bool
}

func parseCaps(raw json.RawMessage) clientCaps {
	var c struct {
		Elicitation *struct {
			Form *json.RawMessage `json:"form"`
			URL  *json.RawMessage `json:"url"`
		} `json:"elicitation"`
		Extensions map[string]json.RawMessage `json:"extensions"`
	}
	if json.Unmarshal(raw, &c) != nil {
		return clientCaps{}
	}
	_, tasks := c.Extensions[extensionTasks]
	// An empty elicitation object means form mode (the 2025-11-25 rule); a client
	// that declares only url mode cannot show the approval form.
	form := c.Elicitation != nil && (c.Elicitation.Form != nil || c.Elicitation.URL == nil)
	return clientCaps{Tasks: tasks, Elicitation: form}
}

var logLevels = map[string]int{"debug": 0, "info": 1, "notice": 2, "warning": 3, "error": 4, "critical": 5, "alert": 6, "emergency": 7}

// serveModern checks a modern request's envelope (the spec's header and version
// rules) and answers it.
func (s *Server) serveModern(w http.ResponseWriter, r *http.Request, name string, p Profile, msg rpcMessage, hv, mv string, meta map[string]json.RawMessage) {
	q := &mreq{srv: s, w: w, r: r, id: msg.ID, method: msg.Method, params: msg.Params, profile: name, p: p}
	if !msg.isRequest() {
		// A notification: there is no session to tell anything, and a cancellation
		// of a stateless request is its connection closing.
		w.WriteHeader(http.StatusAccepted)
		return
	}
	// A discovery probe of a client that has not picked a revision yet (no
	// version, or a 2025 header) is answered as such.
	probe := msg.Method == "server/discover" && !modern(hv) && mv == ""
	if !probe {
		switch {
		case r.Header.Get("Last-Event-ID") != "":
			q.fail(codeHeaderMismatch, "Last-Event-ID is not part of protocol "+Version20260728+": its streams are not resumable; send the request again", nil)
			return
		case hv == "":
			q.fail(codeHeaderMismatch, "the Mcp-Protocol-Version header is required with _meta "+metaVersion, nil)
			return
		case mv == "":
			q.fail(codeInvalidParams, "missing _meta "+metaVersion, nil)
			return
		case hv != mv:
			q.fail(codeHeaderMismatch, fmt.Sprintf("the Mcp-Protocol-Version header %s does not match _meta %s %s", hv, metaVersion, mv), nil)
			return
		case mv != Version20260728:
			q.fail(codeUnsupportedVer, fmt.Sprintf("unsupported protocol version %q", mv), map[string]any{"supported": SupportedVersions, "requested": mv})
			return
		}
		if hm := r.Header.Get("Mcp-Method"); hm != msg.Method {
			q.fail(codeHeaderMismatch, fmt.Sprintf("the Mcp-Method header %q does not match the request's method %q", hm, msg.Method), nil)
			return
		}
		var named struct {
			Name   string `json:"name"`
			TaskID string `json:"taskId"`
		}
		_ = json.Unmarshal(msg.Params, &named)
		// tools/call must name its tool in Mcp-Name. The Tasks extension asks
		// clients to name the task on tasks/*, but mcp-go v1.6.0 sends none: a
		// task's Mcp-Name is checked when present.
		hn, _ := decodeHeader(r.Header.Get("Mcp-Name"))
		switch {
		case msg.Method == "tools/call" && hn != named.Name:
			q.fail(codeHeaderMismatch, fmt.Sprintf("the Mcp-Name header %q does not match the request's %q", hn, named.Name), nil)
			return
		case strings.HasPrefix(msg.Method, "tasks/") && r.Header.Get("Mcp-Name") != "" && hn != named.TaskID:
			q.fail(codeHeaderMismatch, fmt.Sprintf("the Mcp-Name header %q does not match the request's task %q", hn, named.TaskID), nil)
			return
		}
	}
	q.caps = parseCaps(meta[metaCapabilities])
	_ = json.Unmarshal(meta[metaLogLevel], &q.logLevel)
	var ok bool
	q.principal, q.roles, ok = s.callerOf(auth.TokenInfoFromContext(r.Context()))
	if !ok {
		q.fail(codeInvalidRequest, "no authenticated principal on this request", nil)
		return
	}
	switch msg.Method {
	case "server/discover":
		s.discover(q)
	case "ping":
		q.reply(map[string]any{})
	case "tools/list":
		s.listTools(q)
	case "tools/call":
		s.modernCall(q)
	case "tasks/get":
		s.taskGet(q)
	case "tasks/update":
		s.taskUpdate(q)
	case "tasks/cancel":
		s.taskCancel(q)
	case "subscriptions/listen":
		s.listen(q)
	default:
		q.fail(codeNoMethod, "method not found: "+msg.Method, nil)
	}
}

// decodeHeader reads a header value the 2026-07-28 way: "=?base64?…?=" carries
// a value that is not plain ASCII.
func decodeHeader(v string) (string, bool) {
	if inner, ok := strings.CutPrefix(v, "=?base64?"); ok {
		if inner, ok = strings.CutSuffix(inner, "?="); ok {
			b, err := decodeBase64(inner)
			return string(b), err == nil
		}
	}
	return v, true
}

// callerOf is who sent a request: the authenticated token's principal and
// roles, or the local principal holding every role when no tokens are
// configured (loopback only).
func (s *Server) callerOf(ti *auth.TokenInfo) (string, map[string]bool, bool) {
	return s.caller(&mcp.RequestExtra{TokenInfo: ti})
}

func (q *mreq) reply(result map[string]any) {
	if _, ok := result["resultType"]; !ok {
		result["resultType"] = "complete"
	}
	msg := map[string]any{"jsonrpc": "2.0", "id": q.id, "result": result}
	if q.stream != nil {
		q.stream.send(msg)
		return
	}
	q.w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(q.w).Encode(msg)
}

// fail answers a JSON-RPC error, with mcp-go's HTTP status mapping: the
// request's shape 400, an unknown method 404, others 200.
func (q *mreq) fail(code int, msg string, data any) {
	if q.stream != nil {
		q.stream.send(map[string]any{"jsonrpc": "2.0", "id": q.id, "error": rpcError{code, msg, data}})
		return
	}
	status := http.StatusOK
	switch code {
	case codeNoMethod:
		status = http.StatusNotFound
	case codeHeaderMismatch, codeMissingCap, codeUnsupportedVer, codeInvalidRequest, codeInvalidParams, codeParse:
		status = http.StatusBadRequest
	}
	writeRPCError(q.w, q.id, code, msg, data, status)
}

// notify sends a notification on the request's stream, opening it.
func (q *mreq) notify(method string, params map[string]any) {
	if q.stream == nil {
		q.stream = newSSE(q.w)
	}
	q.stream.send(map[string]any{"jsonrpc": "2.0", "method": method, "params": params})
}

// log sends a log notification when the request asked for that level.
func (q *mreq) log(level, text string) {
	want, ok := logLevels[q.logLevel]
	if !ok || logLevels[level] < want {
		return
	}
	q.notify("notifications/message", map[string]any{"level": level, "logger": "aetherium", "data": text})
}

// sseWriter is a response turned into an event stream.
type sseWriter struct {
	w http.ResponseWriter
	f http.Flusher
}

func newSSE(w http.ResponseWriter) *sseWriter {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	return &sseWriter{w: w, f: f}
}

func (s *sseWriter) send(msg any) {
	b, _ := json.Marshal(msg)
	_, _ = fmt.Fprintf(s.w, "event: message\ndata: %s\n\n", b)
	if s.f != nil {
		s.f.Flush()
	}
}

// discoverTTL and listTTL are the cache hints of server/discover and
// tools/list: a profile changes only with the configuration.
const (
	discoverTTL = 10 * time.Minute
	listTTL     = 5 * time.Minute
)

func (s *Server) discover(q *mreq) {
	q.reply(map[string]any{
		"supportedVersions": SupportedVersions,
		"capabilities": map[string]any{
			"tools":      map[string]any{"listChanged": true},
			"logging":    map[string]any{},
			"extensions": map[string]any{extensionTasks: map[string]any{}},
		},
		"instructions": s.instructions[q.profile],
		"ttlMs":        discoverTTL.Milliseconds(),
		"cacheScope":   "private",
		"_meta":        map[string]any{metaServerInfo: map[string]any{"name": "aetherium-" + q.profile, "version": "1"}},
	})
}

func (s *Server) listTools(q *mreq) {
	if !holds(q.roles, q.p.ListRole) && !holds(q.roles, q.p.CallRole) {
		q.fail(codeInvalidRequest, fmt.Sprintf("forbidden: %q lacks role %q for MCP profile %s", q.principal, q.p.ListRole, q.profile), nil)
		return
	}
	list := make([]*mcp.Tool, 0, len(s.catalog[q.profile]))
	for _, e := range s.catalog[q.profile] {
		list = append(list, e.tool)
	}
	q.reply(map[string]any{"tools": list, "ttlMs": listTTL.Milliseconds(), "cacheScope": "private"})
}

// callParams are a tools/call's params as the modern layer reads them.
type callParams struct {
	Name           string                     `json:"name"`
	Arguments      json.RawMessage            `json:"arguments"`
	Meta           map[string]json.RawMessage `json:"_meta"`
	InputResponses map[string]elicitAnswer    `json:"inputResponses"`
	RequestState   string                     `json:"requestState"`
}

// elicitAnswer is the client's answer to the approval form.
type elicitAnswer struct {
	Action  string `json:"action"`
	Content struct {
		Decision string `json:"decision"`
		Reason   string `json:"reason"`
	} `json:"content"`
}

var handleRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

func (s *Server) modernCall(q *mreq) {
	var cp callParams
	if err := json.Unmarshal(q.params, &cp); err != nil {
		q.fail(codeInvalidParams, "tools/call params: "+err.Error(), nil)
		return
	}
	entry, ok := s.entry(q.profile, cp.Name)
	if !ok {
		q.fail(codeInvalidParams, fmt.Sprintf("unknown tool %q", cp.Name), nil)
		return
	}
	ctx := q.r.Context()
	ti := auth.TokenInfoFromContext(ctx)
	if entry.local != nil {
		res, err := entry.local(ctx, &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: cp.Name, Arguments: cp.Arguments},
			Extra: &mcp.RequestExtra{TokenInfo: ti}})
		if err != nil {
			q.fail(codeInternal, err.Error(), nil)
			return
		}
		q.replyCall(res, "")
		return
	}
	if cp.RequestState != "" {
		s.retryCall(q, cp)
		return
	}
	var handle string
	if raw, ok := cp.Meta[metaSession]; ok {
		if json.Unmarshal(raw, &handle) != nil || (handle != "new" && !handleRE.MatchString(handle)) {
			q.fail(codeInvalidParams, `_meta aetherium/session: "new" or a handle of 1-64 of A-Z a-z 0-9 _ -`, nil)
			return
		}
		if handle == "new" {
			handle = "s_" + newHandle()
		}
	}
	call, refused, err := s.submit(ctx, q.profile, q.p, q.principal, q.roles, cp.Name, cp.Arguments, handle)
	if err != nil {
		q.fail(codeInternal, err.Error(), nil)
		return
	}
	if refused != nil {
		q.replyCall(refused, handle)
		return
	}
	q.log("info", fmt.Sprintf("%s queued as call %s of run %s", call.Tool, call.ID, call.RunID))
	s.awaitModern(q, call, handle, "")
}

// awaitModern answers a submitted (or decided) call: its result when it
// finishes first; the approval form when the client approves; a task when the
// client takes tasks; else the progress wait until the outcome.
func (s *Server) awaitModern(q *mreq, call store.MCPCall, handle, decided string) {
	ctx := q.r.Context()
	elicit := q.p.ApproveInClient && q.caps.Elicitation
	limit := s.window()
	if q.caps.Tasks {
		limit = s.cfg.TaskAfter
	}
	var token json.RawMessage
	var cp struct {
		Meta struct {
			ProgressToken json.RawMessage `json:"progressToken"`
		} `json:"_meta"`
	}
	_ = json.Unmarshal(q.params, &cp)
	token = cp.Meta.ProgressToken
	every := time.Duration(0)
	if len(token) > 0 && !q.caps.Tasks {
		every = s.cfg.ProgressEvery
	}
	started := time.Now()
	lastStatus := call.Status
	cur, err := s.follow(ctx, call, limit, every, func(cur store.MCPCall, fresh bool) bool {
		if fresh && cur.Status != lastStatus {
			lastStatus = cur.Status
			if cur.Status == store.MCPCallWaiting {
				q.log("warning", fmt.Sprintf("%s waits for a human approval (%s)", cur.Tool, cur.ApprovalID))
			}
		}
		switch {
		case cur.Status == store.MCPCallDone:
			return true
		case cur.Status == store.MCPCallWaiting && cur.ApprovalID == decided:
			// The client just decided it; the worker has not resumed the call yet.
		case cur.Status == store.MCPCallWaiting && (elicit || q.caps.Tasks):
			return true
		case !fresh && cur.Status == store.MCPCallWaiting && len(token) > 0:
			q.notify("notifications/progress", map[string]any{"progressToken": token, "progress": time.Since(started).Seconds(),
				"message": waitingMessage(cur)})
		}
		return false
	})
	switch {
	case ctx.Err() != nil:
		s.abandon(call, q.principal, "the client went away")
		return
	case errors.Is(err, errWaitTimeout) && q.caps.Tasks:
		q.replyTask(cur)
		return
	case errors.Is(err, errWaitTimeout):
		q.replyCall(refusal(fmt.Sprintf("no outcome for %s within %s; the call %s continues on the workers (run %s)",
			call.Tool, limit, call.ID, call.RunID)), handle)
		return
	case err != nil:
		q.fail(codeInternal, err.Error(), nil)
		return
	}
	switch {
	case cur.Status == store.MCPCallDone:
		q.replyCall(s.result(cur), handle)
	case elicit:
		s.replyInputRequired(q, cur)
	default:
		q.replyTask(cur)
	}
}

func waitingMessage(c store.MCPCall) string {
	return fmt.Sprintf("%s waits for a human approval (%s): approve or deny it at /api/approvals/%s", c.Tool, c.ApprovalID, c.ApprovalID)
}

// replyCall answers a CallToolResult, naming the run handle it ran under.
func (q *mreq) replyCall(res *mcp.CallToolResult, handle string) {
	if handle != "" {
		if res.Meta == nil {
			res.Meta = mcp.Meta{}
		}
		res.Meta[metaSession] = handle
	}
	q.reply(callResult(res))
}

func callResult(res *mcp.CallToolResult) map[string]any {
	b, _ := json.Marshal(res)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	m["resultType"] = "complete"
	return m
}

// approvalKey is the inputRequests key of a call's approval form: unique over
// the task's life because an approval is decided once.
func approvalKey(approvalID string) string { return "approval:" + approvalID }

// replyInputRequired asks the client's human to decide the call's approval.
func (s *Server) replyInputRequired(q *mreq, cur store.MCPCall) {
	req, err := s.approvalForm(q.r.Context(), cur)
	if errors.Is(err, store.ErrDecided) {
		s.awaitModern(q, cur, handleOf(cur.Profile), cur.ApprovalID)
		return
	}
	if err != nil {
		q.fail(codeInternal, err.Error(), nil)
		return
	}
	q.reply(map[string]any{"resultType": "input_required", "inputRequests": req, "requestState": cur.ID})
}

// approvalForm is the elicitation of a call's pending approval: the masked
// view the Studio's approval card shows, and a form to approve or deny.
func (s *Server) approvalForm(ctx context.Context, cur store.MCPCall) (map[string]any, error) {
	a, err := s.d.Store.GetApproval(ctx, cur.ApprovalID)
	if err != nil {
		return nil, fmt.Errorf("approval %s of call %s: %w", cur.ApprovalID, cur.ID, err)
	}
	if a.Status != store.ApprovalPending {
		// Decided (in the client or by an approver): the call resumes.
		return nil, fmt.Errorf("approval %s is %s: %w", a.ID, a.Status, store.ErrDecided)
	}
	params := elicitParams(a)
	return map[string]any{approvalKey(a.ID): map[string]any{"method": "elicitation/create", "params": params}}, nil
}

// elicitParams is the approval form: message and schema, for both generations.
func elicitParams(a store.Approval) map[string]any {
	view := string(a.Args)
	if len(a.View) > 0 && string(a.View) != "null" {
		view = string(a.View)
	}
	msg := fmt.Sprintf("Approve %s (%s tier)?\nWhy it needs approval: %s\nArguments (secrets masked): %s\nApproval %s, expires %s.",
		a.Tool, a.Tier, a.Why, view, a.ID, a.ExpiresAt.UTC().Format(time.RFC3339))
	return map[string]any{
		"mode":    "form",
		"message": msg,
		"requestedSchema": map[string]any{
			"type": "object",
			"properties": map[string]any{
				"decision": map[string]any{"type": "string", "title": "Decision", "enum": []string{"approve", "deny"}},
				"reason":   map[string]any{"type": "string", "title": "Reason", "description": "Why (shown to the agent and kept in the audit)."},
			},
			"required": []string{"decision"},
		},
	}
}

// retryCall is the retry of an input_required answer: it checks the retry is
// the same call of the same principal, decides the approval with the client's
// answer and waits on as for a new call.
func (s *Server) retryCall(q *mreq, cp callParams) {
	ctx := q.r.Context()
	cur, err := s.d.Store.GetMCPCall(ctx, cp.RequestState)
	if err != nil || cur.Principal != q.principal || baseProfile(cur.Profile) != q.profile || cur.Tool != cp.Name {
		q.fail(codeInvalidParams, "requestState names no call of yours for this tool", nil)
		return
	}
	args := string(cp.Arguments)
	if strings.TrimSpace(args) == "" {
		args = "{}"
	}
	if !sameArgs(args, cur.Args) {
		q.fail(codeInvalidParams, "the retry's arguments differ from the call's: the decision binds to the arguments it was asked for", nil)
		return
	}
	handle, decided := handleOf(cur.Profile), ""
	if cur.Status == store.MCPCallWaiting && cur.ApprovalID != "" {
		ans, ok := cp.InputResponses[approvalKey(cur.ApprovalID)]
		if !ok {
			s.replyInputRequired(q, cur)
			return
		}
		if res := s.decideInClient(ctx, q.principal, cur, ans); res != nil {
			q.replyCall(res, handle)
			return
		}
		decided = cur.ApprovalID
	}
	s.awaitModern(q, cur, handle, decided)
}

// decideInClient applies the client's answer to the call's approval. A
// non-nil result ends the wait: the client cancelled the form, so the call was
// withdrawn. A decision that does not apply (somebody decided first, the window
// closed) is only logged: the call's row says what became of it.
func (s *Server) decideInClient(ctx context.Context, principal string, cur store.MCPCall, ans elicitAnswer) *mcp.CallToolResult {
	verb := store.VerbDeny
	switch {
	case ans.Action == "cancel":
		if out, ok := s.withdraw(cur.ID, principal, "the client's human cancelled the approval form"); ok {
			return s.result(out)
		}
		return nil
	case ans.Action == "accept" && ans.Content.Decision == "approve":
		verb = store.VerbApprove
	}
	reason := ans.Content.Reason
	if ans.Action == "decline" && reason == "" {
		reason = "declined in the MCP client"
	}
	if s.d.Approvals == nil {
		s.d.Log.Warn("mcp: a client decision without a permission gate", "call", cur.ID)
		return nil
	}
	if _, err := s.d.Approvals.Apply(ctx, cur.ApprovalID, store.HumanDecision{Verb: verb, By: principal, Reason: reason, InClient: true}); err != nil {
		s.d.Log.Info("mcp: the client's decision was not applied", "call", cur.ID, "approval", cur.ApprovalID, "err", err)
	}
	return nil
}

// baseProfile and handleOf split an MCP run's profile key "<profile>#<handle>".
func baseProfile(key string) string { p, _, _ := strings.Cut(key, "#"); return p }
func handleOf(key string) string    { _, h, _ := strings.Cut(key, "#"); return h }

func sameArgs(a, b string) bool { return sameJSON(json.RawMessage(a), json.RawMessage(b)) || a == b }

func sameJSON(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	ra, _ := json.Marshal(x)
	rb, _ := json.Marshal(y)
	return string(ra) == string(rb)
}

// listen is subscriptions/listen: an event stream of list changes (and of the
// named tasks' states) until the client goes away.
func (s *Server) listen(q *mreq) {
	var lp struct {
		Notifications struct {
			ToolsListChanged bool     `json:"toolsListChanged"`
			TaskIDs          []string `json:"taskIds"`
		} `json:"notifications"`
	}
	_ = json.Unmarshal(q.params, &lp)
	if len(lp.Notifications.TaskIDs) > 0 && !q.caps.Tasks {
		q.fail(codeMissingCap, "Missing required client capability",
			map[string]any{"requiredCapabilities": map[string]any{"extensions": map[string]any{extensionTasks: map[string]any{}}}})
		return
	}
	ctx := q.r.Context()
	var tasks []string
	wakes := make(chan string, 16)
	for _, id := range lp.Notifications.TaskIDs {
		if len(tasks) == maxListenTasks {
			break
		}
		c, err := s.d.Store.GetMCPCall(ctx, id)
		if err != nil || c.Principal != q.principal || baseProfile(c.Profile) != q.profile {
			continue
		}
		wake, stop, err := s.d.Hub.WatchChannel(ctx, mcpCallChannel(id))
		if err != nil {
			continue
		}
		defer stop()
		tasks = append(tasks, id)
		go func(id string) {
			for {
				select {
				case <-ctx.Done():
					return
				case <-wake:
					select {
					case wakes <- id:
					case <-ctx.Done():
						return
					}
				}
			}
		}(id)
	}
	changed, unsubscribe := s.subscribeListChanged()
	defer unsubscribe()
	ack := map[string]any{}
	if lp.Notifications.ToolsListChanged {
		ack["toolsListChanged"] = true
	}
	if len(tasks) > 0 {
		ack["taskIds"] = tasks
	}
	q.notify("notifications/subscriptions/acknowledged", map[string]any{"notifications": ack})
	keepalive := time.NewTicker(25 * time.Second)
	defer keepalive.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
			if lp.Notifications.ToolsListChanged {
				q.notify("notifications/tools/list_changed", map[string]any{})
			}
		case id := <-wakes:
			c, err := s.d.Store.GetMCPCall(ctx, id)
			if err == nil {
				q.notify("notifications/tasks", s.taskView(ctx, c, q.caps, q.p))
			}
		case <-keepalive.C:
			_, _ = fmt.Fprint(q.w, ": keepalive\n\n")
			if q.stream != nil && q.stream.f != nil {
				q.stream.f.Flush()
			}
		}
	}
}

// maxListenTasks bounds the tasks one listen stream follows.
const maxListenTasks = 100

// listChanged fans a catalog change out to the subscriptions/listen streams.
type listChanged struct {
	mu   sync.Mutex
	subs map[chan struct{}]struct{}
}

func (s *Server) subscribeListChanged() (<-chan struct{}, func()) {
	l := &s.listeners
	ch := make(chan struct{}, 1)
	l.mu.Lock()
	if l.subs == nil {
		l.subs = map[chan struct{}]struct{}{}
	}
	l.subs[ch] = struct{}{}
	l.mu.Unlock()
	return ch, func() {
		l.mu.Lock()
		delete(l.subs, ch)
		l.mu.Unlock()
	}
}

// NotifyListChanged tells every subscriptions/listen stream that the catalog
// changed (a configuration reload).
func (s *Server) NotifyListChanged() {
	l := &s.listeners
	l.mu.Lock()
	defer l.mu.Unlock()
	for ch := range l.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}
