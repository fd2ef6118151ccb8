// Package config loads the fleet's configuration: aetherium.yaml (path in
// AETHERIUM_CONFIG) overlaid by AETHERIUM_* environment variables, then validated.
// Every error names the offending key so a bad deployment fails at start-up.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/aetherium-engine/aetherium/knowledge"
	"github.com/aetherium-engine/aetherium/lease"
	"github.com/aetherium-engine/aetherium/mailbox"
	"github.com/aetherium-engine/aetherium/sandbox"
	"github.com/aetherium-engine/aetherium/security"
	"github.com/aetherium-engine/aetherium/tools"
	"github.com/aetherium-engine/aetherium/tools/research"
	"github.com/aetherium-engine/aetherium/wsquota"
)

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

// Duration is a time.Duration written as "30s" / "5m" in YAML.
type Duration time.Duration

// UnmarshalYAML parses a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// Config is the whole deployment configuration.
type Config struct {
	// RedisURL locates Redis (queues, mailboxes, leases, event fan-out).
	// Env AETHERIUM_REDIS_URL. Default redis://127.0.0.1:6379/0.
	RedisURL string `yaml:"redis_url"`
	// DatabaseURL locates PostgreSQL. Env AETHERIUM_DATABASE_URL.
	// Default postgres://postgres@127.0.0.1:5432/aetherium?sslmode=disable.
	DatabaseURL string `yaml:"database_url"`
	// Workspaces is the root of per-run workspaces. Env AETHERIUM_WORKSPACES.
	// Default data/workspaces.
	Workspaces string `yaml:"workspaces"`
	// WorkspaceLimits are the top-level keys workspace_quota (env
	// AETHERIUM_WORKSPACE_QUOTA, default 1GiB, 0 = off), workspace_min_free (env
	// AETHERIUM_WORKSPACE_MIN_FREE, default 5%) and workspace_unmount_after
	// (default 15m): every workspace is a filesystem of that size, and new work is
	// refused while the workspaces' disk is below the minimum. See package wsquota
	// and docs/quota.md.
	WorkspaceLimits wsquota.Config `yaml:",inline"`
	// Templates is the team-template directory. Env AETHERIUM_TEMPLATES. Default templates.
	Templates string `yaml:"templates"`

	API       API       `yaml:"api"`
	Worker    Worker    `yaml:"worker"`
	Scheduler Scheduler `yaml:"scheduler"`
	LLM       LLM       `yaml:"llm"`
	Security  Security  `yaml:"security"`
	Streams   Streams   `yaml:"streams"`
	Devices   Devices   `yaml:"devices"`
	// Sandbox configures run_shell's executor (kind docker|local|auto, image, limits);
	// see package sandbox and sandbox/README.md.
	Sandbox sandbox.Config `yaml:"sandbox"`
	// Research configures the research tools: web_search's backends (SearXNG
	// instances, the DuckDuckGo fallback), web_fetch's caps; see package research.
	Research research.Config `yaml:"research"`
	// Knowledge configures the knowledge base (search_knowledge, write_knowledge,
	// `aetherium knowledge`): score_floor, packs_dir, language, chunk_size,
	// candidates, index_timeout and the optional embeddings endpoint; see package
	// knowledge. Zero values take its defaults.
	Knowledge knowledge.Config `yaml:"knowledge"`
}

// Streams configures the Redis-stream parts: agent mailboxes and GPU leases.
type Streams struct {
	// Mailbox bounds the agent mailboxes (prefix, max_len, max_age, max_deliveries,
	// read_limit, reclaim_idle); see package mailbox for defaults.
	Mailbox mailbox.Config `yaml:"mailbox"`
	// Leases declares the leasable GPU services of this deployment (name, capacity,
	// ttl, image, container, ports, gpus, health_url, start_timeout, idle_stop) and
	// the waiter TTL; see package lease. Default: no services.
	Leases lease.Config `yaml:"leases"`
	// LeaseRetry is how soon a step waiting for a GPU lease is retried. Default 2s.
	LeaseRetry Duration `yaml:"lease_retry"`
}

// Devices configures hardware the device tools drive.
type Devices struct {
	SteamFrame SteamFrame `yaml:"steam_frame"`
}

