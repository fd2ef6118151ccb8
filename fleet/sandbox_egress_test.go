package fleet_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/fleet"
	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/sandbox/sandboxtest"
	"github.com/aetherium-engine/aetherium/store"
)

// An agent's run_shell with egress reaches an allowed host only through the fleet's
// egress proxy: a host off the allowlist, a metadata address, the fleet's own API
// (by name, on an allowed port) and an endpoint the fleet's policy denies on
// another host (security.egress.deny: an internal service, allowlisted by the
// team) are refused by the proxy and recorded for the run, and a direct
// connection to this host (a test-owned listener, the API's port) goes nowhere —
// the listener sees nothing.
func TestAgentShellEgressGoesThroughTheProxy(t *testing.T) {
	t.Parallel()
	dockerOrFail(t)
	upstream := sandboxtest.Upstream(t)
	internal := sandboxtest.Upstream(t)
	host := listenStandIn(t, "0.0.0.0:0")
	require.NotNil(t, host)
	hostPort, err := strconv.Atoi(portOf(t, host.addr))
	require.NoError(t, err)
	hostIP := hostIPv4(t).String()

	cfg := fleettest.Config(t)
	cfg.Security.Egress.Deny = append(cfg.Security.Egress.Deny, internal+":80")
	f := fleettest.StartWith(t, cfg, fleettest.Options{
		Fleet: fleet.Options{Executor: sandboxtest.Docker(t), EgressResolver: fleettest.DNS(t, map[string]string{
			"allowed.test": upstream, "other.test": upstream, "meta.test": "169.254.169.254", "api.test": hostIP, "internal.test": internal,
		})},
	})
	require.NotNil(t, f.EgressProxy, "the fleet runs its egress proxy")
	apiPort, err := strconv.Atoi(portOf(t, f.URL[len("http://"):]))
	require.NoError(t, err)

	script := fmt.Sprintf(`probe() { if out=$(wget -q -O - "$2" 2>&1); then echo "$1: ok $out"; else echo "$1: refused"; fi; }
probe allowed http://allowed.test/hello.txt
probe other http://other.test/hello.txt
probe meta http://meta.test/latest/meta-data/
probe api http://api.test:%d/api/runs
probe internal http://internal.test/hello.txt
gw=$(ip route | awk '/^default/ {print $3}')
for p in %d %d; do if nc -w 3 "$gw" "$p" </dev/null >/dev/null 2>&1; then echo "direct $p: reached"; else echo "direct $p: nothing"; fi; done
if nc -w 3 %s %d </dev/null >/dev/null 2>&1; then echo "host: reached"; else echo "host: nothing"; fi
`, apiPort, hostPort, apiPort, hostIP, hostPort)
	tm := team([]map[string]any{call("run_shell", map[string]any{"command": script, "timeout": 60}), {"say": "probed"}}, map[string]any{
		// meta.test and api.test are allowlisted: the proxy's dial check refuses them.
		"allowed_domains": []string{"allowed.test", "meta.test", "api.test", "internal.test"},
		"egress_ports":    []int{apiPort, hostPort},
	})
	tm["workers"] = []map[string]any{{"name": "writer", "prompt": "probe", "mcp_servers": []string{"shell"}}}
	id := f.SubmitTeam(tm, "probe the network")
	run := f.WaitTerminal(id, 3*time.Minute)
	require.Equal(t, "completed", run.Status, run.Error)

	var out string
	require.NoError(t, f.Store.Pool.QueryRow(context.Background(), `SELECT m->>'content' FROM sessions s, jsonb_array_elements(session_history(s.id)) m
		WHERE s.run_id = $1 AND s.agent = 'writer' AND m->>'role' = 'tool' AND m->>'name' = 'run_shell'`, id).Scan(&out))
	t.Logf("run_shell output:\n%s", out)
	require.Contains(t, out, "allowed: ok hello-from-upstream")
	for _, want := range []string{"other: refused", "meta: refused", "api: refused", "internal: refused", fmt.Sprintf("direct %d: nothing", hostPort), fmt.Sprintf("direct %d: nothing", apiPort), "host: nothing"} {
		require.Contains(t, out, want)
	}
	require.Zero(t, host.accepted.Load(), "the host listener received nothing")

	code, raw := f.Do("GET", "/api/runs/"+id+"/egress", nil, nil)
	require.Equal(t, 200, code, string(raw))
	var body struct {
		Connections []store.EgressConnection `json:"egress"`
	}
	require.NoError(t, json.Unmarshal(raw, &body), string(raw))
	got := map[string]store.EgressConnection{}
	for _, c := range body.Connections {
		got[c.Host] = c
	}
	require.True(t, got["allowed.test"].Allowed, "%+v", body.Connections)
	require.Equal(t, "writer", got["allowed.test"].Agent)
	for _, host := range []string{"other.test", "meta.test", "api.test", "internal.test"} {
		c, ok := got[host]
		require.True(t, ok, "%s recorded: %+v", host, body.Connections)
		require.False(t, c.Allowed, host)
		require.NotEmpty(t, c.Reason, host)
	}
	// A sandbox reaches no address of this host at all, the API's among them.
	require.True(t, strings.Contains(got["api.test"].Reason, "the fleet's own"), "the refusal says why: %q", got["api.test"].Reason)
	// The fleet's policy binds the sandbox too: a denied endpoint elsewhere.
	require.Contains(t, got["internal.test"].Reason, "agents may never reach")
}
