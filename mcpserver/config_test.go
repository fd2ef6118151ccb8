package mcpserver_test

import (
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/api"
	"github.com/aetherium-engine/aetherium/events"
	"github.com/aetherium-engine/aetherium/internal/testdb"

	"github.com/aetherium-engine/aetherium/mcpserver"
	"github.com/aetherium-engine/aetherium/oauth"
	"github.com/aetherium-engine/aetherium/templates"
	"github.com/aetherium-engine/aetherium/toolbox"
	"github.com/aetherium-engine/aetherium/tools"
)

// hub is an events hub on the test Redis (New requires one: waiting calls are
// woken through it).
func hub(t *testing.T) *events.Hub {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: testdb.Redis(t)})
	h := events.NewHub(rdb, nil)
	t.Cleanup(func() { _ = h.Close(); _ = rdb.Close() })
	return h
}

func profile(tools ...string) mcpserver.Profile {
	return mcpserver.Profile{Node: templates.Node{Tools: tools}}
}

func TestConfigEnabledAndCheckAuth(t *testing.T) {
	t.Parallel()
	one := map[string]mcpserver.Profile{"ide": profile("read_file")}
	token := []api.Token{{Name: "a", SHA256: api.HashToken("s"), Roles: []string{api.RoleSubmit}}}
	for _, c := range []struct {
		name    string
		cfg     mcpserver.Config
		api     api.Config
		enabled bool
		authErr string
	}{
		{name: "no profiles", cfg: mcpserver.Config{Addr: mcpserver.DefaultAddr}},
		{name: "off", cfg: mcpserver.Config{Addr: mcpserver.Off, Profiles: one}},
		{name: "empty address", cfg: mcpserver.Config{Profiles: one}},
		{name: "loopback without tokens", cfg: mcpserver.Config{Addr: "127.0.0.1:8081", Profiles: one}, enabled: true},
		{name: "open without tokens", cfg: mcpserver.Config{Addr: "0.0.0.0:8081", Profiles: one}, enabled: true, authErr: "api.mcp_addr 0.0.0.0:8081 is not loopback"},
		{name: "open with tokens", cfg: mcpserver.Config{Addr: "0.0.0.0:8081", Profiles: one}, api: api.Config{Tokens: token}, enabled: true},
		{name: "open behind a proxy", cfg: mcpserver.Config{Addr: "0.0.0.0:8081", Profiles: one}, api: api.Config{InsecureNoAuth: true}, enabled: true},
		{name: "open with oauth", cfg: mcpserver.Config{Addr: "0.0.0.0:8081", Profiles: one, OAuth: oauth.Config{Issuer: "https://id.example.com"}}, enabled: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, c.enabled, c.cfg.Enabled())
			err := c.cfg.CheckAuth(c.api)
			if c.authErr == "" {
				require.NoError(t, err)
			} else {
				require.ErrorContains(t, err, c.authErr)
			}
		})
	}
}

