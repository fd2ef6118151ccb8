package fleet_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/egress"
	"github.com/aetherium-engine/aetherium/fleet"
	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/internal/testinfra"
	"github.com/aetherium-engine/aetherium/webhook/inbound"
)

// api.hooks.addr is a listener of its own that serves only POST /hooks/:id: a
// signed delivery there starts a run, nothing else of the API answers, and
// agents can reach it on no local address (a control-plane endpoint, refused
// by the egress policy at dial time like the API itself).
func TestHooksListener(t *testing.T) {
	t.Parallel()
	addr := func() string {
		p, err := testinfra.FreePort()
		require.NoError(t, err)
		return "127.0.0.1:" + strconv.Itoa(p)
	}
	cfg := fleettest.Config(t)
	cfg.API.Addr, cfg.API.Hooks.Addr = addr(), addr()
	ctx, cancel := context.WithCancel(context.Background())
	f, err := fleet.OpenAPI(ctx, cfg, fleettest.Logger(t), fleet.Options{Migrate: true})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- f.RunAPI(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("api stopped with: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("api did not stop")
		}
		f.Close()
	})
	do := func(method, url string, hdr http.Header, body []byte) (int, []byte) {
		req, err := http.NewRequest(method, url, bytes.NewReader(body))
		require.NoError(t, err)
		if hdr != nil {
			req.Header = hdr
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, nil
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, raw
	}
	hooksURL, apiURL := "http://"+cfg.API.Hooks.Addr, "http://"+cfg.API.Addr
	require.Eventually(t, func() bool { c, _ := do("GET", apiURL+"/healthz", nil, nil); return c == 200 }, 30*time.Second, 50*time.Millisecond)
	require.Eventually(t, func() bool { c, _ := do("POST", hooksURL+"/hooks/x", nil, []byte("{}")); return c == 404 }, 30*time.Second, 50*time.Millisecond)

	// Created on the API (no tokens: the local principal), delivered to the hooks listener.
	req, _ := json.Marshal(map[string]any{"name": "ci", "scheme": "hmac", "template": "demo", "prompt": "Build {{.topic}}", "variables": map[string]string{"topic": "/ref"}})
	code, raw := do("POST", apiURL+"/api/hooks", nil, req)
	require.Equal(t, http.StatusCreated, code, string(raw))
	var hook struct{ ID, Secret string }
	require.NoError(t, json.Unmarshal(raw, &hook))
	body := []byte(`{"ref":"main"}`)
	now := time.Now()
	hdr := http.Header{}
	hdr.Set(inbound.HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
	hdr.Set(inbound.HeaderDelivery, "build-1")
	hdr.Set(inbound.HeaderSignature, inbound.SignHMAC(hook.Secret, now, "build-1", body))
	code, raw = do("POST", hooksURL+"/hooks/"+hook.ID, hdr, body)
	require.Equal(t, http.StatusAccepted, code, string(raw))
	// Only deliveries: the API's routes are not served there.
	code, _ = do("GET", hooksURL+"/api/runs", nil, nil)
	require.Equal(t, http.StatusNotFound, code)
	code, _ = do("GET", hooksURL+"/api/hooks", nil, nil)
	require.Equal(t, http.StatusNotFound, code)

	// The control plane: the listener's port is refused on every local address.
	_, port, err := net.SplitHostPort(cfg.API.Hooks.Addr)
	require.NoError(t, err)
	for _, a := range []string{cfg.API.Hooks.Addr, "127.0.0.2:" + port, "[::1]:" + port} {
		err := f.Policy.CheckDial("tcp", a)
		require.ErrorIs(t, err, egress.ErrEgressDenied, a)
		require.ErrorContains(t, err, egress.EndpointHooks, a)
	}
}
