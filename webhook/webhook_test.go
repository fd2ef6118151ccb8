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

// A decision a person must make is announced: approval.requested goes out signed,
// with what the approver or the asked person needs (the question, its choices,
// the approval's id to answer).
func TestPendingDecisionsAreAnnouncedSigned(t *testing.T) {
	t.Parallel()
	const secret = "another-long-webhook-secret"
	got := make(chan map[string]any, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if webhook.Verify(secret, r.Header, body, time.Now(), 0) != nil {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var e map[string]any
		_ = json.Unmarshal(body, &e)
		got <- e
	}))
	t.Cleanup(srv.Close)
	f := fleettest.Start(t, fleettest.Options{Configure: func(c *config.Config) {
		c.API.Webhooks = []webhook.Hook{{URL: srv.URL, Secret: secret, Events: []string{"approval.requested"}}}
	}})
	id := f.SubmitTeam(map[string]any{
		"name": "asker", "model": map[string]any{"provider": "script"},
		"supervisor": map[string]any{"name": "lead", "prompt": "p", "mcp_servers": []string{"orchestration", "comms"}},
		"script": map[string]any{"agents": map[string]any{"lead": []map[string]any{
			{"calls": []map[string]any{{"tool": "ask_user", "args": map[string]any{"question": "Ship it?", "choices": []string{"yes", "no"}}}}},
			{"calls": []map[string]any{{"tool": "reply", "args": map[string]any{"message": "ok"}}}},
		}}},
	}, "ask")
	var e map[string]any
	select {
	case e = <-got:
	case <-time.After(60 * time.Second):
		t.Fatal("no approval.requested delivery")
	}
	require.Equal(t, "approval.requested", e["type"])
	require.Equal(t, id, e["run_id"])
	data := e["data"].(map[string]any)
	require.Equal(t, "question", data["kind"])
	require.Equal(t, "Ship it?", data["question"])
	require.Equal(t, []any{"yes", "no"}, data["choices"])
	apr := data["approval_id"].(string)
	code, raw := f.Do("POST", "/api/approvals/"+apr+"/answer", map[string]string{"answer": "yes"}, nil)
	require.Equal(t, http.StatusOK, code, string(raw))
	require.Equal(t, "completed", f.WaitTerminal(id, 60*time.Second).Status)
}
