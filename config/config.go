// Package config loads the fleet's configuration: aetherium.yaml (path in
// AETHERIUM_CONFIG) overlaid by AETHERIUM_* environment variables, then validated.
// Every error names the offending key so a bad deployment fails at start-up.
//
// config composes: each section is the Config of the package it configures
// (api, worker, scheduler, device, sandbox, research, mailbox, lease, wsquota),
// with that package's YAML keys, defaults (exported constants, WithDefaults) and
// Validate. config adds the top-level keys, the environment overrides and
// Default, which is the packages' defaults put together.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/aetherium-engine/aetherium/api"
	"github.com/aetherium-engine/aetherium/device"
	"github.com/aetherium-engine/aetherium/internal/redisconn"
	"github.com/aetherium-engine/aetherium/knowledge"
	"github.com/aetherium-engine/aetherium/lease"
	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/llm/anthropic"
	"github.com/aetherium-engine/aetherium/llm/governor"
	"github.com/aetherium-engine/aetherium/llm/openai"
	"github.com/aetherium-engine/aetherium/llm/pricing"
	"github.com/aetherium-engine/aetherium/llm/tokens"
	"github.com/aetherium-engine/aetherium/mailbox"
	"github.com/aetherium-engine/aetherium/mcpserver"
	"github.com/aetherium-engine/aetherium/memory"
	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/replay"
	"github.com/aetherium-engine/aetherium/retention"
	"github.com/aetherium-engine/aetherium/sandbox"
	"github.com/aetherium-engine/aetherium/scheduler"
	"github.com/aetherium-engine/aetherium/schedules"
	"github.com/aetherium-engine/aetherium/security"
	"github.com/aetherium-engine/aetherium/toolbox/audio"
	comfyuitools "github.com/aetherium-engine/aetherium/toolbox/comfyui"
	"github.com/aetherium-engine/aetherium/toolbox/quality"
	"github.com/aetherium-engine/aetherium/toolbox/research"
	"github.com/aetherium-engine/aetherium/tracing"
	"github.com/aetherium-engine/aetherium/webhook"
	"github.com/aetherium-engine/aetherium/worker"
	"github.com/aetherium-engine/aetherium/wsquota"
)

