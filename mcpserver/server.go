// Package mcpserver serves the gated tool catalog to outside MCP clients (an
// IDE, a desktop assistant) over streamable HTTP at /mcp, with the official
// MCP Go SDK. It is part of the api role and builds no gate, sandbox or tool:
// a profile (a team node) gives the catalog it lists, and every call is
// recorded (mcp_calls), queued as an mcp:call task and executed by a worker
// through the same gate, approvals, intents and audit as an agent's call, in
// the run that represents the client (template "mcp:<profile>", one live run
// per principal and profile, owned by the principal). The handler waits for the
// outcome, with progress notifications while a Restricted call waits for a
// human. It is served by net/http on a listener of its own: Fiber's net/http
// adaptor buffers a response until the handler returns, which would hold the
// notifications back. A profile with questions: true also serves the fleet's
// own pending_questions and answer_question (questions.go): a client answers
// the questions agents ask with ask_user, decided by security.Approvals.
// Clients authenticate with the API's bearer tokens or, with mcp.oauth, with
// JWT access tokens of an OAuth authorization server (auth.go, package oauth):
// the listener is then an OAuth 2.1 resource server and serves its RFC 9728
// metadata.
package mcpserver

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aetherium-engine/aetherium/api"
	"github.com/aetherium-engine/aetherium/events"
	"github.com/aetherium-engine/aetherium/oauth"
	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/security"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/templates"
	"github.com/aetherium-engine/aetherium/tools"
)

// Deps are the server's collaborators.
type Deps struct {
	Store *store.Store
	Queue *queue.Enqueuer
	// Registry is the catalog (the api role's: it lists and checks, never runs).
	Registry *tools.Registry
	// Tokens are the API's bearer tokens (api.tokens): the same principals and roles.
	Tokens []api.Token
	// ApprovalWindow is security.approval_window: how long a Restricted call may
	// wait for a human (its wait is that plus Config.CallTimeout).
	ApprovalWindow time.Duration
	// Hub is the process's events hub: a waiting call is woken by the worker's
	// announcement of its row (events.MCPCallChannel) and of its run's end
	// (events.EndChannel), and reads PostgreSQL only then or on Config.Poll.
	Hub *events.Hub
	// Approvals records the answers MCP clients give to the questions of ask_user
	// (answer_question; pending_questions lists them), in profiles with
	// questions: true. Nil without a permission gate: such a profile is an error.
	Approvals *security.Approvals
	// Events announces a call's change of state to every process watching it (a
	// call withdrawn by its client).
	Events *events.Recorder
	// OAuthClient fetches the OAuth issuer's discovery document and keys
	// (mcp.oauth); nil is a client with a 10 s timeout.
	OAuthClient *http.Client
	Log         *slog.Logger
}

// Server is the MCP endpoint.
type Server struct {
	cfg     Config
	d       Deps
	tokens  []token
	servers map[string]*mcp.Server
	teams   map[string]json.RawMessage
	handler http.Handler
	// catalog is each profile's tools in name order (tools/list of both
	// generations), instructions its server instructions.
	catalog      map[string][]catalogEntry
	instructions map[string]string
	tasks        taskCache
	listeners    listChanged
	sweeper      sweeper
	// verifier checks JWT access tokens (mcp.oauth); nil without OAuth.
	verifier *oauth.Verifier
	// schemas are the compiled input schemas by *tools.Spec (argSchema).
	schemas sync.Map
}

// catalogEntry is a served tool: a fleet tool (run by the workers) or one the
// MCP server answers itself (local: the questions of ask_user).
type catalogEntry struct {
	tool  *mcp.Tool
	local mcp.ToolHandler
}

type token struct {
	name  string
	hash  []byte
	roles map[string]bool
}

// New builds the server of cfg's profiles; a profile whose catalog does not
// resolve against the registry is an error naming its key.
func New(cfg Config, d Deps) (*Server, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if d.Log == nil {
		d.Log = slog.Default()
	}
	if d.Hub == nil {
		return nil, errors.New("mcp: no events hub: a waiting call would have to poll PostgreSQL")
	}
	if d.ApprovalWindow <= 0 {
		d.ApprovalWindow = 5 * time.Minute
	}
	s := &Server{cfg: cfg, d: d, servers: map[string]*mcp.Server{}, teams: map[string]json.RawMessage{},
		catalog: map[string][]catalogEntry{}, instructions: map[string]string{}}
	for _, t := range d.Tokens {
		h, _ := hex.DecodeString(t.SHA256)
		roles := map[string]bool{}
		for _, r := range t.Roles {
			roles[r] = true
		}
		s.tokens = append(s.tokens, token{t.Name, h, roles})
	}
	if cfg.OAuth.Enabled() {
		v, err := oauth.New(cfg.OAuth, d.OAuthClient)
		if err != nil {
			return nil, fmt.Errorf("mcp.oauth: %w", err)
		}
		s.verifier = v
	}
	for name, p := range cfg.Profiles {
		srv, team, err := s.buildProfile(name, p)
		if err != nil {
			return nil, err
		}
		s.servers[name], s.teams[name] = srv, team
	}
	s.handler = s.routes()
	return s, nil
}

