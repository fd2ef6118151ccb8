package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/api"
	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/egress"
	"github.com/aetherium-engine/aetherium/llm/governor"
	"github.com/aetherium-engine/aetherium/mcpserver"
	"github.com/aetherium-engine/aetherium/security"
	"github.com/aetherium-engine/aetherium/wsquota"
)

// envOf returns a fake environment lookup over m, so tests never read the real one.
func envOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

// writeFile writes a config file into a fresh temp dir and returns its path.
func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "aetherium.yaml")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
	return p
}

func TestDefault(t *testing.T) {
	t.Parallel()
	c := config.Default()
	require.NoError(t, c.Validate())
	require.Equal(t, "redis://127.0.0.1:6379/0", c.RedisURL)
	require.Equal(t, "postgres://postgres@127.0.0.1:5432/aetherium?sslmode=disable", c.DatabaseURL)
	require.Equal(t, "data/workspaces", c.Workspaces)
	require.EqualValues(t, 1<<30, c.WorkspaceLimits.Quota)
	require.Equal(t, wsquota.MinFree{Percent: 5}, c.WorkspaceLimits.MinFree)
	require.Equal(t, 15*time.Minute, c.WorkspaceLimits.UnmountAfter)
	require.Equal(t, "templates", c.Templates)
	require.Equal(t, "127.0.0.1:8080", c.API.Addr)
	require.Equal(t, 1<<20, c.API.BodyLimit)
	require.NotNil(t, c.API.MonitoringReadOnly)
	require.True(t, *c.API.MonitoringReadOnly)
	require.Empty(t, c.API.PrometheusURL)
	require.Equal(t, 20, c.Worker.Concurrency)
	require.Equal(t, 10*time.Second, c.Worker.ShutdownTimeout)
	require.Equal(t, 100*time.Millisecond, c.Worker.TaskCheckInterval)
	require.Equal(t, 2*time.Minute, c.Worker.StepLease)
	require.Equal(t, 5, c.Worker.MaxRetry)
	require.Equal(t, 5, c.Worker.CircuitBreaker)
	require.Equal(t, 500, c.Worker.MaxSteps)
	require.Equal(t, "127.0.0.1:9091", c.Worker.MetricsAddr)
	require.Equal(t, time.Hour, c.Scheduler.StuckAfter)
	require.Equal(t, "127.0.0.1:9092", c.Scheduler.MetricsAddr)
	require.Equal(t, 90*24*time.Hour, c.Retention.Runs, "runs are kept 90 days by default")
	require.Empty(t, c.Retention.ExportDir, "export before delete is off by default")
	require.Equal(t, "gpt-4o-mini", c.LLM.OpenAI.Model)
	require.Equal(t, "claude-sonnet-4-5", c.LLM.Anthropic.Model)
	for _, p := range []struct {
		MaxRetries      int
		Timeout         time.Duration
		APIKey, BaseURL string
	}{{c.LLM.OpenAI.MaxRetries, c.LLM.OpenAI.Timeout, c.LLM.OpenAI.APIKey, c.LLM.OpenAI.BaseURL}, {c.LLM.Anthropic.MaxRetries, c.LLM.Anthropic.Timeout, c.LLM.Anthropic.APIKey, c.LLM.Anthropic.BaseURL}} {
		require.Equal(t, 3, p.MaxRetries)
		require.Equal(t, 120*time.Second, p.Timeout)
		require.Empty(t, p.APIKey)
		require.Empty(t, p.BaseURL)
	}
}

func TestDefaultsDoNotShareState(t *testing.T) {
	t.Parallel()
	a, b := config.Default(), config.Default()
	*a.API.MonitoringReadOnly = false
	require.True(t, *b.API.MonitoringReadOnly, "Default must return a fresh MonitoringReadOnly pointer")
}

func TestLoadFromNoFileGivesDefaults(t *testing.T) {
	t.Parallel()
	// The package directory has no aetherium.yaml, so an empty path falls back to
	// defaults rather than failing.
	c, err := config.LoadFrom("", envOf(nil))
	require.NoError(t, err)
	require.Equal(t, config.Default(), c)
}

func TestLoadFromEmptyFileGivesDefaults(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "# only a comment\n")
	c, err := config.LoadFrom(path, envOf(nil))
	require.NoError(t, err)
	want := config.Default()
	want.Path = path
	require.Equal(t, want, c)
}

