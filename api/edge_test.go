package api_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/api"
	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/store"
)

// The API without tokens (a developer's loopback API) is what a web page the
// developer visits can reach: these tests send what a browser sends for a
// cross-site page and for a DNS-rebinding one, through the real Fiber app.

// edgeFleet is a fleet without tokens: the configuration an attacker's page
// would meet on a developer's machine.
func edgeFleet(t *testing.T) *fleettest.Fleet {
	t.Helper()
	return fleettest.Start(t, fleettest.Options{NoWorker: true, Configure: func(c *config.Config) {
		c.API.AllowedHosts = []string{"fleet.internal", "*.studio.example"}
		c.API.AllowedOrigins = []string{"https://console.example"}
	}})
}

// send is one request to the API app as host (the Host header) with the given
// headers; it returns the status and the body.
func send(t *testing.T, f *fleettest.Fleet, method, host, path string, header map[string]string, body string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, "http://"+apiHost+path, rd)
	req.Host = host // what the browser sends: the name in its address bar
	// and an origin-form request line, as a browser sends to a server (not a
	// proxy): with httptest's absolute one, fasthttp takes the host from it.
	req.RequestURI = ""
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := f.API.App.Test(req, 10_000)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(raw)
}

const apiHost = "127.0.0.1:8080"

var submitBody = `{"template":"demo","prompt":"x","variables":{"topic":"t"}}`

func runCount(t *testing.T, f *fleettest.Fleet) int {
	t.Helper()
	runs, err := f.Store.ListRuns(context.Background(), "", 100, "")
	require.NoError(t, err)
	return len(runs)
}

func TestCrossSiteSubmitIsRefused(t *testing.T) {
	t.Parallel()
	f := edgeFleet(t)
	cases := []struct {
		name   string
		header map[string]string
		code   int
		errHas string
	}{
		// An HTML form or a no-cors fetch: a "simple" request no preflight stops.
		{"text/plain from another site", map[string]string{"Content-Type": "text/plain", "Origin": "http://evil.example"}, 403, "cross-origin"},
		{"form from another site", map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}, 403, "cross-origin"},
		{"JSON with a cross-site fetch header", map[string]string{"Content-Type": "application/json", "Sec-Fetch-Site": "cross-site"}, 403, "cross-origin"},
		{"JSON from a same-site other port", map[string]string{"Content-Type": "application/json", "Sec-Fetch-Site": "same-site", "Origin": "http://127.0.0.1:3000"}, 403, "cross-origin"},
		{"JSON from an opaque origin", map[string]string{"Content-Type": "application/json", "Origin": "null"}, 403, "cross-origin"},
		{"JSON from another port without fetch metadata", map[string]string{"Content-Type": "application/json", "Origin": "http://127.0.0.1:3000"}, 403, "cross-origin"},
		// Not a browser (curl, the CLI): no Origin, but not JSON either.
		{"text/plain without an origin", map[string]string{"Content-Type": "text/plain"}, 415, "application/json"},
		{"form without an origin", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, 415, "application/json"},
		{"multipart without an origin", map[string]string{"Content-Type": "multipart/form-data; boundary=x"}, 415, "application/json"},
		{"no content type", nil, 415, "application/json"},
		{"json-looking type", map[string]string{"Content-Type": "text/json"}, 415, "application/json"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			payload := submitBody
			if strings.HasPrefix(tc.header["Content-Type"], "multipart/") {
				// A well-formed form (fasthttp refuses a malformed one itself).
				payload = "--x\r\nContent-Disposition: form-data; name=\"prompt\"\r\n\r\nx\r\n--x--\r\n"
			}
			code, body := send(t, f, "POST", apiHost, "/api/orchestrator/run-from-template", tc.header, payload)
			require.Equal(t, tc.code, code, body)
			require.Contains(t, body, tc.errHas)
		})
	}
	require.Zero(t, runCount(t, f), "a refused request stored a run")

	allowed := []struct {
		name   string
		header map[string]string
	}{
		{"same origin", map[string]string{"Content-Type": "application/json", "Origin": "http://" + apiHost, "Sec-Fetch-Site": "same-origin"}},
		{"same origin, old browser", map[string]string{"Content-Type": "application/json; charset=utf-8", "Origin": "http://" + apiHost}},
		{"typed in the address bar", map[string]string{"Content-Type": "application/json", "Sec-Fetch-Site": "none"}},
		{"configured origin", map[string]string{"Content-Type": "application/json", "Origin": "https://console.example", "Sec-Fetch-Site": "cross-site"}},
		{"CLI or curl", map[string]string{"Content-Type": "application/json"}},
	}
	for _, tc := range allowed {
		t.Run(tc.name, func(t *testing.T) {
			code, body := send(t, f, "POST", apiHost, "/api/orchestrator/run-from-template", tc.header, submitBody)
			require.Equal(t, http.StatusAccepted, code, body)
		})
	}
	require.Equal(t, len(allowed), runCount(t, f))
}

