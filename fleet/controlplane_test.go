package fleet_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"regexp"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/egress"
	"github.com/aetherium-engine/aetherium/fleet"
	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/internal/testinfra"
	"github.com/aetherium-engine/aetherium/lease"
	"github.com/aetherium-engine/aetherium/store"
)

// standIn is a test-owned listener on an address the policy must refuse; it
// counts the connections it accepted.
type standIn struct {
	addr     string
	accepted atomic.Int64
}

// listenStandIn binds addr, or returns nil when this machine cannot (no IPv6).
func listenStandIn(t *testing.T, addr string) *standIn {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Logf("stand-in %s not available: %v", addr, err)
		return nil
	}
	s := &standIn{addr: ln.Addr().String()}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.accepted.Add(1)
			_ = c.Close()
		}
	}()
	return s
}

// hostIPv4 is one of this host's own non-loopback addresses.
func hostIPv4(t *testing.T) netip.Addr {
	t.Helper()
	a, ok := testinfra.HostIPv4()
	if !ok {
		t.Skip("no non-loopback IPv4 address on this host")
	}
	return a
}

func portOf(t *testing.T, hostport string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(hostport)
	require.NoError(t, err)
	return p
}

func freeLoopbackPort(t *testing.T) string {
	t.Helper()
	return strconv.Itoa(freeTCPPort(t))
}