// SteamFrame configures the Steam Frame headset (device tools). Zero values take the
// defaults of package device.
type SteamFrame struct {
	// Enabled turns the device tools on; off, they fail with "not configured".
	Enabled bool `yaml:"enabled"`
	// Host, User, SSHPort, ADBPort, KeyPath reach the headset.
	Host    string `yaml:"host"`
	User    string `yaml:"user"`
	SSHPort int    `yaml:"ssh_port"`
	ADBPort int    `yaml:"adb_port"`
	KeyPath string `yaml:"key_path"`
	// ScriptsDir holds device/steam-frame. Default device/steam-frame.
	ScriptsDir string `yaml:"scripts_dir"`
	// SimScenario selects the headset simulator (development and tests).
	SimScenario string `yaml:"sim_scenario"`
	SimBin      string `yaml:"sim_bin"`
	// CaptureInterval, MaxRunDuration bound frame_run.
	CaptureInterval Duration `yaml:"capture_interval"`
	MaxRunDuration  Duration `yaml:"max_run_duration"`
}

// Security configures the permission gate.
type Security struct {
	// PermissionsFile holds the YAML rules, hot-reloaded. Env AETHERIUM_PERMISSIONS.
	// Default config/permissions.yaml (a missing file means no rules).
	PermissionsFile string `yaml:"permissions_file"`
	// ApprovalWindow is how long a human has to decide a Restricted call. Default 5m.
	ApprovalWindow Duration `yaml:"approval_window"`
	// SupervisorFallback lists the tools whose approvals are approved instead of
	// timing out when nobody decides, e.g. [run_shell]. Default empty (none).
	// download_pdf and the frame_* tools never fall back: listing one is an error,
	// and so is the old boolean true (it approved Restricted tools too).
	SupervisorFallback FallbackTools `yaml:"supervisor_fallback"`
	// AuditRetention is how long tool_audit rows are kept. Default 2160h (90 days).
	AuditRetention Duration `yaml:"audit_retention"`
	// MaxRedirects caps redirects of outbound requests. Default 5.
	MaxRedirects int `yaml:"max_redirects"`
	// EgressTimeout bounds one outbound request. Default 30s.
	EgressTimeout Duration `yaml:"egress_timeout"`
	// Secrets are the team secrets by name: a credential read from an environment
	// variable or a file, sent only to its domains, referenced in tool arguments and
	// tool_defaults as {{secret:NAME}}. Default none.
	Secrets map[string]Secret `yaml:"secrets"`
	// Egress is the destination policy beyond the teams' allowlists.
	Egress Egress `yaml:"egress"`
}

// Secret is one team secret. Exactly one of Env and File; the value itself never
// appears in configuration.
type Secret struct {
	// Env names the environment variable holding the value.
	Env string `yaml:"env"`
	// File is a path whose content (trailing newline dropped) is the value.
	File string `yaml:"file"`
	// Domains the value may be sent to: exact names and *.example.com wildcards.
	Domains []string `yaml:"domains"`
}

// Egress configures the egress policy shared by the outbound tools and the sandbox
// egress proxy. The fleet's own endpoints (API, metrics listeners, Redis,
// PostgreSQL, Docker over TCP, GPU services, the headset) are always refused.
type Egress struct {
	// Private is allow (loopback and private ranges reachable without an
	// allowlist entry, the seed's behaviour) or deny. A team's egress.private may
	// tighten it, never loosen it. Env AETHERIUM_EGRESS_PRIVATE. Default allow.
	Private string `yaml:"private"`
	// Deny lists more host:port endpoints agents may never reach (internal
	// services); a host of "" or 0.0.0.0 means that port on every local address.
	// Default none.
	Deny []string `yaml:"deny"`
	// Refresh is how often every process re-reads the registry of listen
	// addresses, the host's addresses and endpoint names. Default 10s.
	Refresh Duration `yaml:"refresh"`
}

