// Package tools is the tool router: typed registration (args struct → JSON schema), the
// catalog, the connection and capability filters, and dispatch through middleware.
// The server classes live under toolbox/ (a floor above this one) and register
// themselves on a Registry.
package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strings"

	"github.com/invopop/jsonschema"

	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/store"
)

// Call is one tool invocation as the model asked for it, with the session that
// makes it: a handler's inputs are all in its signature, so a tool (and a test of
// one) cannot run without a caller by forgetting to put one on a context.
type Call struct {
	// ID is the model's id of the call; tools key their effects on it so a
	// redelivered step does not repeat them.
	ID   string
	Name string
	Args json.RawMessage
	// Session is who calls, for which run, with what rights: the worker and the
	// MCP server's runner set it where they build the call. Nil is a call from
	// outside any session, which the capability layer and the gate refuse.
	Session *Session
	// Answer is a human's answer to a tool that asks one (AsksHuman): the gate
	// sets it once the question is answered, and calls the tool only then.
	Answer *HumanAnswer
}

// HumanAnswer is a person's answer to a question a tool asked (AsksHuman).
type HumanAnswer struct {
	// By is the principal who answered.
	By   string
	Text string
}

// ErrNoWorkspace is a call whose session has no workspace directory (no session,
// or one outside a run).
var ErrNoWorkspace = errors.New("no workspace for this session")

// Workspace is the calling session's workspace directory, the root every tool
// that reads or writes the run's files confines itself to (through confine or
// os.OpenRoot); ErrNoWorkspace when there is none.
func (c Call) Workspace() (string, error) {
	if c.Session == nil || c.Session.Workspace == "" {
		return "", ErrNoWorkspace
	}
	return c.Session.Workspace, nil
}

// RunWorkspace is Workspace for the tools that also act on the run itself (its
// sandbox, its command log, its browser): a session with a workspace but no run
// is refused with ErrNoWorkspace too.
func (c Call) RunWorkspace() (string, error) {
	if c.Session == nil || c.Session.RunID == "" {
		return "", ErrNoWorkspace
	}
	return c.Workspace()
}

// Result is what goes back to the model.
type Result struct {
	Content string
	// Pending marks a call whose result arrives later (delegate, spawn_subagents):
	// the session waits and is resumed when it is ready.
	Pending bool
	// Final ends the session's loop after this call (reply).
	Final bool
	// Audit is the gate's audit row of this attempt, returned with the call's
	// result (or refusal) rather than written by the gate: the agent loop saves it
	// in the transaction that makes the result durable. Nil when no gate ran or
	// the attempt is not audited yet (pending approval, infrastructure failure).
	Audit *store.AuditRow
}

// The loop-control tools: calls the durable agent loop itself knows. The
// worker answers delegate, spawn_subagents and code_review from the
// delegations they record, and reply ends the run; their registrations
// (toolbox/orchestration, toolbox/quality) and the worker name them by these.
const (
	Reply          = "reply"
	Delegate       = "delegate"
	SpawnSubagents = "spawn_subagents"
	CodeReview     = "code_review"
)

// Outcome is how a call that was answered ended, as the audit trail, the run's
// events and the metrics name it.
type Outcome string

// Outcomes.
const (
	OutcomeAllowed Outcome = "allowed" // ran and succeeded
	OutcomeError   Outcome = "error"   // ran (or was tried) and failed
	OutcomeDenied  Outcome = "denied"  // refused by a gate layer
	OutcomeUnknown Outcome = "unknown" // started before a crash; not run again (ErrOutcomeUnknown)
)

// Classify is the one place a call's error becomes its outcome, with the refusing
// layer of a denial. ErrInfrastructure is not an outcome: such an attempt is
// retried, not answered, so callers branch on it first.
func Classify(err error) (Outcome, string) {
	var d *Denied
	switch {
	case err == nil:
		return OutcomeAllowed, ""
	case errors.As(err, &d):
		return OutcomeDenied, d.Layer
	case errors.Is(err, ErrOutcomeUnknown):
		return OutcomeUnknown, ""
	default:
		return OutcomeError, ""
	}
}

// Text is a convenience Result.
func Text(format string, a ...any) Result { return Result{Content: fmt.Sprintf(format, a...)} }

