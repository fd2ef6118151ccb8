package api_test

import (
	"encoding/base64"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/api"
	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/fleettest"
)

// sessionKey is the monitoring key the test's API processes share.
const sessionKey = "0123456789abcdef0123456789abcdef-shared"

// mintCookie signs root in on base and returns the cookie's value and its
// Set-Cookie header.
func mintCookie(t *testing.T, f *fleettest.Fleet, base string, hdr map[string]string) (string, string) {
	t.Helper()
	code, h, raw := request(t, f, base, "root", "POST", api.MonitoringSessionPath, nil, hdr)
	require.Equal(t, http.StatusNoContent, code, string(raw))
	set := h.Get("Set-Cookie")
	resp := http.Response{Header: h}
	for _, c := range resp.Cookies() {
		if c.Name == api.MonitoringCookie {
			return c.Value, set
		}
	}
	t.Fatalf("no %s cookie in %q", api.MonitoringCookie, set)
	return "", ""
}

func withCookie(value string, more ...string) map[string]string {
	h := map[string]string{"Cookie": api.MonitoringCookie + "=" + value}
	for i := 0; i+1 < len(more); i += 2 {
		h[more[i]] = more[i+1]
	}
	return h
}

// asynqmon in a browser: the admin's bearer token buys a cookie that opens
// /monitoring and nothing else; it stops working when it expires, when its
// token is revoked or demoted, on a process with another key, when tampered
// with; a change it carries must come from the API's own origin.
func TestMonitoringSession(t *testing.T) {
	t.Parallel()
	tokens := map[string][]string{"root": {api.RoleAdmin}, "alice": {api.RoleSubmit, api.RoleRead}}
	f := fleettest.Start(t, fleettest.Options{NoWorker: true, Configure: func(c *config.Config) {
		tokensOf(c, tokens)
		c.API.MonitoringSessionKey = sessionKey
	}})
	cookie, set := mintCookie(t, f, f.URL, nil)
	for _, attr := range []string{"path=/monitoring", "httponly", "samesite=strict", "max-age=600"} {
		require.Contains(t, strings.ToLower(set), attr) // attribute names are case-insensitive
	}
	require.NotContains(t, strings.ToLower(set), "secure", "plain HTTP")
	_, tls := mintCookie(t, f, f.URL, map[string]string{"X-Forwarded-Proto": "https"})
	require.Contains(t, strings.ToLower(tls), "secure", "over TLS (a proxy's)")

	// Other API processes of the fleet: one as configured (the shared key), one
	// with another key, one where root's token was revoked, one where root was
	// demoted, one whose cookies last a second.
	same := f.StartAPIWith(nil)
	otherKey := f.StartAPIWith(func(c *config.Config) { c.API.MonitoringSessionKey = strings.Repeat("k", 32) })
	revoked := f.StartAPIWith(func(c *config.Config) {
		tokensOf(c, map[string][]string{"alice": tokens["alice"]})
	})
	demoted := f.StartAPIWith(func(c *config.Config) {
		tokensOf(c, map[string][]string{"root": {api.RoleRead}, "alice": tokens["alice"]})
	})
	rotated := f.StartAPIWith(func(c *config.Config) {
		tokensOf(c, map[string][]string{"alice": tokens["alice"]})
		c.API.Tokens = append(c.API.Tokens, api.Token{Name: "root", SHA256: api.HashToken("root-new-secret"), Roles: []string{api.RoleAdmin}})
	})
	short := f.StartAPIWith(func(c *config.Config) { c.API.MonitoringSessionTTL = time.Second })
	shortCookie, _ := mintCookie(t, f, short.URL, nil)

	payload, sig, _ := strings.Cut(cookie, ".")
	forged := base64.RawURLEncoding.EncodeToString([]byte(`{"p":"root","exp":9999999999}`)) + "." + sig
	random := base64.RawURLEncoding.EncodeToString([]byte(`{"p":"root","exp":9999999999}`)) + "." + base64.RawURLEncoding.EncodeToString(make([]byte, 32))
	noSig := payload

	time.Sleep(2 * time.Second) // shortCookie expires
	cases := []struct {
		name, base, token, method, path string
		hdr                             map[string]string
		code                            int
		errHas                          string
	}{
		{name: "no cookie, no token", base: f.URL, method: "GET", path: "/monitoring/", code: 401, errHas: api.MonitoringSessionPath},
		{name: "the cookie opens asynqmon", base: f.URL, method: "GET", path: "/monitoring/", hdr: withCookie(cookie), code: 200},
		{name: "and its API", base: f.URL, method: "GET", path: "/monitoring/api/queues", hdr: withCookie(cookie), code: 200},
		{name: "on another process with the shared key", base: same.URL, method: "GET", path: "/monitoring/", hdr: withCookie(cookie), code: 200},
		{name: "the bearer token still opens it", base: f.URL, token: "root", method: "GET", path: "/monitoring/", code: 200},
		{name: "a non-admin's bearer token does not", base: f.URL, token: "alice", method: "GET", path: "/monitoring/", code: 403},
		{name: "a non-admin cannot mint a cookie", base: f.URL, token: "alice", method: "POST", path: api.MonitoringSessionPath, code: 403},
		{name: "nor can nobody", base: f.URL, method: "POST", path: api.MonitoringSessionPath, code: 401},
		{name: "expired", base: short.URL, method: "GET", path: "/monitoring/", hdr: withCookie(shortCookie), code: 401, errHas: "expired"},
		{name: "forged payload", base: f.URL, method: "GET", path: "/monitoring/", hdr: withCookie(forged), code: 401, errHas: "not valid"},
		{name: "a made-up signature", base: f.URL, method: "GET", path: "/monitoring/", hdr: withCookie(random), code: 401},
		{name: "no signature", base: f.URL, method: "GET", path: "/monitoring/", hdr: withCookie(noSig), code: 401},
		{name: "garbage", base: f.URL, method: "GET", path: "/monitoring/", hdr: withCookie("%%%"), code: 401},
		{name: "another key", base: otherKey.URL, method: "GET", path: "/monitoring/", hdr: withCookie(cookie), code: 401, errHas: "not valid"},
		{name: "revoked token", base: revoked.URL, method: "GET", path: "/monitoring/", hdr: withCookie(cookie), code: 401},
		{name: "rotated secret", base: rotated.URL, method: "GET", path: "/monitoring/", hdr: withCookie(cookie), code: 401},
		{name: "demoted to read", base: demoted.URL, method: "GET", path: "/monitoring/", hdr: withCookie(cookie), code: 401, errHas: "no longer holds role admin"},
		// Changes: the edge refuses a foreign Origin for everyone; the cookie
		// also needs a positive same-origin sign (a request with neither header
		// passes the edge as a non-browser client, but then it has no cookie
		// business: such a client sends the bearer token).
		{name: "cross-site POST with the cookie", base: f.URL, method: "POST", path: "/monitoring/api/queues/default:pause",
			hdr: withCookie(cookie, "Origin", "http://evil.example"), code: 403},
		{name: "cross-site fetch metadata", base: f.URL, method: "POST", path: "/monitoring/api/queues/default:pause",
			hdr: withCookie(cookie, "Sec-Fetch-Site", "cross-site"), code: 403},
		{name: "POST with the cookie and no origin", base: f.URL, method: "POST", path: "/monitoring/api/queues/default:pause",
			hdr: withCookie(cookie), code: 403, errHas: "with the monitoring cookie must come from"},
		{name: "DELETE with the cookie and no origin", base: f.URL, method: "DELETE", path: "/monitoring/api/queues/default",
			hdr: withCookie(cookie), code: 403, errHas: "with the monitoring cookie must come from"},
		// Never on /api: every /api route reads the bearer token alone.
		{name: "no cookie on an /api read", base: f.URL, method: "GET", path: "/api/runs", hdr: withCookie(cookie), code: 401, errHas: "missing bearer token"},
		{name: "no cookie on the fleet page", base: f.URL, method: "GET", path: "/api/fleet", hdr: withCookie(cookie), code: 401},
		{name: "no cookie on a same-origin submit", base: f.URL, method: "POST", path: "/api/orchestrator/run-from-template",
			hdr: withCookie(cookie, "Sec-Fetch-Site", "same-origin"), code: 401},
		{name: "no cookie on minting a cookie", base: f.URL, method: "POST", path: api.MonitoringSessionPath,
			hdr: withCookie(cookie, "Sec-Fetch-Site", "same-origin"), code: 401},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, _, raw := request(t, f, tc.base, tc.token, tc.method, tc.path, nil, tc.hdr)
			require.Equal(t, tc.code, code, string(raw))
			require.Contains(t, string(raw), tc.errHas)
		})
	}

	// A same-origin change with the cookie passes the sign-in: asynqmon,
	// read-only, answers for itself (not our 401 or 403).
	for _, hdr := range []map[string]string{
		withCookie(cookie, "Sec-Fetch-Site", "same-origin"),
		withCookie(cookie, "Origin", f.URL),
	} {
		code, _, raw := request(t, f, f.URL, "", "POST", "/monitoring/api/queues/default:pause", nil, hdr)
		require.NotContains(t, []int{401, 403}, code, string(raw))
	}

	// Sign-out: the browser is told to drop the cookie.
	code, h, raw := request(t, f, f.URL, "root", "DELETE", api.MonitoringSessionPath, nil, nil)
	require.Equal(t, http.StatusNoContent, code, string(raw))
	resp := http.Response{Header: h}
	cleared := resp.Cookies()
	require.Len(t, cleared, 1)
	require.Equal(t, api.MonitoringCookie, cleared[0].Name)
	require.Equal(t, "/monitoring", cleared[0].Path)
	require.Empty(t, cleared[0].Value)
	require.True(t, cleared[0].Expires.Before(time.Now()), "expired: %v", cleared[0].Expires)
}
