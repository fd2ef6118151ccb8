package research_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/egress"
	"github.com/aetherium-engine/aetherium/toolbox/research"
	"github.com/aetherium-engine/aetherium/tools"
)

type response struct {
	Status    int               `json:"status"`
	Headers   map[string]string `json:"headers"`
	Body      string            `json:"body"`
	Truncated bool              `json:"truncated"`
	FinalURL  string            `json:"final_url"`
}

type health struct {
	Healthy   bool   `json:"healthy"`
	Status    int    `json:"status"`
	LatencyMS int64  `json:"latency_ms"`
	Error     string `json:"error"`
}

type env struct {
	router *tools.Router
	srv    *httptest.Server
}

// setup registers the research tools on the egress client and starts an upstream on
// loopback (allowed without an allowlist entry, as a private address).
func setup(t *testing.T, cfg research.Config) *env {
	t.Helper()
	reg := tools.NewRegistry()
	research.Register(reg, egress.NewEgress(egress.EgressConfig{Timeout: 10 * time.Second}), cfg, nil)
	mux := http.NewServeMux()
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Method", r.Method)
		w.Header().Add("X-Multi", "a")
		w.Header().Add("X-Multi", "b")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "%s|%s|%s|%s", r.Method, r.Header.Get("X-Test"), r.Header.Get("Content-Type"), body)
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, strings.Repeat("0123456789", 10))
	})
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/echo", http.StatusFound)
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(60 * time.Millisecond)
		fmt.Fprint(w, "ok")
	})
	mux.HandleFunc("/hang", func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	})
	mux.HandleFunc("/down", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "maintenance", http.StatusServiceUnavailable)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &env{router: tools.NewRouter(reg), srv: srv}
}

func (e *env) call(t *testing.T, tool string, args any, out any) error {
	t.Helper()
	raw, err := json.Marshal(args)
	require.NoError(t, err)
	ctx, caller := context.Background(), &tools.Session{AllowedDomains: []string{"127.0.0.1"}, RunID: "r", SessionID: "s", Agent: "a",
		Access: tools.Access{Tools: []string{"http_request", "http_health_check"}}}
	res, err := e.router.Dispatch(ctx, tools.Call{Session: caller, ID: "c", Name: tool, Args: raw})
	if err != nil {
		return err
	}
	require.NoError(t, json.Unmarshal([]byte(res.Content), out), res.Content)
	return nil
}

func TestRegister(t *testing.T) {
	t.Parallel()
	reg := tools.NewRegistry()
	research.Register(reg, nil, research.Config{}, nil)
	for _, name := range []string{"http_request", "http_health_check"} {
		s, ok := reg.Spec(name)
		require.True(t, ok, name)
		require.True(t, s.Outbound, "%s must be gated by egress and DLP", name)
		require.Equal(t, "research", s.Group)
		require.Equal(t, tools.Elevated, s.Tier)
	}
	ctx, caller := context.Background(), &tools.Session{AllowedDomains: []string{"127.0.0.1"}, Access: tools.Access{Tools: []string{"http_request"}}}
	_, err := tools.NewRouter(reg).Dispatch(ctx, tools.Call{Session: caller, ID: "c", Name: "http_request", Args: json.RawMessage(`{"method":"GET","url":"http://127.0.0.1/"}`)})
	require.ErrorContains(t, err, "no egress client configured")
}