// JSON renders v as the result content.
func JSON(v any) (Result, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return Result{}, err
	}
	return Result{Content: string(b)}, nil
}

// Handler executes a tool call. Middleware wraps Handlers like net/http's.
type Handler interface {
	Handle(ctx context.Context, call Call) (Result, error)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, call Call) (Result, error)

// Handle implements Handler.
func (f HandlerFunc) Handle(ctx context.Context, call Call) (Result, error) { return f(ctx, call) }

// Middleware wraps a Handler (gate layers, audit, metrics).
type Middleware func(Handler) Handler

// Sentinel errors callers branch on.
var (
	// ErrUnknownTool is a call to a tool that is not registered.
	ErrUnknownTool = errors.New("unknown tool")
	// ErrNotInCatalog is a call to a tool outside the calling agent's catalog.
	ErrNotInCatalog = errors.New("tool not in this agent's catalog")
	// ErrInvalidArgs is a call whose arguments do not match the tool's schema.
	ErrInvalidArgs = errors.New("invalid tool arguments")
	// ErrOutcomeUnknown is a non-idempotent call that started before a crash and
	// never finished: it is not run again, and nobody knows whether it took effect.
	ErrOutcomeUnknown = errors.New("outcome unknown")
	// ErrInfrastructure is a failure of the fleet's own services (database, queue)
	// while a tool ran, not of the call: the step fails and its task is retried,
	// instead of the model being told — a delegation that could not be enqueued
	// must not turn into a run that "completes" without the work. The gate leaves
	// such an attempt unaudited; the retry writes the call's one row.
	ErrInfrastructure = errors.New("infrastructure failure")
)

// Infrastructure marks err as an ErrInfrastructure (nil stays nil).
func Infrastructure(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrInfrastructure, err)
}

// Denied is a call refused by a gate layer (capability, rules, egress, dlp,
// approval). Callers branch on it to tell refusals from tool failures.
type Denied struct {
	Layer  string
	Reason string
	// Err is a sentinel the refusal also matches (ErrUnknownTool, ErrNotInCatalog).
	Err error
	// Ran marks a refusal made after the tool ran (the egress client refused a
	// redirect): its reason may quote what the remote chose.
	Ran bool
	// Human marks a human reviewer's rejection: its reason is the reviewer's
	// feedback, and it counts toward no failure unless the team says so.
	Human bool
}

func (d *Denied) Error() string { return "denied by " + d.Layer + ": " + d.Reason }

// Unwrap lets errors.Is see the sentinel.
func (d *Denied) Unwrap() error { return d.Err }

// Spec describes a registered tool.
type Spec struct {
	Name        string
	Description string
	Group       string
	Tier        Tier
	// Outbound marks tools that reach the network (egress + DLP gate).
	Outbound bool
	// OutboundWhen, when set, tells the sessions in which the tool reaches the
	// network (see OutboundWhen).
	OutboundWhen func(s *Session) bool
	// LoopbackInSandbox marks outbound tools that carry a loopback URL
	// (IsLoopbackHost) into the calling run's own sandbox, where the run's app
	// listens, instead of dialing it from the worker: the gate does not judge
	// such a URL by the egress policy (it never leaves the run's network
	// namespace, whose firewall still binds it). Set only where the routing is
	// real (the Docker executor); elsewhere loopback is the worker's own and is
	// judged like any address.
	LoopbackInSandbox bool
	// Idempotent marks tools safe to re-run after a crash.
	Idempotent bool
	// ReadOnly marks a tool that changes nothing: not the workspace, not the
	// run's state, not a remote service or device (see ReadOnly).
	ReadOnly bool
	// Output is the JSON schema of a successful call's result, for a tool whose
	// result is always one JSON object (see Returns); nil for text results.
	Output json.RawMessage
	// Escalate, when set, says why a call needs a human approval although its
	// tier does not ("" when it does not): see Escalates.
	Escalate func(args json.RawMessage) string
	// AlwaysHuman marks a tool only a person may approve: see AlwaysHuman.
	AlwaysHuman bool
	// AsksHuman, when set, reads the question a call asks a person: see AsksHuman.
	AsksHuman func(args json.RawMessage) (Question, error)
	// Reads is the provenance of what the tool returns (see Reads): the session
	// that reads it carries it in its Label.
	Reads Provenance
	// Persists marks a tool that writes where later runs read and obey (see
	// Persists).
	Persists bool
	// ChangesRemote, when set, names the change a call makes on a remote service
	// ("DELETE"; "" for a read): see ChangesRemote.
	ChangesRemote func(args json.RawMessage) string
	// HoldsTodos marks a tool that works on Session.Todos (see HoldsTodos).
	HoldsTodos bool
	// WritesPath names the argument holding the workspace path the tool writes,
	// and the path it writes without one (see WritesPath).
	WritesPath, WritesDefault string
	Schema                    json.RawMessage
	// schema is the reflected schema of the arguments: its required fields are
	// checked at every depth before decoding.
	schema  *jsonschema.Schema
	handler Handler
}

