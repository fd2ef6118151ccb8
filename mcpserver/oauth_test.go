package mcpserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/api"
	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/mcpserver"
	"github.com/aetherium-engine/aetherium/oauth"
	"github.com/aetherium-engine/aetherium/oauth/oauthtest"
	"github.com/aetherium-engine/aetherium/templates"
	"github.com/aetherium-engine/aetherium/toolbox"
)

// resource is the MCP listener's resource identifier in the OAuth tests: the
// audience its tokens carry.
const resource = "https://fleet.example.com/mcp"

var oauthScopes = map[string][]string{
	"fleet:read":    {api.RoleRead},
	"fleet:call":    {api.RoleSubmit, api.RoleRead},
	"fleet:approve": {api.RoleApprove},
}

// providers are a real OpenID provider the listener trusts and a foreign one,
// each with the clients of the tests: alice's IDE (this resource), a client
// of another resource, one whose tokens are born expired.
func providers(t *testing.T) (idp, foreign *oauthtest.Provider) {
	t.Helper()
	idp, foreign = oauthtest.Start(t), oauthtest.Start(t)
	for _, p := range []*oauthtest.Provider{idp, foreign} {
		p.AddClient(oauthtest.Client{ID: "ide", Secret: "s", Subject: "alice", Audience: []string{resource}})
		p.AddClient(oauthtest.Client{ID: "other", Secret: "s", Subject: "alice", Audience: []string{"https://other.example.com"}})
		p.AddClient(oauthtest.Client{ID: "stale", Secret: "s", Subject: "alice", Audience: []string{resource}, Lifetime: -time.Hour})
	}
	return idp, foreign
}

// initialize posts an MCP initialize request to url with bearer (none when
// empty) and returns the response, its body read.
func initialize(t *testing.T, url, bearer string) (*http.Response, string) {
	t.Helper()
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	return post(t, url, bearer, []byte(body), nil)
}

// post posts a JSON-RPC body with bearer (none when empty) and headers.
func post(t *testing.T, url, bearer string, body []byte, headers map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(b)
}

