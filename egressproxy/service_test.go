package egressproxy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/egressproxy"
	"github.com/aetherium-engine/aetherium/internal/testlog"
	"github.com/aetherium-engine/aetherium/store"
)

// serviceEnv is an egress service in this process (the host's network namespace,
// as in docker-compose.yml), serving the proxy of setupWith.
type serviceEnv struct {
	url, tokenFile string
}

// start runs the service and returns cfg pointed at it. The firewall rules are the
// test's (setup installs them): ExternalFirewall keeps the service from removing
// them under the package's other tests when it stops.
func (s *serviceEnv) start(t *testing.T, cfg egressproxy.Config) egressproxy.Config {
	t.Helper()
	cfg.ExternalFirewall = true
	s.tokenFile = filepath.Join(t.TempDir(), "egress", "token")
	cfg.Service.TokenFile = s.tokenFile
	svc, err := egressproxy.NewService(cfg, testlog.Logger(t))
	require.NoError(t, err)
	fi, err := os.Stat(s.tokenFile)
	require.NoError(t, err, "the service wrote the shared token")
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })
	s.url = "http://" + ln.Addr().String()
	cfg.Service.URL = s.url
	cfg.Service.Relay = "127.0.0.1:0"
	return cfg
}

func (s *serviceEnv) call(t *testing.T, method, path, token string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		require.NoError(t, err)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, s.url+path, rd)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, raw
}

// TestSandboxEgressThroughService: with the proxy's host half in the egress
// service (the compose deployment's shape), a sandbox reaches its allowed host
// through the service's listener and the worker's relayed proxy; every refusal
// of the proxy holds; the service's API and the worker's relay refuse anyone
// without the token, and the service opens listeners on sandbox networks only.
func TestSandboxEgressThroughService(t *testing.T) {
	t.Parallel()
	svc := &serviceEnv{}
	e := setupWith(t, svc)
	ctx := context.Background()

	res := e.run(t, e.runA, e.ws, "wget -q -O - http://allowed.test/hello.txt")
	require.Equal(t, 0, res.ExitCode, res.Output)
	require.Equal(t, "hello-from-upstream\n", res.Output)
	res = e.run(t, e.runA, e.ws, "echo $http_proxy")
	gw := strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(res.Output), "http://"), ":3128")

	token, err := os.ReadFile(svc.tokenFile)
	require.NoError(t, err)
	tok := strings.TrimSpace(string(token))
	code, raw := svc.call(t, "GET", "/v1/state", tok, nil)
	require.Equal(t, http.StatusOK, code, "%s", raw)
	var st egressproxy.ServiceState
	require.NoError(t, json.Unmarshal(raw, &st))
	require.Equal(t, []string{e.runA}, st.Runs, "the service serves the run's network")
	require.Contains(t, st.HostAddrs, gw, "the gateway is one of the host's addresses")

	for _, tc := range []struct{ name, cmd, reason string }{
		{"not allowlisted", "wget -q -O - http://blocked.test/hello.txt", "allowed_domains"},
		{"the gateway", fmt.Sprintf("wget -q -O - http://%s:%d/", gw, e.hostPort), "sandbox network"},
		{"loopback", fmt.Sprintf("wget -q -O - http://127.0.0.1:%d/", e.hostPort), "this host"},
		{"direct to the host", fmt.Sprintf("nc -w 2 %s %d </dev/null", gw, e.hostPort), ""},
	} {
		res := e.run(t, e.runA, e.ws, tc.cmd)
		require.NotEqual(t, 0, res.ExitCode, "%s: %s", tc.name, res.Output)
	}
	require.Zero(t, e.hostHits.Load(), "the host listener saw a connection from the sandbox")
	rows, err := e.st.RunEgress(ctx, e.runA, 100)
	require.NoError(t, err)
	byHost := map[string][]store.EgressConnection{}
	for _, r := range rows {
		byHost[r.Host] = append(byHost[r.Host], r)
	}
	require.True(t, byHost["allowed.test"][0].Allowed, "%+v", byHost)
	for host, want := range map[string]string{"blocked.test": "allowed_domains", gw: "sandbox network", "127.0.0.1": "this host"} {
		require.NotEmpty(t, byHost[host], host)
		require.False(t, byHost[host][0].Allowed)
		require.Contains(t, byHost[host][0].Reason, want)
	}

	// The API without the token, or asked for a listener outside the pool.
	code, _ = svc.call(t, "GET", "/v1/state", "", nil)
	require.Equal(t, http.StatusUnauthorized, code)
	code, _ = svc.call(t, "PUT", "/v1/runs/x", "wrong", egressproxy.ServiceBinding{Subnet: "10.213.0.0/28", Gateway: "10.213.0.1", RelayPort: 1})
	require.Equal(t, http.StatusUnauthorized, code)
	code, raw = svc.call(t, "PUT", "/v1/runs/x", tok, egressproxy.ServiceBinding{Subnet: "127.0.0.0/28", Gateway: "127.0.0.1", RelayPort: 1})
	require.Equal(t, http.StatusBadRequest, code, "%s", raw)
	require.Contains(t, string(raw), "not a sandbox network")

	// The relay without the token: closed, nothing forwarded.
	for _, line := range []string{"AETHERIUM-EGRESS/1 wrong " + e.runA + " " + gw + ":40000\n", "GET http://allowed.test/hello.txt HTTP/1.1\r\n"} {
		c, err := net.Dial("tcp", e.relay)
		require.NoError(t, err)
		_, _ = fmt.Fprintf(c, "%sHost: allowed.test\r\n\r\n", line)
		_ = c.SetReadDeadline(time.Now().Add(15 * time.Second))
		got, _ := io.ReadAll(c)
		_ = c.Close()
		require.Empty(t, got, "the relay answered %q", line)
	}

	// Releasing the run stops the service's listener.
	require.NoError(t, e.d.Release(ctx, e.runA))
	code, raw = svc.call(t, "GET", "/v1/state", tok, nil)
	require.Equal(t, http.StatusOK, code)
	require.NoError(t, json.Unmarshal(raw, &st))
	require.Empty(t, st.Runs)
}