// Handler is /mcp/<profile> (and /mcp for a single profile) behind the bearer
// token check.
func (s *Server) Handler() http.Handler { return s.handler }

// Serve serves ln until ctx ends, then drains connections within grace.
func (s *Server) Serve(ctx context.Context, ln net.Listener, grace time.Duration) error {
	hs := &http.Server{Handler: s.handler, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	sweepCtx, stopSweep := context.WithCancel(ctx)
	defer stopSweep()
	go s.sweep(sweepCtx)
	select {
	case err := <-errc:
		return fmt.Errorf("mcp (api.mcp_addr=%s): %w", s.cfg.Addr, err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		// Streams of calls waiting for a human do not end by themselves.
		_ = hs.Close()
	}
	return nil
}

// team is the run team of a profile: the profile's node as the one worker, the
// team-level settings its calls run under. It is what the worker reads back.
func team(name string, p Profile) templates.Template {
	node := p.Node
	node.Name, node.Prompt, node.Model = name, "", nil
	return templates.Template{
		Name: store.MCPTemplatePrefix + name, Description: p.Description, Workers: []templates.Node{node},
		AllowedDomains: p.AllowedDomains, Egress: p.Egress, ToolDefaults: p.ToolDefaults,
	}
}

func (s *Server) buildProfile(name string, p Profile) (*mcp.Server, json.RawMessage, error) {
	key := "mcp.profiles." + name
	access := s.d.Registry.Resolve(tools.Node{Role: "mcp", MCPServers: p.MCPServers, Tools: p.Tools})
	for _, t := range p.Tools {
		if !access.Allows(t) {
			return nil, nil, fmt.Errorf("%s.tools: %s is not registered in this build", key, t)
		}
	}
	if len(access.Tools) == 0 && !p.Questions {
		return nil, nil, fmt.Errorf("%s: its catalog is empty", key)
	}
	raw, err := json.Marshal(team(name, p))
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", key, err)
	}
	instructions := p.Description
	if instructions == "" {
		instructions = "Aetherium fleet tools of profile " + name + ": every call passes the permission gate; Restricted calls wait for a human approval."
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: "aetherium-" + name, Version: "1"}, &mcp.ServerOptions{
		Instructions: instructions, Logger: s.d.Log.With("component", "mcp", "profile", name),
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}},
	})
	for _, def := range s.d.Registry.Definitions(access) {
		spec, _ := s.d.Registry.Spec(def.Name)
		var schema map[string]any
		if err := json.Unmarshal(def.Parameters, &schema); err != nil || schema["type"] != "object" {
			return nil, nil, fmt.Errorf("%s: tool %s has no object schema", key, def.Name)
		}
		meta, err := describe(spec)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", key, err)
		}
		if _, err := s.argSchema(spec); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", key, err)
		}
		t := meta.sdkTool()
		s.addTool(name, srv, t, s.callTool(name, p), false)
	}
	if p.Questions {
		if err := s.addQuestionTools(name, key, srv); err != nil {
			return nil, nil, err
		}
	}
	slices.SortFunc(s.catalog[name], func(a, b catalogEntry) int { return strings.Compare(a.tool.Name, b.tool.Name) })
	s.instructions[name] = instructions
	return srv, raw, nil
}

// addTool serves t on srv (the go-sdk's sessions) and lists it for the
// stateless generation; local tools are answered by h in both.
func (s *Server) addTool(profile string, srv *mcp.Server, t *mcp.Tool, h mcp.ToolHandler, local bool) {
	srv.AddTool(t, h)
	e := catalogEntry{tool: t}
	if local {
		e.local = h
	}
	s.catalog[profile] = append(s.catalog[profile], e)
}