// Config is the whole deployment configuration.
type Config struct {
	// RedisURL locates Redis (queues, mailboxes, leases, event fan-out): one node
	// (redis://host:port/db), a Sentinel group
	// (redis-sentinel://[:password@]host:port[,host:port…]/master-name[/db]) or a
	// Cluster (redis-cluster://host:port[,host:port…]); see internal/redisconn.
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

	// API configures the api role and the webhooks; see packages api and webhook.
	API API `yaml:"api"`
	// Worker configures the worker role (concurrency, shutdown, the agent loop's
	// bounds, its metrics listener); see package worker.
	Worker worker.Config `yaml:"worker"`
	// Scheduler configures the scheduler role and its maintenance; see package
	// scheduler.
	Scheduler scheduler.Config `yaml:"scheduler"`
	// Schedules bounds the schedules people create (min_interval, max_jitter,
	// max_catch_up) and paces the scheduler role's loop that fires them
	// (period, late_after, resubmit_after); see package schedules and
	// docs/schedules.md.
	Schedules schedules.Config `yaml:"schedules"`
	// Fairness shares the fleet between tenants: fairness keys' weights, run
	// and turn limits, the priorities roles may submit with, aging, and the
	// dispatch mode (see queue.Fairness and docs/fairness.md).
	Fairness queue.Fairness `yaml:"fairness"`
	LLM      LLM            `yaml:"llm"`
	// Path is the file the configuration was read from ("" for none): the
	// llm section's limits and prices are reloaded when it changes.
	Path string `yaml:"-"`
	// Security configures the permission gate, the team secrets and the egress
	// policy; see package security.
	Security security.Config `yaml:"security"`
	Streams  Streams         `yaml:"streams"`
	Devices  Devices         `yaml:"devices"`
	// Sandbox configures run_shell's executor (kind docker|local|auto, image, limits);
	// see package sandbox and sandbox/README.md.
	Sandbox sandbox.Config `yaml:"sandbox"`
	// Research configures the research tools: web_search's backends (SearXNG
	// instances, the DuckDuckGo fallback), web_fetch's caps; see package research.
	Research research.Config `yaml:"research"`
	// Quality bounds analyze_code, run_tests and code_review (timeouts, container limits,
	// findings cap); see package quality. Their image is sandbox.docker.image's
	// toolchain purpose.
	Quality quality.Config `yaml:"quality"`
	// Audio picks tts_render's voice backend (espeak in the media image, or
	// qwen-tts on the leased GPU service) and bounds it; see package audio. Its
	// image is sandbox.docker.image's media purpose.
	Audio audio.Config `yaml:"audio"`
	// ComfyUI bounds comfyui_generate and comfyui_status (max_count, max_side,
	// wait_timeout, progress_every, max_ref_bytes, client.request_timeout); see
	// package toolbox/comfyui. The services themselves (image, url, fence) are
	// streams.leases.services. Zero values take its defaults.
	ComfyUI comfyuitools.Config `yaml:"comfyui"`
	// Knowledge configures the knowledge base (search_knowledge, write_knowledge,
	// `aetherium knowledge`): score_floor, packs_dir, language, chunk_size,
	// candidates, index_timeout and the optional embeddings endpoint; see package
	// knowledge. Zero values take its defaults.
	Knowledge knowledge.Config `yaml:"knowledge"`
	// Memory is agent memory (ADR 5) of project runs: token_budget, half_life,
	// recency_weight, entry_chars, candidates; see package memory. Zero values
	// take its defaults.
	Memory memory.Config `yaml:"memory"`
	// Replay bounds replays and forks (max_messages: the history messages of a
	// run a replay or a fork may read; wait: how long an API process without
	// the worker's engine waits for the worker it hands them to; keep: how
	// long that result is kept for the same request); see package replay and
	// docs/replay.md. Zero values take its defaults.
	Replay replay.Config `yaml:"replay"`
	// MCP is the MCP server's profiles and waits (profiles, call_timeout, poll,
	// progress_every, session_timeout) and its OAuth resource server (oauth);
	// its address is api.mcp_addr. See package mcpserver and docs/mcp.md.
	// Default: no profiles, no listener.
	MCP mcpserver.Config `yaml:"mcp"`
	// Tracing is OpenTelemetry tracing, one trace per run (enabled, exporter,
	// endpoint, service_name, sample_ratio, shutdown_timeout, trace_url); the standard
	// OTEL_* variables (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_HEADERS,
	// OTEL_TRACES_SAMPLER, OTEL_SERVICE_NAME) apply where the YAML sets nothing.
	// See package tracing and docs/traces.md. Default: off.
	Tracing tracing.Config `yaml:"tracing"`
	// Retention is how long each data class is kept: terminal runs with their
	// rows, egress rows, dead letters, deleted projects' knowledge, and the
	// export of each run before its delete (docs/retention.md). The audit's is
	// security.audit_retention.
	Retention retention.Config `yaml:"retention"`
}

// MCPConfig is the MCP server's configuration with its address (api.mcp_addr)
// and defaults filled in.
func (c Config) MCPConfig() mcpserver.Config {
	m := c.MCP
	m.Addr = c.API.MCPAddr
	return m.WithDefaults()
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
	// LeaseRetry is how soon a step waiting for a GPU lease is retried. Default
	// worker.DefaultLeaseRetry.
	LeaseRetry time.Duration `yaml:"lease_retry"`
}

// Devices configures hardware the device tools drive.
type Devices struct {
	SteamFrame SteamFrame `yaml:"steam_frame"`
}

// SteamFrame is devices.steam_frame: whether the fleet drives the headset, and the
// driver's configuration (package device; zero fields take its defaults).
type SteamFrame struct {
	// Enabled turns the device tools on; off, they fail with "not configured".
	Enabled       bool `yaml:"enabled"`
	device.Config `yaml:",inline"`
}

// API is the api section: the api role's settings (package api) and the webhooks
// that receive every run event (package webhook).
type API struct {
	api.Config `yaml:",inline"`
	// Webhooks receive every run event, signed with HMAC-SHA256. Default none.
	Webhooks []webhook.Hook `yaml:"webhooks"`
	// MCPAddr is the MCP server's own listener (/mcp, package mcpserver). Env
	// AETHERIUM_MCP_ADDR. Default mcpserver.DefaultAddr; "" or "off" disables it,
	// and it only starts when mcp.profiles names a profile.
	MCPAddr string `yaml:"mcp_addr"`
}