func TestCrossSiteDecisionsAndDeletesAreRefused(t *testing.T) {
	t.Parallel()
	f := edgeFleet(t)
	ctx := context.Background()
	run := f.Submit("demo", "x", map[string]any{"topic": "t"})
	a, _, err := f.Store.RequestApproval(ctx, store.Approval{
		ID: "apr_edge" + strings.ReplaceAll(run, "-", "")[:16], RunID: run, SessionID: queue.SupervisorSession(run).String(), CallID: "call-1",
		Agent: "lead", Tool: "run_shell", Tier: "restricted", Why: "rm -rf /", Args: json.RawMessage(`{"command":"rm -rf /"}`),
	}, time.Hour)
	require.NoError(t, err)
	code, raw := f.Do("POST", "/api/projects", map[string]any{"slug": "site", "name": "site"}, nil)
	require.Equal(t, http.StatusCreated, code, string(raw))
	var mem struct {
		ID int64 `json:"id"`
	}
	code, raw = f.Do("POST", "/api/projects/site/memory", map[string]any{"content": "keep me"}, &mem)
	require.Equal(t, http.StatusCreated, code, string(raw))

	evil := map[string]string{"Content-Type": "application/json", "Origin": "http://evil.example"}
	evilFetch := map[string]string{"Content-Type": "application/json", "Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}
	plain := map[string]string{"Content-Type": "text/plain", "Origin": "http://evil.example"}
	cases := []struct {
		name, method, path string
		header             map[string]string
		body               string
	}{
		{"approve, JSON", "POST", "/api/approvals/" + a.ID + "/approve", evil, `{"reason":"ok"}`},
		{"approve, fetch metadata", "POST", "/api/approvals/" + a.ID + "/approve", evilFetch, `{"reason":"ok"}`},
		{"approve, text/plain", "POST", "/api/approvals/" + a.ID + "/approve", plain, `{"reason":"ok"}`},
		{"approve, no body", "POST", "/api/approvals/" + a.ID + "/approve", map[string]string{"Origin": "http://evil.example"}, ""},
		{"deny", "POST", "/api/approvals/" + a.ID + "/deny", evil, `{"reason":"no"}`},
		{"cancel", "POST", "/api/runs/" + run + "/cancel", evilFetch, ""},
		{"delete project", "DELETE", "/api/projects/site?confirm=site", evil, ""},
		{"delete memory", "DELETE", "/api/projects/site/memory/" + jsonInt(mem.ID), evilFetch, ""},
		{"asynqmon", "POST", "/monitoring/api/queues/workers:pause", evil, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, body := send(t, f, tc.method, apiHost, tc.path, tc.header, tc.body)
			require.Equal(t, http.StatusForbidden, code, body)
			require.Contains(t, body, "cross-origin")
		})
	}
	got, err := f.Store.GetApproval(ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, "pending", got.Status)
	require.Equal(t, "queued", f.GetRun(run).Status)
	code, _ = f.Do("GET", "/api/projects/site", nil, nil)
	require.Equal(t, http.StatusOK, code)
	var memories struct {
		Memory []json.RawMessage `json:"memory"`
	}
	code, raw = f.Do("GET", "/api/projects/site/memory", nil, &memories)
	require.Equal(t, http.StatusOK, code, string(raw))
	require.Len(t, memories.Memory, 1, string(raw))

	// The same decision from the API's own page (the Studio) goes through.
	code, body := send(t, f, "POST", apiHost, "/api/approvals/"+a.ID+"/deny",
		map[string]string{"Content-Type": "application/json", "Origin": "http://" + apiHost, "Sec-Fetch-Site": "same-origin"}, `{"reason":"no"}`)
	require.Equal(t, http.StatusOK, code, body)
	// A DELETE without a body needs no content type (curl -X DELETE); one with a body does.
	code, body = send(t, f, "DELETE", apiHost, "/api/projects/site/memory/"+jsonInt(mem.ID), map[string]string{"Content-Type": "text/plain"}, "x")
	require.Equal(t, http.StatusUnsupportedMediaType, code, body)
	code, body = send(t, f, "DELETE", apiHost, "/api/projects/site/memory/"+jsonInt(mem.ID), nil, "")
	require.Equal(t, http.StatusNoContent, code, body)
}

