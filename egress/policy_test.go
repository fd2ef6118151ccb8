package egress_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/egress"
	"github.com/aetherium-engine/aetherium/internal/testdb"

	"github.com/aetherium-engine/aetherium/internal/testinfra"
)

// hostAddr is one of this host's own non-loopback addresses (a Docker bridge
// gateway counts: it is a host interface).
func hostAddr(t *testing.T) netip.Addr {
	t.Helper()
	a, ok := testinfra.HostIPv4()
	if !ok {
		t.Skip("no non-loopback IPv4 address on this host")
	}
	return a
}

func TestEgressPolicyRefusesTheControlPlane(t *testing.T) {
	t.Parallel()
	host := hostAddr(t).String()
	p, err := egress.NewEgressPolicy(egress.EgressPolicyConfig{Endpoints: []egress.Endpoint{
		{Name: egress.EndpointRedis, Addr: "127.0.0.1:16379"},
		{Name: egress.EndpointPostgres, Addr: "10.9.9.9:5432"},
		{Name: egress.EndpointInternal, Addr: ":7000"},
		{Name: egress.EndpointHeadset, Addr: "localhost:5555"},
	}})
	require.NoError(t, err)
	require.NoError(t, p.Register(context.Background(), egress.EndpointAPI, "127.0.0.1:18080"))
	cases := []struct {
		addr string
		deny string // substring of the refusal; "" when allowed
	}{
		{"127.0.0.1:18080", egress.EndpointAPI},
		{"127.0.0.2:18080", egress.EndpointAPI},
		{"[::1]:18080", egress.EndpointAPI},
		{"[::ffff:127.0.0.1]:18080", egress.EndpointAPI},
		{net.JoinHostPort(host, "18080"), egress.EndpointAPI},
		{"127.0.0.1:16379", egress.EndpointRedis},
		{net.JoinHostPort(host, "16379"), egress.EndpointRedis},
		{"10.9.9.9:5432", egress.EndpointPostgres},
		{"127.0.0.5:7000", egress.EndpointInternal},
		{"[::1]:5555", egress.EndpointHeadset},
		{"169.254.169.254:80", "link-local or metadata"},
		{"127.0.0.1:18081", ""},
		{"10.9.9.9:5433", ""},
		{"10.9.9.8:5432", ""},
		{"10.1.2.3:18080", ""}, // not this host: only configured addresses are exact
		{"8.8.8.8:443", ""},
	}
	for _, tc := range cases {
		t.Run(tc.addr, func(t *testing.T) {
			t.Parallel()
			err := p.CheckDial("tcp", tc.addr)
			if tc.deny == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, egress.ErrEgressDenied)
			require.ErrorContains(t, err, tc.deny)
		})
	}
}