// A fleet whose MCP listener trusts an OpenID provider: the provider's tokens
// for this resource connect and act as their subject, every other token is
// refused with the status and challenge of docs/mcp.md, static tokens work
// beside, and the metadata says where to get a token.
func TestMCPOAuth(t *testing.T) {
	t.Parallel()
	idp, foreign := providers(t)
	idp.AddClient(oauthtest.Client{ID: "approver", Secret: "s", Subject: "carol", Audience: []string{resource}})
	f := fleettest.Start(t, fleettest.Options{NoWorker: true, Configure: func(c *config.Config) {
		c.API.Tokens = []api.Token{{Name: "bob", SHA256: api.HashToken(bobSecret), Roles: []string{api.RoleSubmit, api.RoleRead}}}
		c.MCP.Profiles = map[string]mcpserver.Profile{
			"inbox": {Questions: true},
			"ide":   {Node: templates.Node{Tools: []string{"read_file"}}},
		}
		c.MCP.OAuth = oauth.Config{Issuer: idp.Issuer, Resource: resource, Scopes: oauthScopes}
	}})
	endpoint := f.MCPURL + "/mcp/ide"
	metadataURL := "https://fleet.example.com/.well-known/oauth-protected-resource/mcp/ide"

	t.Run("refusals", func(t *testing.T) {
		t.Parallel()
		for _, c := range []struct {
			name       string
			token      func(t *testing.T) string
			status     int
			challenge  string // exact
			challenges []string
		}{
			{name: "no token", token: func(*testing.T) string { return "" }, status: http.StatusUnauthorized,
				challenge: `Bearer resource_metadata="` + metadataURL + `", scope="fleet:call fleet:read"`},
			{name: "another resource's token", token: func(t *testing.T) string { return idp.Token(t, "other", "fleet:call") }, status: http.StatusUnauthorized,
				challenges: []string{`Bearer error="invalid_token", error_description="invalid token: wrong audience`, `resource_metadata="` + metadataURL + `"`}},
			{name: "an expired token", token: func(t *testing.T) string { return idp.Token(t, "stale", "fleet:call") }, status: http.StatusUnauthorized,
				challenges: []string{`Bearer error="invalid_token", error_description="invalid token: expired`, `resource_metadata="` + metadataURL + `"`}},
			{name: "a foreign provider's token", token: func(t *testing.T) string { return foreign.Token(t, "ide", "fleet:call") }, status: http.StatusUnauthorized,
				challenges: []string{`Bearer error="invalid_token", error_description="invalid token: foreign issuer`, `resource_metadata="` + metadataURL + `"`}},
			{name: "an unknown static token", token: func(*testing.T) string { return "not-a-token" }, status: http.StatusUnauthorized,
				challenges: []string{`Bearer error="invalid_token", error_description="invalid token: malformed`}},
			{name: "scopes granting neither the list nor the call role", token: func(t *testing.T) string { return idp.Token(t, "approver", "fleet:approve") },
				status: http.StatusForbidden, challenge: `Bearer error="insufficient_scope", scope="fleet:call fleet:read", resource_metadata="` + metadataURL + `"`},
		} {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				resp, body := initialize(t, endpoint, c.token(t))
				require.Equal(t, c.status, resp.StatusCode, body)
				got := resp.Header.Get("WWW-Authenticate")
				if c.challenge != "" {
					require.Equal(t, c.challenge, got)
				}
				for _, want := range c.challenges {
					require.Contains(t, got, want)
				}
			})
		}
	})

	t.Run("the provider's token connects and lists", func(t *testing.T) {
		t.Parallel()
		for _, token := range []string{idp.Token(t, "ide", "fleet:read"), idp.Token(t, "ide", "fleet:call")} {
			cs := connectURL(t, endpoint, token)
			tools, err := cs.ListTools(context.Background(), nil)
			require.NoError(t, err)
			require.Len(t, tools.Tools, 1)
			require.Equal(t, "read_file", tools.Tools[0].Name)
		}
	})

	t.Run("a static token works beside", func(t *testing.T) {
		t.Parallel()
		resp, body := initialize(t, endpoint, bobSecret)
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		cs := connectURL(t, endpoint, bobSecret)
		_, err := cs.ListTools(context.Background(), nil)
		require.NoError(t, err)
	})

	t.Run("the token's subject is the principal", func(t *testing.T) {
		t.Parallel()
		aliceRun, bobRun := ownRun(t, f, "alice"), ownRun(t, f, "bob")
		mine := ask(t, f, aliceRun, "o1", "Which port?", []string{"8080", "9090"}, false)
		ask(t, f, bobRun, "o2", "Ship it?", []string{"yes", "no"}, false)
		token := idp.Token(t, "ide", "fleet:call")
		alice := connectURL(t, f.MCPURL+"/mcp/inbox", token)
		require.Equal(t, []string{mine}, pending(t, alice, nil), "alice sees her run's question only")
		// The 2026-07-28 generation reads the same TokenInfo.
		resp, body := modern(t, f.MCPURL+"/mcp/inbox", token, "tools/call", mcpserver.ToolPendingQuestions)
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		require.Contains(t, body, mine)
		require.NotContains(t, body, "Ship it?")
		text, isErr := callTool(t, alice, mcpserver.ToolAnswerQuestion, map[string]any{"approval_id": mine, "answer": "8080"})
		require.False(t, isErr, text)
		a, err := f.Store.GetApproval(context.Background(), mine)
		require.NoError(t, err)
		require.Contains(t, a.DecidedBy, "alice")
	})

	t.Run("metadata", func(t *testing.T) {
		t.Parallel()
		for _, path := range []string{"/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp/ide", "/.well-known/oauth-protected-resource/mcp/inbox"} {
			resp, err := http.Get(f.MCPURL + path)
			require.NoError(t, err)
			var doc map[string]any
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&doc), path)
			_ = resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode, path)
			require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			require.Equal(t, map[string]any{
				"resource": resource, "authorization_servers": []any{idp.Issuer},
				"scopes_supported":         []any{"fleet:approve", "fleet:call", "fleet:read"},
				"bearer_methods_supported": []any{"header"}, "resource_name": oauth.ResourceName,
			}, doc, path)
		}
		resp, err := http.Get(f.MCPURL + "/.well-known/oauth-protected-resource/mcp/nope")
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusNotFound, resp.StatusCode)
	})
}