func TestHTTPRequest(t *testing.T) {
	t.Parallel()
	e := setup(t, research.Config{MaxBodyBytes: 64})
	cases := []struct {
		name string
		args research.RequestArgs
		want response // Headers: only the keys listed are checked
	}{
		{"GET", research.RequestArgs{Method: "GET", URL: e.srv.URL + "/echo", Headers: map[string]string{"X-Test": "t1"}},
			response{Status: 201, Body: "GET|t1||", Headers: map[string]string{"X-Method": "GET", "X-Multi": "a, b"}}},
		{"lower-case method", research.RequestArgs{Method: "get", URL: e.srv.URL + "/echo"}, response{Status: 201, Body: "GET|||"}},
		{"POST with body and content type", research.RequestArgs{Method: "POST", URL: e.srv.URL + "/echo", Body: `{"a":1}`,
			Headers: map[string]string{"Content-Type": "application/json"}}, response{Status: 201, Body: `POST||application/json|{"a":1}`}},
		{"PUT", research.RequestArgs{Method: "PUT", URL: e.srv.URL + "/echo", Body: "x"}, response{Status: 201, Body: "PUT|||x"}},
		{"PATCH", research.RequestArgs{Method: "PATCH", URL: e.srv.URL + "/echo", Body: "y"}, response{Status: 201, Body: "PATCH|||y"}},
		{"DELETE", research.RequestArgs{Method: "DELETE", URL: e.srv.URL + "/echo"}, response{Status: 201, Body: "DELETE|||"}},
		{"HEAD has no body", research.RequestArgs{Method: "HEAD", URL: e.srv.URL + "/echo"},
			response{Status: 201, Body: "", Headers: map[string]string{"X-Method": "HEAD"}}},
		{"body capped at MaxBodyBytes", research.RequestArgs{Method: "GET", URL: e.srv.URL + "/big"},
			response{Status: 200, Body: strings.Repeat("0123456789", 7)[:64], Truncated: true}},
		{"redirect followed, final URL reported", research.RequestArgs{Method: "GET", URL: e.srv.URL + "/redirect"},
			response{Status: 201, Body: "GET|||", FinalURL: e.srv.URL + "/echo"}},
		{"error status is a result, not an error", research.RequestArgs{Method: "GET", URL: e.srv.URL + "/down"},
			response{Status: 503, Body: "maintenance\n"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var got response
			require.NoError(t, e.call(t, "http_request", tc.args, &got))
			require.Equal(t, tc.want.Status, got.Status)
			require.Equal(t, tc.want.Body, got.Body)
			require.Equal(t, tc.want.Truncated, got.Truncated)
			for k, v := range tc.want.Headers {
				require.Equal(t, v, got.Headers[k], k)
			}
			if tc.want.FinalURL != "" {
				require.Equal(t, tc.want.FinalURL, got.FinalURL)
			}
		})
	}
}

func TestHTTPRequestErrors(t *testing.T) {
	t.Parallel()
	e := setup(t, research.Config{})
	cases := []struct {
		name string
		args any
		want string
	}{
		{"unsupported method", research.RequestArgs{Method: "TRACE", URL: e.srv.URL + "/echo"}, `method "TRACE" is not one of GET, POST, PUT, DELETE, PATCH, HEAD`},
		{"CONNECT", research.RequestArgs{Method: "CONNECT", URL: e.srv.URL}, `method "CONNECT"`},
		{"missing url", map[string]any{"method": "GET"}, "missing required field(s): url"},
		{"unknown argument", map[string]any{"method": "GET", "url": e.srv.URL, "verb": "x"}, "unknown field"},
		{"metadata address refused by the client itself", research.RequestArgs{Method: "GET", URL: "http://169.254.169.254/latest/meta-data/"}, "egress denied"},
		{"timeout", research.RequestArgs{Method: "GET", URL: e.srv.URL + "/hang", TimeoutSeconds: 1}, "deadline exceeded"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var got response
			err := e.call(t, "http_request", tc.args, &got)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestHTTPHealthCheck(t *testing.T) {
	t.Parallel()
	e := setup(t, research.Config{})
	closed := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := l.Addr().String()
		l.Close()
		return "http://" + addr + "/"
	}()

	t.Run("healthy, latency measured", func(t *testing.T) {
		t.Parallel()
		var h health
		require.NoError(t, e.call(t, "http_health_check", research.HealthArgs{URL: e.srv.URL + "/slow"}, &h))
		require.True(t, h.Healthy)
		require.Equal(t, 200, h.Status)
		require.GreaterOrEqual(t, h.LatencyMS, int64(60), "latency includes the server's 60ms")
	})
	t.Run("unhealthy status", func(t *testing.T) {
		t.Parallel()
		var h health
		require.NoError(t, e.call(t, "http_health_check", research.HealthArgs{URL: e.srv.URL + "/down"}, &h))
		require.False(t, h.Healthy)
		require.Equal(t, 503, h.Status)
	})
	t.Run("unreachable is a result, not an error", func(t *testing.T) {
		t.Parallel()
		var h health
		require.NoError(t, e.call(t, "http_health_check", research.HealthArgs{URL: closed}, &h))
		require.False(t, h.Healthy)
		require.Zero(t, h.Status)
		require.Contains(t, h.Error, "connection refused")
	})
	t.Run("metadata address", func(t *testing.T) {
		t.Parallel()
		var h health
		require.NoError(t, e.call(t, "http_health_check", research.HealthArgs{URL: "http://169.254.169.254/"}, &h))
		require.False(t, h.Healthy)
		require.Contains(t, h.Error, "egress denied")
	})
}