// API configures the HTTP API role.
type API struct {
	// Addr is the listen address. Env AETHERIUM_API_ADDR. Default 127.0.0.1:8080.
	Addr string `yaml:"addr"`
	// BodyLimit caps request bodies in bytes. Env AETHERIUM_API_BODY_LIMIT. Default 1 MiB.
	BodyLimit int `yaml:"body_limit"`
	// MonitoringReadOnly makes asynqmon at /monitoring/ read-only. Default true.
	MonitoringReadOnly *bool `yaml:"monitoring_read_only"`
	// PrometheusURL, when set, lets asynqmon draw its queue charts. Default empty.
	PrometheusURL string `yaml:"prometheus_url"`
	// Tokens are the accepted bearer tokens (roles submit, read, read_all, approve,
	// admin; docs/ownership.md has the role table).
	// Required when Addr is not loopback, unless InsecureNoAuth. Default none.
	Tokens []APIToken `yaml:"tokens"`
	// InsecureNoAuth allows a non-loopback Addr without tokens (flag --insecure-no-auth).
	InsecureNoAuth bool `yaml:"insecure_no_auth"`
	// Webhooks receive every run event, signed with HMAC-SHA256. Default none.
	Webhooks []Webhook `yaml:"webhooks"`
	// MaxRunsInFlight caps the runs one principal (token) has queued, running or
	// waiting; a submit over it gets 429 with Retry-After. Default 0 (unlimited).
	MaxRunsInFlight int `yaml:"max_runs_in_flight"`
}

// APIToken is a bearer token: only the SHA-256 of its secret is configured.
type APIToken struct {
	Name string `yaml:"name"`
	// SHA256 is the hex SHA-256 of the secret (printf %s "$TOKEN" | sha256sum).
	SHA256 string   `yaml:"sha256"`
	Roles  []string `yaml:"roles"`
}

// Webhook is an endpoint that receives run events as signed POSTs.
type Webhook struct {
	URL string `yaml:"url"`
	// Secret keys the X-Aetherium-Signature HMAC-SHA256 header.
	Secret string `yaml:"secret"`
	// Events filters by event type; empty means all.
	Events []string `yaml:"events"`
}

// Worker configures the asynq worker role.
type Worker struct {
	// Concurrency is the number of tasks one worker process runs at once.
	// Env AETHERIUM_WORKER_CONCURRENCY. Default 20.
	Concurrency int `yaml:"concurrency"`
	// ShutdownTimeout is how long in-flight tasks may run after SIGTERM before they
	// are handed back to the queue. Default 10s.
	ShutdownTimeout Duration `yaml:"shutdown_timeout"`
	// TaskCheckInterval is asynq's idle-queue poll interval. Default 100ms
	// (asynq's own 1s default adds up to a second of latency per hop).
	TaskCheckInterval Duration `yaml:"task_check_interval"`
	// StepLease is how long one step holds its session before another delivery may
	// take it over (a crashed worker's lease simply expires). Default 2m.
	StepLease Duration `yaml:"step_lease"`
	// MaxRetry is how often a failing task is retried before its run fails. Default 5.
	MaxRetry int `yaml:"max_retry"`
	// CircuitBreaker is the number of consecutive failed tool calls or unusable
	// model answers in one session after which the run fails. Default 5.
	CircuitBreaker int `yaml:"circuit_breaker"`
	// MaxSteps bounds model calls per session, a backstop against loops. Default 50.
	MaxSteps int `yaml:"max_steps"`
	// MetricsAddr serves /metrics for this worker. Env AETHERIUM_WORKER_METRICS_ADDR.
	// Default 127.0.0.1:9091; empty disables it.
	MetricsAddr string `yaml:"metrics_addr"`
	// ScriptLatency is slept before every answer of the script model, standing in
	// for model think time (benchmarks and drills of I/O-bound fleets). Default 0.
	ScriptLatency Duration `yaml:"script_latency"`
}

// Scheduler configures the periodic-maintenance role.
type Scheduler struct {
	// Period is the maintenance tick interval. Default 15s.
	Period Duration `yaml:"period"`
	// StuckAfter fails a non-terminal run with no event for this long. Default 1h.
	StuckAfter Duration `yaml:"stuck_after"`
	// MetricsAddr serves /metrics for the scheduler. Env AETHERIUM_SCHEDULER_METRICS_ADDR.
	// Default 127.0.0.1:9092; empty disables it.
	MetricsAddr string `yaml:"metrics_addr"`
}

