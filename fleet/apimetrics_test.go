package fleet_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/api"
	"github.com/aetherium-engine/aetherium/fleet"
	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/internal/testinfra"
)

// The api role with tokens serves /metrics without a token only on its metrics
// listener (api.metrics_addr, what Prometheus scrapes); on the API's port
// /metrics asks for a token with the metrics role.
func TestAPIMetricsListener(t *testing.T) {
	t.Parallel()
	addr := func() string {
		p, err := testinfra.FreePort()
		require.NoError(t, err)
		return "127.0.0.1:" + strconv.Itoa(p)
	}
	cfg := fleettest.Config(t)
	cfg.API.Addr, cfg.API.MetricsAddr = addr(), addr()
	cfg.API.Tokens = []api.Token{{Name: "root", SHA256: api.HashToken("root-secret"), Roles: []string{api.RoleAdmin}}}
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
	get := func(url, auth string) (int, string) {
		req, err := http.NewRequest("GET", url, nil)
		require.NoError(t, err)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	require.Eventually(t, func() bool { c, _ := get("http://"+cfg.API.MetricsAddr+"/metrics", ""); return c == 200 }, 30*time.Second, 50*time.Millisecond)
	code, body := get("http://"+cfg.API.MetricsAddr+"/metrics", "")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "aetherium_")
	require.Eventually(t, func() bool { c, _ := get("http://"+cfg.API.Addr+"/healthz", ""); return c == 200 }, 30*time.Second, 50*time.Millisecond)
	code, body = get("http://"+cfg.API.Addr+"/metrics", "")
	require.Equal(t, http.StatusUnauthorized, code, body)
	code, body = get("http://"+cfg.API.Addr+"/metrics", "Bearer root-secret")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "aetherium_")
}
