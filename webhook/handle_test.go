package webhook_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/events"
	"github.com/aetherium-engine/aetherium/internal/testdb"
	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/webhook"
)

// A delivery reaches the receiver it was enqueued for, whatever the
// configuration of the process that runs it: a list reordered, a receiver
// removed or no longer taking the event's type (a restart with a new
// configuration, the processes of a rolling one) never sends the event to
// whichever receiver took the hook's place. Errors do not quote the URL: it
// is often the receiver's credential, and a task's error is kept in Redis.
func TestDeliveriesGoToTheReceiverTheyWereEnqueuedFor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := testdb.Store(t)
	const secret = "a-long-webhook-secret"

	var mu sync.Mutex
	got := map[string]int{}
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		got[r.URL.Path]++
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	a := webhook.Hook{URL: srv.URL + "/a/token-of-a", Secret: secret}
	b := webhook.Hook{URL: srv.URL + "/b/token-of-b", Secret: secret}
	aCompletedOnly := webhook.Hook{URL: a.URL, Secret: secret, Events: []string{events.RunCompleted}}

	run := uuid.NewString()
	require.NoError(t, st.CreateRun(ctx, store.Run{ID: run, Prompt: "p", Team: json.RawMessage(`{}`), Variables: json.RawMessage(`{}`), Owner: "alice"}))
	ev, _, err := st.AppendEvent(ctx, run, "k", events.ModelAnswered, "", map[string]string{"k": "v"})
	require.NoError(t, err)

	cases := []struct {
		name   string
		hooks  []webhook.Hook // the configuration of the process that delivers
		task   *asynq.Task    // enqueued when a was api.webhooks[0]
		status int
		want   string // the path that receives it; "" none
		err    string // a delivery that is refused for good
	}{
		{name: "unchanged", hooks: []webhook.Hook{a, b}, task: queue.WebhookTask(0, a.Digest(), ev), want: "/a/token-of-a"},
		{name: "reordered", hooks: []webhook.Hook{b, a}, task: queue.WebhookTask(0, a.Digest(), ev), want: "/a/token-of-a"},
		{name: "removed", hooks: []webhook.Hook{b}, task: queue.WebhookTask(0, a.Digest(), ev), err: "no longer configured"},
		{name: "listed twice, the other entry takes the type", hooks: []webhook.Hook{aCompletedOnly, b, a}, task: queue.WebhookTask(0, a.Digest(), ev), want: "/a/token-of-a"},
		{name: "no longer takes the type", hooks: []webhook.Hook{aCompletedOnly}, task: queue.WebhookTask(0, a.Digest(), ev), err: "no longer takes " + events.ModelAnswered + " events"},
		{name: "an older build's payload names the index", hooks: []webhook.Hook{b, a},
			task: asynq.NewTask(queue.TypeWebhookDeliver, []byte(`{"v":2,"event_id":`+strconv.FormatInt(ev, 10)+`,"hook":0}`)), want: "/b/token-of-b"},
		{name: "receiver fails", hooks: []webhook.Hook{a}, task: queue.WebhookTask(0, a.Digest(), ev), status: http.StatusServiceUnavailable, want: "/a/token-of-a", err: "HTTP 503"},
	}
	for _, tc := range cases {
		// Sequential: the cases share the receiver's counts.
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			clear(got)
			status = max(tc.status, http.StatusOK)
			mu.Unlock()
			d := &webhook.Deliverer{Store: st, Hooks: tc.hooks}
			err := d.Handle(ctx, tc.task)
			if tc.err == "" {
				require.NoError(t, err)
			} else {
				require.ErrorContains(t, err, tc.err)
				require.NotContains(t, err.Error(), "token-of", "an error must not quote the receiver's URL path")
				if tc.want == "" {
					require.ErrorIs(t, err, asynq.SkipRetry, "a delivery with no receiver is refused for good, not retried")
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if tc.want == "" {
				require.Empty(t, got)
			} else {
				require.Equal(t, map[string]int{tc.want: 1}, got)
			}
		})
	}
}
