package egressproxy_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/dns/dnsmessage"

	"github.com/aetherium-engine/aetherium/egress"
	"github.com/aetherium-engine/aetherium/egressproxy"
	"github.com/aetherium-engine/aetherium/internal/testdb"
	"github.com/aetherium-engine/aetherium/internal/testlog"

	"github.com/aetherium-engine/aetherium/sandbox"
	"github.com/aetherium-engine/aetherium/sandbox/sandboxtest"
	"github.com/aetherium-engine/aetherium/store"
)

// env is one test's world: an executor whose egress goes through a proxy, two runs
// (two sandboxes), an upstream web server in a container the test owns (the
// "internet"), and a listener on every host address standing in for the fleet's
// own services (API, Redis, PostgreSQL…).
type env struct {
	d        *sandbox.Docker
	st       *store.Store
	runA     string
	runB     string
	ws       string
	wsB      string
	upstream string // the upstream container's address
	hostPort int    // the host listener's port
	hostHits *atomic.Int64
	relay    string // the proxy's relay listener (with an egress service)
}

func setup(t *testing.T) *env {
	t.Helper()
	return setupWith(t, nil)
}

// setupWith is setup whose proxy's host half is svc's egress service when svc is
// not nil (Config.Service): the service listens on the gateways and relays.
func setupWith(t *testing.T, svc *serviceEnv) *env {
	t.Helper()
	ctx := context.Background()
	e := &env{st: testdb.Store(t), hostHits: &atomic.Int64{}}
	e.upstream = sandboxtest.Upstream(t)

	// Stand-in for every service of this host: it listens on all addresses, so
	// the sandbox's gateway and the host's own address lead to it.
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	e.hostPort = ln.Addr().(*net.TCPAddr).Port
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			e.hostHits.Add(1)
			_ = c.Close()
		}
	}()

	dns := startDNS(t, map[string]string{
		"allowed.test": e.upstream, "blocked.test": e.upstream, "meta.test": "169.254.169.254",
		"loop.test": "127.0.0.1",
	})
	cfg := egressproxy.Config{}.WithDefaults()
	require.NoError(t, cfg.InstallFirewall(ctx))
	if svc != nil {
		cfg = svc.start(t, cfg)
	}
	dlp, err := egress.NewDLP()
	require.NoError(t, err)
	p, err := egressproxy.New(cfg, egressproxy.Deps{DLP: dlp, Recorder: e.st, Resolver: dns, Log: testlog.Logger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	e.relay = p.RelayAddr()

	e.d = sandboxtest.Docker(t)
	e.d.SetEgress(p)
	for _, r := range []*string{&e.runA, &e.runB} {
		*r = uuid.NewString()
		require.NoError(t, e.st.CreateRun(ctx, store.Run{ID: *r, Prompt: "egress", Template: "t", Team: []byte(`{}`)}))
		run := *r
		t.Cleanup(func() { _ = e.d.Release(context.Background(), run) })
	}
	e.ws, e.wsB = sandboxtest.Workspace(t), sandboxtest.Workspace(t)
	return e
}

func (e *env) run(t *testing.T, project, ws, cmd string) sandbox.Result {
	t.Helper()
	return e.runAs(t, project, ws, cmd, false)
}

// runAs is run for a team that may set egress.private: deny.
func (e *env) runAs(t *testing.T, project, ws, cmd string, denyPrivate bool) sandbox.Result {
	t.Helper()
	res, err := e.d.Exec(context.Background(), sandbox.Request{
		EgressDenyPrivate: denyPrivate,
		Project:           project, Workspace: ws, Command: cmd, Timeout: 20 * time.Second,
		Network: true, Agent: "alice",
		// meta.test, loop.test and the loopback and private ranges are allowlisted: the dial check must refuse them.
		Allowlist: []string{"allowed.test", "meta.test", "loop.test", "127.0.0.1", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"},
		// Open ports, so the host and sandbox refusals are what is tested.
		EgressPorts: []int{e.hostPort, 8080},
	})
	require.NoError(t, err)
	return res
}

func randomToken(t *testing.T) string {
	const alnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	var b strings.Builder
	for range 36 {
		n, err := rand.Int(rand.Reader, big.NewInt(int64(len(alnum))))
		require.NoError(t, err)
		b.WriteByte(alnum[n.Int64()])
	}
	return "ghp_" + b.String()
}

// TestSandboxEgressThroughProxy drives a real sandbox: it reaches an allowed host
// only through the proxy, every other destination is refused and recorded, and
// nothing reaches this host or another sandbox directly.
func TestSandboxEgressThroughProxy(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()

	// Run B's sandbox: a listener another run must not reach.
	res := e.run(t, e.runB, e.wsB, "(nc -ll -p 8080 -e /bin/echo hit >/dev/null 2>&1 &) ; ip -4 -o addr show eth0 | sed 's/.*inet \\([0-9.]*\\).*/\\1/'")
	require.Equal(t, 0, res.ExitCode, res.Output)
	ipB := strings.TrimSpace(res.Output)
	require.True(t, netip.MustParseAddr(ipB).IsValid())

	info, err := e.d.Inspect(ctx, e.runA)
	if err == nil {
		t.Fatalf("run A has a container before its first command: %v", info.Name)
	}
	// The engine still gives an --internal network's container a default route to
	// its gateway: the firewall rules, not the route table, confine it.
	res = e.run(t, e.runA, e.ws, "echo $http_proxy")
	require.Equal(t, 0, res.ExitCode, res.Output)
	proxyURL := strings.TrimSpace(res.Output)
	gw := strings.TrimSuffix(strings.TrimPrefix(proxyURL, "http://"), ":3128")
	require.True(t, netip.MustParseAddr(gw).IsValid(), proxyURL)
	info, err = e.d.Inspect(ctx, e.runA)
	require.NoError(t, err)
	require.Equal(t, e.d.NetworkName(e.runA), string(info.HostConfig.NetworkMode))

	// The allowed host, by name, resolved by the proxy.
	res = e.run(t, e.runA, e.ws, "wget -q -O - http://allowed.test/hello.txt")
	require.Equal(t, 0, res.ExitCode, res.Output)
	require.Equal(t, "hello-from-upstream\n", res.Output)

	// CONNECT to an allowed host on port 80 opens a tunnel; on another port it is refused.
	res = e.run(t, e.runA, e.ws, connectCmd(gw, "allowed.test:80", "head -3"))
	require.Contains(t, strings.SplitN(res.Output, "\n", 2)[0], "200", res.Output)
	res = e.run(t, e.runA, e.ws, connectCmd(gw, "allowed.test:22", "head -1"))
	require.Contains(t, res.Output, "403", res.Output)

	refused := []struct {
		name, cmd string
	}{
		{"not allowlisted", "wget -q -O - http://blocked.test/hello.txt"},
		{"metadata by address", "wget -q -O - http://169.254.169.254/latest/meta-data/"},
		{"metadata by name", "wget -q -O - http://meta.test/latest/meta-data/"},
		{"gateway", fmt.Sprintf("wget -q -O - http://%s:%d/", gw, e.hostPort)},
		{"gateway port 80", fmt.Sprintf("wget -q -O - http://%s/", gw)},
		{"loopback (the API)", fmt.Sprintf("wget -q -O - http://127.0.0.1:%d/", e.hostPort)},
		{"a name for loopback", "wget -q -O - http://loop.test/"},
		{"another run's sandbox", fmt.Sprintf("wget -q -O - http://%s:8080/", ipB)},
		{"CONNECT to another run's sandbox", connectCmd(gw, ipB+":443", "head -1 | grep -q ' 200 '")},
		{"a credential in a plaintext body", "wget -q -O - --post-data 'token=" + randomToken(t) + "' http://allowed.test/hello.txt"},
		// Around the proxy: nothing answers.
		{"direct to the host", fmt.Sprintf("nc -w 2 %s %d </dev/null", gw, e.hostPort)},
		{"direct to another sandbox", fmt.Sprintf("nc -w 2 %s 8080 </dev/null", ipB)},
		{"direct to the upstream", fmt.Sprintf("nc -w 2 %s 80 </dev/null", e.upstream)},
		{"direct without the proxy", "http_proxy= wget -q -T 3 -O - http://" + e.upstream + "/hello.txt"},
	}
	for _, tc := range refused {
		res := e.run(t, e.runA, e.ws, tc.cmd)
		require.NotEqual(t, 0, res.ExitCode, "%s: %s", tc.name, res.Output)
	}
	// Direct to every address of this host.
	local, err := net.InterfaceAddrs()
	require.NoError(t, err)
	for _, a := range local {
		pfx := netip.MustParsePrefix(a.String())
		if !pfx.Addr().Is4() || pfx.Addr().IsLoopback() {
			continue
		}
		res := e.run(t, e.runA, e.ws, fmt.Sprintf("nc -w 2 %s %d </dev/null", pfx.Addr(), e.hostPort))
		require.NotEqual(t, 0, res.ExitCode, "%s: %s", pfx.Addr(), res.Output)
	}
	require.Zero(t, e.hostHits.Load(), "the host listener saw a connection from the sandbox")

	rows, err := e.st.RunEgress(ctx, e.runA, 1000)
	require.NoError(t, err)
	byHost := map[string][]store.EgressConnection{}
	for _, r := range rows {
		require.Equal(t, "alice", r.Agent)
		byHost[r.Host] = append(byHost[r.Host], r)
	}
	allowed := byHost["allowed.test"]
	require.NotEmpty(t, allowed)
	require.True(t, allowed[0].Allowed, "%+v", allowed[0])
	require.Equal(t, "GET", allowed[0].Method)
	require.Equal(t, 200, allowed[0].Status)
	require.Equal(t, int64(len("hello-from-upstream\n")), allowed[0].BytesIn)
	require.Contains(t, allowed[0].Remote, e.upstream)
	var sawPort22, sawDLP bool
	for _, r := range allowed {
		sawPort22 = sawPort22 || (r.Method == "CONNECT" && r.Port == 22 && !r.Allowed && strings.Contains(r.Reason, "port 22"))
		sawDLP = sawDLP || (!r.Allowed && strings.Contains(r.Reason, "DLP") && strings.Contains(r.Reason, "github"))
	}
	require.True(t, sawPort22, "CONNECT to port 22 refused and recorded: %+v", allowed)
	require.True(t, sawDLP, "the credential refused by DLP and recorded: %+v", allowed)
	for host, want := range map[string]string{
		"blocked.test": "allowed_domains", "169.254.169.254": "metadata", "meta.test": "link-local",
		gw: "sandbox network", "127.0.0.1": "this host", "loop.test": "this host", ipB: "sandbox network",
	} {
		rs := byHost[host]
		require.NotEmpty(t, rs, "no record for %s", host)
		for _, r := range rs {
			require.False(t, r.Allowed, "%+v", r)
			require.Contains(t, r.Reason, want, "%+v", r)
			require.Empty(t, r.Remote, "refused before dialing: %+v", r)
		}
	}
	for _, r := range rows {
		require.NotContains(t, r.Reason, "ghp_", "a record repeats the credential")
	}

	// Releasing the run removes its network and stops serving it.
	require.NoError(t, e.d.Release(ctx, e.runA))
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	require.NoError(t, err)
	defer cli.Close()
	_, err = cli.NetworkInspect(ctx, e.d.NetworkName(e.runA), network.InspectOptions{})
	require.Error(t, err, "the run's network is gone")
}

// TestTeamDenyPrivateBindsTheSandbox: a team's egress.private: deny reaches the
// proxy, so an allowlisted name that resolves to a private address (the upstream
// container's, on Docker's bridge) is refused at the dial, as is the address
// itself, while the deployment (which allows private ranges) lets another team
// through to the same host.
func TestTeamDenyPrivateBindsTheSandbox(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	require.True(t, netip.MustParseAddr(e.upstream).IsPrivate(), "the upstream container is on a private bridge: %s", e.upstream)

	res := e.runAs(t, e.runB, e.wsB, "wget -q -O - http://allowed.test/hello.txt", false)
	require.Equal(t, 0, res.ExitCode, "a team without the switch: %s", res.Output)

	for _, cmd := range []string{
		"wget -q -O - http://allowed.test/hello.txt",
		"wget -q -O - http://" + e.upstream + "/hello.txt",
		`gw=$(echo $http_proxy | sed 's|http://||; s|:3128||'); ` + connectCmd("$gw", "allowed.test:80", "head -1 | grep -q ' 200 '"),
	} {
		res := e.runAs(t, e.runA, e.ws, cmd, true)
		require.NotEqual(t, 0, res.ExitCode, "%s: %s", cmd, res.Output)
	}
	rows, err := e.st.RunEgress(ctx, e.runA, 100)
	require.NoError(t, err)
	require.Len(t, rows, 3, "%+v", rows)
	for _, r := range rows {
		require.False(t, r.Allowed, "%+v", r)
		require.Contains(t, r.Reason, "egress.private is deny", "%+v", r)
	}
}

// connectCmd sends a CONNECT for target to the proxy at gw:3128 with busybox nc and
// pipes the answer into then. nc's stdin stays open for 3 s after the request: nc
// half-closes the connection at its stdin's EOF, net/http cancels a request's
// context when its client half-closes, and a CONNECT whose name was still being
// resolved then ends as "dial failed: … operation was canceled" — a 502, or an
// allowed-but-failed row instead of the refusal under test (both seen in CI under
// load).
func connectCmd(gw, target, then string) string {
	return fmt.Sprintf(`{ printf 'CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n'; sleep 3; } | nc -w 5 %s 3128 | %s`, target, target, gw, then)
}

// TestNoAllowlistNoNetwork: a team without allowed_domains keeps network none, even
// with the proxy running.
func TestNoAllowlistNoNetwork(t *testing.T) {
	t.Parallel()
	e := setup(t)
	res, err := e.d.Exec(context.Background(), sandbox.Request{Project: e.runA, Workspace: e.ws, Command: "cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '; env | grep -ci proxy"})
	require.NoError(t, err)
	require.Equal(t, "lo\n0\n", res.Output)
	info, err := e.d.Inspect(context.Background(), e.runA)
	require.NoError(t, err)
	require.Equal(t, "none", string(info.HostConfig.NetworkMode))
}

// startDNS answers A queries from table (a test's own resolver for the proxy).
func startDNS(t *testing.T, table map[string]string) *net.Resolver {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = pc.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			var q dnsmessage.Message
			if q.Unpack(buf[:n]) != nil || len(q.Questions) == 0 {
				continue
			}
			reply := dnsmessage.Message{Header: dnsmessage.Header{ID: q.ID, Response: true, Authoritative: true, RCode: dnsmessage.RCodeNameError}, Questions: q.Questions}
			question := q.Questions[0]
			if ip, ok := table[strings.TrimSuffix(question.Name.String(), ".")]; ok {
				reply.RCode = dnsmessage.RCodeSuccess
				if question.Type == dnsmessage.TypeA {
					reply.Answers = []dnsmessage.Resource{{
						Header: dnsmessage.ResourceHeader{Name: question.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 1},
						Body:   &dnsmessage.AResource{A: netip.MustParseAddr(ip).As4()},
					}}
				}
			}
			if out, err := reply.Pack(); err == nil {
				_, _ = pc.WriteTo(out, from)
			}
		}
	}()
	addr := pc.LocalAddr().String()
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", addr)
	}}
}