func TestLoadFromFileAndEnv(t *testing.T) {
	t.Parallel()
	path := writeFile(t, `
redis_url: redis://redis.internal:6380/2
database_url: postgresql://fleet@db:5432/fleet
workspaces: /srv/ws
workspace_quota: 512MiB
workspace_min_free: 2GiB
workspace_unmount_after: 1h
api:
  addr: 0.0.0.0:9000
  body_limit: 2048
  monitoring_read_only: false
worker:
  concurrency: 7
  shutdown_timeout: 30s
  step_lease: 5m
  metrics_addr: ""
scheduler:
  stuck_after: 90m
llm:
  openai:
    base_url: http://vllm:8000/v1
    api_key: from-file
    model: local-model
  anthropic:
    timeout: 45s
`)
	tests := []struct {
		name  string
		env   map[string]string
		check func(t *testing.T, c config.Config)
	}{
		{
			name: "file only",
			check: func(t *testing.T, c config.Config) {
				require.Equal(t, "redis://redis.internal:6380/2", c.RedisURL)
				require.Equal(t, "postgresql://fleet@db:5432/fleet", c.DatabaseURL)
				require.Equal(t, "/srv/ws", c.Workspaces)
				require.EqualValues(t, 512<<20, c.WorkspaceLimits.Quota)
				require.Equal(t, wsquota.MinFree{Bytes: 2 << 30}, c.WorkspaceLimits.MinFree)
				require.Equal(t, time.Hour, c.WorkspaceLimits.UnmountAfter)
				require.Equal(t, "templates", c.Templates, "keys absent from the file keep their default")
				require.Equal(t, "0.0.0.0:9000", c.API.Addr)
				require.Equal(t, 2048, c.API.BodyLimit)
				require.False(t, *c.API.MonitoringReadOnly)
				require.Equal(t, 7, c.Worker.Concurrency)
				require.Equal(t, 30*time.Second, c.Worker.ShutdownTimeout)
				require.Equal(t, 5*time.Minute, c.Worker.StepLease)
				require.Equal(t, 100*time.Millisecond, c.Worker.TaskCheckInterval)
				require.Equal(t, 5, c.Worker.MaxRetry)
				require.Empty(t, c.Worker.MetricsAddr, "an empty metrics address disables it")
				require.Equal(t, 90*time.Minute, c.Scheduler.StuckAfter)
				require.Equal(t, "127.0.0.1:9092", c.Scheduler.MetricsAddr)
				require.Equal(t, "http://vllm:8000/v1", c.LLM.OpenAI.BaseURL)
				require.Equal(t, "from-file", c.LLM.OpenAI.APIKey)
				require.Equal(t, "local-model", c.LLM.OpenAI.Model)
				require.Equal(t, 3, c.LLM.OpenAI.MaxRetries)
				require.Equal(t, 45*time.Second, c.LLM.Anthropic.Timeout)
				require.Equal(t, "claude-sonnet-4-5", c.LLM.Anthropic.Model)
			},
		},
		{
			name: "env overrides file",
			env: map[string]string{
				"AETHERIUM_REDIS_URL":                  "rediss://cache:6379/0",
				"AETHERIUM_DATABASE_URL":               "postgres://other@db2/x",
				"AETHERIUM_WORKSPACES":                 "/tmp/ws",
				"AETHERIUM_WORKSPACE_QUOTA":            "0",
				"AETHERIUM_WORKSPACE_MIN_FREE":         "10%",
				"AETHERIUM_TEMPLATES":                  "/etc/aetherium/templates",
				"AETHERIUM_API_ADDR":                   ":8081",
				"AETHERIUM_PROMETHEUS_URL":             "http://prom:9090",
				"AETHERIUM_API_BODY_LIMIT":             "4096",
				"AETHERIUM_WORKER_CONCURRENCY":         "3",
				"AETHERIUM_WORKER_METRICS_ADDR":        "127.0.0.1:9191",
				"AETHERIUM_SCHEDULER_METRICS_ADDR":     "",
				"AETHERIUM_OPENAI_BASE_URL":            "http://ollama:11434/v1",
				"AETHERIUM_ANTHROPIC_BASE_URL":         "http://proxy/anthropic",
				"AETHERIUM_OPENAI_MODEL":               "env-model",
				"AETHERIUM_ANTHROPIC_MODEL":            "claude-env",
				"AETHERIUM_ANTHROPIC_API_KEY":          "ant-env",
				"AETHERIUM_API_TOKEN_SHA256":           strings.Repeat("AB", 32),
				"AETHERIUM_API_MONITORING_SESSION_KEY": strings.Repeat("m", 40),
			},
			check: func(t *testing.T, c config.Config) {
				require.Equal(t, []api.Token{{Name: config.EnvTokenName, SHA256: strings.Repeat("ab", 32), Roles: []string{api.RoleAdmin}}}, c.API.Tokens,
					"the env token is added with role admin, its hex lower-cased")
				require.Equal(t, "rediss://cache:6379/0", c.RedisURL)
				require.Equal(t, "postgres://other@db2/x", c.DatabaseURL)
				require.Equal(t, "/tmp/ws", c.Workspaces)
				require.Zero(t, c.WorkspaceLimits.Quota, "0 turns quotas off")
				require.Equal(t, wsquota.MinFree{Percent: 10}, c.WorkspaceLimits.MinFree)
				require.Equal(t, time.Hour, c.WorkspaceLimits.UnmountAfter)
				require.Equal(t, "/etc/aetherium/templates", c.Templates)
				require.Equal(t, ":8081", c.API.Addr)
				require.Equal(t, "http://prom:9090", c.API.PrometheusURL)
				require.Equal(t, 4096, c.API.BodyLimit)
				require.Equal(t, 3, c.Worker.Concurrency)
				require.Equal(t, "127.0.0.1:9191", c.Worker.MetricsAddr)
				require.Empty(t, c.Scheduler.MetricsAddr, "a set-but-empty env var still overrides")
				require.Equal(t, "http://ollama:11434/v1", c.LLM.OpenAI.BaseURL)
				require.Equal(t, "http://proxy/anthropic", c.LLM.Anthropic.BaseURL)
				require.Equal(t, "env-model", c.LLM.OpenAI.Model)
				require.Equal(t, "claude-env", c.LLM.Anthropic.Model)
				require.Equal(t, "from-file", c.LLM.OpenAI.APIKey)
				require.Equal(t, "ant-env", c.LLM.Anthropic.APIKey)
				require.Equal(t, strings.Repeat("m", 40), c.API.MonitoringSessionKey)
				require.Equal(t, 30*time.Second, c.Worker.ShutdownTimeout, "file values without an env var survive")
			},
		},
		{
			name: "vendor api key env overrides file",
			env:  map[string]string{"OPENAI_API_KEY": "sk-vendor", "ANTHROPIC_API_KEY": "ant-vendor"},
			check: func(t *testing.T, c config.Config) {
				require.Equal(t, "sk-vendor", c.LLM.OpenAI.APIKey)
				require.Equal(t, "ant-vendor", c.LLM.Anthropic.APIKey)
			},
		},
		{
			name: "aetherium api key wins over vendor key",
			env: map[string]string{
				"OPENAI_API_KEY": "sk-vendor", "AETHERIUM_OPENAI_API_KEY": "sk-aeth",
				"ANTHROPIC_API_KEY": "ant-vendor", "AETHERIUM_ANTHROPIC_API_KEY": "ant-aeth",
			},
			check: func(t *testing.T, c config.Config) {
				require.Equal(t, "sk-aeth", c.LLM.OpenAI.APIKey)
				require.Equal(t, "ant-aeth", c.LLM.Anthropic.APIKey)
			},
		},
		{
			name: "empty vendor key does not clear the file's key",
			env:  map[string]string{"OPENAI_API_KEY": ""},
			check: func(t *testing.T, c config.Config) {
				require.Equal(t, "from-file", c.LLM.OpenAI.APIKey)
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := config.LoadFrom(path, envOf(tc.env))
			require.NoError(t, err)
			tc.check(t, c)
		})
	}
}

func TestLoadFromErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// file is the YAML body; "" with missing=true means no file at all.
		file    string
		missing bool
		env     map[string]string
		// want are substrings the error must contain (the key it names).
		want []string
	}{
		{name: "explicit missing file", missing: true, want: []string{"AETHERIUM_CONFIG", "no such file"}},
		{name: "unknown top-level key", file: "redis_url: redis://x:1/0\nredis_ulr: typo\n", want: []string{"redis_ulr", "not found"}},
		{name: "unknown nested key", file: "api:\n  adr: 1.2.3.4:80\n", want: []string{"adr", "not found"}},
		{name: "malformed yaml", file: "api: [unclosed\n", want: []string{"config "}},
		{name: "bad duration", file: "worker:\n  shutdown_timeout: soon\n", want: []string{"soon"}},
		// A bare number is refused (yaml.v3 reads no integer into a time.Duration).
		{name: "duration without unit", file: "worker:\n  step_lease: 5\n", want: []string{"line 2", "`5`", "time.Duration"}},
		{name: "scheduler duration without unit", file: "scheduler:\n  period: 15\n", want: []string{"`15`", "time.Duration"}},
		{name: "bad webhook", file: "api:\n  webhooks:\n    - url: ftp://x\n      secret: short\n", want: []string{"api.webhooks[0].url", "api.webhooks[0].secret"}},
		{name: "api fields and webhooks side by side", file: "api:\n  addr: 127.0.0.1:1\n  webhooks: []\n  max_runs_in_flight: -1\n", want: []string{"config: api.max_runs_in_flight"}},
		{name: "fairness weight 0 and a negative limit", file: "fairness:\n  keys:\n    alice: {weight: 0}\n    bob: {runs: -1}\n", want: []string{`fairness.keys["alice"].weight: must be at least 1, got 0`, `fairness.keys["bob"].runs`}},
		{name: "fairness negative weight", file: "fairness:\n  default: {weight: -3}\n", want: []string{"fairness.default.weight"}},
		{name: "fairness priority out of range", file: "fairness:\n  max_priority: {submit: 9}\n", want: []string{`fairness.max_priority["submit"]`}},
		{name: "fairness unknown key", file: "fairness:\n  wieghts: {}\n", want: []string{"wieghts", "not found"}},
		{name: "bad redis url in file", file: "redis_url: http://localhost:6379\n", want: []string{"redis_url", "AETHERIUM_REDIS_URL"}},
		{name: "bad redis url in env", env: map[string]string{"AETHERIUM_REDIS_URL": "localhost:6379"}, want: []string{"redis_url (AETHERIUM_REDIS_URL)", "localhost:6379"}},
		{name: "bad database url", env: map[string]string{"AETHERIUM_DATABASE_URL": "mysql://db/x"}, want: []string{"database_url (AETHERIUM_DATABASE_URL)"}},
		{name: "bad api addr in env", env: map[string]string{"AETHERIUM_API_ADDR": "8080"}, want: []string{"api.addr (AETHERIUM_API_ADDR)", `"8080"`}},
		{name: "bad api addr in file", file: "api:\n  addr: localhost\n", want: []string{"api.addr"}},
		{name: "bad mcp addr", file: "api:\n  mcp_addr: nope\n", want: []string{"api.mcp_addr (AETHERIUM_MCP_ADDR)", `"nope"`}},
		{name: "mcp profile with an agent's tool", file: "mcp:\n  profiles:\n    ide:\n      tools: [write_file, delegate]\n", want: []string{"mcp.profiles.ide.tools", "delegate is a team agent's tool"}},
		{name: "mcp profile with an unknown tool", file: "mcp:\n  profiles:\n    ide:\n      tools: [rm_rf]\n", want: []string{"mcp.profiles.ide.tools", `unknown tool "rm_rf"`}},
		{name: "mcp profile with the team group", file: "mcp:\n  profiles:\n    ide:\n      mcp_servers: [team]\n", want: []string{"mcp.profiles.ide.mcp_servers"}},
		{name: "empty mcp profile", file: "mcp:\n  profiles:\n    ide: {}\n", want: []string{"mcp.profiles.ide", "catalog would be empty"}},
		{name: "mcp profile with a bad name", file: "mcp:\n  profiles:\n    IDE/x:\n      tools: [read_file]\n", want: []string{"mcp.profiles.IDE/x", "profile name"}},
		{name: "mcp profile with an unknown role", file: "mcp:\n  profiles:\n    ide:\n      tools: [read_file]\n      call_role: god\n", want: []string{"mcp.profiles.ide.call_role", `"god"`}},
		{name: "unknown mcp profile key", file: "mcp:\n  profiles:\n    ide:\n      tolls: [read_file]\n", want: []string{"tolls", "not found"}},
		{name: "negative mcp wait", file: "mcp:\n  poll: -1s\n", want: []string{"mcp.poll"}},
		{name: "mcp oauth with an unknown role", file: "mcp:\n  oauth:\n    issuer: https://id.example.com\n    scopes:\n      fleet:all: [root]\n",
			want: []string{"mcp.oauth.scopes.fleet:all", `unknown role "root"`}},
		{name: "mcp oauth over http", file: "mcp:\n  oauth:\n    issuer: http://id.example.com\n    scopes: {fleet:read: [read]}\n", want: []string{"mcp.oauth.issuer", "want https"}},
		{name: "mcp oauth key misspelt", file: "mcp:\n  oauth:\n    isuer: https://id.example.com\n", want: []string{"isuer", "not found"}},
		{name: "non-integer concurrency", env: map[string]string{"AETHERIUM_WORKER_CONCURRENCY": "lots"}, want: []string{"AETHERIUM_WORKER_CONCURRENCY", `"lots"`, "not an integer"}},
		{name: "non-integer body limit", env: map[string]string{"AETHERIUM_API_BODY_LIMIT": "1MB"}, want: []string{"AETHERIUM_API_BODY_LIMIT", "not an integer"}},
		{name: "zero body limit in file", file: "api:\n  body_limit: 0\n", want: []string{"api.body_limit (AETHERIUM_API_BODY_LIMIT)", "must be positive"}},
		{name: "zero body limit in env", env: map[string]string{"AETHERIUM_API_BODY_LIMIT": "0"}, want: []string{"api.body_limit", "got 0"}},
		{name: "negative concurrency", env: map[string]string{"AETHERIUM_WORKER_CONCURRENCY": "-1"}, want: []string{"worker.concurrency (AETHERIUM_WORKER_CONCURRENCY)"}},
		{name: "empty workspaces", env: map[string]string{"AETHERIUM_WORKSPACES": ""}, want: []string{"workspaces (AETHERIUM_WORKSPACES)"}},
		{name: "bad quota in env", env: map[string]string{"AETHERIUM_WORKSPACE_QUOTA": "1 gallon"}, want: []string{"AETHERIUM_WORKSPACE_QUOTA", "1 gallon"}},
		{name: "tiny quota in file", file: "workspace_quota: 1MiB\n", want: []string{"workspace_quota (AETHERIUM_WORKSPACE_QUOTA)", "below the minimum"}},
		{name: "bad quota in file", file: "workspace_quota: lots\n", want: []string{"lots"}},
		{name: "bad min free in env", env: map[string]string{"AETHERIUM_WORKSPACE_MIN_FREE": "150%"}, want: []string{"AETHERIUM_WORKSPACE_MIN_FREE", "percentage"}},
		{name: "bad min free in file", file: "workspace_min_free: half\n", want: []string{"half"}},
		{name: "negative unmount after", file: "workspace_unmount_after: -1m\n", want: []string{"workspace_unmount_after"}},
		{name: "unknown workspace key", file: "workspace_qouta: 1GiB\n", want: []string{"workspace_qouta", "not found"}},
		{name: "negative run retention", file: "retention:\n  runs: -24h\n", want: []string{"retention.runs", "must not be negative"}},
		{name: "negative egress retention", file: "retention:\n  egress: -1s\n", want: []string{"retention.egress"}},
		{name: "unknown retention key", file: "retention:\n  run: 720h\n", want: []string{"field run not found"}},
		{name: "retention batch too large", file: "retention:\n  batch_size: 1000000\n", want: []string{"retention.batch_size"}},
		{name: "empty templates", env: map[string]string{"AETHERIUM_TEMPLATES": ""}, want: []string{"templates (AETHERIUM_TEMPLATES)"}},
		{name: "bad worker metrics addr", env: map[string]string{"AETHERIUM_WORKER_METRICS_ADDR": "nope"}, want: []string{"worker.metrics_addr"}},
		{name: "bad scheduler metrics addr", file: "scheduler:\n  metrics_addr: nope\n", want: []string{"scheduler.metrics_addr"}},
		{name: "short step lease", file: "worker:\n  step_lease: 500ms\n", want: []string{"worker.step_lease"}},
		{name: "zero max steps", file: "worker:\n  max_steps: 0\n", want: []string{"worker", "max_steps"}},
		{name: "negative max retry", file: "worker:\n  max_retry: -1\n", want: []string{"max_retry"}},
		{name: "zero circuit breaker", file: "worker:\n  circuit_breaker: 0\n", want: []string{"circuit_breaker"}},
		{name: "secret value inline", file: "security:\n  secrets:\n    github:\n      value: ghp_x\n      domains: [api.github.com]\n", want: []string{"value", "not found"}},
		{name: "secret without a source", file: "security:\n  secrets:\n    github:\n      domains: [api.github.com]\n", want: []string{"security.secrets.github", "exactly one of env and file"}},
		{name: "secret without domains", file: "security:\n  secrets:\n    github:\n      env: GITHUB_TOKEN\n", want: []string{"security.secrets.github", "at least one domain"}},
		{name: "secret bound to a URL", file: "security:\n  secrets:\n    github:\n      env: GITHUB_TOKEN\n      domains: [\"https://api.github.com/\"]\n", want: []string{"security.secrets.github", "not a host name"}},
		{
			name: "every problem is listed",
			env: map[string]string{
				"AETHERIUM_REDIS_URL": "nope", "AETHERIUM_API_ADDR": "nope", "AETHERIUM_API_BODY_LIMIT": "0",
			},
			want: []string{"redis_url", "api.addr", "api.body_limit"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var path string
			if tc.missing {
				path = filepath.Join(t.TempDir(), "absent.yaml")
			} else {
				path = writeFile(t, tc.file)
			}
			_, err := config.LoadFrom(path, envOf(tc.env))
			require.Error(t, err)
			for _, w := range tc.want {
				require.ErrorContains(t, err, w)
			}
		})
	}
}

func TestValidateNamesEachKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(c *config.Config)
		want   string
	}{
		{name: "rediss scheme is fine", mutate: func(c *config.Config) { c.RedisURL = "rediss://h:1/0" }},
		{name: "postgresql scheme is fine", mutate: func(c *config.Config) { c.DatabaseURL = "postgresql://u@h/db" }},
		{name: "metrics disabled is fine", mutate: func(c *config.Config) { c.Worker.MetricsAddr, c.Scheduler.MetricsAddr = "", "" }},
		{name: "unparsable redis url", mutate: func(c *config.Config) { c.RedisURL = "redis://[::1" }, want: "redis_url"},
		{name: "sentinel group is fine", mutate: func(c *config.Config) { c.RedisURL = "redis-sentinel://:pw@127.0.0.1:26379,127.0.0.1:26380/mymaster/1" }},
		{name: "cluster is fine", mutate: func(c *config.Config) { c.RedisURL = "redis-cluster://127.0.0.1:7000,127.0.0.1:7001" }},
		{name: "sentinel without master name", mutate: func(c *config.Config) { c.RedisURL = "redis-sentinel://127.0.0.1:26379" }, want: "redis_url (AETHERIUM_REDIS_URL): invalid redis url"},
		{name: "cluster with a db", mutate: func(c *config.Config) { c.RedisURL = "redis-cluster://127.0.0.1:7000/2" }, want: "redis_url (AETHERIUM_REDIS_URL): invalid redis url"},
		{name: "cluster with a bad port", mutate: func(c *config.Config) { c.RedisURL = "redis-cluster://127.0.0.1:70000" }, want: "redis_url (AETHERIUM_REDIS_URL): invalid redis url"},
		{name: "empty database url", mutate: func(c *config.Config) { c.DatabaseURL = "" }, want: "database_url"},
		{name: "empty api addr", mutate: func(c *config.Config) { c.API.Addr = "" }, want: "api.addr"},
		{name: "zero concurrency", mutate: func(c *config.Config) { c.Worker.Concurrency = 0 }, want: "worker.concurrency"},
		{name: "negative body limit", mutate: func(c *config.Config) { c.API.BodyLimit = -5 }, want: "api.body_limit"},
		{name: "a video width off Wan's grid", mutate: func(c *config.Config) { c.ComfyUI.VideoWidth = 830 }, want: "comfyui.video_width"},
		{name: "a video service that is no lease name", mutate: func(c *config.Config) { c.ComfyUI.VideoService = "Comfy Video" }, want: "comfyui.video_service"},
		{name: "limits and a daily budget are fine", mutate: func(c *config.Config) {
			c.LLM.Limits = []governor.Limit{{Provider: "openai", RPM: 60, TPM: 20000}, {Provider: "openai", Model: "gpt-4o", Concurrency: 4, TeamShare: 50}}
			c.LLM.Budgets.PrincipalDaily = "5.00"
		}},
		{name: "governor neither on nor off", mutate: func(c *config.Config) { c.LLM.Governor = "maybe" }, want: "llm.governor (AETHERIUM_LLM_GOVERNOR): want on or off"},
		{name: "a negative limit", mutate: func(c *config.Config) { c.LLM.Limits = []governor.Limit{{Provider: "openai", RPM: -5}} }, want: "llm.limits"},
		{name: "an absurd limit", mutate: func(c *config.Config) { c.LLM.Limits = []governor.Limit{{Provider: "openai", TPM: 1 << 40}} }, want: "llm.limits"},
		{name: "a limit line that limits nothing", mutate: func(c *config.Config) { c.LLM.Limits = []governor.Limit{{Provider: "openai"}} }, want: "llm.limits"},
		{name: "a negative max wait", mutate: func(c *config.Config) { c.LLM.MaxWait = -time.Second }, want: "llm.max_wait"},
		{name: "a missing price file", mutate: func(c *config.Config) { c.LLM.Prices = "/nonexistent/prices.yaml" }, want: "llm.prices (AETHERIUM_LLM_PRICES)"},
		{name: "a daily budget in exponent form", mutate: func(c *config.Config) { c.LLM.Budgets.PrincipalDaily = "1e3" }, want: "llm.budgets.principal_daily"},
		{name: "a negative daily budget", mutate: func(c *config.Config) { c.LLM.Budgets.PrincipalDaily = "-5" }, want: "llm.budgets.principal_daily"},
		{name: "a secret from env bound to domains is fine", mutate: func(c *config.Config) {
			c.Security.Secrets = map[string]egress.SecretSource{"github": {Env: "GITHUB_TOKEN", Domains: []string{"api.github.com", "*.github.com"}}}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := config.Default()
			tc.mutate(&c)
			err := c.Validate()
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, "config: "+tc.want)
		})
	}
}