// entry is a profile's tool by name.
func (s *Server) entry(profile, name string) (catalogEntry, bool) {
	for _, e := range s.catalog[profile] {
		if e.tool.Name == name {
			return e, true
		}
	}
	return catalogEntry{}, false
}

// routes are the profile paths behind the token check and, with OAuth, the
// protected resource metadata (unauthenticated: it is how a client learns
// where to get a token).
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	var metadata http.Handler
	if s.verifier != nil {
		metadata = s.metadata()
		mux.Handle("GET "+oauth.WellKnownPath, metadata)
	}
	names := make([]string, 0, len(s.servers))
	for name := range s.servers {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		srv, p := s.servers[name], s.cfg.Profiles[name]
		h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{
			SessionTimeout: s.cfg.SessionTimeout, Logger: s.d.Log.With("component", "mcp", "profile", name),
		})
		guarded := s.origin(s.authorize(p, s.edge(name, p, h)))
		mux.Handle("/mcp/"+name, guarded)
		if len(names) == 1 {
			mux.Handle("/mcp", guarded)
		}
		if metadata != nil {
			mux.Handle("GET "+oauth.WellKnownPath+"/mcp/"+name, metadata)
			if len(names) == 1 {
				mux.Handle("GET "+oauth.WellKnownPath+"/mcp", metadata)
			}
		}
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, fmt.Sprintf("no MCP profile at %s: serve /mcp/<profile>, one of %s", r.URL.Path, strings.Join(names, ", ")), http.StatusNotFound)
	})
	return mux
}

// callTool is a tool of the go-sdk's sessions: it submits the call and waits
// for its outcome.
func (s *Server) callTool(profile string, p Profile) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		principal, roles, ok := s.caller(req.Extra)
		if !ok {
			return nil, errors.New("no authenticated principal on this request")
		}
		call, refused, err := s.submit(ctx, profile, p, principal, roles, req.Params.Name, req.Params.Arguments, "")
		if err != nil || refused != nil {
			return refused, err
		}
		return s.wait(ctx, req, p, principal, call)
	}
}

// submit records a call and queues it for the workers, for both generations:
// the role check, the profile's project, the MCP run (the principal's default
// one, or that of handle), the call's row and its task. A refusal is a tool
// result with isError, and then nothing was queued.
func (s *Server) submit(ctx context.Context, profile string, p Profile, principal string, roles map[string]bool, tool string, rawArgs json.RawMessage, handle string) (store.MCPCall, *mcp.CallToolResult, error) {
	if !holds(roles, p.CallRole) {
		return store.MCPCall{}, refusal(fmt.Sprintf("forbidden: token %q lacks role %q to call tools of MCP profile %s", principal, p.CallRole, profile)), nil
	}
	projectID, refused, err := s.project(ctx, profile, p, principal, roles)
	if err != nil || refused != nil {
		return store.MCPCall{}, refused, err
	}
	key := profile
	if handle != "" {
		key += "#" + handle
	}
	run, err := s.d.Store.EnsureMCPRun(ctx, principal, key, s.teams[profile], projectID)
	if errors.Is(err, store.ErrNoProject) {
		return store.MCPCall{}, refusal(fmt.Sprintf("MCP profile %s names project %q of %s, which does not exist", profile, p.Project, p.ProjectOwner)), nil
	}
	if err != nil {
		return store.MCPCall{}, nil, fmt.Errorf("mcp run: %w", err)
	}
	if verr := s.validateArgs(tool, withDefaults(p.ToolDefaults[tool], rawArgs)); verr != nil {
		res, err := s.refuseArgs(ctx, run, key, principal, tool, verr)
		return store.MCPCall{}, res, err
	}
	args := string(rawArgs)
	if strings.TrimSpace(args) == "" {
		args = "{}"
	}
	call := store.MCPCall{ID: "mcp_" + strings.ReplaceAll(uuid.NewString(), "-", ""), RunID: run.ID, Profile: key,
		Principal: principal, Tool: tool, Args: args, Status: store.MCPCallQueued}
	if err := s.d.Store.CreateMCPCall(ctx, call, s.cfg.MaxCallsInFlight); err != nil {
		if errors.Is(err, store.ErrTooManyMCPCalls) {
			// Refused before anything is queued: no approval is requested for it.
			return store.MCPCall{}, refusal(fmt.Sprintf("refused: %v; retry when one of them is decided or done", err)), nil
		}
		return store.MCPCall{}, nil, err
	}
	if err := s.d.Queue.MCPCall(ctx, queue.Route{Key: run.FairKey, Priority: run.Priority}, call.ID, "start"); err != nil {
		return store.MCPCall{}, nil, fmt.Errorf("queue mcp call %s: %w", call.ID, err)
	}
	return call, nil, nil
}

