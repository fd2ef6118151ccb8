package mcpserver

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"sort"
	"time"

	"github.com/aetherium-engine/aetherium/api"
	"github.com/aetherium-engine/aetherium/internal/defaults"
	"github.com/aetherium-engine/aetherium/oauth"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/templates"
	"github.com/aetherium-engine/aetherium/tools"
)

// Defaults of Config.
const (
	// DefaultAddr is where /mcp listens (api.mcp_addr): a listener of its own,
	// beside the API's DefaultAddr.
	DefaultAddr = "127.0.0.1:8081"
	// DefaultCallTimeout bounds how long a call waits for its outcome beyond the
	// approval window (a queued call, a slow tool).
	DefaultCallTimeout = 2 * time.Minute
	// DefaultPoll is a waiting call's safety re-read of its row: the worker's
	// announcements on the events hub wake the wait, and this only covers one
	// that was lost (Redis away).
	DefaultPoll = 30 * time.Second
	// DefaultMaxCallsInFlight caps one principal's MCP calls not yet done.
	DefaultMaxCallsInFlight = 16
	// DefaultProgressEvery is how often a call waiting for a human sends a
	// progress notification.
	DefaultProgressEvery = time.Second
	// DefaultSessionTimeout closes an MCP session idle for this long.
	DefaultSessionTimeout = 30 * time.Minute
	// DefaultTaskAfter is how long a 2026-07-28 call of a client that declared
	// the Tasks extension waits inline before it is answered as a task.
	DefaultTaskAfter = 2 * time.Second
	// DefaultTaskPoll is the pollIntervalMs a task suggests.
	DefaultTaskPoll = time.Second
	// DefaultListRole may connect and list a profile's tools; DefaultCallRole may
	// call them (the API's roles, docs/ownership.md).
	DefaultListRole = api.RoleRead
	DefaultCallRole = api.RoleSubmit
)

// Off is the api.mcp_addr value that disables the MCP listener (as does "").
const Off = "off"

// Config is the MCP server: the `mcp` section of aetherium.yaml, and its address
// (api.mcp_addr). Zero fields take their defaults (WithDefaults).
type Config struct {
	// Addr is the listen address, the key api.mcp_addr (env AETHERIUM_MCP_ADDR).
	// Default DefaultAddr; "" or "off" disables the listener, and so does a
	// configuration without profiles (there is nothing to serve).
	Addr string `yaml:"-"`
	// Profiles are the catalogs served, by name: /mcp/<name> (and /mcp when there
	// is exactly one).
	Profiles map[string]Profile `yaml:"profiles"`
	// CallTimeout is how long a call waits for its outcome on top of the approval
	// window. Default DefaultCallTimeout.
	CallTimeout time.Duration `yaml:"call_timeout"`
	// Poll is how often the process checks, in one query for all of them, the
	// calls its clients wait on (and the tasks they poll), in case the events
	// hub lost an announcement; only a call that changed is re-read. Default
	// DefaultPoll.
	Poll time.Duration `yaml:"poll"`
	// MaxCallsInFlight caps one principal's MCP calls not yet done (queued,
	// running or waiting for a human). Default DefaultMaxCallsInFlight.
	MaxCallsInFlight int `yaml:"max_calls_in_flight"`
	// ProgressEvery is the interval of the progress notifications of a call
	// waiting for approval. Default DefaultProgressEvery.
	ProgressEvery time.Duration `yaml:"progress_every"`
	// SessionTimeout closes idle MCP sessions. Default DefaultSessionTimeout.
	SessionTimeout time.Duration `yaml:"session_timeout"`
	// TaskAfter is how long a call of a client that declared the Tasks extension
	// waits for its outcome before the answer is a task. Default DefaultTaskAfter.
	TaskAfter time.Duration `yaml:"task_after"`
	// TaskPoll is the polling interval a task suggests (pollIntervalMs): its
	// polls are served from a cache the events hub keeps fresh, so they cost no
	// query. Default DefaultTaskPoll.
	TaskPoll time.Duration `yaml:"task_poll"`
	// AllowedOrigins are the browser origins (scheme://host[:port]) besides the
	// listener's own whose requests are served: a request with any other Origin
	// header is refused (403) before authentication, against DNS rebinding.
	AllowedOrigins []string `yaml:"allowed_origins"`
	// OAuth makes the listener an OAuth 2.1 resource server (docs/mcp.md): a
	// bearer that is no api.tokens token is verified as a JWT access token of
	// the issuer, its principal the principal_claim, its roles those of its
	// scopes. The resource (the audience tokens must carry) defaults to
	// http://<api.mcp_addr>/mcp on a loopback address and is required elsewhere
	// (behind a proxy only the operator knows the public URL). Off without an
	// issuer.
	OAuth oauth.Config `yaml:"oauth"`
}

