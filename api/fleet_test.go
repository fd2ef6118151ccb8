package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/api"
	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/lease"
	"github.com/aetherium-engine/aetherium/queue"
)

// request sends a request to base (a fleet's API) as token's principal ("" for
// none: the secret is token+"-secret", as in ownership_test.go), with extra
// headers; answers are checked against the OpenAPI document (f.Client).
func request(t *testing.T, f *fleettest.Fleet, base, token, method, path string, body any, hdr map[string]string) (int, http.Header, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		require.NoError(t, err)
		rd = bytes.NewReader(raw)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token+"-secret")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := f.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header, raw
}

// tokensOf configures a token per name (secret name+"-secret").
func tokensOf(c *config.Config, tokens map[string][]string) {
	c.API.Tokens = nil
	for name, roles := range tokens {
		c.API.Tokens = append(c.API.Tokens, api.Token{Name: name, SHA256: api.HashToken(name + "-secret"), Roles: roles})
	}
}

// GET /api/fleet over a real fleet: runs in flight counted in the caller's
// scope, a task in the maintenance queue pending, the GPU service's capacity,
// the configured limits, asynqmon; then a worker started shows up.
func TestFleetPage(t *testing.T) {
	t.Parallel()
	f := fleettest.Start(t, fleettest.Options{NoWorker: true, Configure: func(c *config.Config) {
		tokensOf(c, map[string][]string{
			"alice":   {api.RoleSubmit, api.RoleRead},
			"bob":     {api.RoleSubmit, api.RoleRead},
			"auditor": {api.RoleReadAll},
			"root":    {api.RoleAdmin},
		})
		c.API.MaxRunsInFlight = 7
		c.Streams.Leases = lease.Config{Services: []lease.Service{{Name: "comfyui", Capacity: 2, TTL: time.Minute}}}
	}})
	submit := func(who string) {
		code, _, raw := request(t, f, f.URL, who, "POST", "/api/orchestrator/run-from-template",
			map[string]any{"template": "demo", "prompt": "x", "variables": map[string]any{"topic": "t"}}, nil)
		require.Equal(t, http.StatusAccepted, code, string(raw))
	}
	submit("alice")
	submit("alice")
	submit("bob")
	// Without a worker nothing takes it: it stays pending.
	_, err := f.Fleet.Client.Enqueue(asynq.NewTask("test:fleet-page", nil), asynq.Queue(queue.QueueMaintenance))
	require.NoError(t, err)
	_, err = f.Leases.Acquire(context.Background(), "comfyui", "7d444840-9dc0-11d1-b245-5ffdce74fad2")
	require.NoError(t, err)

	get := func(who string) api.FleetView {
		t.Helper()
		code, _, raw := request(t, f, f.URL, who, "GET", "/api/fleet", nil, nil)
		require.Equal(t, http.StatusOK, code, string(raw))
		var v api.FleetView
		require.NoError(t, json.Unmarshal(raw, &v))
		return v
	}
	for _, tc := range []struct {
		who    string
		queued int
	}{
		{"alice", 2}, // her own runs only, as GET /api/runs lists them
		{"bob", 1},
		{"auditor", 3}, // read_all counts everyone's
		{"root", 3},
	} {
		t.Run("runs of "+tc.who, func(t *testing.T) {
			v := get(tc.who)
			require.Equal(t, api.FleetRuns{Queued: tc.queued}, v.Runs)
		})
	}

	v := get("alice")
	require.Empty(t, v.Workers, "no worker runs yet")
	byName := map[string]api.FleetQueue{}
	for _, q := range v.Queues {
		byName[q.Name] = q
	}
	for _, name := range queue.Queues() {
		require.Contains(t, byName, name, "every queue of the fleet is listed, zeros included")
	}
	require.Equal(t, 1, byName[queue.QueueMaintenance].Pending, "the queued task is pending")
	require.Equal(t, 1, byName[queue.QueueMaintenance].Size)
	require.Equal(t, []api.FleetLease{{Service: "comfyui", Capacity: 2, Held: 1}}, v.Leases)
	limits := map[string]string{}
	for _, l := range v.Limits {
		require.NotEmpty(t, l.Why, l.Name)
		limits[l.Name] = l.Value
	}
	require.Equal(t, "8", limits["worker.concurrency"], "fleettest's worker.concurrency")
	require.Equal(t, "7", limits["api.max_runs_in_flight"])
	require.Equal(t, "fair", limits["fairness.dispatch"])
	require.Equal(t, "2", limits["streams.leases.services[comfyui].capacity"])
	require.Equal(t, api.MonitoringInfo{Path: "/monitoring/", Available: true, ReadOnly: true, Session: api.MonitoringSessionPath}, v.Monitoring)

	// A worker registers itself in Redis; the page shows it.
	f.StartWorker()
	host, _ := os.Hostname()
	require.Eventually(t, func() bool { return len(get("alice").Workers) == 1 }, 20*time.Second, 100*time.Millisecond)
	w := get("alice").Workers[0]
	require.Equal(t, os.Getpid(), w.PID)
	require.Equal(t, host, w.Host)
	require.Equal(t, 8, w.Concurrency)
	require.Equal(t, queue.Weights(), w.Queues)
	require.Equal(t, "active", w.Status)
	_, err = time.Parse(time.RFC3339, w.Started)
	require.NoError(t, err)

	// A read token is needed.
	code, _, _ := request(t, f, f.URL, "", "GET", "/api/fleet", nil, nil)
	require.Equal(t, http.StatusUnauthorized, code)
}

// Redis away: the fleet page says so with a 503, not a 500. The API is built
// by hand on the fleet's PostgreSQL and a Redis address nothing listens on (a
// fleet does not open without Redis).
func TestFleetPageWithoutRedis(t *testing.T) {
	t.Parallel()
	f := fleettest.Start(t, fleettest.Options{NoWorker: true})
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { _ = dead.Close() })
	srv := api.New(api.Config{}, api.Deps{Store: f.Store, Redis: dead, RedisOpt: asynq.RedisClientOpt{Addr: "127.0.0.1:1"}, Log: fleettest.Logger(t)})
	t.Cleanup(func() { _ = srv.Close() })
	req := httptest.NewRequest("GET", "/api/fleet", nil)
	req.Host = "127.0.0.1"
	resp, err := srv.App.Test(req, 30_000)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, string(raw))
	require.Contains(t, string(raw), "Redis is unreachable")
	require.NoError(t, fleettest.ValidateResponse(req, resp.StatusCode, resp.Header, raw))
}
