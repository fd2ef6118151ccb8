package research_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/egress"
	"github.com/aetherium-engine/aetherium/sandbox"
	"github.com/aetherium-engine/aetherium/sandbox/sandboxtest"
	"github.com/aetherium-engine/aetherium/toolbox"
	"github.com/aetherium-engine/aetherium/toolbox/quality"
	"github.com/aetherium-engine/aetherium/toolbox/research"
	"github.com/aetherium-engine/aetherium/tools"
)

// The fixture app a worker would start in its sandbox: a healthy page whose
// heading is rendered late by its script (after a fetch of its API), and a
// broken page that throws, logs console.error, loads a missing image and a
// script from a CGI that answers 500, and renders no heading.
var webCheckSite = map[string]string{
	"index.html": `<!doctype html><html><head><title>Fleet</title><script src="app.js"></script></head><body><div id="app"></div></body></html>`,
	"app.js": `window.addEventListener('load', () => { fetch('/api/users.json').then((r) => r.json()).then((users) => {
  setTimeout(() => { document.getElementById('app').innerHTML = '<h1 class="title">Hello Fleet</h1><ul>' + users.map((u) => '<li>' + u.name + '</li>').join('') + '</ul>'; }, 300);
}); });`,
	"api/users.json": `[{"id":1,"name":"Ada"},{"id":2,"name":"Lin"}]`,
	"broken.html": `<!doctype html><html><head><script>console.error('config missing'); window.addEventListener('load', () => { undefinedFunction(); });</script>
<script src="/cgi-bin/fail"></script></head><body><p>Broken</p><img src="/missing.png"></body></html>`,
	"cgi-bin/fail": "#!/bin/sh\nprintf 'Status: 500 Internal Server Error\\r\\nContent-Type: text/plain\\r\\n\\r\\noops\\n'\n",
}

// validate_web_app's browser checks on real Chromium, through the toolbox's
// wiring: the run's app (busybox httpd started in its sandbox, as run_shell
// would) is loaded at http://localhost:8000 inside the sandbox; the healthy
// page passes every check, each planted failure of the broken page is
// reported with its evidence, and a 500 path fails its status check.
func TestValidateWebAppBrowserChecks(t *testing.T) {
	t.Parallel()
	e := newCaptureEnv(t, research.Config{CaptureTimeout: 60 * time.Second, CaptureIdleTimeout: 4 * time.Second})
	ctx := context.Background()
	run, ws := sandboxtest.Project(), sandboxtest.Workspace(t)
	for name, body := range webCheckSite {
		p := filepath.Join(ws, "site", filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o777))
		mode := os.FileMode(0o644)
		if filepath.Base(filepath.Dir(p)) == "cgi-bin" {
			mode = 0o755
		}
		require.NoError(t, os.WriteFile(p, []byte(body), mode))
	}
	require.NoError(t, os.WriteFile(filepath.Join(ws, "httpd.conf"), []byte(".json:application/json\n.js:text/javascript\n"), 0o644))
	require.NoError(t, os.Chmod(ws, 0o777))
	res, err := e.d.Exec(ctx, sandbox.Request{Project: run, Workspace: ws, Command: "httpd -p 127.0.0.1:8000 -h /workspace/site -c /workspace/httpd.conf"})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode, res.Output)

	reg, err := toolbox.New(toolbox.Deps{Executor: e.d, Egress: egress.NewEgress(egress.EgressConfig{Timeout: 10 * time.Second}),
		Research: research.Config{CaptureTimeout: 60 * time.Second, CaptureIdleTimeout: 4 * time.Second, CaptureImage: e.image}})
	require.NoError(t, err)
	router := tools.NewRouter(reg)
	validate := func(checks ...map[string]any) quality.WebAppReport {
		t.Helper()
		raw, _ := json.Marshal(map[string]any{"url": "http://localhost:8000", "checks": checks})
		sctx, sCaller := ctx, &tools.Session{RunID: run, SessionID: "s", Agent: "qa", Workspace: ws,
			Access: tools.Access{Tools: []string{"validate_web_app"}}, AllowedDomains: []string{"fixture.test"}}
		out, err := router.Dispatch(sctx, tools.Call{Session: sCaller, ID: "c", Name: "validate_web_app", Args: raw})
		require.NoError(t, err)
		var rep quality.WebAppReport
		require.NoError(t, json.NewDecoder(strings.NewReader(out.Content)).Decode(&rep), out.Content)
		return rep
	}
	decodeRows := func(rep quality.WebAppReport) map[string]quality.WebCheckRow {
		rows := map[string]quality.WebCheckRow{}
		for _, r := range rep.Rows {
			if _, dup := rows[r.Check+" "+r.Path]; !dup {
				rows[r.Check+" "+r.Path] = r
			}
		}
		return rows
	}

	healthy := validate(
		map[string]any{"type": "selector", "path": "/index.html", "selector": "h1.title"},
		map[string]any{"type": "text", "path": "/index.html", "text": "Hello Fleet"},
		map[string]any{"type": "text", "path": "/index.html", "text": "Lin"},
		map[string]any{"type": "no_console_errors", "path": "/index.html"},
		map[string]any{"type": "no_failed_requests", "path": "/index.html"},
		map[string]any{"type": "status", "path": "/index.html", "content_type": "text/html"},
	)
	out, _ := json.MarshalIndent(healthy, "", " ")
	require.True(t, healthy.Passed, "%s", out)
	require.Equal(t, quality.ViaSandbox, healthy.Via)
	require.Contains(t, decodeRows(healthy)["selector /index.html"].Evidence, "1 element(s) match")

	broken := validate(
		map[string]any{"type": "selector", "path": "/broken.html", "selector": "h1.title", "wait_ms": 500},
		map[string]any{"type": "selector", "path": "/broken.html", "selector": "p:::bad"},
		map[string]any{"type": "text", "path": "/broken.html", "text": "Hello Fleet", "wait_ms": 200},
		map[string]any{"type": "no_console_errors", "path": "/broken.html"},
		map[string]any{"type": "no_failed_requests", "path": "/broken.html"},
		map[string]any{"type": "status", "path": "/cgi-bin/fail"},
		map[string]any{"type": "selector", "path": "/nothing-here.html", "selector": "body"},
	)
	out, _ = json.MarshalIndent(broken, "", " ")
	t.Logf("broken: %s", out)
	require.False(t, broken.Passed)
	rows := decodeRows(broken)
	for key, want := range map[string][]string{
		"selector /broken.html":           {`no element matches "h1.title"`},
		"text /broken.html":               {`does not contain "Hello Fleet"`},
		"no_console_errors /broken.html":  {"console.error: config missing", "undefinedFunction"},
		"no_failed_requests /broken.html": {"/missing.png → HTTP 404", "/cgi-bin/fail → HTTP 500"},
		"status /cgi-bin/fail":            {"status 500, want 200"},
		"selector /nothing-here.html":     {"page /nothing-here.html → 404: the page answered an error status"},
	} {
		row, ok := rows[key]
		require.True(t, ok, key)
		require.Equal(t, "FAIL", row.Result, key)
		for _, w := range want {
			require.Contains(t, row.Evidence, w, key)
		}
	}
	require.Equal(t, "FAIL", broken.Rows[1].Result)
	require.Contains(t, broken.Rows[1].Evidence, `"p:::bad" is not a valid CSS selector`)
}