// refuseArgs answers a call whose arguments do not match the tool's input
// schema (SEP-1303: a tool error the client's model reads and fixes, not a
// protocol error). Nothing is queued and no approval is asked, but the attempt
// is audited in the MCP run (layer arguments), as every refusal is; the
// arguments are not stored: no gate masked them.
func (s *Server) refuseArgs(ctx context.Context, run store.Run, key, principal, tool string, verr error) (*mcp.CallToolResult, error) {
	id := "mcp_" + strings.ReplaceAll(uuid.NewString(), "-", "")
	tier := ""
	if spec, ok := s.d.Registry.Spec(tool); ok {
		tier = spec.Tier.String()
	}
	row := store.AuditRow{CallKey: "m:" + id + ":" + id, At: time.Now(), RunID: run.ID, Team: store.MCPTemplatePrefix + baseProfile(key),
		Agent: principal, Role: "mcp", Tool: tool, Tier: tier, Decision: "denied", DenyLayer: "arguments", DenyReason: verr.Error(),
		Summary: tool + " refused: " + verr.Error()}
	if err := s.d.Store.InsertAudit(ctx, []store.AuditRow{row}); err != nil {
		return nil, fmt.Errorf("audit refused mcp call: %w", err)
	}
	res := refusal(verr.Error())
	res.Meta = mcp.Meta{"aetherium/call_id": id, "aetherium/run_id": run.ID, "aetherium/decision": "denied",
		"aetherium/layer": "arguments", "aetherium/reason": verr.Error()}
	return res, nil
}

// withDefaults is a call's arguments with the profile's tool_defaults for the
// tool merged under them, as the worker merges them: the schema judges what
// will run. Arguments that are not a JSON object are left as they are (the
// schema refuses them).
func withDefaults(defaults map[string]any, args json.RawMessage) json.RawMessage {
	if len(defaults) == 0 {
		return args
	}
	var m map[string]any
	if trimmed := strings.TrimSpace(string(args)); trimmed == "" || trimmed == "null" {
		m = map[string]any{}
	} else if json.Unmarshal(args, &m) != nil || m == nil {
		return args
	}
	for k, v := range defaults {
		if _, set := m[k]; !set {
			m[k] = v
		}
	}
	out, err := json.Marshal(m)
	if err != nil {
		return args
	}
	return out
}

// project resolves the profile's project for one call: its id when the calling
// principal may use it, else a refusal. Every call checks anew (the project may
// have been deleted, or its slug taken by someone else, since the last one), with
// the API's ownership check (store.ProjectAccess).
func (s *Server) project(ctx context.Context, profile string, p Profile, principal string, roles map[string]bool) (string, *mcp.CallToolResult, error) {
	if p.Project == "" {
		return "", nil, nil
	}
	proj, err := s.d.Store.GetProject(ctx, p.Project)
	if errors.Is(err, store.ErrNotFound) {
		return "", refusal(fmt.Sprintf("MCP profile %s names project %q of %s, which does not exist", profile, p.Project, p.ProjectOwner)), nil
	}
	if err != nil {
		return "", nil, fmt.Errorf("project of mcp profile %s: %w", profile, err)
	}
	if proj.Owner != p.ProjectOwner {
		// The slug was taken by another principal (the profile's project was
		// deleted, or never made): that project is not the profile's.
		return "", refusal(fmt.Sprintf("MCP profile %s names project %q of %s, which does not exist (a project of that slug belongs to someone else)",
			profile, p.Project, p.ProjectOwner)), nil
	}
	access := store.ProjectAccess{Principal: principal, ReadAll: holds(roles, api.RoleReadAll), Admin: roles[api.RoleAdmin]}
	if !access.MayUse(proj) {
		return "", refusal(fmt.Sprintf("forbidden: %q may not use project %q of MCP profile %s (it belongs to %s)", principal, p.Project, profile, proj.Owner)), nil
	}
	return proj.ID, nil, nil
}

