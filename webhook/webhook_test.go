package webhook_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/webhook"
)

func TestRunEventsAreDeliveredSigned(t *testing.T) {
	t.Parallel()
	const secret = "a-long-webhook-secret"
	var mu sync.Mutex
	var got []map[string]any
	var badSig int
	fails := 1
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		if fails > 0 { // the first delivery fails: it must be retried, not lost
			fails--
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		if webhook.Verify(secret, r.Header, body, time.Now(), 0) != nil {
			badSig++
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var e map[string]any
		_ = json.Unmarshal(body, &e)
		if e["type"] != r.Header.Get("X-Aetherium-Event") {
			badSig++
		}
		got = append(got, e)
	}))
	t.Cleanup(srv.Close)
	f := fleettest.Start(t, fleettest.Options{Configure: func(c *config.Config) {
		c.API.Webhooks = []webhook.Hook{{URL: srv.URL, Secret: secret, Events: []string{"run.started", "run.completed"}}}
	}})
	id := f.Submit("demo", "x", map[string]any{"topic": "t"})
	f.WaitTerminal(id, 60*time.Second)
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == 2
	}, 60*time.Second, 50*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	require.Zero(t, badSig)
	types := map[string]bool{}
	for _, e := range got {
		require.Equal(t, id, e["run_id"])
		types[e["type"].(string)] = true
	}
	require.Equal(t, map[string]bool{"run.started": true, "run.completed": true}, types)
}