// LLM holds provider endpoints and credentials; templates pick provider and model.
type LLM struct {
	OpenAI    Provider `yaml:"openai"`
	Anthropic Provider `yaml:"anthropic"`
}

// Provider configures one LLM API.
type Provider struct {
	// BaseURL overrides the API root (vLLM, Ollama, llama.cpp server, a proxy).
	// Env AETHERIUM_OPENAI_BASE_URL / AETHERIUM_ANTHROPIC_BASE_URL.
	BaseURL string `yaml:"base_url"`
	// APIKey authenticates. Env AETHERIUM_OPENAI_API_KEY / AETHERIUM_ANTHROPIC_API_KEY
	// (OPENAI_API_KEY / ANTHROPIC_API_KEY are honoured too).
	APIKey string `yaml:"api_key"`
	// Model is the default model when a template names none.
	Model string `yaml:"model"`
	// MaxRetries for 429/5xx answers, with exponential backoff. Default 3.
	MaxRetries int `yaml:"max_retries"`
	// Timeout per request. Default 120s.
	Timeout Duration `yaml:"timeout"`
}

// Default returns the configuration with every default filled in.
func Default() Config {
	ro := true
	return Config{
		RedisURL:        "redis://127.0.0.1:6379/0",
		DatabaseURL:     "postgres://postgres@127.0.0.1:5432/aetherium?sslmode=disable",
		Workspaces:      "data/workspaces",
		WorkspaceLimits: wsquota.Defaults(),
		Templates:       "templates",
		API:             API{Addr: "127.0.0.1:8080", BodyLimit: 1 << 20, MonitoringReadOnly: &ro},
		Worker: Worker{
			Concurrency: 20, ShutdownTimeout: Duration(10 * time.Second),
			TaskCheckInterval: Duration(100 * time.Millisecond), StepLease: Duration(2 * time.Minute),
			MaxRetry: 5, CircuitBreaker: 5, MaxSteps: 50, MetricsAddr: "127.0.0.1:9091",
		},
		Security: Security{
			PermissionsFile: "config/permissions.yaml", ApprovalWindow: Duration(5 * time.Minute),
			AuditRetention: Duration(90 * 24 * time.Hour), MaxRedirects: 5, EgressTimeout: Duration(30 * time.Second),
			Egress: Egress{Private: "allow", Refresh: Duration(10 * time.Second)},
		},
		Scheduler: Scheduler{Period: Duration(15 * time.Second), StuckAfter: Duration(time.Hour), MetricsAddr: "127.0.0.1:9092"},
		LLM: LLM{
			OpenAI:    Provider{Model: "gpt-4o-mini", MaxRetries: 3, Timeout: Duration(120 * time.Second)},
			Anthropic: Provider{Model: "claude-sonnet-4-5", MaxRetries: 3, Timeout: Duration(120 * time.Second)},
		},
	}
}

// Load reads AETHERIUM_CONFIG (when set, the file must exist; otherwise ./aetherium.yaml
// when present), applies environment overrides and validates the result.
func Load() (Config, error) {
	return LoadFrom(os.Getenv("AETHERIUM_CONFIG"), os.LookupEnv)
}

// LoadFrom is Load with an explicit file path and environment lookup (tests).
func LoadFrom(path string, env func(string) (string, bool)) (Config, error) {
	cfg := Default()
	explicit := path != ""
	if !explicit {
		path = "aetherium.yaml"
	}
	raw, err := os.ReadFile(path)
	switch {
	case err == nil:
		dec := yaml.NewDecoder(bytes.NewReader(raw))
		dec.KnownFields(true)
		if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
			return cfg, fmt.Errorf("config %s: %w", path, err)
		}
	case explicit || !errors.Is(err, os.ErrNotExist):
		return cfg, fmt.Errorf("config: AETHERIUM_CONFIG=%s: %w", path, err)
	}
	if err := applyEnv(&cfg, env); err != nil {
		return cfg, err
	}
	return cfg, cfg.Validate()
}