// supervisor_fallback is a list of tools; the old boolean is read as false only,
// and the tools that always need a human cannot be listed.
func TestSupervisorFallbackPerTool(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, yaml string
		want       []string
		err        string
	}{
		{"list", "security:\n  supervisor_fallback: [run_shell, http_request]\n", []string{"run_shell", "http_request"}, ""},
		{"absent", "", nil, ""},
		{"old false", "security:\n  supervisor_fallback: false\n", nil, ""},
		{"old true refused", "security:\n  supervisor_fallback: true\n", nil, "true is no longer accepted"},
		{"download_pdf never", "security:\n  supervisor_fallback: [download_pdf]\n", nil, "download_pdf always needs a human"},
		{"headset never", "security:\n  supervisor_fallback: [frame_run]\n", nil, "frame_run always needs a human"},
		{"unknown tool", "security:\n  supervisor_fallback: [rm_everything]\n", nil, `"rm_everything" is not a tool`},
		{"not a list", "security:\n  supervisor_fallback: {a: 1}\n", nil, "want a list of tool names"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := config.LoadFrom(writeFile(t, tc.yaml), envOf(nil))
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, security.FallbackTools(tc.want), c.Security.SupervisorFallback)
		})
	}
}

func TestKnowledgeSection(t *testing.T) {
	t.Parallel()
	p := writeFile(t, `knowledge:
  score_floor: 0.3
  packs_dir: /srv/packs
  chunk_size: 800
  index_timeout: 3s
  embeddings:
    endpoint: http://127.0.0.1:11434/v1
    model: nomic-embed-text
`)
	c, err := config.LoadFrom(p, envOf(map[string]string{"AETHERIUM_EMBEDDINGS_API_KEY": "sk-x"}))
	require.NoError(t, err)
	require.Equal(t, 0.3, c.Knowledge.ScoreFloor)
	require.Equal(t, "/srv/packs", c.Knowledge.PacksDir)
	require.Equal(t, 800, c.Knowledge.ChunkSize)
	require.Equal(t, 3*time.Second, c.Knowledge.IndexTimeout)
	require.Equal(t, "nomic-embed-text", c.Knowledge.Embeddings.Model)
	require.Equal(t, "sk-x", c.Knowledge.Embeddings.APIKey)

	for body, key := range map[string]string{
		"knowledge: {score_floor: 1.5}":                            "knowledge.score_floor",
		"knowledge: {chunk_size: 10}":                              "knowledge.chunk_size",
		"knowledge: {embeddings: {endpoint: 'http://x/v1'}}":       "knowledge.embeddings.model",
		"knowledge: {embeddings: {endpoint: 'ftp://x', model: m}}": "knowledge.embeddings.endpoint",
		"knowledge: {language: 'english; drop'}":                   "knowledge.language",
	} {
		_, err := config.LoadFrom(writeFile(t, body), envOf(nil))
		require.ErrorContains(t, err, key, body)
	}
}