// modern posts a 2026-07-28 request (stateless: no session) of method on
// tool name with bearer.
func modern(t *testing.T, url, bearer, method, name string) (*http.Response, string) {
	t.Helper()
	meta := map[string]any{"io.modelcontextprotocol/protocolVersion": mcpserver.Version20260728, "io.modelcontextprotocol/clientCapabilities": map[string]any{}}
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": map[string]any{"name": name, "arguments": map[string]any{}, "_meta": meta}})
	require.NoError(t, err)
	return post(t, url, bearer, body, map[string]string{"Mcp-Protocol-Version": mcpserver.Version20260728, "Mcp-Method": method, "Mcp-Name": name})
}

// connectURL opens an MCP session with the SDK's client and a bearer token.
func connectURL(t *testing.T, endpoint, token string) *mcp.ClientSession {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "aetherium-test", Version: "1"}, nil)
	cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{
		Endpoint: endpoint, HTTPClient: &http.Client{Transport: bearer{token, http.DefaultTransport}}, MaxRetries: 1,
	}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// With OAuth and no api.tokens, the listener is no longer the open loopback
// one of a single local principal: a request needs a token all the same. The
// lightest real server: mcpserver.New on the catalog, no fleet.
func TestMCPOAuthWithoutStaticTokens(t *testing.T) {
	t.Parallel()
	idp, _ := providers(t)
	reg, err := toolbox.New(toolbox.Deps{})
	require.NoError(t, err)
	srv, err := mcpserver.New(mcpserver.Config{
		Addr:     "127.0.0.1:8081",
		Profiles: map[string]mcpserver.Profile{"ide": profile("read_file")},
		OAuth:    oauth.Config{Issuer: idp.Issuer, Scopes: oauthScopes},
	}, mcpserver.Deps{Registry: reg, Hub: hub(t)})
	require.NoError(t, err)
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)

	// The resource defaults to the loopback listener's URL.
	const derived = "http://127.0.0.1:8081/mcp"
	resp, body := initialize(t, ts.URL+"/mcp", "")
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, body)
	require.Equal(t, `Bearer resource_metadata="http://127.0.0.1:8081/.well-known/oauth-protected-resource/mcp", scope="fleet:call fleet:read"`,
		resp.Header.Get("WWW-Authenticate"))

	resp, body = initialize(t, ts.URL+"/mcp", idp.Token(t, "ide", "fleet:read"))
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "audience %s is not %s: %s", resource, derived, body)

	idp.AddClient(oauthtest.Client{ID: "local", Secret: "s", Subject: "dave", Audience: []string{derived}})
	cs := connectURL(t, ts.URL+"/mcp/ide", idp.Token(t, "local", "fleet:read"))
	tools, err := cs.ListTools(context.Background(), nil)
	require.NoError(t, err)
	require.Len(t, tools.Tools, 1)
	resp, err = http.Get(ts.URL + "/.well-known/oauth-protected-resource/mcp")
	require.NoError(t, err)
	var doc oauth.Metadata
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&doc))
	_ = resp.Body.Close()
	require.Equal(t, derived, doc.Resource)
	require.True(t, strings.HasPrefix(idp.Issuer, "http://127.0.0.1:"))
}
