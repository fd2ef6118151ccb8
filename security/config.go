package security

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/aetherium-engine/aetherium/egress"
	"github.com/aetherium-engine/aetherium/internal/defaults"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/tools"
)

// Defaults of Config.
const (
	// DefaultPermissionsFile holds the always_deny rules (a missing file means no
	// rules).
	DefaultPermissionsFile = "config/permissions.yaml"
	// DefaultApprovalWindow is how long a human has to decide a Restricted call.
	DefaultApprovalWindow = 5 * time.Minute
	// DefaultAuditRetention is how long tool_audit rows are kept (90 days).
	DefaultAuditRetention = store.DefaultAuditRetention
	// DefaultMaxRedirects caps redirects of outbound requests.
	DefaultMaxRedirects = 5
	// DefaultEgressTimeout bounds one outbound request.
	DefaultEgressTimeout = 30 * time.Second
	// MinApprovalWindow is the shortest approval window accepted.
	MinApprovalWindow = time.Second
	// MinEndpointRefresh is the shortest security.egress.refresh accepted.
	MinEndpointRefresh = 100 * time.Millisecond
	// DefaultFlow is security.flow's default: the flow rules ask.
	DefaultFlow = FlowAsk
	// DefaultFlowContent is security.flow_private_content's default: an
	// outbound call that carries private content read in a session that also
	// read untrusted content is refused (the human an ask would reach sees the
	// same call after the refusal, if the agent asks for it another way).
	DefaultFlowContent = FlowContentRefuse
)

// DefaultInstructionFiles are the workspace files later runs, agents and CI read
// as instructions (security.flow_instruction_files): a name matches the file in
// any folder, a name ending in / every file below such a folder. Case does not
// matter.
var DefaultInstructionFiles = []string{
	"AGENTS.md", "CLAUDE.md", "GEMINI.md", "STYLE.md", ".cursorrules", ".windsurfrules",
	".cursor/", ".github/", ".gitlab-ci.yml", ".circleci/", "Jenkinsfile", ".pre-commit-config.yaml",
	".gitattributes", ".envrc", "knowledge/",
}

// The values of security.flow.
const (
	// FlowAsk holds for a human the calls the flow rules name (Gate, docs/flow.md):
	// what a session that read untrusted content does with private data, with
	// the knowledge base, and with its Elevated tools.
	FlowAsk = "ask"
	// FlowOff judges each call on its own, as before the flow rules.
	FlowOff = "off"
)

// The values of security.flow_private_content.
const (
	// FlowContentRefuse refuses the call (layer flow), naming the private read
	// and the form it was sent in.
	FlowContentRefuse = "refuse"
	// FlowContentAsk holds it for a human, with the same reason.
	FlowContentAsk = "ask"
)

