package webhook_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/webhook"
)

// A delivery is signed as the Standard Webhooks specification says, checked here
// by the specification's algorithm written out (not by the package's Verify):
// webhook-id, webhook-timestamp (now) and webhook-signature
// "v1,"+base64(HMAC-SHA256(key, id.timestamp.body)), the key being the base64
// part of a whsec_ secret.
func TestDeliveriesCarryStandardWebhooksSignature(t *testing.T) {
	t.Parallel()
	key := []byte("0123456789abcdef0123456789abcdef")
	secret := "whsec_" + base64.StdEncoding.EncodeToString(key)
	type delivery struct {
		header http.Header
		body   []byte
		at     time.Time
	}
	var mu sync.Mutex
	var got []delivery
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, delivery{r.Header.Clone(), body, time.Now()})
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	f := fleettest.Start(t, fleettest.Options{Configure: func(c *config.Config) {
		c.API.Webhooks = []webhook.Hook{{URL: srv.URL, Secret: secret, Events: []string{"run.started", "run.completed"}}}
	}})
	id := f.Submit("demo", "x", map[string]any{"topic": "t"})
	f.WaitTerminal(id, 60*time.Second)
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 2 }, 60*time.Second, 50*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	ids := map[string]bool{}
	for _, d := range got {
		msgID, ts := d.header.Get("webhook-id"), d.header.Get("webhook-timestamp")
		require.NotEmpty(t, msgID)
		ids[msgID] = true
		sec, err := strconv.ParseInt(ts, 10, 64)
		require.NoError(t, err, "webhook-timestamp %q", ts)
		require.WithinDuration(t, d.at, time.Unix(sec, 0), time.Minute)
		m := hmac.New(sha256.New, key)
		m.Write([]byte(msgID + "." + ts + "."))
		m.Write(d.body)
		require.Equal(t, "v1,"+base64.StdEncoding.EncodeToString(m.Sum(nil)), d.header.Get("webhook-signature"))
		require.Equal(t, "application/json", d.header.Get("Content-Type"))
		require.Empty(t, d.header.Get("X-Aetherium-Signature"), "the old timestamp-less signature is gone")
	}
	require.Len(t, ids, 2, "each delivery has its own id")
}

// The specification's own example (standard-webhooks, libraries' test suites):
// the secret, id, timestamp and payload below sign to this value.
func TestSignMatchesTheSpecificationVector(t *testing.T) {
	t.Parallel()
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	body := []byte(`{"test": 2432232314}`)
	ts := time.Unix(1614265330, 0)
	sig, err := webhook.Sign(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", ts, body)
	require.NoError(t, err)
	require.Equal(t, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", sig)
}

// Verify accepts a fresh delivery and refuses a replay outside the window, a
// timestamp from the future, and any change of body, id, timestamp or secret.
func TestVerifyRefusesReplaysAndTampering(t *testing.T) {
	t.Parallel()
	const secret = "a-long-webhook-secret"
	body := []byte(`{"type":"run.completed"}`)
	sent := time.Unix(1_800_000_000, 0)
	sig, err := webhook.Sign(secret, "0-42", sent, body)
	require.NoError(t, err)
	headers := func(id, ts, sig string) http.Header {
		h := http.Header{}
		h.Set("webhook-id", id)
		h.Set("webhook-timestamp", ts)
		h.Set("webhook-signature", sig)
		return h
	}
	ts := strconv.FormatInt(sent.Unix(), 10)
	good := headers("0-42", ts, sig)
	cases := []struct {
		name   string
		secret string
		h      http.Header
		body   []byte
		now    time.Time
		want   error
	}{
		{"fresh", secret, good, body, sent.Add(time.Second), nil},
		{"at the window's edge", secret, good, body, sent.Add(webhook.DefaultTolerance), nil},
		{"rotation: one of two signatures", secret, headers("0-42", ts, "v1,AAAA "+sig), body, sent, nil},
		{"replayed after the window", secret, good, body, sent.Add(webhook.DefaultTolerance + time.Second), webhook.ErrTimestamp},
		{"replayed a day later", secret, good, body, sent.Add(24 * time.Hour), webhook.ErrTimestamp},
		{"from the future", secret, good, body, sent.Add(-webhook.DefaultTolerance - time.Second), webhook.ErrTimestamp},
		{"replay with a fresh timestamp", secret, headers("0-42", strconv.FormatInt(sent.Add(time.Hour).Unix(), 10), sig), body, sent.Add(time.Hour), webhook.ErrSignature},
		{"another id", secret, headers("0-43", ts, sig), body, sent, webhook.ErrSignature},
		{"another body", secret, good, append(body, ' '), sent, webhook.ErrSignature},
		{"another secret", secret + "x", good, body, sent, webhook.ErrSignature},
		{"an unknown version", secret, headers("0-42", ts, "v2,"+sig[3:]), body, sent, webhook.ErrSignature},
		{"no signature", secret, headers("0-42", ts, ""), body, sent, webhook.ErrMissingHeaders},
		{"no timestamp", secret, headers("0-42", "", sig), body, sent, webhook.ErrMissingHeaders},
		{"a timestamp not in seconds", secret, headers("0-42", "yesterday", sig), body, sent, webhook.ErrTimestamp},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := webhook.Verify(tc.secret, tc.h, tc.body, tc.now, 0)
			if tc.want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tc.want)
		})
	}
	// A tolerance of one second refuses what the default accepts.
	require.ErrorIs(t, webhook.Verify(secret, good, body, sent.Add(2*time.Second), time.Second), webhook.ErrTimestamp)
}

func TestSecretFormats(t *testing.T) {
	t.Parallel()
	key, err := webhook.Key("whsec_MDEyMzQ1Njc4OWFiY2RlZg==")
	require.NoError(t, err)
	require.Equal(t, []byte("0123456789abcdef"), key)
	key, err = webhook.Key("plain-secret-as-written")
	require.NoError(t, err)
	require.Equal(t, []byte("plain-secret-as-written"), key)
	_, err = webhook.Key("whsec_not base64!")
	require.Error(t, err)
	require.Error(t, webhook.ValidateHooks([]webhook.Hook{{URL: "http://x", Secret: "whsec_!!!!!!!!!!!!!!!!!!!!"}}))
	require.Error(t, webhook.ValidateHooks([]webhook.Hook{{URL: "http://x", Secret: "whsec_MDEyMzQ1Njc4OQ=="}}), "a 10-byte key is short")
	require.NoError(t, webhook.ValidateHooks([]webhook.Hook{{URL: "http://x", Secret: "whsec_MDEyMzQ1Njc4OWFiY2RlZg=="}}))
}