func TestEgressPolicyCheckURL(t *testing.T) {
	t.Parallel()
	p, err := egress.NewEgressPolicy(egress.EgressPolicyConfig{Endpoints: []egress.Endpoint{{Name: egress.EndpointAPI, Addr: "127.0.0.1:8080"}}})
	require.NoError(t, err)
	deny, err := egress.NewEgressPolicy(egress.EgressPolicyConfig{Private: egress.PrivateDeny})
	require.NoError(t, err)
	seed, err := egress.NewEgressPolicy(egress.EgressPolicyConfig{Private: egress.PrivateAllow, Endpoints: []egress.Endpoint{{Name: egress.EndpointAPI, Addr: "127.0.0.1:8080"}}})
	require.NoError(t, err)
	allow := []string{"api.example.com", "10.0.0.7", "127.0.0.1"}
	cases := []struct {
		name        string
		policy      *egress.EgressPolicy
		url         string
		teamDeny    bool
		wantRefusal string
	}{
		{"api literal", p, "http://127.0.0.1:8080/api/approvals", false, egress.EndpointAPI},
		{"api other loopback", p, "http://127.0.0.9:8080/", false, egress.EndpointAPI},
		{"api by localhost", p, "http://localhost:8080/metrics", false, egress.EndpointAPI},
		{"api whatever the allowlist", p, "http://[::1]:8080/", false, egress.EndpointAPI},
		{"other local port, allowlisted", p, "http://127.0.0.1:3000/", false, ""},
		{"default port", p, "http://127.0.0.1/", false, ""},
		{"a private address the allowlist does not name", p, "http://10.0.0.5/", false, "the team's allowed_domains do not name"},
		{"localhost is a name like any other", p, "http://localhost:3000/", false, "not in the team's allowed_domains"},
		{"another loopback address", p, "http://127.0.0.2:3000/", false, "the team's allowed_domains do not name"},
		{"the seed's allow: a private literal without an entry", seed, "http://10.0.0.5/", false, ""},
		{"the seed's allow: localhost", seed, "http://localhost:3000/", false, ""},
		{"the seed's allow, the team tightens", seed, "http://10.0.0.5/", true, "egress.private is deny"},
		{"the seed's allow keeps the fleet's own endpoints", seed, "http://127.0.0.1:8080/", false, egress.EndpointAPI},
		{"team tightens", p, "http://10.0.0.5/", true, "egress.private is deny"},
		{"team tightens localhost", p, "http://localhost:3000/", true, "egress.private is deny"},
		{"allowlisted name", p, "https://api.example.com/", true, ""},
		{"deployment deny", deny, "http://192.168.1.1/", false, "egress.private is deny"},
		{"deployment deny, allowlisted literal", deny, "http://10.0.0.7/", false, "egress.private is deny"},
		{"deployment deny, team cannot loosen", deny, "http://127.0.0.1:3000/", false, "egress.private is deny"},
		{"deployment deny, public name", deny, "https://api.example.com/", false, ""},
		{"static rules still apply", p, "http://169.254.169.254/", false, "link-local or metadata"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.policy.CheckURLFor(tc.url, allow, tc.teamDeny)
			if tc.wantRefusal == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, egress.ErrEgressDenied)
			require.ErrorContains(t, err, tc.wantRefusal)
		})
	}
	require.ErrorContains(t, p.CheckURL("http://127.0.0.1:8080/", nil), egress.EndpointAPI, "the proxy's shape")
}

func TestEgressPolicyConfigErrors(t *testing.T) {
	t.Parallel()
	for _, cfg := range []egress.EgressPolicyConfig{
		{Private: "sometimes"},
		{Endpoints: []egress.Endpoint{{Name: "x", Addr: "no-port"}}},
		{Refresh: time.Minute, TTL: time.Second},
	} {
		_, err := egress.NewEgressPolicy(cfg)
		require.Error(t, err, "%+v", cfg)
	}
}

// Every process learns the listeners the others register, and forgets those of a
// process that stopped renewing them.
func TestEgressPolicyRegistryAcrossProcesses(t *testing.T) {
	t.Parallel()
	opt, err := redis.ParseURL(testdb.Redis(t))
	require.NoError(t, err)
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	cfg := egress.EgressPolicyConfig{Redis: rdb, Refresh: 100 * time.Millisecond, TTL: 400 * time.Millisecond}
	api, err := egress.NewEgressPolicy(cfg)
	require.NoError(t, err)
	worker, err := egress.NewEgressPolicy(cfg)
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, worker.CheckDial("tcp", "127.0.0.1:18090"))

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); api.Run(runCtx) }()
	require.NoError(t, api.Register(ctx, egress.EndpointAPI, "0.0.0.0:18090"))
	worker.Refresh(ctx)
	require.ErrorContains(t, worker.CheckDial("tcp", "127.0.0.3:18090"), egress.EndpointAPI)
	require.ErrorContains(t, worker.CheckDial("tcp", net.JoinHostPort(hostAddr(t).String(), "18090")), egress.EndpointAPI)

	time.Sleep(600 * time.Millisecond) // beyond the TTL: renewals keep it listed
	worker.Refresh(ctx)
	require.Error(t, worker.CheckDial("tcp", "127.0.0.1:18090"))

	stop() // a clean stop withdraws the registration
	<-done
	worker.Refresh(ctx)
	require.NoError(t, worker.CheckDial("tcp", "127.0.0.1:18090"))

	// A process that dies without withdrawing ages out after the TTL.
	dead, err := egress.NewEgressPolicy(cfg)
	require.NoError(t, err)
	require.NoError(t, dead.Register(ctx, egress.EndpointWorkerMetrics, "127.0.0.1:18091"))
	worker.Refresh(ctx)
	require.ErrorContains(t, worker.CheckDial("tcp", "127.0.0.1:18091"), egress.EndpointWorkerMetrics)
	require.Eventually(t, func() bool {
		worker.Refresh(ctx)
		return worker.CheckDial("tcp", "127.0.0.1:18091") == nil
	}, 5*time.Second, 50*time.Millisecond)
}