// LLM holds provider endpoints and credentials; templates pick provider and model.
// Each is its provider package's Config (base_url, api_key, model, max_retries,
// timeout). Env AETHERIUM_OPENAI_BASE_URL / AETHERIUM_ANTHROPIC_BASE_URL,
// AETHERIUM_OPENAI_API_KEY / AETHERIUM_ANTHROPIC_API_KEY (OPENAI_API_KEY /
// ANTHROPIC_API_KEY are honoured too), AETHERIUM_OPENAI_MODEL /
// AETHERIUM_ANTHROPIC_MODEL.
type LLM struct {
	OpenAI    openai.Config    `yaml:"openai"`
	Anthropic anthropic.Config `yaml:"anthropic"`
	// Governor is "on" (the default) or "off" (env AETHERIUM_LLM_GOVERNOR): on,
	// every model call is admitted against Limits, shared by the whole fleet
	// through Redis (package llm/governor); off, none is, but a provider's 429,
	// 503 or 529 still parks the step instead of failing it.
	Governor string `yaml:"governor"`
	// Limits are the providers' limits: [{provider, model, rpm, tpm,
	// concurrency, team_share, principal_share}], model "" or "*" for the
	// credential's limit across its models. Reloaded when the file changes (a
	// broken file keeps the last good limits). Default none.
	Limits []governor.Limit `yaml:"limits"`
	// MaxWait bounds how long a step may stay parked by rate limits before its
	// run fails with reason rate_limited. Default worker.DefaultMaxWait.
	MaxWait time.Duration `yaml:"max_wait"`
	// Prices is a price file (package llm/pricing's format, dollars per million
	// tokens) whose lines replace or extend the shipped table's (env
	// AETHERIUM_LLM_PRICES). Reloaded when it changes. Default: the shipped
	// table only.
	Prices string `yaml:"prices"`
	// Budgets are money budgets beyond a run's own (a template's
	// budget.max_cost).
	Budgets Budgets `yaml:"budgets"`
	// Windows are the models' context windows and answer limits, in tokens:
	// {default: {context, output}, models: {name or prefix: {context, output}}}
	// replacing or extending the shipped table (package llm/tokens). A session
	// whose next request would pass worker.compact_at of its model's window is
	// compacted first (docs/long-sessions.md). Default: the shipped table.
	Windows tokens.Config `yaml:"windows"`
}

// WindowTable is the shipped window table with llm.windows applied.
func (l LLM) WindowTable() (*tokens.Table, error) {
	return tokens.Default().Merge(l.Windows)
}

// Budgets is llm.budgets.
type Budgets struct {
	// PrincipalDaily, in dollars ("5.00"), stops a principal's runs and
	// refuses its submits once its model calls cost that much since midnight
	// UTC. "" = none.
	PrincipalDaily string `yaml:"principal_daily"`
}

// DefaultModel is the model a provider is asked when a team names none ("" for
// the script model and unknown providers).
func (l LLM) DefaultModel(provider string) string {
	switch provider {
	case "openai":
		return l.OpenAI.Model
	case "anthropic":
		return l.Anthropic.Model
	}
	return ""
}

// GovernorConfig is the governor's configuration from the llm section.
func (l LLM) GovernorConfig() governor.Config {
	return governor.Config{Enabled: l.Governor != "off", Limits: l.Limits, MaxWait: l.MaxWait}.WithDefaults()
}

// PriceTable is the shipped price table with the llm.prices file over it.
func (l LLM) PriceTable() (*pricing.Table, error) {
	if l.Prices == "" {
		return pricing.Default(), nil
	}
	over, err := pricing.Load(l.Prices)
	if err != nil {
		return nil, err
	}
	return pricing.Merge(pricing.Default(), over)
}

// DailyBudget is llm.budgets.principal_daily (0: none).
func (l LLM) DailyBudget() (llm.Money, error) {
	if l.Budgets.PrincipalDaily == "" {
		return 0, nil
	}
	return llm.ParseDollars(l.Budgets.PrincipalDaily)
}

