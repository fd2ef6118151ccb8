package security_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/egress"
	"github.com/aetherium-engine/aetherium/egress/egresstest"
	"github.com/aetherium-engine/aetherium/internal/testlog"
	"github.com/aetherium-engine/aetherium/security"
	"github.com/aetherium-engine/aetherium/tools"
)

type webAppArgs struct {
	URL string `json:"url"`
}

type playArgs struct {
	Page string `json:"page"`
}

// loopbackGate is a gate over stand-ins of the tools that route loopback into
// the run's sandbox (validate_web_app, play_test) and of one that does not
// (http_health_check), in a deployment with egress.private deny and the fleet's
// API on port 8080 of every local address.
func loopbackGate(t *testing.T, inSandbox bool) (*tools.Router, *atomic.Int64) {
	t.Helper()
	log := testlog.Logger(t)
	path := filepath.Join(t.TempDir(), "permissions.yaml")
	require.NoError(t, os.WriteFile(path, []byte("rules:\n  - match: {tool: play_test, url_pattern: \"evil\\\\.test\"}\n    action: always_deny\n    reason: no evil\n"), 0o644))
	rules, err := security.LoadRules(path, log)
	require.NoError(t, err)
	policy, err := egress.NewEgressPolicy(egress.EgressPolicyConfig{Private: egress.PrivateDeny,
		Endpoints: []egress.Endpoint{{Name: "the fleet's own API", Addr: ":8080"}}, Log: log})
	require.NoError(t, err)
	var ran atomic.Int64
	reg := tools.NewRegistry()
	tools.Register(reg, "validate_web_app", "stand-in", func(context.Context, tools.Call, webAppArgs) (tools.Result, error) {
		ran.Add(1)
		return tools.Text("ran"), nil
	}, tools.Outbound(), tools.LoopbackInSandbox(inSandbox), tools.InGroup("quality"))
	tools.Register(reg, "play_test", "stand-in", func(context.Context, tools.Call, playArgs) (tools.Result, error) {
		ran.Add(1)
		return tools.Text("ran"), nil
	}, tools.Outbound(), tools.LoopbackInSandbox(inSandbox), tools.InGroup("quality"))
	tools.Register(reg, "http_health_check", "stand-in", func(context.Context, tools.Call, webAppArgs) (tools.Result, error) {
		ran.Add(1)
		return tools.Text("ran"), nil
	}, tools.Outbound(), tools.InGroup("research"), tools.WithTier(tools.Elevated))
	gate := security.NewGate(security.GateDeps{Registry: reg, Rules: rules, DLP: egresstest.NewDLP(t), Policy: policy, Log: log})
	return tools.NewGatedRouter(reg, gate.Middleware), &ran
}

// A loopback URL of a tool that reaches the run's own sandbox is the run's
// app, not the worker: it passes even with egress.private deny and on the
// port of the fleet's API. The same URL is judged as the worker's loopback
// where the routing does not exist (local executor) and for a tool that dials
// from the worker. Look-alikes (a loopback user part, a loopback-looking
// name, credentials) are judged as the destinations they really are, and a
// page URL is judged like any URL argument (rules and egress), while a page
// that is a workspace path is not a URL.
func TestGateLoopbackInSandbox(t *testing.T) {
	t.Parallel()
	sandboxed, ranS := loopbackGate(t, true)
	local, ranL := loopbackGate(t, false)
	s := &tools.Session{RunID: "r", SessionID: "s", Agent: "qa", Role: "worker",
		Access: tools.Access{Tools: []string{"validate_web_app", "play_test", "http_health_check"}}, AllowedDomains: []string{"api.example.com"}, EgressDenyPrivate: true}
	dispatch := func(r *tools.Router, tool string, args any) error {
		raw, _ := json.Marshal(args)
		_, err := r.Dispatch(context.Background(), tools.Call{ID: "c", Name: tool, Args: raw, Session: s})
		return err
	}
	for _, tc := range []struct {
		name      string
		tool      string
		args      any
		sandboxed string // "" allowed, else the egress/rules refusal
		local     string
	}{
		{"localhost app", "validate_web_app", webAppArgs{"http://localhost:8000"}, "", "egress.private is deny"},
		{"fleet API port inside the sandbox", "validate_web_app", webAppArgs{"http://127.0.0.1:8080/"}, "", "the fleet's own API"},
		{"ipv6 loopback", "validate_web_app", webAppArgs{"http://[::1]:3000/"}, "", "egress.private is deny"},
		{"mapped loopback", "validate_web_app", webAppArgs{"http://[::ffff:127.0.0.1]:3000/"}, "", "egress.private is deny"},
		{"sub.localhost", "validate_web_app", webAppArgs{"http://app.localhost:3000/"}, "", "egress.private is deny"},
		{"https localhost", "validate_web_app", webAppArgs{"HTTPS://LOCALHOST:8443/"}, "", "egress.private is deny"},
		{"loopback user part", "validate_web_app", webAppArgs{"http://localhost:8000@evil.example.net/"}, "credentials in the URL", "credentials in the URL"},
		{"loopback-looking name", "validate_web_app", webAppArgs{"http://localhost.evil.example.net/"}, "not in the team's allowed_domains", "not in the team's allowed_domains"},
		{"private address", "validate_web_app", webAppArgs{"http://10.1.2.3/"}, "egress.private is deny", "egress.private is deny"},
		{"metadata", "validate_web_app", webAppArgs{"http://169.254.169.254/"}, "metadata", "metadata"},
		{"file scheme", "validate_web_app", webAppArgs{"file:///etc/passwd"}, "scheme", "scheme"},
		{"worker-side tool", "http_health_check", webAppArgs{"http://localhost:8000"}, "egress.private is deny", "egress.private is deny"},
		{"page URL on loopback", "play_test", playArgs{"http://localhost:8000/index.html"}, "", "egress.private is deny"},
		{"page URL to metadata", "play_test", playArgs{"http://169.254.169.254/latest"}, "metadata", "metadata"},
		{"page URL elsewhere", "play_test", playArgs{"https://other.example.org/"}, "not in the team's allowed_domains", "not in the team's allowed_domains"},
		{"page URL under a deny rule", "play_test", playArgs{"https://api.example.com/evil.test"}, "no evil", "no evil"},
		{"workspace page", "play_test", playArgs{"site/index.html"}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, side := range []struct {
				r    *tools.Router
				ran  *atomic.Int64
				want string
			}{{sandboxed, ranS, tc.sandboxed}, {local, ranL, tc.local}} {
				before := side.ran.Load()
				err := dispatch(side.r, tc.tool, tc.args)
				if side.want == "" {
					require.NoError(t, err)
					require.Equal(t, before+1, side.ran.Load())
					continue
				}
				var d *tools.Denied
				require.ErrorAs(t, err, &d)
				require.Contains(t, d.Reason, side.want)
			}
		})
	}
}