// The client refuses a fleet endpoint on the address it dials (a name resolving to
// it, a redirect to it) and the endpoint's stand-in sees nothing.
func TestEgressClientRefusesControlPlane(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	standIn := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	t.Cleanup(standIn.Close)
	_, port, _ := net.SplitHostPort(standIn.Listener.Addr().String())
	p, err := egress.NewEgressPolicy(egress.EgressPolicyConfig{})
	require.NoError(t, err)
	require.NoError(t, p.Register(context.Background(), egress.EndpointAPI, standIn.Listener.Addr().String()))
	redirect := httptest.NewServer(http.RedirectHandler("http://127.0.0.1:"+port+"/api/approvals", http.StatusFound))
	t.Cleanup(redirect.Close)
	dns := startDNS(t, map[string]string{"api.example.com": "127.0.0.1"})
	eg := egress.NewEgress(egress.EgressConfig{Policy: p, Resolver: dns.resolver()})
	// Allowlisted, and still refused: no allowlist opens the fleet's own.
	c := eg.Client([]string{"api.example.com", "localhost", "127.0.0.1"})
	for _, u := range []string{
		"http://api.example.com:" + port + "/metrics",
		"http://localhost:" + port + "/metrics",
		redirect.URL,
	} {
		_, err := get(t, c, u)
		require.True(t, errors.Is(err, egress.ErrEgressDenied), "%s: %v", u, err)
		require.ErrorContains(t, err, egress.EndpointAPI)
	}
	require.Zero(t, hits.Load())
}

// A fleet network (the GPU services' Docker bridge) is refused whole: every
// address of its prefix on every port, under private allow too; a prefix
// registered by one process reaches the others through the registry.
func TestEgressPolicyRefusesAFleetNetwork(t *testing.T) {
	t.Parallel()
	opt, err := redis.ParseURL(testdb.Redis(t))
	require.NoError(t, err)
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	cfg := egress.EgressPolicyConfig{Redis: rdb, Key: "egress:test:" + t.Name(), Endpoints: []egress.Endpoint{{Name: "configured net", Addr: "10.77.0.0/16"}}}
	gpuHost, err := egress.NewEgressPolicy(cfg)
	require.NoError(t, err)
	other, err := egress.NewEgressPolicy(cfg)
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, gpuHost.Register(ctx, egress.EndpointGPU+" network", "172.31.250.0/24"))
	other.Refresh(ctx)
	for _, p := range []*egress.EgressPolicy{gpuHost, other} {
		for _, tc := range []struct{ addr, deny string }{
			{"172.31.250.2:8188", egress.EndpointGPU},
			{"172.31.250.254:1", egress.EndpointGPU},
			{"[::ffff:172.31.250.9]:80", egress.EndpointGPU},
			{"10.77.3.4:443", "configured net"},
			{"172.31.251.2:8188", ""},
			{"10.78.0.1:443", ""},
		} {
			err := p.CheckDial("tcp", tc.addr)
			if tc.deny == "" {
				require.NoError(t, err, tc.addr)
				continue
			}
			require.ErrorIs(t, err, egress.ErrEgressDenied, tc.addr)
			require.ErrorContains(t, err, tc.deny, tc.addr)
		}
		require.ErrorContains(t, p.CheckURL("http://172.31.250.2:8188/history", nil), egress.EndpointGPU)
	}
	_, err = egress.NewEgressPolicy(egress.EgressPolicyConfig{Endpoints: []egress.Endpoint{{Name: "x", Addr: "10.0.0.0/33"}}})
	require.Error(t, err, "a malformed prefix is no endpoint")
}