// Config is the permission gate and the egress policy (the `security` section of
// aetherium.yaml). Zero fields take their defaults (WithDefaults).
type Config struct {
	// PermissionsFile holds the YAML rules, hot-reloaded. Env AETHERIUM_PERMISSIONS.
	// Default DefaultPermissionsFile.
	PermissionsFile string `yaml:"permissions_file"`
	// ApprovalWindow is how long a human has to decide a Restricted call. Default
	// DefaultApprovalWindow.
	ApprovalWindow time.Duration `yaml:"approval_window"`
	// SupervisorFallback lists the tools whose approvals are approved instead of
	// timing out when nobody decides, e.g. [run_shell]. Default empty (none).
	// download_pdf and the frame_* tools never fall back: listing one is an error,
	// and so is the old boolean true (it approved Restricted tools too).
	SupervisorFallback FallbackTools `yaml:"supervisor_fallback"`
	// GrantMaxTTL caps the life of a scoped grant an approver makes with a
	// decision. Default DefaultGrantMaxTTL (24h).
	GrantMaxTTL time.Duration `yaml:"grant_max_ttl"`
	// AllowSelfApproval lets a principal approve, edit or grant a call of a run
	// it submitted: for single-user setups (`aetherium dev` sets it). Env
	// AETHERIUM_ALLOW_SELF_APPROVAL. Default false: someone else decides.
	AllowSelfApproval bool `yaml:"allow_self_approval"`
	// AuditRetention is how long tool_audit rows are kept (the scheduler's
	// maintenance purges older ones). Default DefaultAuditRetention.
	AuditRetention time.Duration `yaml:"audit_retention"`
	// MaxRedirects caps redirects of outbound requests. Default DefaultMaxRedirects.
	MaxRedirects int `yaml:"max_redirects"`
	// EgressTimeout bounds one outbound request. Default DefaultEgressTimeout.
	EgressTimeout time.Duration `yaml:"egress_timeout"`
	// Secrets are the team secrets by name: a credential read from an environment
	// variable or a file, sent only to its domains, referenced in tool arguments and
	// tool_defaults as {{secret:NAME}}. Default none.
	Secrets map[string]egress.SecretSource `yaml:"secrets"`
	// Egress is the destination policy beyond the teams' allowlists.
	Egress EgressRules `yaml:"egress"`
	// Flow is what the flow rules do with a call of a session that has read
	// untrusted content: FlowAsk (a human decides, shown the sources) or FlowOff.
	// Default DefaultFlow.
	Flow string `yaml:"flow"`
	// FlowInstructionFiles are the files a session that read untrusted content
	// may not write without a human (names, or folders ending in /). Default
	// DefaultInstructionFiles.
	FlowInstructionFiles []string `yaml:"flow_instruction_files"`
	// FlowPrivateContent is what an outbound call of a session that read
	// untrusted content gets when it carries private content the session read
	// (whole, split over calls, encoded, reversed or spaced; egress/fingerprint):
	// FlowContentRefuse or FlowContentAsk. Default DefaultFlowContent.
	FlowPrivateContent string `yaml:"flow_private_content"`
}

// EgressRules is security.egress: the destination policy shared by the outbound
// tools and the sandbox egress proxy. The fleet's own endpoints (API, metrics
// listeners, Redis, PostgreSQL, Docker over TCP, GPU services, the headset) are
// always refused.
type EgressRules struct {
	// Private is allowlist (a loopback or private-range destination only when
	// the team's allowed_domains name it: name, address or prefix), allow
	// (address literals and localhost reachable without an entry, the seed's
	// behaviour) or deny. A team's egress.private may tighten it, never loosen
	// it. Env AETHERIUM_EGRESS_PRIVATE. Default PrivateAllowlist.
	Private string `yaml:"private"`
	// Deny lists more host:port endpoints agents may never reach (internal
	// services); a host of "" or 0.0.0.0 means that port on every local address.
	// Default none.
	Deny []string `yaml:"deny"`
	// Refresh is how often every process re-reads the registry of listen
	// addresses, the host's addresses and endpoint names. Default
	// DefaultEndpointRefresh.
	Refresh time.Duration `yaml:"refresh"`
}

// WithDefaults returns c with every zero field filled in.
func (c Config) WithDefaults() Config {
	c.PermissionsFile = cmp.Or(c.PermissionsFile, DefaultPermissionsFile)
	c.ApprovalWindow = defaults.Positive(c.ApprovalWindow, DefaultApprovalWindow)
	c.GrantMaxTTL = defaults.Positive(c.GrantMaxTTL, DefaultGrantMaxTTL)
	c.AuditRetention = defaults.Positive(c.AuditRetention, DefaultAuditRetention)
	c.MaxRedirects = defaults.Positive(c.MaxRedirects, DefaultMaxRedirects)
	c.EgressTimeout = defaults.Positive(c.EgressTimeout, DefaultEgressTimeout)
	c.Egress.Private = cmp.Or(c.Egress.Private, egress.PrivateAllowlist)
	c.Egress.Refresh = defaults.Positive(c.Egress.Refresh, egress.DefaultEndpointRefresh)
	c.Flow = cmp.Or(c.Flow, DefaultFlow)
	c.FlowPrivateContent = cmp.Or(c.FlowPrivateContent, DefaultFlowContent)
	if c.FlowInstructionFiles == nil {
		c.FlowInstructionFiles = slices.Clone(DefaultInstructionFiles)
	}
	return c
}

