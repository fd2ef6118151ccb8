package api_test

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// redisClients counts the connections the fleet's Redis server holds (the test's
// Redis is private, so every client is the fleet's or this count's own).
func redisClients(t *testing.T, rdb redis.UniversalClient) int {
	t.Helper()
	list, err := rdb.ClientList(context.Background()).Result()
	require.NoError(t, err)
	return strings.Count(strings.TrimSpace(list), "\n") + 1
}

// Open event streams share one Redis subscription, and a client that leaves frees
// its stream at once instead of at the next keepalive.
func TestEventStreamsShareOneSubscription(t *testing.T) {
	t.Parallel()
	f := setup(t)
	runID := f.Submit("demo", "x", map[string]any{"topic": "y"}) // no worker: it stays queued
	const streams = 200
	base := redisClients(t, f.Redis)

	client := fleettest.Client(t, &http.Transport{MaxConnsPerHost: 0, MaxIdleConnsPerHost: -1, DisableKeepAlives: true})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	bodies := make(chan func() error, streams)
	errs := make(chan error, streams)
	for range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(ctx, "GET", f.URL+"/api/runs/"+runID+"/events", nil)
			resp, err := client.Do(req)
			if err != nil {
				errs <- err
				return
			}
			bodies <- resp.Body.Close
			// The stream is live once its first event arrived.
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				if strings.HasPrefix(sc.Text(), "event: run.queued") {
					errs <- nil
					return
				}
			}
			errs <- sc.Err()
		}()
	}
	for range streams {
		require.NoError(t, <-errs)
	}
	require.Equal(t, streams, f.API.StreamWatchers())
	require.LessOrEqual(t, redisClients(t, f.Redis)-base, 2, "200 streams hold at most one pub/sub connection (plus pool growth)")

	close(bodies)
	cancel()
	for c := range bodies {
		_ = c()
	}
	wg.Wait()
	start := time.Now()
	require.Eventually(t, func() bool { return f.API.StreamWatchers() == 0 }, time.Second, 20*time.Millisecond,
		"closed streams still watched: %d", f.API.StreamWatchers())
	t.Logf("200 closed streams released in %s", time.Since(start).Round(time.Millisecond))
}
