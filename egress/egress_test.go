package egress_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/net/dns/dnsmessage"

	"github.com/aetherium-engine/aetherium/egress"
)

func TestCheckURL(t *testing.T) {
	t.Parallel()
	allow := []string{"api.example.com", "*.corp.example", "169.254.169.254", "fd00:ec2::254", "8.8.8.8", "10.20.0.0/16", "[fd99::7]", "192.168.7.7"}
	cases := []struct {
		url  string
		deny string // substring of the refusal; "" when allowed
	}{
		{"https://api.example.com/v1/things?q=1", ""},
		{"https://API.Example.com./v1", ""},
		{"http://api.example.com:8080/", ""},
		{"https://example.com/", "not in the team's allowed_domains"},
		{"https://evil-api.example.com/", "not in the team's allowed_domains"},
		{"https://api.example.com.evil.net/", "not in the team's allowed_domains"},
		{"https://docs.corp.example/", ""},
		{"https://a.b.corp.example/", ""},
		{"https://corp.example/", "not in the team's allowed_domains"},
		{"https://notcorp.example/", "not in the team's allowed_domains"},
		// Private destinations need the allowlist too (security.egress.private:
		// allowlist, the default): an address, or a prefix holding it.
		{"http://127.0.0.1:8080/health", "loopback or private address the team's allowed_domains do not name"},
		{"http://localhost:3000/", "not in the team's allowed_domains"},
		{"http://10.1.2.3/", "loopback or private address"},
		{"http://192.168.0.10/", "loopback or private address"},
		{"http://172.16.5.4/", "loopback or private address"},
		{"http://[::1]:9000/", "loopback or private address"},
		{"http://[fd12:3456::1]/", "loopback or private address"},
		{"http://[::ffff:127.0.0.1]/", "loopback or private address"},
		{"http://[::ffff:192.168.7.7]/", ""},
		{"http://192.168.7.7:81/", ""},
		{"http://10.20.3.4/", ""},
		{"http://10.21.3.4/", "loopback or private address"},
		{"http://[fd99::7]/", ""},
		{"http://8.8.8.8/", ""},
		{"http://1.1.1.1/", "not in the team's allowed_domains"},
		{"http://[2606:4700::1111]/", "not in the team's allowed_domains"},
		{"http://169.254.169.254/latest/meta-data/", "link-local or metadata"},
		{"http://169.254.1.1/", "link-local or metadata"},
		{"http://[fd00:ec2::254]/", "link-local or metadata"},
		{"http://[::ffff:169.254.169.254]/", "link-local or metadata"},
		{"http://[::ffff:a9fe:a9fe]/", "link-local or metadata"},
		{"http://[fe80::1]/", "link-local or metadata"},
		{"http://[64:ff9b::a9fe:a9fe]/", "link-local or metadata"},
		{"http://[64:ff9b::169.254.169.254]/", "link-local or metadata"},
		{"http://[64:ff9b:1::a9fe:a9fe]/", "link-local or metadata"},
		{"http://[2002:a9fe:a9fe::1]/", "link-local or metadata"},
		{"http://[::a9fe:a9fe]/", "link-local or metadata"},
		{"http://100.100.100.200/latest/meta-data/", "link-local or metadata"},
		{"http://[64:ff9b::808:808]/", "not in the team's allowed_domains"},
		{"http://[64:ff9b::a00:1]/", "not in the team's allowed_domains"},
		{"http://100.100.100.201/", "not in the team's allowed_domains"},
		{"http://[fe80::1%25eth0]/", "link-local or metadata"},
		{"http://0.0.0.0/", "link-local or metadata"},
		{"http://[::]/", "link-local or metadata"},
		{"http://224.0.0.1/", "link-local or metadata"},
		{"ftp://api.example.com/file", `scheme "ftp"`},
		{"file:///etc/passwd", `scheme "file"`},
		{"gopher://api.example.com/", `scheme "gopher"`},
		{"api.example.com/path", `scheme ""`},
		{"https://user:pass@api.example.com/", "credentials in the URL"},
		{"https://token@api.example.com/", "credentials in the URL"},
		{"https:///path-only", "no host"},
		{"http://%zz/", "unparsable"},
	}
	for _, tc := range cases {
		t.Run(tc.url, func(t *testing.T) {
			t.Parallel()
			err := egress.CheckURL(tc.url, allow)
			if tc.deny == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, egress.ErrEgressDenied)
			require.ErrorContains(t, err, tc.deny)
		})
	}
}