// An agent's http_request never reaches the fleet's own endpoints — the API (no
// tokens configured), a metrics listener, Redis, PostgreSQL — on the configured
// address nor on the same port of any other local address, and cannot decide a
// pending approval; a redirect to such an endpoint is a refusal of the egress layer.
func TestAgentsCannotReachTheControlPlane(t *testing.T) {
	t.Parallel()
	f := fleettest.Start(t, fleettest.Options{
		Configure: func(c *config.Config) {
			c.Security.ApprovalWindow = time.Minute
			c.Worker.CircuitBreaker = 100 // every attempt below is refused in a row
		},
		Fleet: fleet.Options{ExtraTools: withStandInPDF},
	})
	require.Empty(t, f.Cfg.API.Tokens, "the default loopback setup: no tokens")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	// A worker's metrics listener, registered by ServeMetrics as a worker does.
	metricsPort := freeLoopbackPort(t)
	go func() { _ = f.ServeMetrics(ctx, "127.0.0.1:"+metricsPort) }()
	require.Eventually(t, func() bool {
		c, err := net.Dial("tcp", "127.0.0.1:"+metricsPort)
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	}, 10*time.Second, 20*time.Millisecond)

	apiPort := portOf(t, f.URL[len("http://"):])
	ropt, err := redis.ParseURL(f.Cfg.RedisURL)
	require.NoError(t, err)
	redisPort := portOf(t, ropt.Addr)
	pg, err := url.Parse(f.Cfg.DatabaseURL)
	require.NoError(t, err)
	pgPort := pg.Port()
	hostIP := hostIPv4(t).String()

	// Stand-ins: the same ports on other local addresses, owned by this test.
	var standIns []*standIn
	for _, a := range []string{
		"127.0.0.2:" + apiPort, net.JoinHostPort(hostIP, apiPort), "[::1]:" + apiPort,
		"127.0.0.2:" + metricsPort, net.JoinHostPort(hostIP, metricsPort),
		"127.0.0.2:" + redisPort, net.JoinHostPort(hostIP, redisPort), "127.0.0.2:" + pgPort,
	} {
		if s := listenStandIn(t, a); s != nil {
			standIns = append(standIns, s)
		}
	}
	redirector := httptest.NewServer(http.RedirectHandler("http://127.0.0.2:"+apiPort+"/api/runs", http.StatusFound))
	t.Cleanup(redirector.Close)
	var benign atomic.Int64
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { benign.Add(1); _, _ = w.Write([]byte("ok")) }))
	t.Cleanup(ok.Close)

	// A run waiting for a human's approval.
	waiting := team([]map[string]any{call("download_pdf", map[string]any{"url": ok.URL + "/a.pdf"}), {"say": "done"}}, loopback)
	waiting["workers"] = []map[string]any{{"name": "writer", "prompt": "w", "mcp_servers": []string{"research"}}}
	waitingID := f.SubmitTeam(waiting, "wait for approval")
	appr := pendingApproval(t, f, waitingID)

	type attempt struct {
		method, url, reason string
	}
	attempts := []attempt{
		{"GET", "http://127.0.0.1:" + apiPort + "/metrics", egress.EndpointAPI},
		{"GET", "http://127.0.0.1:" + apiPort + "/api/approvals?status=pending", egress.EndpointAPI},
		{"POST", "http://127.0.0.1:" + apiPort + "/api/approvals/" + appr.ID + "/approve", egress.EndpointAPI},
		{"POST", "http://localhost:" + apiPort + "/api/approvals/" + appr.ID + "/approve", egress.EndpointAPI},
		// Inbound webhooks are served on the API's listener too (and on api.hooks.addr: TestHooksListener).
		{"POST", "http://127.0.0.2:" + apiPort + "/hooks/hk_00000000000000000000000000000000", egress.EndpointAPI},
		{"GET", "http://127.0.0.2:" + apiPort + "/metrics", egress.EndpointAPI},
		{"GET", "http://" + net.JoinHostPort(hostIP, apiPort) + "/metrics", egress.EndpointAPI},
		{"GET", "http://[::1]:" + apiPort + "/metrics", egress.EndpointAPI},
		{"GET", "http://127.0.0.1:" + metricsPort + "/metrics", egress.EndpointWorkerMetrics},
		{"GET", "http://127.0.0.2:" + metricsPort + "/metrics", egress.EndpointWorkerMetrics},
		{"GET", "http://" + net.JoinHostPort(hostIP, metricsPort) + "/metrics", egress.EndpointWorkerMetrics},
		{"POST", "http://127.0.0.1:" + redisPort + "/", egress.EndpointRedis},
		{"POST", "http://127.0.0.2:" + redisPort + "/", egress.EndpointRedis},
		{"POST", "http://" + net.JoinHostPort(hostIP, redisPort) + "/", egress.EndpointRedis},
		{"GET", "http://127.0.0.1:" + pgPort + "/", egress.EndpointPostgres},
		{"GET", "http://127.0.0.2:" + pgPort + "/", egress.EndpointPostgres},
		{"GET", redirector.URL + "/go", egress.EndpointAPI},
	}
	var script []map[string]any
	for _, a := range attempts {
		script = append(script, call("http_request", map[string]any{"method": a.method, "url": a.url, "body": "x"}))
	}
	script = append(script, call("http_request", map[string]any{"method": "GET", "url": ok.URL + "/fine"}), map[string]any{"say": "done trying"})
	tm := team(script, privateOpen)
	tm["workers"] = []map[string]any{{"name": "writer", "prompt": "w", "mcp_servers": []string{"research"}}}
	id := f.SubmitTeam(tm, "reach the control plane")
	evs := f.Follow(id, 0, 90*time.Second)
	require.Equal(t, "run.completed", evs[len(evs)-1].Type)

	f.Audit.Flush()
	rows, err := f.Store.RunAudit(context.Background(), id, 100)
	require.NoError(t, err)
	var calls []store.AuditRow
	for _, r := range rows {
		if r.Agent == "writer" && r.Tool == "http_request" {
			calls = append(calls, r)
		}
	}
	require.Len(t, calls, len(attempts)+1)
	for i, a := range attempts {
		r := calls[i]
		require.Equal(t, "denied", r.Decision, "%s %s: %+v", a.method, a.url, r)
		require.Equal(t, "egress", r.DenyLayer, a.url)
		require.Contains(t, r.DenyReason, a.reason, a.url)
	}
	require.Equal(t, "allowed", calls[len(attempts)].Decision, "an ordinary local service stays reachable")
	require.EqualValues(t, 1, benign.Load())
	rec := httptest.NewRecorder()
	f.Metrics.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	m := regexp.MustCompile(`gate_denials_total\{layer="egress"\} (\d+)`).FindStringSubmatch(rec.Body.String())
	require.Len(t, m, 2, "no egress denials in /metrics")
	n, err := strconv.Atoi(m[1])
	require.NoError(t, err)
	require.GreaterOrEqual(t, n, len(attempts), "every refusal, the redirect's included, counts as a gate denial")

	for _, s := range standIns {
		require.Zero(t, s.accepted.Load(), "stand-in %s received a connection", s.addr)
	}
	still, err := f.Store.GetApproval(context.Background(), appr.ID)
	require.NoError(t, err)
	require.Equal(t, store.ApprovalPending, still.Status, "an agent cannot decide an approval")
}

