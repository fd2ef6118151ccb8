package studio_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/studio"
)

func TestShellsAndHeaders(t *testing.T) {
	t.Parallel()
	app := fiber.New()
	studio.Mount(app)
	const run = "0b7f1a52-6c1f-4d55-9b8f-3c0e8f6a1d2e"
	for _, tc := range []struct {
		path, page string
		code       int
		ctype      string
	}{
		{"/app", "runs", 200, "text/html"},
		{"/app/runs", "runs", 200, "text/html"},
		{"/app/runs/" + run, "run", 200, "text/html"},
		{"/app/runs/" + run + "/files", "files", 200, "text/html"},
		{"/app/inbox", "inbox", 200, "text/html"},
		{"/app/approvals", "inbox", 200, "text/html"},
		{"/app/audit", "audit", 200, "text/html"},
		{"/app/leases", "leases", 200, "text/html"},
		{"/app/tools", "tools", 200, "text/html"},
		{"/app/static/studio.js", "", 200, "text/javascript"},
		{"/app/static/studio.css", "", 200, "text/css"},
		{"/app/static/favicon.svg", "", 200, "image/svg+xml"},
		// A path the shell would echo must be a run id, nothing else.
		{"/app/runs/%22%3E%3Cscript%3Ealert(1)%3C%2Fscript%3E", "", 404, ""},
		{"/app/static/shell.html", "", 404, ""},
		{"/app/static/..%2Ftemplates%2Fshell.html", "", 404, ""},
	} {
		t.Run(tc.path, func(t *testing.T) {
			resp, err := app.Test(httptest.NewRequest("GET", tc.path, nil))
			require.NoError(t, err)
			body, _ := io.ReadAll(resp.Body)
			require.Equal(t, tc.code, resp.StatusCode, string(body))
			require.Equal(t, studio.CSP, resp.Header.Get("Content-Security-Policy"))
			require.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"))
			require.Equal(t, "DENY", resp.Header.Get("X-Frame-Options"))
			require.NotContains(t, string(body), "<script>alert")
			if tc.code != 200 {
				return
			}
			require.True(t, strings.HasPrefix(resp.Header.Get("Content-Type"), tc.ctype), resp.Header.Get("Content-Type"))
			if tc.page != "" {
				require.Contains(t, string(body), `data-page="`+tc.page+`"`)
				require.NotContains(t, string(body), "<script>", "no inline script: only <script src>")
				require.NotContains(t, string(body), "style=", "no inline style")
				// The tab's icon is the Studio's own file: no network, no data: URI
				// the CSP would have to allow.
				require.Contains(t, string(body), `<link rel="icon" type="image/svg+xml" href="/app/static/favicon.svg">`)
			}
		})
	}
	resp, err := app.Test(httptest.NewRequest("GET", "/", nil))
	require.NoError(t, err)
	require.Equal(t, http.StatusFound, resp.StatusCode)
	require.Equal(t, "/app", resp.Header.Get("Location"))
}

// The CSP is what stops a payload that reached the DOM as markup from running:
// nothing inline, nothing from elsewhere, no framing.
func TestCSPIsStrict(t *testing.T) {
	t.Parallel()
	for _, want := range []string{"default-src 'self'", "script-src 'self'", "style-src 'self'", "object-src 'none'", "frame-ancestors 'none'", "base-uri 'none'"} {
		require.Contains(t, studio.CSP, want)
	}
	for _, bad := range []string{"unsafe-inline", "unsafe-eval", "*", "data:"} {
		require.NotContains(t, studio.CSP, bad)
	}
}

// The script never turns a string into markup or code: every API string goes in
// through textContent or createTextNode.
func TestScriptBuildsNoMarkup(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("static/studio.js")
	require.NoError(t, err)
	for _, sink := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "setAttribute('on", "DOMParser", "createContextualFragment"} {
		require.NotContains(t, string(raw), sink)
	}
}
