package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/api"
	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/lease"
)

// setupLeases mounts the handler alone; api.Error answers like the API's own
// error handler (status, {"error", "field"}).
func setupLeases(t *testing.T, m *lease.Manager) *fiber.App {
	t.Helper()
	app := fiber.New(fiber.Config{DisableStartupMessage: true, ErrorHandler: func(c *fiber.Ctx, err error) error {
		var ae *api.Error
		if errors.As(err, &ae) {
			return c.Status(ae.Status).JSON(fiber.Map{"error": ae.Message, "field": ae.Field})
		}
		return c.Status(500).JSON(fiber.Map{"error": err.Error()})
	}})
	app.Get("/api/leases", api.LeasesHandler(m))
	return app
}

func getLeases(t *testing.T, app *fiber.App, path string) (int, map[string]json.RawMessage) {
	t.Helper()
	req := httptest.NewRequest("GET", path, nil)
	resp, err := app.Test(req, 10_000)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, fleettest.ValidateResponse(req, resp.StatusCode, resp.Header, raw))
	var body map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(raw, &body), string(raw))
	return resp.StatusCode, body
}

func TestLeasesHandlerShowsHoldersWaitersAndEvents(t *testing.T) {
	t.Parallel()
	opt, err := redis.ParseURL(fleettest.Redis(t))
	require.NoError(t, err)
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	m, err := lease.New(rdb, lease.Config{Services: []lease.Service{{Name: "comfyui", TTL: time.Minute}, {Name: "qwen-tts"}}}, lease.Options{})
	require.NoError(t, err)
	ctx := context.Background()
	g, err := m.Acquire(ctx, "comfyui", "run-a")
	require.NoError(t, err)
	_, err = m.Acquire(ctx, "comfyui", "run-b")
	require.ErrorIs(t, err, lease.ErrWaiting)
	app := setupLeases(t, m)

	cases := []struct {
		name, path string
		code       int
		events     int
	}{
		{"services only", "/api/leases", 200, 0},
		{"with events", "/api/leases?events=5", 200, 2},
		{"bad events", "/api/leases?events=x", 400, 0},
		{"too many events", "/api/leases?events=5000", 400, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, body := getLeases(t, app, tc.path)
			require.Equal(t, tc.code, code)
			if code != 200 {
				require.Contains(t, string(body["error"]), "events must be")
				require.Equal(t, `"events"`, string(body["field"]))
				return
			}
			var svcs []lease.ServiceState
			require.NoError(t, json.Unmarshal(body["services"], &svcs))
			require.Len(t, svcs, 2)
			require.Equal(t, "comfyui", svcs[0].Service)
			require.Len(t, svcs[0].Holders, 1)
			require.Equal(t, "run-a", svcs[0].Holders[0].Holder)
			require.Equal(t, g.Token, svcs[0].Holders[0].Token)
			require.Len(t, svcs[0].Waiters, 1)
			require.Equal(t, "run-b", svcs[0].Waiters[0].Holder)
			require.Empty(t, svcs[1].Holders)
			var evs []lease.Event
			if raw, ok := body["events"]; ok {
				require.NoError(t, json.Unmarshal(raw, &evs))
			}
			require.Len(t, evs, tc.events)
			if tc.events > 0 {
				require.Equal(t, "acquire", evs[0].Type)
				require.Equal(t, "wait", evs[1].Type)
			}
		})
	}
}

func TestLeasesHandlerWithoutGPUServices(t *testing.T) {
	t.Parallel()
	code, body := getLeases(t, setupLeases(t, nil), "/api/leases")
	require.Equal(t, 200, code)
	require.JSONEq(t, `[]`, string(body["services"]))
}