func applyEnv(c *Config, env func(string) (string, bool)) error {
	str := map[string]*string{
		"AETHERIUM_REDIS_URL":              &c.RedisURL,
		"AETHERIUM_DATABASE_URL":           &c.DatabaseURL,
		"AETHERIUM_WORKSPACES":             &c.Workspaces,
		"AETHERIUM_TEMPLATES":              &c.Templates,
		"AETHERIUM_PERMISSIONS":            &c.Security.PermissionsFile,
		"AETHERIUM_API_ADDR":               &c.API.Addr,
		"AETHERIUM_PROMETHEUS_URL":         &c.API.PrometheusURL,
		"AETHERIUM_WORKER_METRICS_ADDR":    &c.Worker.MetricsAddr,
		"AETHERIUM_SCHEDULER_METRICS_ADDR": &c.Scheduler.MetricsAddr,
		"AETHERIUM_EGRESS_PRIVATE":         &c.Security.Egress.Private,
		"AETHERIUM_OPENAI_BASE_URL":        &c.LLM.OpenAI.BaseURL,
		"AETHERIUM_ANTHROPIC_BASE_URL":     &c.LLM.Anthropic.BaseURL,
		"OPENAI_API_KEY":                   &c.LLM.OpenAI.APIKey,
		"ANTHROPIC_API_KEY":                &c.LLM.Anthropic.APIKey,
		"AETHERIUM_OPENAI_API_KEY":         &c.LLM.OpenAI.APIKey,
		"AETHERIUM_ANTHROPIC_API_KEY":      &c.LLM.Anthropic.APIKey,
		"AETHERIUM_OPENAI_MODEL":           &c.LLM.OpenAI.Model,
		"AETHERIUM_ANTHROPIC_MODEL":        &c.LLM.Anthropic.Model,
		"AETHERIUM_EMBEDDINGS_API_KEY":     &c.Knowledge.Embeddings.APIKey,
	}
	// Deterministic order: the AETHERIUM_ spelling of a key wins over the vendor one.
	for _, k := range []string{"OPENAI_API_KEY", "ANTHROPIC_API_KEY"} {
		if v, ok := env(k); ok && v != "" {
			*str[k] = v
		}
	}
	keys := make([]string, 0, len(str))
	for k := range str {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if k == "OPENAI_API_KEY" || k == "ANTHROPIC_API_KEY" {
			continue
		}
		v, ok := env(k)
		// An empty key variable (compose's ${VAR:-}) must not wipe a key set elsewhere.
		if !ok || (v == "" && strings.HasSuffix(k, "_API_KEY")) {
			continue
		}
		*str[k] = v
	}
	ints := map[string]*int{
		"AETHERIUM_API_BODY_LIMIT":     &c.API.BodyLimit,
		"AETHERIUM_WORKER_CONCURRENCY": &c.Worker.Concurrency,
	}
	var errs []error
	for _, k := range []string{"AETHERIUM_API_BODY_LIMIT", "AETHERIUM_WORKER_CONCURRENCY"} {
		if v, ok := env(k); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("config: %s=%q is not an integer", k, v))
				continue
			}
			*ints[k] = n
		}
	}
	if v, ok := env("AETHERIUM_WORKSPACE_QUOTA"); ok {
		q, err := wsquota.ParseSize(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("config: AETHERIUM_WORKSPACE_QUOTA=%q: %v", v, err))
		}
		c.WorkspaceLimits.Quota = q
	}
	if v, ok := env("AETHERIUM_WORKSPACE_MIN_FREE"); ok {
		m, err := wsquota.ParseMinFree(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("config: AETHERIUM_WORKSPACE_MIN_FREE=%q: %v", v, err))
		}
		c.WorkspaceLimits.MinFree = m
	}
	return errors.Join(errs...)
}

