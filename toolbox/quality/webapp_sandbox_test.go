package quality_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/egress"
	"github.com/aetherium-engine/aetherium/sandbox"
	"github.com/aetherium-engine/aetherium/sandbox/sandboxtest"
	"github.com/aetherium-engine/aetherium/toolbox/quality"
)

// fakeSandbox stands for the run's sandbox: every dial lands on app, and the
// dials are recorded.
type fakeSandbox struct {
	app   string // host:port the "sandbox loopback" really is
	mu    sync.Mutex
	dials []string // project addr
}

func (f *fakeSandbox) DialProject(ctx context.Context, project, addr string) (net.Conn, error) {
	f.mu.Lock()
	f.dials = append(f.dials, project+" "+addr)
	f.mu.Unlock()
	var d net.Dialer
	return d.DialContext(ctx, "tcp", f.app)
}

// runInRun dispatches a web app tool in run runID with deps.
func runInRun(t *testing.T, deps quality.WebAppDeps, runID, ws, tool string, args any) (string, error) {
	t.Helper()
	return dispatchWebTool(t, deps, quality.WebAppConfig{}, runID, ws, tool, args)
}

// With a sandbox, localhost and loopback URLs are dialed inside the calling
// run's sandbox; other hosts take the egress client.
func TestWebAppLoopbackGoesThroughTheSandbox(t *testing.T) {
	t.Parallel()
	app := fixtureApp(t, usersDoc, usersJSON)
	fake := &fakeSandbox{app: app.Listener.Addr().String()}
	deps := quality.WebAppDeps{Egress: egress.NewEgress(egress.EgressConfig{Timeout: 10 * time.Second}), Sandbox: fake}
	for _, tc := range []struct {
		url, via, dial string
	}{
		{"http://localhost:8000", quality.ViaSandbox, "run-7 localhost:8000"},
		{"http://127.0.0.1:3000/", quality.ViaSandbox, "run-7 127.0.0.1:3000"},
		{"http://[::1]:5000", quality.ViaSandbox, "run-7 [::1]:5000"},
		{app.URL, quality.ViaSandbox, "run-7 " + app.Listener.Addr().String()},
	} {
		out, err := runInRun(t, deps, "run-7", t.TempDir(), "validate_web_app", map[string]any{"url": tc.url,
			"checks": []map[string]any{{"type": "status", "path": "/api/users", "content_type": "json"}}})
		require.NoError(t, err, tc.url)
		rep := decode[quality.WebAppReport](t, out)
		require.True(t, rep.Passed, out)
		require.Equal(t, tc.via, rep.Via)
		fake.mu.Lock()
		require.Equal(t, tc.dial, fake.dials[len(fake.dials)-1])
		fake.mu.Unlock()
	}
	// A redirect off the app's origin is refused on the sandbox route too.
	_, err := runInRun(t, deps, "run-7", t.TempDir(), "validate_web_app", map[string]any{"url": "http://localhost:8000",
		"checks": []map[string]any{{"type": "status", "path": "/to-metadata"}}})
	require.ErrorContains(t, err, "leaves the app's origin http://localhost:8000")

	// Without a sandbox (the local executor) loopback is the worker's own.
	out, err := runInRun(t, quality.WebAppDeps{Egress: deps.Egress}, "run-7", t.TempDir(), "validate_web_app", map[string]any{"url": app.URL,
		"checks": []map[string]any{{"type": "status"}}})
	require.NoError(t, err)
	require.Equal(t, quality.ViaEgress, decode[quality.WebAppReport](t, out).Via)
}

// End to end on the Docker executor: an app started in the run's sandbox the
// way a worker starts one (run_shell, busybox httpd on 127.0.0.1:8000) is
// checked and its schema inferred at http://localhost:8000; the worker's own
// loopback port 8000 plays no part, and another run's sandbox does not see it.
func TestWebAppInRealSandbox(t *testing.T) {
	t.Parallel()
	d := sandboxtest.Docker(t)
	ctx := context.Background()
	run, other, ws := sandboxtest.Project(), sandboxtest.Project(), sandboxtest.Workspace(t)
	require.NoError(t, os.MkdirAll(filepath.Join(ws, "site", "api"), 0o777))
	require.NoError(t, os.WriteFile(filepath.Join(ws, "site", "api", "users.json"), []byte(usersJSON), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(ws, "httpd.conf"), []byte(".json:application/json\n"), 0o644))
	require.NoError(t, os.Chmod(ws, 0o777))
	for _, p := range []string{run, other} {
		res, err := d.Exec(ctx, sandbox.Request{Project: p, Workspace: ws, Command: "true"})
		require.NoError(t, err)
		require.Equal(t, 0, res.ExitCode, res.Output)
	}
	res, err := d.Exec(ctx, sandbox.Request{Project: run, Workspace: ws, Command: "httpd -p 127.0.0.1:8000 -h /workspace/site -c /workspace/httpd.conf"})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode, res.Output)

	deps := quality.WebAppDeps{Egress: egress.NewEgress(egress.EgressConfig{Timeout: 10 * time.Second}), Sandbox: d}
	schema := map[string]any{"type": "array", "items": map[string]any{"type": "object", "required": []string{"id", "name"}}}
	out, err := runInRun(t, deps, run, ws, "validate_web_app", map[string]any{"url": "http://localhost:8000", "checks": []map[string]any{
		{"type": "status", "path": "/api/users.json", "content_type": "application/json"},
		{"type": "max_ms", "path": "/api/users.json", "max_ms": 5000},
		{"type": "json_schema", "path": "/api/users.json", "schema": schema},
		{"type": "status", "path": "/missing", "status": 404},
	}})
	require.NoError(t, err)
	rep := decode[quality.WebAppReport](t, out)
	require.True(t, rep.Passed, out)
	require.Equal(t, quality.ViaSandbox, rep.Via)

	out, err = runInRun(t, deps, run, ws, "capture_api_schema", map[string]any{"base_url": "http://localhost:8000", "paths": []string{"/api/users.json"}})
	require.NoError(t, err)
	srep := decode[quality.APISchemaReport](t, out)
	require.Equal(t, "inferred", srep.Source, out)
	require.Equal(t, 1, srep.Paths)

	// The other run's sandbox has nothing on its loopback: the app is not there.
	out, err = runInRun(t, deps, other, ws, "validate_web_app", map[string]any{"url": "http://localhost:8000", "checks": []map[string]any{{"type": "status"}}})
	require.NoError(t, err)
	orep := decode[quality.WebAppReport](t, out)
	require.False(t, orep.Passed)
	require.Contains(t, orep.Rows[0].Evidence, "Connection refused")
}