func jsonInt(n int64) string { b, _ := json.Marshal(n); return string(b) }

func TestForeignHostIsRefused(t *testing.T) {
	t.Parallel()
	f := edgeFleet(t)
	refused := []string{
		"evil.example:8080", "evil.example", "127.0.0.1.evil.example:8080", "localhost.evil.example",
		"localhost@evil.example" /* sent with an empty Host */, "fleet.internal.evil.example", "studio.example", "[::1", "xn--lcalhost-9za:8080",
		"localhost:http", "[fe80::1%eth0]:8080",
	}
	for _, host := range refused {
		for _, path := range []string{"/api/runs", "/api/approvals", "/api/openapi.json", "/app", "/monitoring/"} {
			t.Run(host+path, func(t *testing.T) {
				code, body := send(t, f, "GET", host, path, nil, "")
				require.Contains(t, []int{http.StatusForbidden, http.StatusBadRequest}, code, body)
				require.NotContains(t, body, `"runs"`)
			})
		}
	}
	// A refused Host cannot reach a mutation either.
	code, body := send(t, f, "POST", "evil.example:8080", "/api/orchestrator/run-from-template",
		map[string]string{"Content-Type": "application/json", "Origin": "http://evil.example:8080", "Sec-Fetch-Site": "same-origin"}, submitBody)
	require.Equal(t, http.StatusForbidden, code, body)
	require.Zero(t, runCount(t, f))

	allowed := []string{
		"127.0.0.1:8080", "127.0.0.1", "127.0.0.2:9000", "localhost:8080", "LOCALHOST", "localhost.:8080",
		"[::1]:8080", "[::1]", "[0:0:0:0:0:0:0:1]:80", "[::ffff:127.0.0.1]:8080",
		// An IP literal cannot be rebound: a page at http://10.1.2.3 is that address's own.
		"10.1.2.3:8080", "[2001:db8::1]:8080",
		// Configured names, any port; a wildcard covers subdomains only.
		"fleet.internal", "FLEET.internal:443", "a.studio.example", "b.a.studio.example:8443",
	}
	for _, host := range allowed {
		t.Run("allowed "+host, func(t *testing.T) {
			code, body := send(t, f, "GET", host, "/api/runs", nil, "")
			require.Equal(t, http.StatusOK, code, body)
		})
	}
	// Probes reach health and readiness by whatever name or address they use.
	for _, path := range []string{"/healthz", "/readyz"} {
		code, body := send(t, f, "GET", "api:8080", path, nil, "")
		require.Equal(t, http.StatusOK, code, body)
	}
}

// /metrics on the API listener tells how busy every tenant is (runs, tools,
// approvals): with tokens it needs the metrics role (admin holds it).
func TestMetricsNeedAToken(t *testing.T) {
	t.Parallel()
	f := fleettest.Start(t, fleettest.Options{NoWorker: true, Configure: func(c *config.Config) {
		c.API.Tokens = []api.Token{
			{Name: "alice", SHA256: api.HashToken("alice-secret"), Roles: []string{api.RoleSubmit, api.RoleRead, api.RoleReadAll}},
			{Name: "scraper", SHA256: api.HashToken("scraper-secret"), Roles: []string{api.RoleMetrics}},
			{Name: "root", SHA256: api.HashToken("root-secret"), Roles: []string{api.RoleAdmin}},
		}
	}})
	cases := []struct {
		name, path, auth string
		code             int
	}{
		{"no token", "/metrics", "", http.StatusUnauthorized},
		{"wrong token", "/metrics", "Bearer nope", http.StatusUnauthorized},
		{"a token without the metrics role", "/metrics", "Bearer alice-secret", http.StatusForbidden},
		{"the metrics role", "/metrics", "Bearer scraper-secret", http.StatusOK},
		{"admin", "/metrics", "Bearer root-secret", http.StatusOK},
		{"the metrics role reads nothing else", "/api/runs", "Bearer scraper-secret", http.StatusForbidden},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := map[string]string{}
			if tc.auth != "" {
				h["Authorization"] = tc.auth
			}
			code, body := send(t, f, "GET", apiHost, tc.path, h, "")
			require.Equal(t, tc.code, code, body)
			if tc.path == "/metrics" && tc.code == http.StatusOK {
				require.Contains(t, body, "aetherium_")
			} else {
				require.NotContains(t, body, "aetherium_")
			}
		})
	}
}