// Validate reports every invalid field, naming its key.
func (c Config) Validate() error {
	var errs []error
	bad := func(key, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, a...)))
	}
	if c.ApprovalWindow < MinApprovalWindow {
		bad("security.approval_window", "must be at least %s", MinApprovalWindow)
	}
	for _, name := range c.SupervisorFallback {
		if _, ok := tools.GroupOf(name); !ok {
			bad("security.supervisor_fallback", "%q is not a tool", name)
		} else if tools.NeverFallsBack(name) {
			bad("security.supervisor_fallback", "%s always needs a human decision and never falls back", name)
		}
	}
	if c.Flow != FlowAsk && c.Flow != FlowOff {
		bad("security.flow", "%q is neither %s nor %s", c.Flow, FlowAsk, FlowOff)
	}
	if c.FlowPrivateContent != FlowContentRefuse && c.FlowPrivateContent != FlowContentAsk {
		bad("security.flow_private_content", "%q is neither %s nor %s", c.FlowPrivateContent, FlowContentRefuse, FlowContentAsk)
	}
	for _, f := range c.FlowInstructionFiles {
		if strings.Trim(f, "/ ") == "" || strings.Contains(f, "..") {
			bad("security.flow_instruction_files", "%q is not a file or folder name", f)
		}
	}
	if c.GrantMaxTTL < time.Minute {
		bad("security.grant_max_ttl", "must be at least 1m")
	}
	if c.MaxRedirects < 0 {
		bad("security.max_redirects", "must not be negative")
	}
	for _, name := range slices.Sorted(maps.Keys(c.Secrets)) {
		if err := egress.ValidateSecretSource(name, c.Secrets[name]); err != nil {
			bad("security.secrets."+name, "%v", err)
		}
	}
	if p := c.Egress.Private; !egress.ValidPrivate(p) {
		bad("security.egress.private (AETHERIUM_EGRESS_PRIVATE)", "want %s, %s or %s, got %q", egress.PrivateAllowlist, egress.PrivateAllow, egress.PrivateDeny, p)
	}
	for i, d := range c.Egress.Deny {
		if _, port, err := net.SplitHostPort(d); err != nil || port == "" {
			bad(fmt.Sprintf("security.egress.deny[%d]", i), "want host:port, got %q", d)
		} else if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
			bad(fmt.Sprintf("security.egress.deny[%d]", i), "want a port in 1-65535, got %q", d)
		}
	}
	if c.Egress.Refresh < MinEndpointRefresh {
		bad("security.egress.refresh", "must be at least %s", MinEndpointRefresh)
	}
	return errors.Join(errs...)
}

// FallbackTools is security.supervisor_fallback: a list of tool names. The boolean
// form of older configs is read too: false as the empty list, true refused.
type FallbackTools []string

// UnmarshalYAML reads a list of tool names, or a boolean false.
func (f *FallbackTools) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!bool" {
		var b bool
		if err := n.Decode(&b); err != nil {
			return err
		}
		if b {
			return fmt.Errorf("security.supervisor_fallback: true is no longer accepted (it approved every expiring call, " +
				"Restricted tools included); list the tools that may fall back, e.g. [run_shell]")
		}
		*f = nil
		return nil
	}
	var names []string
	if err := n.Decode(&names); err != nil {
		return fmt.Errorf("security.supervisor_fallback: want a list of tool names: %w", err)
	}
	*f = names
	return nil
}
