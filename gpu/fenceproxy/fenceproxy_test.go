package fenceproxy_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/internal/testdb"

	"github.com/aetherium-engine/aetherium/gpu/fenceproxy"
	"github.com/aetherium-engine/aetherium/lease"
)

type rig struct {
	m     *lease.Manager
	proxy *httptest.Server
	seen  atomic.Int64
}

func newRig(t *testing.T, capacity int) *rig {
	t.Helper()
	url := testdb.Redis(t)
	opt, err := redis.ParseURL(url)
	require.NoError(t, err)
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	r := &rig{}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.seen.Add(1)
		if req.URL.Path == "/ws" {
			c, err := websocket.Accept(w, req, nil)
			if err != nil {
				return
			}
			_ = c.Write(req.Context(), websocket.MessageText, []byte(`{"type":"status"}`))
			if req.URL.Query().Get("hold") != "" {
				_, _, _ = c.Read(req.Context()) // until either side goes away
			}
			_ = c.Close(websocket.StatusNormalClosure, "")
			return
		}
		_, _ = io.WriteString(w, "upstream "+req.URL.Path)
	}))
	t.Cleanup(up.Close)
	cfg := fenceproxy.Config{Service: "comfyui", Upstream: up.URL, Redis: url, Capacity: capacity, TTL: time.Minute, Revalidate: 50 * time.Millisecond}
	r.m, err = fenceproxy.NewManager(cfg.WithDefaults(), rdb)
	require.NoError(t, err)
	p, err := fenceproxy.New(cfg, r.m, nil)
	require.NoError(t, err)
	r.proxy = httptest.NewServer(p)
	t.Cleanup(r.proxy.Close)
	return r
}

func (r *rig) get(t *testing.T, h http.Header) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, r.proxy.URL+"/queue", nil)
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestProxyRefusesMissingStaleAndDeadTokens(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newRig(t, 1)
	old, err := r.m.Acquire(ctx, "comfyui", "run-a")
	require.NoError(t, err)
	code, body := r.get(t, hdr(old))
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, "upstream /queue", body)

	// run-a loses its lease; run-b is granted the next token and uses it.
	_, err = r.m.Release(ctx, "comfyui", "run-a", old.Token)
	require.NoError(t, err)
	cur, err := r.m.Acquire(ctx, "comfyui", "run-b")
	require.NoError(t, err)
	code, _ = r.get(t, hdr(cur))
	require.Equal(t, http.StatusOK, code)
	seen := r.seen.Load()

	for _, tc := range []struct {
		name   string
		h      http.Header
		reason string
	}{
		{"no header", http.Header{}, fenceproxy.ReasonMissing},
		{"not a number", tokenOnly("abc"), fenceproxy.ReasonMissing},
		{"older than the newest admitted", hdr(old), fenceproxy.ReasonStale},
		{"never granted", hdr(lease.Grant{Token: cur.Token + 5, Secret: cur.Secret}), fenceproxy.ReasonNotLive},
		{"the live grant without its secret", tokenOnly(strconv.FormatUint(cur.Token, 10)), fenceproxy.ReasonMissing},
		{"the live grant with another's secret", hdr(lease.Grant{Token: cur.Token, Secret: old.Secret}), fenceproxy.ReasonNotLive},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := r.get(t, tc.h)
			require.Equal(t, http.StatusConflict, code)
			ref := fenceproxy.ParseRefusal(code, []byte(body))
			require.NotNil(t, ref, body)
			require.Equal(t, tc.reason, ref.Reason)
			require.Equal(t, "comfyui", ref.Service)
		})
	}
	require.Equal(t, seen, r.seen.Load(), "no refused request reached the service")

	// A released grant is no longer live even though it is the newest.
	_, err = r.m.Release(ctx, "comfyui", "run-b", cur.Token)
	require.NoError(t, err)
	code, body = r.get(t, hdr(cur))
	require.Equal(t, http.StatusConflict, code)
	require.Equal(t, fenceproxy.ReasonNotLive, fenceproxy.ParseRefusal(code, []byte(body)).Reason)

	var st fenceproxy.State
	resp, err := http.Get(r.proxy.URL + fenceproxy.StatePath)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&st))
	require.Equal(t, cur.Token, st.Newest)
	require.Equal(t, int64(2), st.Admitted)
	require.Equal(t, int64(3), st.Refused[fenceproxy.ReasonMissing])
}

// With capacity 2, two live holders interleave: the older live token is still
// admitted after the newer one (only Validate and the epoch fence it).
func TestProxyCapacityTwoAdmitsBothLiveHolders(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newRig(t, 2)
	a, err := r.m.Acquire(ctx, "comfyui", "a")
	require.NoError(t, err)
	b, err := r.m.Acquire(ctx, "comfyui", "b")
	require.NoError(t, err)
	for _, g := range []lease.Grant{b, a, b} {
		code, body := r.get(t, hdr(g))
		require.Equal(t, http.StatusOK, code, body)
	}
	// A token of a newer epoch that was never granted is refused (not live) and
	// does not move the fence: the live holders still pass.
	code, body := r.get(t, hdr(lease.Grant{Token: b.Token + 1<<lease.EpochShift, Secret: b.Secret}))
	require.Equal(t, http.StatusConflict, code, body) // not live
	code, body = r.get(t, hdr(a))
	require.Equal(t, http.StatusOK, code, body)
}