// validate reports the llm section's problems, naming the keys.
func (l LLM) validate() []error {
	var errs []error
	if l.Governor != "" && l.Governor != "on" && l.Governor != "off" {
		errs = append(errs, fmt.Errorf("llm.governor (AETHERIUM_LLM_GOVERNOR): want on or off, got %q", l.Governor))
	}
	if l.MaxWait < 0 {
		errs = append(errs, fmt.Errorf("llm.max_wait: must not be negative, got %s", l.MaxWait))
	}
	if err := l.GovernorConfig().Validate(); err != nil {
		errs = append(errs, fmt.Errorf("llm.limits: %w", err))
	}
	if _, err := l.PriceTable(); err != nil {
		errs = append(errs, fmt.Errorf("llm.prices (AETHERIUM_LLM_PRICES): %w", err))
	}
	if _, err := l.DailyBudget(); err != nil {
		errs = append(errs, fmt.Errorf("llm.budgets.principal_daily: %w", err))
	}
	if err := l.Windows.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("llm.windows: %w", err))
	}
	return errs
}

// Default returns the configuration with every default filled in: the packages'
// own defaults, composed.
func Default() Config {
	return Config{
		RedisURL:        "redis://127.0.0.1:6379/0",
		DatabaseURL:     "postgres://postgres@127.0.0.1:5432/aetherium?sslmode=disable",
		Workspaces:      "data/workspaces",
		WorkspaceLimits: wsquota.Defaults(),
		Templates:       "templates",
		API:             API{Config: api.Config{}.WithDefaults(), MCPAddr: mcpserver.DefaultAddr},
		Worker:          worker.Defaults(),
		Security:        security.Config{}.WithDefaults(),
		Scheduler:       scheduler.Defaults(),
		Schedules:       schedules.Config{}.WithDefaults(),
		Tracing:         tracing.Config{}.WithDefaults(),
		Retention:       retention.Defaults(),
		Replay:          replay.Config{}.WithDefaults(),
		LLM: LLM{
			OpenAI:    openai.Config{Model: openai.DefaultModel, MaxRetries: openai.DefaultMaxRetries, Timeout: openai.DefaultTimeout},
			Anthropic: anthropic.Config{Model: anthropic.DefaultModel, MaxRetries: anthropic.DefaultMaxRetries, Timeout: anthropic.DefaultTimeout},
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
		cfg.Path = path
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
		"AETHERIUM_REDIS_URL":                  &c.RedisURL,
		"AETHERIUM_DATABASE_URL":               &c.DatabaseURL,
		"AETHERIUM_WORKSPACES":                 &c.Workspaces,
		"AETHERIUM_TEMPLATES":                  &c.Templates,
		"AETHERIUM_PERMISSIONS":                &c.Security.PermissionsFile,
		"AETHERIUM_API_ADDR":                   &c.API.Addr,
		"AETHERIUM_MCP_ADDR":                   &c.API.MCPAddr,
		"AETHERIUM_PROMETHEUS_URL":             &c.API.PrometheusURL,
		"AETHERIUM_API_METRICS_ADDR":           &c.API.MetricsAddr,
		"AETHERIUM_API_MONITORING_SESSION_KEY": &c.API.MonitoringSessionKey,
		"AETHERIUM_API_HOOKS_ADDR":             &c.API.Hooks.Addr,
		"AETHERIUM_WORKER_METRICS_ADDR":        &c.Worker.MetricsAddr,
		"AETHERIUM_SCHEDULER_METRICS_ADDR":     &c.Scheduler.MetricsAddr,
		"AETHERIUM_EGRESS_PRIVATE":             &c.Security.Egress.Private,
		"AETHERIUM_EGRESS_SERVICE_URL":         &c.Sandbox.EgressProxy.Service.URL,
		"AETHERIUM_EGRESS_SERVICE_LISTEN":      &c.Sandbox.EgressProxy.Service.Listen,
		"AETHERIUM_EGRESS_TOKEN_FILE":          &c.Sandbox.EgressProxy.Service.TokenFile,
		"AETHERIUM_OPENAI_BASE_URL":            &c.LLM.OpenAI.BaseURL,
		"AETHERIUM_LLM_GOVERNOR":               &c.LLM.Governor,
		"AETHERIUM_LLM_PRICES":                 &c.LLM.Prices,
		"AETHERIUM_ANTHROPIC_BASE_URL":         &c.LLM.Anthropic.BaseURL,
		"OPENAI_API_KEY":                       &c.LLM.OpenAI.APIKey,
		"ANTHROPIC_API_KEY":                    &c.LLM.Anthropic.APIKey,
		"AETHERIUM_OPENAI_API_KEY":             &c.LLM.OpenAI.APIKey,
		"AETHERIUM_ANTHROPIC_API_KEY":          &c.LLM.Anthropic.APIKey,
		"AETHERIUM_OPENAI_MODEL":               &c.LLM.OpenAI.Model,
		"AETHERIUM_ANTHROPIC_MODEL":            &c.LLM.Anthropic.Model,
		"AETHERIUM_EMBEDDINGS_API_KEY":         &c.Knowledge.Embeddings.APIKey,
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
	if v, ok := env("AETHERIUM_ALLOW_SELF_APPROVAL"); ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("config: AETHERIUM_ALLOW_SELF_APPROVAL=%q is not true or false", v))
		}
		c.Security.AllowSelfApproval = b
	}
	if v, ok := env("AETHERIUM_TRACING"); ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("config: AETHERIUM_TRACING=%q is not true or false", v))
		}
		c.Tracing.Enabled = b
	}
	if v, ok := env("AETHERIUM_API_ALLOWED_HOSTS"); ok {
		c.API.AllowedHosts = nil
		for _, h := range strings.Split(v, ",") {
			if h = strings.TrimSpace(h); h != "" {
				c.API.AllowedHosts = append(c.API.AllowedHosts, h)
			}
		}
	}
	// One bearer token from the environment (compose and other container
	// deployments, where a mounted config file is extra ceremony): its hex SHA-256,
	// role admin, named "env". It joins api.tokens rather than replacing them; an
	// empty value (compose's ${VAR:-}) adds nothing.
	if v, ok := env("AETHERIUM_API_TOKEN_SHA256"); ok && v != "" {
		c.API.Tokens = append(c.API.Tokens, api.Token{Name: EnvTokenName, SHA256: strings.ToLower(strings.TrimSpace(v)), Roles: []string{api.RoleAdmin}})
	}
	return errors.Join(errs...)
}

