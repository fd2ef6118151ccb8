package fleet_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/fleettest"
)

// A non-idempotent call interrupted mid-flight is not run again after redelivery:
// the model is told its outcome is unknown, and the audit trail says so.
func TestInterruptedNonIdempotentCallIsOutcomeUnknown(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		select {
		case started <- struct{}{}:
		default:
		}
		select { // hangs until the worker gives up on it
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) }) // runs first: frees a handler the client left behind
	f := fleettest.Start(t, fleettest.Options{})
	tm := team([]map[string]any{
		call("http_request", map[string]any{"method": "POST", "url": srv.URL + "/charge", "body": "once"}),
		{"say": "done"},
	}, loopback)
	tm["workers"] = []map[string]any{{"name": "writer", "prompt": "w", "mcp_servers": []string{"research"}}}
	id := f.SubmitTeam(tm, "charge once")

	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the request never reached the server")
	}
	f.StopWorker() // graceful stop: the in-flight call is cancelled after the timeout
	f.StartWorker()
	run := f.WaitTerminal(id, 60*time.Second)
	require.Equal(t, "completed", run.Status, run.Error)
	require.Equal(t, int32(1), hits.Load(), "the POST was not sent a second time")

	ctx := context.Background()
	var msgs string
	require.NoError(t, f.Store.Pool.QueryRow(ctx, `SELECT session_history(id)::text FROM sessions WHERE run_id = $1 AND agent = 'writer'`, id).Scan(&msgs))
	require.Contains(t, msgs, "outcome unknown")
	f.Audit.Flush()
	rows, err := f.Store.RunAudit(ctx, id, 100)
	require.NoError(t, err)
	var decisions []string
	for _, r := range rows {
		if r.Tool == "http_request" {
			decisions = append(decisions, r.Decision)
		}
	}
	require.Equal(t, []string{"unknown"}, decisions, "one audit row for the call, saying its outcome is unknown")
}
