package cli

import (
	"bytes"
	"context"
	"net"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/api"
	"github.com/aetherium-engine/aetherium/internal/testdb"

	"github.com/aetherium-engine/aetherium/lease"
)

// setupLeases serves api.LeasesHandler on a loopback port over a real lease
// manager with one holder and one waiter on comfyui.
func setupLeases(t *testing.T) string {
	t.Helper()
	opt, err := redis.ParseURL(testdb.Redis(t))
	require.NoError(t, err)
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	m, err := lease.New(rdb, lease.Config{Services: []lease.Service{{Name: "comfyui", TTL: time.Minute}, {Name: "qwen-tts"}}}, lease.Options{})
	require.NoError(t, err)
	ctx := context.Background()
	_, err = m.Acquire(ctx, "comfyui", "run-a")
	require.NoError(t, err)
	_, err = m.Acquire(ctx, "comfyui", "run-b")
	require.ErrorIs(t, err, lease.ErrWaiting)

	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Get("/api/leases", api.LeasesHandler(m))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = app.Listener(ln) }()
	t.Cleanup(func() { _ = app.Shutdown() })
	return "http://" + ln.Addr().String()
}

func TestLeasesCommand(t *testing.T) {
	t.Parallel()
	base := setupLeases(t)
	cases := []struct {
		name string
		args []string
		code int
		out  []string
		err  string
	}{
		{"table", []string{"--api", base}, 0, []string{"comfyui", "1/1 held", "1 waiting", "holder", "run-a", "token 1", "waiter #1", "run-b", "qwen-tts", "0/1 held"}, ""},
		{"events", []string{"--api", base, "--events", "10"}, 0, []string{"recent lease events:", "acquire", "wait"}, ""},
		{"json", []string{"--api", base, "--json"}, 0, []string{`"services"`, `"holder":"run-a"`}, ""},
		{"bad events", []string{"--api", base, "--events", "-1"}, 1, nil, "--events must be"},
		{"api down", []string{"--api", "http://127.0.0.1:1"}, 1, nil, "is the API running?"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := leasesCmd(context.Background(), tc.args, &out, &errOut)
			require.Equal(t, tc.code, code, errOut.String())
			for _, want := range tc.out {
				require.Contains(t, out.String(), want)
			}
			if tc.err != "" {
				require.Contains(t, errOut.String(), tc.err)
			}
		})
	}
}
