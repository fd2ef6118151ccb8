package fleet

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/internal/testdb"
)

// TestTrafficReload: the llm section's limits and the price file reload when
// their files change; a broken file keeps the last good ones.
func TestTrafficReload(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfgPath, pricesPath := filepath.Join(dir, "aetherium.yaml"), filepath.Join(dir, "prices.yaml")
	write := func(path, body string) { require.NoError(t, os.WriteFile(path, []byte(body), 0o600)) }
	limits := func(rpm string) string {
		return "llm:\n  prices: " + pricesPath + "\n  limits:\n    - {provider: openai, rpm: " + rpm + "}\n"
	}
	prices := func(input string) string {
		return "currency: USD\nas_of: 2026-12-01\nmodels:\n  - {provider: openai, model: house-model, input: " + input + ", output: 1}\n"
	}
	write(pricesPath, prices("2"))
	write(cfgPath, limits("60"))
	cfg, err := config.LoadFrom(cfgPath, func(string) (string, bool) { return "", false })
	require.NoError(t, err)
	opt, err := redis.ParseURL(testdb.Redis(t))
	require.NoError(t, err)
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { rdb.Close() })
	tr, err := newTraffic(cfg, rdb, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	require.NoError(t, tr.Watch(ctx))
	rpm := func() int { return tr.Governor.Config().Limits[0].RPM }
	price := func() int64 {
		l, ok := tr.Prices().Lookup("openai", "house-model")
		require.True(t, ok)
		return int64(l.Input)
	}
	require.Equal(t, 60, rpm())
	require.EqualValues(t, 2_000_000, price())

	write(cfgPath, limits("30"))
	require.Eventually(t, func() bool { return rpm() == 30 }, 5*time.Second, 20*time.Millisecond, "the new limits are in force")

	n := tr.reloaded.Load()
	write(cfgPath, limits("-5"))
	time.Sleep(500 * time.Millisecond)
	require.Equal(t, n, tr.reloaded.Load(), "a refused limit is not a reload")
	require.Equal(t, 30, rpm(), "a negative limit keeps the last good ones")
	write(cfgPath, "llm: [not, a, map")
	time.Sleep(500 * time.Millisecond)
	require.Equal(t, 30, rpm(), "broken YAML keeps the last good ones")

	write(cfgPath, limits("45"))
	require.Eventually(t, func() bool { return rpm() == 45 }, 5*time.Second, 20*time.Millisecond)
	write(pricesPath, prices("3.5"))
	require.Eventually(t, func() bool { return price() == 3_500_000 }, 5*time.Second, 20*time.Millisecond, "the price file reloads")
	write(pricesPath, prices("-1"))
	time.Sleep(500 * time.Millisecond)
	require.EqualValues(t, 3_500_000, price(), "a bad price keeps the last good table")
}