func TestDomainAllowed(t *testing.T) {
	t.Parallel()
	cases := []struct {
		host  string
		allow []string
		want  bool
	}{
		{"example.com", []string{"example.com"}, true},
		{"Example.COM.", []string{"example.com"}, true},
		{"www.example.com", []string{"example.com"}, false},
		{"www.example.com", []string{"*.example.com"}, true},
		{"example.com", []string{"*.example.com"}, false},
		{"badexample.com", []string{"*.example.com"}, false},
		{"example.com", nil, false},
	}
	for _, tc := range cases {
		require.Equal(t, tc.want, egress.DomainAllowed(tc.host, tc.allow), "%s in %v", tc.host, tc.allow)
	}
}

// dnsServer answers A queries from a fixed table (every other name: 169.254.169.254)
// and AAAA queries with no records. It counts the queries it answered.
type dnsServer struct {
	addr    string
	queries atomic.Int64
}

func startDNS(t *testing.T, table map[string]string) *dnsServer {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { pc.Close() })
	s := &dnsServer{addr: pc.LocalAddr().String()}
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			var q dnsmessage.Message
			if err := q.Unpack(buf[:n]); err != nil || len(q.Questions) == 0 {
				continue
			}
			s.queries.Add(1)
			reply := dnsmessage.Message{
				Header:    dnsmessage.Header{ID: q.ID, Response: true, Authoritative: true, RecursionDesired: q.RecursionDesired, RecursionAvailable: true},
				Questions: q.Questions,
			}
			question := q.Questions[0]
			if question.Type == dnsmessage.TypeA {
				ip := "169.254.169.254"
				if v, ok := table[strings.TrimSuffix(question.Name.String(), ".")]; ok {
					ip = v
				}
				a := net.ParseIP(ip).To4()
				reply.Answers = []dnsmessage.Resource{{
					Header: dnsmessage.ResourceHeader{Name: question.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 1},
					Body:   &dnsmessage.AResource{A: [4]byte{a[0], a[1], a[2], a[3]}},
				}}
			}
			out, err := reply.Pack()
			if err != nil {
				continue
			}
			_, _ = pc.WriteTo(out, from)
		}
	}()
	return s
}

func (s *dnsServer) resolver() *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", s.addr)
	}}
}

// hits counts requests an httptest server received.
func countingServer(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		h(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func get(t *testing.T, c *http.Client, u string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	require.NoError(t, err)
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

func TestEgressClientDialCheck(t *testing.T) {
	t.Parallel()
	dns := startDNS(t, map[string]string{"app.fleet.test": "127.0.0.1"})
	eg := egress.NewEgress(egress.EgressConfig{Resolver: dns.resolver(), Timeout: 10 * time.Second})
	srv, hits := countingServer(t, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello") })
	port := srv.Listener.Addr().(*net.TCPAddr).Port

	t.Run("the configured resolver is used", func(t *testing.T) {
		t.Parallel()
		body, err := get(t, eg.Client([]string{"app.fleet.test"}), fmt.Sprintf("http://app.fleet.test:%d/", port))
		require.NoError(t, err)
		require.Equal(t, "hello", body)
		require.Positive(t, hits.Load())
	})
	t.Run("an allowlisted name resolving to the metadata address fails at dial time", func(t *testing.T) {
		t.Parallel()
		before := dns.queries.Load()
		allow := []string{"imds.fleet.test"}
		u := "http://imds.fleet.test/latest/meta-data/iam/security-credentials/"
		require.NoError(t, egress.CheckURL(u, allow), "the name passes the pre-check")
		_, err := get(t, eg.Client(allow), u)
		require.ErrorIs(t, err, egress.ErrEgressDenied)
		require.ErrorContains(t, err, "dialing 169.254.169.254")
		require.Greater(t, dns.queries.Load(), before, "the name was resolved by the test DNS server")
	})
	t.Run("an IPv4-mapped IPv6 literal fails at dial time", func(t *testing.T) {
		t.Parallel()
		_, err := get(t, eg.Client(nil), "http://[::ffff:169.254.169.254]/latest/meta-data/")
		require.ErrorIs(t, err, egress.ErrEgressDenied)
	})
	t.Run("a link-local IPv6 literal with a zone fails at dial time", func(t *testing.T) {
		t.Parallel()
		_, err := get(t, eg.Client(nil), "http://[fe80::1%25lo]:9/")
		require.ErrorIs(t, err, egress.ErrEgressDenied)
	})
}

func TestEgressClientRedirects(t *testing.T) {
	t.Parallel()
	dns := startDNS(t, map[string]string{})
	eg := egress.NewEgress(egress.EgressConfig{Resolver: dns.resolver(), MaxRedirects: 3, Timeout: 10 * time.Second})

	mux := http.NewServeMux()
	mux.HandleFunc("/to-metadata", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusFound)
	})
	mux.HandleFunc("/to-mapped", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://[::ffff:169.254.169.254]/", http.StatusFound)
	})
	mux.HandleFunc("/to-rebound-name", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://rebind.fleet.test/", http.StatusFound)
	})
	mux.HandleFunc("/to-public", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "https://not-allowed.example.net/", http.StatusFound)
	})
	mux.HandleFunc("/chain/", func(w http.ResponseWriter, r *http.Request) {
		var n int
		fmt.Sscanf(strings.TrimPrefix(r.URL.Path, "/chain/"), "%d", &n)
		if n == 0 {
			fmt.Fprint(w, "end of chain")
			return
		}
		http.Redirect(w, r, fmt.Sprintf("/chain/%d", n-1), http.StatusFound)
	})
	srv, _ := countingServer(t, mux.ServeHTTP)
	client := eg.Client([]string{"rebind.fleet.test", "127.0.0.1"})

	for _, path := range []string{"/to-metadata", "/to-mapped", "/to-rebound-name", "/to-public"} {
		t.Run(path, func(t *testing.T) {
			t.Parallel()
			_, err := get(t, client, srv.URL+path)
			require.ErrorIs(t, err, egress.ErrEgressDenied)
		})
	}
	t.Run("MaxRedirects redirects are followed", func(t *testing.T) {
		t.Parallel()
		body, err := get(t, client, srv.URL+"/chain/3")
		require.NoError(t, err)
		require.Equal(t, "end of chain", body)
	})
	t.Run("one more is refused", func(t *testing.T) {
		t.Parallel()
		_, err := get(t, client, srv.URL+"/chain/4")
		require.ErrorIs(t, err, egress.ErrEgressDenied)
		require.ErrorContains(t, err, "more than 3 redirects")
	})
}