// Option adjusts a registration.
type Option func(*Spec)

// InGroup puts a tool in its server group, the key a node's mcp_servers names
// (one of Groups). Every registration needs one.
func InGroup(group string) Option { return func(s *Spec) { s.Group = group } }

// WithTier sets a tool's security tier (Standard without it).
func WithTier(t Tier) Option { return func(s *Spec) { s.Tier = t } }

// Escalates gives the gate a rule of the tool's own: why, given a call's raw
// arguments, the call needs a human although its tier does not ("" when it does
// not). run_shell escalates a destructive command line.
func Escalates(why func(args json.RawMessage) string) Option {
	return func(s *Spec) { s.Escalate = why }
}

// AlwaysHuman marks a tool whose approval only a person can give: its expiring
// approval times out whatever security.supervisor_fallback lists, and listing it
// there is a configuration error (NeverFallsBack). download_pdf carries it (the
// seed's rule), and the headset tools, which act on a device a person wears.
func AlwaysHuman() Option { return func(s *Spec) { s.AlwaysHuman = true } }

// OutboundWhen flags a tool that reaches the network in some sessions only
// (run_shell, when the team's allowlist gives its sandbox a network): in those,
// the DLP layer scans its arguments as an outbound tool's, since a credential
// written into a command line leaves with it. Its destinations are the egress
// proxy's to judge, not the gate's.
func OutboundWhen(when func(s *Session) bool) Option {
	return func(s *Spec) { s.OutboundWhen = when }
}

// Outbound flags a tool as reaching the network.
func Outbound() Option { return func(s *Spec) { s.Outbound = true } }

// LoopbackInSandbox flags an outbound tool whose loopback URLs go into the
// calling run's sandbox (see Spec.LoopbackInSandbox). on is whether that
// routing exists in this deployment.
func LoopbackInSandbox(on bool) Option {
	return func(s *Spec) { s.LoopbackInSandbox = on }
}

// IsLoopbackHost tells a URL host that names the local machine's loopback:
// localhost and *.localhost (RFC 6761), 127.0.0.0/8 and ::1 (IPv4-mapped
// forms included). The tools that route loopback into a run's sandbox and the
// gate that exempts those URLs use this one predicate, so they cannot disagree.
func IsLoopbackHost(h string) bool {
	h = strings.ToLower(strings.TrimSuffix(strings.Trim(h, "[]"), "."))
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return true
	}
	a, err := netip.ParseAddr(h)
	return err == nil && a.Unmap().IsLoopback()
}

// AsksHuman marks a tool whose call is a question to a person (ask_user): the
// gate reads the question with parse (an error is the call's error, and nobody
// is asked), holds the call as a question (a durable approval of kind question,
// with its expiry and cancellation) and calls the tool with Call.Answer once a
// person answered, so the tool only words the answer.
func AsksHuman(parse func(args json.RawMessage) (Question, error)) Option {
	return func(s *Spec) { s.AsksHuman = parse }
}

// Question is what a tool that AsksHuman asks.
type Question struct {
	Text string `json:"question"`
	// Choices, when any, are the answers offered; AllowOther lets a person
	// answer something else too.
	Choices    []string `json:"choices,omitempty"`
	AllowOther bool     `json:"allow_other,omitempty"`
}