func TestNewRefusesProfilesTheCatalogCannotServe(t *testing.T) {
	t.Parallel()
	reg, err := toolbox.New(toolbox.Deps{})
	require.NoError(t, err)
	h := hub(t)
	for _, c := range []struct {
		name    string
		p       mcpserver.Profile
		wantErr string
	}{
		{name: "a group and a tool", p: mcpserver.Profile{Node: templates.Node{MCPServers: []string{"workspace"}, Tools: []string{"todo"}}}},
		{name: "an agent's tool", p: profile("read_file", "reply"), wantErr: "mcp.profiles.ide.tools: reply is a team agent's tool"},
		{name: "the orchestration group", p: mcpserver.Profile{Node: templates.Node{MCPServers: []string{"orchestration"}}}, wantErr: "mcp.profiles.ide.mcp_servers"},
		{name: "an unknown tool", p: profile("format_disk"), wantErr: `unknown tool "format_disk"`},
		{name: "nothing", p: mcpserver.Profile{}, wantErr: "catalog would be empty"},
		// Questions alone make a catalog (an inbox), but only a fleet with a gate has any.
		{name: "questions without a gate", p: mcpserver.Profile{Questions: true}, wantErr: "mcp.profiles.ide.questions: this fleet has no permission gate"},
		{name: "a bad role", p: mcpserver.Profile{Node: templates.Node{Tools: []string{"read_file"}}, CallRole: "root"}, wantErr: `mcp.profiles.ide.call_role: unknown role "root"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := mcpserver.New(mcpserver.Config{Profiles: map[string]mcpserver.Profile{"ide": c.p}}, mcpserver.Deps{Registry: reg, Hub: h})
			if c.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, c.wantErr)
		})
	}
	t.Run("a tool this build does not register", func(t *testing.T) {
		t.Parallel()
		small := tools.NewRegistry()
		_, err := mcpserver.New(mcpserver.Config{Profiles: map[string]mcpserver.Profile{"ide": profile("read_file")}}, mcpserver.Deps{Registry: small, Hub: h})
		require.ErrorContains(t, err, "mcp.profiles.ide.tools: read_file is not registered")
	})
	t.Run("no events hub", func(t *testing.T) {
		t.Parallel()
		_, err := mcpserver.New(mcpserver.Config{Profiles: map[string]mcpserver.Profile{"ide": profile("read_file")}}, mcpserver.Deps{Registry: reg})
		require.ErrorContains(t, err, "no events hub")
	})
}

func TestConfigValidateOAuth(t *testing.T) {
	t.Parallel()
	one := map[string]mcpserver.Profile{"ide": profile("read_file")}
	good := oauth.Config{Issuer: "https://id.example.com", Resource: "https://fleet.example.com/mcp", Scopes: map[string][]string{"fleet:call": {api.RoleSubmit, api.RoleRead}}}
	for _, c := range []struct {
		name string
		addr string
		mod  func(o *oauth.Config)
		want []string
	}{
		{name: "valid", addr: "0.0.0.0:8081", mod: func(*oauth.Config) {}},
		{name: "off", addr: "0.0.0.0:8081", mod: func(o *oauth.Config) { *o = oauth.Config{} }},
		{name: "the resource defaults on loopback", addr: "127.0.0.1:8081", mod: func(o *oauth.Config) { o.Resource = "" }},
		{name: "no resource beyond loopback", addr: "0.0.0.0:8081", mod: func(o *oauth.Config) { o.Resource = "" }, want: []string{"mcp.oauth.resource: required when api.mcp_addr is not a loopback address"}},
		{name: "an unknown role", addr: "0.0.0.0:8081", mod: func(o *oauth.Config) { o.Scopes = map[string][]string{"fleet:all": {"root"}} }, want: []string{`mcp.oauth.scopes.fleet:all: unknown role "root"`}},
		{name: "the package's own checks, by key", addr: "0.0.0.0:8081", mod: func(o *oauth.Config) { o.Issuer = "http://id.example.com"; o.Scopes = nil },
			want: []string{"mcp.oauth.issuer: want https", "mcp.oauth.scopes: required"}},
		{name: "keys without an issuer", addr: "0.0.0.0:8081", mod: func(o *oauth.Config) { o.Issuer = "" }, want: []string{"mcp.oauth.issuer: required"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			o := good
			c.mod(&o)
			cfg := mcpserver.Config{Addr: c.addr, Profiles: one, OAuth: o}
			err := cfg.WithDefaults().Validate()
			if len(c.want) == 0 {
				require.NoError(t, err)
				return
			}
			for _, w := range c.want {
				require.ErrorContains(t, err, w)
			}
		})
	}
	d := mcpserver.Config{Addr: "127.0.0.1:8081", OAuth: oauth.Config{Issuer: "https://id.example.com"}}.WithDefaults()
	require.Equal(t, "http://127.0.0.1:8081/mcp", d.OAuth.Resource)
	require.Equal(t, oauth.DefaultLeeway, d.OAuth.Leeway)
}