// proxyChildEnv marks the child process TestEgressClientIgnoresProxyEnv runs in.
const proxyChildEnv = "AETHERIUM_TEST_PROXY_CHILD"

// net/http reads the proxy environment once per process, and a dependency may
// read it while the binary initializes (the MCP SDK's oauthex probes
// http.DefaultTransport's proxy at init), so setting it inside this process
// proves nothing: the check runs in a child test process whose environment
// names the proxy from its start, and this one counts what reached the proxy.
func TestEgressClientIgnoresProxyEnv(t *testing.T) {
	if os.Getenv(proxyChildEnv) != "" {
		egressIgnoresProxyEnv(t)
		return
	}
	t.Parallel()
	proxy, proxied := countingServer(t, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "via proxy") })
	cmd := exec.Command(os.Args[0], "-test.run=^TestEgressClientIgnoresProxyEnv$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), proxyChildEnv+"=1", "NO_PROXY=", "no_proxy=")
	for _, k := range []string{"HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"} {
		cmd.Env = append(cmd.Env, k+"="+proxy.URL)
	}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "--- PASS: TestEgressClientIgnoresProxyEnv", "the child ran the check: %s", out)
	require.Zero(t, proxied.Load(), "nothing went through the proxy")
}

func egressIgnoresProxyEnv(t *testing.T) {
	target, direct := countingServer(t, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "direct") })
	// A name, not a loopback literal: Go never proxies loopback addresses, so only a
	// name shows whether the environment is honoured.
	dns := startDNS(t, map[string]string{"svc.fleet.test": "127.0.0.1"})
	eg := egress.NewEgress(egress.EgressConfig{Resolver: dns.resolver(), Timeout: 10 * time.Second})
	port := target.Listener.Addr().(*net.TCPAddr).Port
	u := fmt.Sprintf("http://svc.fleet.test:%d/", port)

	// Sanity: the environment would route this request through the proxy.
	pu, err := http.ProxyFromEnvironment(&http.Request{URL: mustParse(t, u)})
	require.NoError(t, err)
	require.NotNil(t, pu, "the child's environment names a proxy")

	body, err := get(t, eg.Client([]string{"svc.fleet.test"}), u)
	require.NoError(t, err)
	require.Equal(t, "direct", body)
	require.EqualValues(t, 1, direct.Load())
}

func mustParse(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	require.NoError(t, err)
	return u
}