// Accepts reports whether answer answers q ("" when it does, else why not).
func (q Question) Accepts(answer string) string {
	if strings.TrimSpace(answer) == "" {
		return "the answer is empty"
	}
	if len(q.Choices) == 0 || q.AllowOther {
		return ""
	}
	for _, c := range q.Choices {
		if c == answer {
			return ""
		}
	}
	return fmt.Sprintf("the answer must be one of the choices %q", q.Choices)
}

// Idempotent flags a tool as safe to re-run.
func Idempotent() Option { return func(s *Spec) { s.Idempotent = true } }

// ReadOnly flags a tool that only reads: it writes no file, changes no plan, no
// remote service and no device. Outside clients are told so (the MCP server's
// readOnlyHint), so the flag must hold for every call of the tool, whatever its
// arguments: a tool that reads or writes depending on them is not read-only.
func ReadOnly() Option { return func(s *Spec) { s.ReadOnly = true } }

// Returns declares that a successful call's result is always one JSON object of
// type R (the tool answers with JSON(r)): its reflected schema is the tool's
// output schema, which the MCP server lists (outputSchema) and by which a client
// may read the result as structured content. Declare it only where no success
// path answers anything else.
func Returns[R any]() Option {
	sch := reflector.Reflect(new(R))
	sch.Version, sch.ID = "", ""
	raw, err := json.Marshal(sch)
	if err != nil {
		panic(fmt.Sprintf("tools: result schema of %T: %v", *new(R), err))
	}
	return func(s *Spec) { s.Output = raw }
}

// Registry holds the registered tools.
type Registry struct {
	specs map[string]*Spec
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{specs: map[string]*Spec{}} }

var reflector = jsonschema.Reflector{DoNotReference: true, ExpandedStruct: true, Anonymous: true}

// Register adds a typed tool: A's JSON schema is what the model sees, and a call's
// arguments are decoded strictly into A before fn runs. The registration is the one
// place a tool is declared: its server group (InGroup, required), its tier
// (WithTier; Standard otherwise) and its gate options. tools/catalog.yaml documents
// it, and CheckCatalog fails a process whose registrations and catalog differ, so
// a tool cannot land in another group or tier by accident.
func Register[A any](r *Registry, name, description string, fn func(ctx context.Context, call Call, args A) (Result, error), opts ...Option) {
	if _, dup := r.specs[name]; dup {
		panic("tools: duplicate registration of " + name)
	}
	sch := reflector.Reflect(new(A))
	sch.Version, sch.ID = "", ""
	raw, err := json.Marshal(sch)
	if err != nil {
		panic(fmt.Sprintf("tools: schema of %s: %v", name, err))
	}
	s := &Spec{Name: name, Description: description, Schema: raw, schema: sch}
	s.handler = HandlerFunc(func(ctx context.Context, call Call) (Result, error) {
		var a A
		if err := decodeArgs(call.Args, s.schema, &a); err != nil {
			return Result{}, fmt.Errorf("%s: %w: %v", name, ErrInvalidArgs, err)
		}
		return fn(ctx, call, a)
	})
	for _, o := range opts {
		o(s)
	}
	if s.Group == "" {
		panic(fmt.Sprintf("tools: %s is registered without a server group (tools.InGroup)", name))
	}
	if !IsGroup(s.Group) {
		panic(fmt.Sprintf("tools: %s: %q is not a server group (tools.Groups)", name, s.Group))
	}
	r.specs[name] = s
}

func decodeArgs(raw json.RawMessage, schema *jsonschema.Schema, into any) error {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		raw = json.RawMessage("{}")
	}
	var obj map[string]any
	if err := json.Unmarshal(raw, &obj); err != nil {
		return fmt.Errorf("arguments must be a JSON object: %v", err)
	}
	// Required fields at every depth (tasks[0].task too): a missing one would
	// otherwise decode as its zero value, and the tool would run on a value the
	// model never gave.
	var missing []string
	missingFields(schema, obj, "", &missing)
	if len(missing) > 0 {
		return fmt.Errorf("missing required field(s): %s", strings.Join(missing, ", "))
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		return err
	}
	return nil
}