// A GPU service's every address is the control plane: its fencing proxy's
// listener and the URL tools use (besides its published ports and health URL),
// by http_request and web_fetch, under any local name. Bob's agent once read
// alice's ComfyUI /history through the proxy with her token.
func TestAgentsCannotReachAGPUService(t *testing.T) {
	t.Parallel()
	fence := listenStandIn(t, "127.0.0.1:0")
	svcURL := listenStandIn(t, "127.0.0.1:0")
	upstream := listenStandIn(t, "127.0.0.1:0")
	f := fleettest.Start(t, fleettest.Options{Configure: func(c *config.Config) {
		c.Worker.CircuitBreaker = 100 // every attempt below is refused in a row
		c.Streams.Leases = lease.Config{Prefix: "aeth:lease:" + randomSuffix(), Services: []lease.Service{{
			// Never started: no run of this test leases it.
			Name: "comfyui", Image: "aetherium-test/never-started:0", URL: "http://" + svcURL.addr,
			Fence: &lease.Fence{Image: "aetherium-test/never-started-fence:0", Listen: fence.addr,
				Upstream: "http://" + upstream.addr, Redis: c.RedisURL},
		}}}
	}})
	reason := egress.EndpointGPU // "(comfyui)" for its addresses, "network (…)" for its network
	var attempts []string
	for _, s := range []*standIn{fence, svcURL, upstream} {
		port := portOf(t, s.addr)
		attempts = append(attempts, "http://"+s.addr+"/history", "http://localhost:"+port+"/history",
			"http://127.0.0.2:"+port+"/history", "http://[::ffff:127.0.0.1]:"+port+"/history")
	}
	// Any address of the GPU services' own Docker network, any port: a GPU
	// container answers there without a token (the team's egress allows private
	// addresses, the default).
	nets, err := f.GPU.Networks(context.Background())
	require.NoError(t, err)
	require.NotEmpty(t, nets)
	inNet := nets[0].Addr().Next().Next()
	attempts = append(attempts, "http://"+netip.AddrPortFrom(inNet, 8188).String()+"/history", "http://"+netip.AddrPortFrom(inNet, 9).String()+"/")
	var script []map[string]any
	for _, u := range attempts {
		script = append(script, call("http_request", map[string]any{"method": "GET", "url": u}))
	}
	script = append(script, call("web_fetch", map[string]any{"url": "http://" + fence.addr + "/history"}),
		call("web_fetch", map[string]any{"url": "http://" + svcURL.addr + "/history"}), map[string]any{"say": "done trying"})
	tm := team(script, privateOpen)
	tm["workers"] = []map[string]any{{"name": "writer", "prompt": "w", "mcp_servers": []string{"research"}}}
	id := f.SubmitTeam(tm, "reach the GPU service")
	evs := f.Follow(id, 0, 90*time.Second)
	require.Equal(t, "run.completed", evs[len(evs)-1].Type)

	f.Audit.Flush()
	rows, err := f.Store.RunAudit(context.Background(), id, 100)
	require.NoError(t, err)
	var calls []store.AuditRow
	for _, r := range rows {
		if r.Agent == "writer" && (r.Tool == "http_request" || r.Tool == "web_fetch") {
			calls = append(calls, r)
		}
	}
	require.Len(t, calls, len(attempts)+2)
	for _, r := range calls {
		require.Equal(t, "denied", r.Decision, "%s %s", r.Tool, r.Args)
		require.Equal(t, "egress", r.DenyLayer, "%s %s", r.Tool, r.Args)
		require.Contains(t, r.DenyReason, reason, "%s %s", r.Tool, r.Args)
	}
	for _, s := range []*standIn{fence, svcURL, upstream} {
		require.Zero(t, s.accepted.Load(), "the GPU service's address %s received a connection", s.addr)
	}
}