// Profile is one served catalog: a team node (its mcp_servers and tools build
// the catalog exactly as an agent's do) with the team-level settings its calls
// run under.
type Profile struct {
	// Node is the profile's node: mcp_servers, tools (name is the profile's
	// name; prompt and model are unused: no model runs).
	templates.Node `yaml:",inline"`
	// Description is shown to clients as the server's instructions.
	Description string `yaml:"description"`
	// AllowedDomains is the egress allowlist of the profile's outbound tools.
	AllowedDomains []string `yaml:"allowed_domains"`
	// Egress tightens the deployment's egress policy (private: deny).
	Egress templates.Egress `yaml:"egress"`
	// ToolDefaults are argument defaults merged under the client's arguments.
	ToolDefaults map[string]map[string]any `yaml:"tool_defaults"`
	// Project is the slug of the project whose workspace and knowledge the calls
	// use; empty gives each principal's MCP run a workspace of its own. A slug is
	// only a name (a deleted project's slug can be taken by anyone), so a profile
	// names a project of an owner: ProjectOwner is required with it, and a call
	// runs only while the project of that slug belongs to ProjectOwner and the
	// calling principal may use it (store.ProjectAccess.MayUse: its owner or an
	// admin) — never in a project someone else created under the slug.
	Project string `yaml:"project"`
	// ProjectOwner is the principal (API token name, "local" without tokens)
	// that owns Project.
	ProjectOwner string `yaml:"project_owner"`
	// ListRole may connect and list tools. Default DefaultListRole.
	ListRole string `yaml:"list_role"`
	// CallRole may call tools. Default DefaultCallRole.
	CallRole string `yaml:"call_role"`
	// Principals, when set, are the only token names that may use the profile.
	Principals []string `yaml:"principals"`
	// Questions serves, beside the catalog, the fleet's own tools
	// pending_questions and answer_question: a client answers the questions
	// agents ask with ask_user (questions.go). Opt-in, so a profile lists exactly
	// the catalog it names unless it says so; a profile of questions alone (no
	// mcp_servers, no tools) is an answering inbox.
	Questions bool `yaml:"questions"`
	// ApproveInClient lets the calling principal decide its own Restricted calls
	// in its MCP client (an elicitation form showing what the fleet's approval
	// card shows), instead of the fleet's approvers: the operator's explicit
	// choice, audited as "<principal> (mcp client)". A client without
	// elicitation falls back to the fleet's approvers.
	ApproveInClient bool `yaml:"approve_in_client"`
}

// WithDefaults returns c with every zero field filled in.
func (c Config) WithDefaults() Config {
	c.CallTimeout = defaults.Positive(c.CallTimeout, DefaultCallTimeout)
	c.Poll = defaults.Positive(c.Poll, DefaultPoll)
	c.ProgressEvery = defaults.Positive(c.ProgressEvery, DefaultProgressEvery)
	c.MaxCallsInFlight = cmp.Or(c.MaxCallsInFlight, DefaultMaxCallsInFlight)
	c.SessionTimeout = defaults.Positive(c.SessionTimeout, DefaultSessionTimeout)
	c.TaskAfter = defaults.Positive(c.TaskAfter, DefaultTaskAfter)
	c.TaskPoll = defaults.Positive(c.TaskPoll, DefaultTaskPoll)
	profiles := make(map[string]Profile, len(c.Profiles))
	for name, p := range c.Profiles {
		p.ListRole = cmp.Or(p.ListRole, DefaultListRole)
		p.CallRole = cmp.Or(p.CallRole, DefaultCallRole)
		p.Name = name
		profiles[name] = p
	}
	c.Profiles = profiles
	c.OAuth = c.OAuth.WithDefaults()
	if c.OAuth.Enabled() && c.OAuth.Resource == "" && api.IsLoopback(c.Addr) {
		c.OAuth.Resource = "http://" + c.Addr + "/mcp"
	}
	return c
}

// Enabled reports whether the MCP listener runs.
func (c Config) Enabled() bool { return c.Addr != "" && c.Addr != Off && len(c.Profiles) > 0 }

var profileRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// Validate reports every invalid field, naming its key.
func (c Config) Validate() error {
	var errs []error
	if c.Addr != "" && c.Addr != Off {
		if _, _, err := net.SplitHostPort(c.Addr); err != nil {
			errs = append(errs, fmt.Errorf("api.mcp_addr (AETHERIUM_MCP_ADDR): want host:port, %q or empty, got %q", Off, c.Addr))
		}
	}
	if c.CallTimeout < 0 || c.Poll < 0 || c.ProgressEvery < 0 || c.SessionTimeout < 0 || c.TaskAfter < 0 || c.TaskPoll < 0 {
		errs = append(errs, errors.New("mcp.call_timeout, mcp.poll, mcp.progress_every, mcp.session_timeout, mcp.task_after, mcp.task_poll: must not be negative"))
	}
	for i, o := range c.AllowedOrigins {
		if u, err := url.Parse(o); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
			errs = append(errs, fmt.Errorf("mcp.allowed_origins[%d]: want scheme://host[:port], got %q", i, o))
		}
	}
	errs = append(errs, defaults.NotNegative("mcp.max_calls_in_flight", c.MaxCallsInFlight))
	names := make([]string, 0, len(c.Profiles))
	for name := range c.Profiles {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		p := c.Profiles[name]
		key := "mcp.profiles." + name
		if !profileRE.MatchString(name) {
			errs = append(errs, fmt.Errorf("%s: a profile name is 1-64 of a-z 0-9 _ - (it is a URL path segment)", key))
		}
		if len(p.MCPServers) == 0 && len(p.Tools) == 0 && !p.Questions {
			errs = append(errs, fmt.Errorf("%s: names neither mcp_servers nor tools nor questions: its catalog would be empty", key))
		}
		for _, t := range p.Tools {
			if tools.AgentOnly(t) {
				errs = append(errs, fmt.Errorf("%s.tools: %s is a team agent's tool, not a client's", key, t))
			} else if _, ok := tools.GroupOf(t); !ok {
				errs = append(errs, fmt.Errorf("%s.tools: unknown tool %q", key, t))
			}
		}
		for _, g := range p.MCPServers {
			if g == "orchestration" || g == "team" {
				errs = append(errs, fmt.Errorf("%s.mcp_servers: %s holds a team agent's tools, not a client's", key, g))
			}
		}
		for _, r := range []struct{ k, v string }{{"list_role", p.ListRole}, {"call_role", p.CallRole}} {
			if r.v != "" && !knownRole(r.v) {
				errs = append(errs, fmt.Errorf("%s.%s: unknown role %q", key, r.k, r.v))
			}
		}
		switch {
		case p.Project == "" && p.ProjectOwner != "":
			errs = append(errs, fmt.Errorf("%s.project_owner: set without project", key))
		case p.Project == "":
		case !store.SlugPattern.MatchString(p.Project):
			errs = append(errs, fmt.Errorf("%s.project: %q is not a project slug", key, p.Project))
		case p.ProjectOwner == "":
			errs = append(errs, fmt.Errorf("%s.project_owner: required with project %q: a slug is only a name, the profile must say whose project it is", key, p.Project))
		}
		if p.Egress.Private != "" && p.Egress.Private != "deny" && p.Egress.Private != "allow" {
			errs = append(errs, fmt.Errorf("%s.egress.private: want deny or allow, got %q", key, p.Egress.Private))
		}
	}
	return errors.Join(append(errs, c.validateOAuth()...)...)
}

// validateOAuth names the keys of mcp.oauth's problems, and checks what the
// oauth package cannot know: the fleet's roles, and where the listener is.
func (c Config) validateOAuth() []error {
	const key = "mcp.oauth"
	var errs []error
	if err := c.OAuth.Validate(); err != nil {
		for _, e := range unjoin(err) {
			if fe, ok := errors.AsType[*oauth.FieldError](e); ok {
				errs = append(errs, fmt.Errorf("%s.%s: %w", key, fe.Key, fe.Err))
			} else {
				errs = append(errs, fmt.Errorf("%s: %w", key, e))
			}
		}
	}
	if !c.OAuth.Enabled() {
		return errs
	}
	if c.OAuth.Resource == "" && !api.IsLoopback(c.Addr) {
		errs = append(errs, fmt.Errorf("%s.resource: required when api.mcp_addr is not a loopback address: the audience tokens must carry is the URL clients reach the listener at", key))
	}
	scopes := make([]string, 0, len(c.OAuth.Scopes))
	for s := range c.OAuth.Scopes {
		scopes = append(scopes, s)
	}
	sort.Strings(scopes)
	for _, s := range scopes {
		for _, r := range c.OAuth.Scopes[s] {
			if !knownRole(r) {
				errs = append(errs, fmt.Errorf("%s.scopes.%s: unknown role %q", key, s, r))
			}
		}
	}
	return errs
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

func knownRole(r string) bool {
	switch r {
	case api.RoleRead, api.RoleSubmit, api.RoleReadAll, api.RoleApprove, api.RoleAdmin:
		return true
	}
	return false
}

// CheckAuth refuses an MCP listener reachable beyond loopback without tokens,
// the API's rule (api.Config.CheckAuth): every profile call can write files.
// mcp.oauth counts as authentication: every request then needs a token.
func (c Config) CheckAuth(a api.Config) error {
	if !c.Enabled() || len(a.Tokens) > 0 || c.OAuth.Enabled() || a.InsecureNoAuth || api.IsLoopback(c.Addr) {
		return nil
	}
	return fmt.Errorf("api.mcp_addr %s is not loopback and neither api.tokens nor mcp.oauth is configured: configure bearer tokens or an OAuth issuer, or pass --insecure-no-auth if an authenticating proxy guards it", c.Addr)
}