func TestProxyPassesWebSocketUpgrade(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r := newRig(t, 1)
	g, err := r.m.Acquire(ctx, "comfyui", "a")
	require.NoError(t, err)
	h := http.Header{}
	g.SetHeader(h)
	c, _, err := websocket.Dial(ctx, strings.Replace(r.proxy.URL, "http", "ws", 1)+"/ws?clientId=x", &websocket.DialOptions{HTTPHeader: h})
	require.NoError(t, err)
	_, msg, err := c.Read(ctx)
	require.NoError(t, err)
	require.JSONEq(t, `{"type":"status"}`, string(msg))
	_ = c.CloseNow()

	_, resp, err := websocket.Dial(ctx, strings.Replace(r.proxy.URL, "http", "ws", 1)+"/ws?clientId=x", nil)
	require.Error(t, err, "an upgrade without a token is refused")
	require.Equal(t, http.StatusConflict, resp.StatusCode)
}

// An open WebSocket is closed once its lease ends.
func TestProxyClosesWebSocketWhenLeaseEnds(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r := newRig(t, 1)
	g, err := r.m.Acquire(ctx, "comfyui", "a")
	require.NoError(t, err)
	h := http.Header{}
	g.SetHeader(h)
	c, _, err := websocket.Dial(ctx, strings.Replace(r.proxy.URL, "http", "ws", 1)+"/ws?clientId=x&hold=1", &websocket.DialOptions{HTTPHeader: h})
	require.NoError(t, err)
	defer c.CloseNow()
	_, _, err = c.Read(ctx)
	require.NoError(t, err)
	_, err = r.m.Release(ctx, "comfyui", "a", g.Token)
	require.NoError(t, err)
	began := time.Now()
	_, _, err = c.Read(ctx)
	require.Error(t, err, "the connection of a released lease is closed")
	require.NoError(t, ctx.Err())
	t.Logf("closed %v after the release", time.Since(began))
}

func TestProxyFailsClosedWithoutRedis(t *testing.T) {
	t.Parallel()
	cfg := fenceproxy.Config{Service: "comfyui", Upstream: "http://127.0.0.1:1", Redis: "redis://127.0.0.1:1/0", TTL: time.Minute}
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer rdb.Close()
	m, err := fenceproxy.NewManager(cfg.WithDefaults(), rdb)
	require.NoError(t, err)
	p, err := fenceproxy.New(cfg, m, nil)
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/queue", nil)
	req.Header.Set(lease.Header, "7")
	req.Header.Set(lease.SecretHeader, "s")
	p.ServeHTTP(rec, req)
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	require.Equal(t, fenceproxy.ReasonValidateFailed, fenceproxy.ParseRefusal(rec.Code, rec.Body.Bytes()).Reason)
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  fenceproxy.Config
		want string
	}{
		{"no service", fenceproxy.Config{Upstream: "http://x", Redis: "redis://x"}, "service"},
		{"no redis", fenceproxy.Config{Service: "s", Upstream: "http://x"}, "redis"},
		{"bad upstream", fenceproxy.Config{Service: "s", Redis: "redis://x", Upstream: "x:1"}, "upstream"},
		{"ok", fenceproxy.Config{Service: "s", Redis: "redis://x", Upstream: "http://x:1"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.cfg.WithDefaults().Validate()
			if tc.want == "" {
				require.NoError(t, err)
				env := map[string]string{}
				for _, kv := range tc.cfg.WithDefaults().Env() {
					k, v, _ := strings.Cut(kv, "=")
					env[k] = v
				}
				got, err := fenceproxy.FromEnv(func(k string) string { return env[k] })
				require.NoError(t, err)
				require.Equal(t, tc.cfg.WithDefaults(), got)
				return
			}
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// hdr is what the holder of g sends: its token and its secret.
func hdr(g lease.Grant) http.Header {
	h := http.Header{}
	g.SetHeader(h)
	return h
}

// tokenOnly is a request with a fencing number and nothing else.
func tokenOnly(token string) http.Header {
	h := http.Header{}
	h.Set(lease.Header, token)
	return h
}

// The fencing number is public and predictable (epoch<<32 + counter): it orders
// grants, it does not authorize. A request that carries a live grant's number
// without the grant's secret — what anyone who read a listing or counted could
// send — is refused before the service sees it, and does not move the fence.
func TestProxyRefusesTheFencingNumberAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newRig(t, 1)
	g, err := r.m.Acquire(ctx, "comfyui", "run-alice")
	require.NoError(t, err)
	for _, tc := range []struct{ name, token string }{
		{"the live grant's number", strconv.FormatUint(g.Token, 10)},
		{"the next number", strconv.FormatUint(g.Token+1, 10)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := r.get(t, tokenOnly(tc.token))
			require.Equal(t, http.StatusConflict, code, body)
			require.NotNil(t, fenceproxy.ParseRefusal(code, []byte(body)), body)
		})
	}
	require.Zero(t, r.seen.Load(), "a request without the grant's secret reached the service")
	code, body := r.get(t, hdr(g))
	require.Equal(t, http.StatusOK, code, "the holder, with its secret, passes: %s", body)
}