// wait is a session's wait for its call's outcome (follow): progress
// notifications while its approval is pending (when the client asked for
// progress), the approval form when the profile lets the client decide and the
// client elicits; the approval window bounds the wait, as the expiry denies the
// call. A client that cancels the request (notifications/cancelled) or goes
// away withdraws the call while no worker runs it, and its pending approval
// with it.
func (s *Server) wait(ctx context.Context, req *mcp.CallToolRequest, p Profile, principal string, call store.MCPCall) (*mcp.CallToolResult, error) {
	elicit := p.ApproveInClient && req.Session != nil && sessionElicits(req.Session)
	token := req.Params.GetProgressToken()
	every := time.Duration(0)
	if token != nil {
		every = s.cfg.ProgressEvery
	}
	started, asked := time.Now(), ""
	var decided *mcp.CallToolResult
	cur, err := s.follow(ctx, call, s.window(), every, func(cur store.MCPCall, fresh bool) bool {
		switch {
		case cur.Status == store.MCPCallDone:
			return true
		case fresh && elicit && cur.Status == store.MCPCallWaiting && cur.ApprovalID != "" && cur.ApprovalID != asked:
			asked = cur.ApprovalID
			decided = s.elicitSession(ctx, req, principal, cur)
			return decided != nil
		case !fresh && cur.Status == store.MCPCallWaiting && token != nil:
			if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
				ProgressToken: token, Message: waitingMessage(cur), Progress: time.Since(started).Seconds(),
			}); err != nil {
				s.d.Log.Debug("mcp progress notification", "call", call.ID, "err", err)
			}
		}
		return false
	})
	switch {
	case decided != nil:
		return decided, nil
	case ctx.Err() != nil:
		s.abandon(call, principal, "the client cancelled the call or went away")
		return nil, ctx.Err()
	case errors.Is(err, errWaitTimeout):
		return refusal(fmt.Sprintf("no outcome for %s within %s; the call %s continues on the workers (run %s)",
			call.Tool, s.window(), call.ID, call.RunID)), nil
	case err != nil:
		return nil, err
	}
	return s.result(cur), nil
}

// sessionElicits reports whether a session's client declared form elicitation.
func sessionElicits(ss *mcp.ServerSession) bool {
	ip := ss.InitializeParams()
	if ip == nil || ip.Capabilities == nil || ip.Capabilities.Elicitation == nil {
		return false
	}
	e := ip.Capabilities.Elicitation
	return e.Form != nil || e.URL == nil
}

// elicitSession asks the session's client (elicitation/create) to decide the
// call's approval; a non-nil result ends the wait (withdrawn, or the decision
// refused). A form that cannot be asked leaves the decision to the fleet's
// approvers.
func (s *Server) elicitSession(ctx context.Context, req *mcp.CallToolRequest, principal string, cur store.MCPCall) *mcp.CallToolResult {
	a, err := s.d.Store.GetApproval(ctx, cur.ApprovalID)
	if err != nil {
		s.d.Log.Warn("mcp elicitation: approval", "call", cur.ID, "err", err)
		return nil
	}
	form := elicitParams(a)
	res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Mode: "form", Message: form["message"].(string), RequestedSchema: form["requestedSchema"]})
	if err != nil {
		s.d.Log.Info("mcp elicitation failed: the fleet's approvers decide", "call", cur.ID, "err", err)
		return nil
	}
	var ans elicitAnswer
	ans.Action = res.Action
	if d, ok := res.Content["decision"].(string); ok {
		ans.Content.Decision = d
	}
	if r, ok := res.Content["reason"].(string); ok {
		ans.Content.Reason = r
	}
	return s.decideInClient(ctx, principal, cur, ans)
}

// result is a finished call as MCP sees it: a refusal or a tool error is a tool
// result with isError (the text says "denied by <layer>: <reason>", as an agent
// reads it), the gate's verdict in _meta; a tool that declares a result schema
// (its outputSchema) gives its result as structuredContent too.
func (s *Server) result(c store.MCPCall) *mcp.CallToolResult {
	text := c.Result
	if text == "" && !c.IsError {
		text = "ok"
	}
	res := &mcp.CallToolResult{
		IsError: c.IsError,
		Content: []mcp.Content{&mcp.TextContent{Text: text}},
		Meta: mcp.Meta{"aetherium/call_id": c.ID, "aetherium/run_id": c.RunID, "aetherium/decision": c.Decision,
			"aetherium/layer": c.DenyLayer, "aetherium/reason": c.DenyReason},
	}
	if spec, ok := s.d.Registry.Spec(c.Tool); ok {
		if sc := structured(spec, c.IsError, c.Result); sc != nil {
			res.StructuredContent = sc
		}
	}
	return res
}

func refusal(msg string) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: msg}}}
}