func TestLoadMCPProfiles(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, file string
		env        map[string]string
		addr       string
		enabled    bool
	}{
		{name: "defaults: no profile, no listener", file: "", addr: mcpserver.DefaultAddr},
		{name: "a profile on the default address", file: "mcp:\n  profiles:\n    ide:\n      mcp_servers: [workspace]\n      tools: [read_file]\n      project: site\n      project_owner: alice\n      allowed_domains: [example.com]\n", addr: mcpserver.DefaultAddr, enabled: true},
		{name: "off", file: "api:\n  mcp_addr: \"off\"\nmcp:\n  profiles:\n    ide:\n      tools: [read_file]\n", addr: mcpserver.Off},
		{name: "env address", file: "mcp:\n  profiles:\n    ide:\n      tools: [read_file]\n", env: map[string]string{"AETHERIUM_MCP_ADDR": "127.0.0.1:9999"}, addr: "127.0.0.1:9999", enabled: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := config.LoadFrom(writeFile(t, c.file), envOf(c.env))
			require.NoError(t, err)
			m := cfg.MCPConfig()
			require.Equal(t, c.addr, m.Addr)
			require.Equal(t, c.enabled, m.Enabled())
			require.Equal(t, mcpserver.DefaultCallTimeout, m.CallTimeout)
			if p, ok := m.Profiles["ide"]; ok {
				require.Equal(t, "ide", p.Name)
				require.Equal(t, mcpserver.DefaultCallRole, p.CallRole)
				require.Equal(t, mcpserver.DefaultListRole, p.ListRole)
			}
		})
	}
	t.Run("oauth", func(t *testing.T) {
		t.Parallel()
		cfg, err := config.LoadFrom(writeFile(t, "mcp:\n  profiles:\n    ide:\n      tools: [read_file]\n  oauth:\n    issuer: https://id.example.com\n"+
			"    scopes:\n      fleet:call: [submit, read]\n    principal_claim: email\n    leeway: 1m\n"), envOf(nil))
		require.NoError(t, err)
		o := cfg.MCPConfig().OAuth
		require.Equal(t, "https://id.example.com", o.Issuer)
		require.Equal(t, map[string][]string{"fleet:call": {"submit", "read"}}, o.Scopes)
		require.Equal(t, "email", o.PrincipalClaim)
		require.Equal(t, time.Minute, o.Leeway)
		require.Equal(t, "http://"+mcpserver.DefaultAddr+"/mcp", o.Resource, "the loopback listener's URL")
	})
	t.Run("a project without its owner", func(t *testing.T) {
		t.Parallel()
		_, err := config.LoadFrom(writeFile(t, "mcp:\n  profiles:\n    ide:\n      tools: [read_file]\n      project: site\n"), envOf(nil))
		require.ErrorContains(t, err, "mcp.profiles.ide.project_owner: required")
	})
}

// A file that sets only a short scheduler.stuck_after loads (drills 6 and 7 set
// 150s): resume_after's 5 min default is cut to half of it, not refused.
func TestLoadShortStuckAfterCutsResumeAfter(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "aetherium.yaml")
	require.NoError(t, os.WriteFile(path, []byte("scheduler:\n  stuck_after: 150s\n"), 0o600))
	c, err := config.LoadFrom(path, envOf(nil))
	require.NoError(t, err)
	require.NoError(t, c.Validate())
	require.Equal(t, 75*time.Second, c.Scheduler.WithDefaults().ResumeAfter)
}