// missingFields appends the paths of the required fields of s that v lacks, in
// objects and array items at any depth. Values of the wrong type are left to the
// strict decode, which names them.
func missingFields(s *jsonschema.Schema, v any, path string, out *[]string) {
	if s == nil {
		return
	}
	join := func(k string) string {
		if path == "" {
			return k
		}
		return path + "." + k
	}
	switch x := v.(type) {
	case map[string]any:
		for _, k := range s.Required {
			if _, ok := x[k]; !ok {
				*out = append(*out, join(k))
			}
		}
		if s.Properties == nil {
			return
		}
		for p := s.Properties.Oldest(); p != nil; p = p.Next() {
			if child, ok := x[p.Key]; ok {
				missingFields(p.Value, child, join(p.Key), out)
			}
		}
	case []any:
		for i, e := range x {
			missingFields(s.Items, e, fmt.Sprintf("%s[%d]", path, i), out)
		}
	}
}

// Unregister removes a tool, so a test can stand another in for a shipped one
// (tools.Register refuses a second registration).
func (r *Registry) Unregister(name string) { delete(r.specs, name) }

// Spec returns the registered tool, if any.
func (r *Registry) Spec(name string) (*Spec, bool) {
	s, ok := r.specs[name]
	return s, ok
}

// Names returns registered tool names, sorted.
func (r *Registry) Names() []string {
	out := make([]string, 0, len(r.specs))
	for k := range r.specs {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Access is a node's resolved permissions: the connection layer (groups) and the
// capability layer (the visible tool set).
type Access struct {
	Groups []string `json:"groups"`
	Tools  []string `json:"tools"`
}

// Allows reports whether tool is in the catalog this access shows.
func (a Access) Allows(tool string) bool {
	for _, t := range a.Tools {
		if t == tool {
			return true
		}
	}
	return false
}

// Node is what a template says about one agent's permissions.
type Node struct {
	Role       string // supervisor | worker | subagent
	MCPServers []string
	Tools      []string
}

// Resolve applies the connection and capability layers to a node: it is served its
// mcp_servers plus the group of every tool its tools list names (so an explicit tool
// is never hidden by a forgotten group); an explicit tools list then intersects the
// result; supervisors always get delegate and reply.
func (r *Registry) Resolve(n Node) Access {
	groups := map[string]bool{}
	for _, g := range n.MCPServers {
		groups[g] = true
	}
	for _, t := range n.Tools {
		if s, ok := r.specs[t]; ok {
			groups[s.Group] = true
		} else if g, ok := GroupOf(t); ok {
			groups[g] = true // a documented tool this process did not register
		}
	}
	explicit := map[string]bool{}
	for _, t := range n.Tools {
		explicit[t] = true
	}
	var visible []string
	for _, name := range r.Names() {
		s := r.specs[name]
		if !groups[s.Group] {
			continue
		}
		if len(explicit) > 0 && !explicit[name] {
			continue
		}
		visible = append(visible, name)
	}
	if n.Role == "supervisor" {
		for _, t := range []string{Delegate, Reply} {
			if _, ok := r.specs[t]; ok && !contains(visible, t) {
				visible = append(visible, t)
			}
		}
		groups["orchestration"] = true
	}
	sort.Strings(visible)
	gs := make([]string, 0, len(groups))
	for g := range groups {
		gs = append(gs, g)
	}
	sort.Strings(gs)
	return Access{Groups: gs, Tools: visible}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// Definitions returns the schemas the model sees for an access: nothing else exists
// as far as the model knows.
func (r *Registry) Definitions(a Access) []llm.ToolDef {
	out := make([]llm.ToolDef, 0, len(a.Tools))
	for _, t := range a.Tools {
		if s, ok := r.specs[t]; ok {
			out = append(out, llm.ToolDef{Name: s.Name, Description: s.Description, Parameters: s.Schema})
		}
	}
	return out
}

// Router dispatches calls through the middleware chain to the registered tools.
type Router struct {
	reg     *Registry
	handler Handler
}

// NewRouter builds the dispatch chain of an ungated router. The team's
// tool_defaults are merged first, before any middleware, so every layer judges the
// arguments that really run. Middleware then run outermost first; the innermost
// layer is the capability check (the tool must be in the caller's catalog),
// followed by the typed handler.
func NewRouter(reg *Registry, mw ...Middleware) *Router {
	return newRouter(reg, capability(reg), mw)
}

// NewGatedRouter builds the dispatch chain of a router whose middleware include a
// permission gate (outermost first, as NewRouter). The gate owns the capability
// check (CheckCapability): it must refuse — and audit the refusal of — a call
// outside the caller's catalog before any other layer judges it, so the router
// does not check it a second time.
func NewGatedRouter(reg *Registry, mw ...Middleware) *Router {
	return newRouter(reg, nil, mw)
}

// NewRecordedRouter builds a gated router (as NewGatedRouter) whose innermost
// handler is terminal instead of the registered tools: replay's (package
// replay) serves each call the result a run recorded, so the middleware — the
// gate — judge every call for real and no tool runs. The registered tools and
// the record are the two terminals of the same chain.
func NewRecordedRouter(reg *Registry, terminal Handler, mw ...Middleware) *Router {
	return build(reg, terminal, nil, mw)
}

func newRouter(reg *Registry, innermost Middleware, mw []Middleware) *Router {
	return build(reg, HandlerFunc(func(ctx context.Context, call Call) (Result, error) {
		s, ok := reg.specs[call.Name]
		if !ok {
			return Result{}, fmt.Errorf("%w: %q", ErrUnknownTool, call.Name)
		}
		return s.handler.Handle(ctx, call)
	}), innermost, mw)
}

func build(reg *Registry, h Handler, innermost Middleware, mw []Middleware) *Router {
	if innermost != nil {
		h = innermost(h)
	}
	for i := len(mw) - 1; i >= 0; i-- {
		h = mw[i](h)
	}
	h = mergeDefaults(h)
	return &Router{reg: reg, handler: h}
}

// Registry returns the router's registry.
func (r *Router) Registry() *Registry { return r.reg }

// Dispatch runs one call; its Session says who calls.
func (r *Router) Dispatch(ctx context.Context, call Call) (Result, error) {
	return r.handler.Handle(ctx, call)
}

// capability refuses tools that are unregistered or outside the caller's catalog:
// a hallucinated tool cannot run even if the model names it.
func capability(reg *Registry) Middleware {
	return func(next Handler) Handler {
		return HandlerFunc(func(ctx context.Context, call Call) (Result, error) {
			s := call.Session
			if s == nil {
				return Result{}, errors.New("tools: call without a session context")
			}
			if err := CheckCapability(reg, s.Access, s.Agent, call.Name); err != nil {
				return Result{}, err
			}
			return next.Handle(ctx, call)
		})
	}
}

// CheckCapability is the capability layer: the tool must be registered and in the
// caller's catalog.
func CheckCapability(reg *Registry, a Access, agent, tool string) error {
	if _, ok := reg.specs[tool]; !ok {
		return &Denied{Layer: "capability", Reason: fmt.Sprintf("unknown tool %q (it does not exist; use only the tools you were given)", tool), Err: ErrUnknownTool}
	}
	if !a.Allows(tool) {
		return &Denied{Layer: "capability", Reason: fmt.Sprintf("tool %q is not available to %s", tool, agent), Err: ErrNotInCatalog}
	}
	return nil
}

// mergeDefaults lays the team's tool_defaults under the model's arguments.
func mergeDefaults(next Handler) Handler {
	return HandlerFunc(func(ctx context.Context, call Call) (Result, error) {
		s := call.Session
		if s == nil || len(s.ToolDefaults[call.Name]) == 0 {
			return next.Handle(ctx, call)
		}
		args := map[string]any{}
		if len(bytes.TrimSpace(call.Args)) > 0 && string(bytes.TrimSpace(call.Args)) != "null" {
			if err := json.Unmarshal(call.Args, &args); err != nil {
				// Passed on unmerged: the typed handler refuses it inside the gate,
				// so the malformed call is still audited.
				return next.Handle(ctx, call)
			}
		}
		for k, v := range s.ToolDefaults[call.Name] {
			if _, set := args[k]; !set {
				args[k] = v
			}
		}
		raw, err := json.Marshal(args)
		if err != nil {
			return Result{}, err
		}
		call.Args = raw
		return next.Handle(ctx, call)
	})
}