// Validate checks every setting and names the key of the first problems found.
func (c Config) Validate() error {
	var errs []error
	bad := func(key, format string, a ...any) {
		errs = append(errs, fmt.Errorf("config: %s: %s", key, fmt.Sprintf(format, a...)))
	}
	if u, err := url.Parse(c.RedisURL); err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") {
		bad("redis_url (AETHERIUM_REDIS_URL)", "want redis://host:port/db, got %q", c.RedisURL)
	}
	if u, err := url.Parse(c.DatabaseURL); err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		bad("database_url (AETHERIUM_DATABASE_URL)", "want postgres://user@host:port/db, got %q", c.DatabaseURL)
	}
	if c.Workspaces == "" {
		bad("workspaces (AETHERIUM_WORKSPACES)", "must not be empty")
	}
	if err := c.WorkspaceLimits.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("config: %w", err))
	}
	if c.Templates == "" {
		bad("templates (AETHERIUM_TEMPLATES)", "must not be empty")
	}
	if _, _, err := net.SplitHostPort(c.API.Addr); err != nil {
		bad("api.addr (AETHERIUM_API_ADDR)", "want host:port, got %q", c.API.Addr)
	}
	for key, addr := range map[string]string{"worker.metrics_addr": c.Worker.MetricsAddr, "scheduler.metrics_addr": c.Scheduler.MetricsAddr} {
		if addr == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			bad(key, "want host:port, got %q", addr)
		}
	}
	if c.API.MaxRunsInFlight < 0 {
		bad("api.max_runs_in_flight", "must be 0 (unlimited) or positive, got %d", c.API.MaxRunsInFlight)
	}
	if c.API.BodyLimit <= 0 {
		bad("api.body_limit (AETHERIUM_API_BODY_LIMIT)", "must be positive, got %d", c.API.BodyLimit)
	}
	if c.Worker.Concurrency <= 0 {
		bad("worker.concurrency (AETHERIUM_WORKER_CONCURRENCY)", "must be positive, got %d", c.Worker.Concurrency)
	}
	if c.Worker.StepLease.D() < time.Second {
		bad("worker.step_lease", "must be at least 1s")
	}
	if c.Worker.MaxRetry < 0 || c.Worker.CircuitBreaker <= 0 || c.Worker.MaxSteps <= 0 {
		bad("worker", "max_retry must be >= 0, circuit_breaker and max_steps > 0")
	}
	if c.Security.ApprovalWindow.D() < time.Second {
		bad("security.approval_window", "must be at least 1s")
	}
	for _, name := range c.Security.SupervisorFallback {
		if _, ok := tools.GroupOf(name); !ok {
			bad("security.supervisor_fallback", "%q is not a tool", name)
		} else if tools.NeverFallsBack(name) {
			bad("security.supervisor_fallback", "%s always needs a human decision and never falls back", name)
		}
	}
	if c.Security.MaxRedirects < 0 {
		bad("security.max_redirects", "must not be negative")
	}
	for _, name := range sortedKeys(c.Security.Secrets) {
		s := c.Security.Secrets[name]
		if err := security.ValidateSecretSource(name, security.SecretSource{Env: s.Env, File: s.File, Domains: s.Domains}); err != nil {
			bad("security.secrets."+name, "%v", err)
		}
	}
	if p := c.Security.Egress.Private; p != "allow" && p != "deny" {
		bad("security.egress.private (AETHERIUM_EGRESS_PRIVATE)", "want allow or deny, got %q", p)
	}
	for i, d := range c.Security.Egress.Deny {
		if _, port, err := net.SplitHostPort(d); err != nil || port == "" {
			bad(fmt.Sprintf("security.egress.deny[%d]", i), "want host:port, got %q", d)
		} else if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
			bad(fmt.Sprintf("security.egress.deny[%d]", i), "want a port in 1-65535, got %q", d)
		}
	}
	if c.Security.Egress.Refresh.D() < 100*time.Millisecond {
		bad("security.egress.refresh", "must be at least 100ms")
	}
	if err := c.Research.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("config: %w", err))
	}
	if err := c.Knowledge.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("config: %w", err))
	}
	for i, h := range c.API.Webhooks {
		if u, err := url.Parse(h.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad(fmt.Sprintf("api.webhooks[%d].url", i), "want an http(s) URL, got %q", h.URL)
		}
		if len(h.Secret) < 16 {
			bad(fmt.Sprintf("api.webhooks[%d].secret", i), "must be at least 16 characters (it keys the HMAC signature)")
		}
	}
	return errors.Join(errs...)
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