// EnvTokenName names the api token AETHERIUM_API_TOKEN_SHA256 adds.
const EnvTokenName = "env"

// Validate checks every setting and names the key of the first problems found.
func (c Config) Validate() error {
	var errs []error
	bad := func(key, format string, a ...any) {
		errs = append(errs, fmt.Errorf("config: %s: %s", key, fmt.Sprintf(format, a...)))
	}
	// add takes a package's Validate result: each of its errors names its key.
	add := func(err error) {
		if err == nil {
			return
		}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				errs = append(errs, fmt.Errorf("config: %w", e))
			}
			return
		}
		errs = append(errs, fmt.Errorf("config: %w", err))
	}
	if _, err := redisconn.Parse(c.RedisURL); err != nil {
		bad("redis_url (AETHERIUM_REDIS_URL)", "%v", err)
	}
	if u, err := url.Parse(c.DatabaseURL); err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		bad("database_url (AETHERIUM_DATABASE_URL)", "want postgres://user@host:port/db, got %q", c.DatabaseURL)
	}
	if c.Workspaces == "" {
		bad("workspaces (AETHERIUM_WORKSPACES)", "must not be empty")
	}
	add(c.WorkspaceLimits.Validate())
	if c.Templates == "" {
		bad("templates (AETHERIUM_TEMPLATES)", "must not be empty")
	}
	for _, err := range []error{c.API.Validate(), webhook.ValidateHooks(c.API.Webhooks), c.Worker.Validate(), c.Scheduler.Validate(), c.Schedules.Validate()} {
		add(err)
	}
	add(c.Security.Validate())
	add(errors.Join(c.LLM.validate()...))
	add(c.Research.Validate())
	add(c.Quality.WithDefaults().Validate())
	add(c.Sandbox.OneShot.WithDefaults().Validate())
	add(c.Audio.WithDefaults().Validate())
	add(c.ComfyUI.WithDefaults().Validate())
	add(c.Knowledge.Validate())
	add(c.Memory.Validate())
	add(c.Fairness.Validate())
	add(c.Tracing.Validate())
	add(c.Retention.Validate())
	add(c.Replay.Validate())
	mcp := c.MCP // validated as written: WithDefaults would hide a negative wait
	mcp.Addr = c.API.MCPAddr
	add(mcp.Validate())
	return errors.Join(errs...)
}
