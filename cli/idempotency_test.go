package cli

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/fleettest"
)

// aetherium run submits under an Idempotency-Key: the same key again answers
// with the first run, another request under it is refused, and a connection
// that dies after the API took the run but before its answer arrived is sent
// again without starting a second run.
func TestRunIdempotencyKey(t *testing.T) {
	t.Parallel()
	f := fleettest.Start(t, fleettest.Options{NoWorker: true})
	cli := func(base string, args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := Main(append(args, "--api", base), &out, &errOut)
		return code, out.String(), errOut.String()
	}
	runIDs := regexp.MustCompile(`run ([0-9a-f-]{36})`)
	runs := func() int {
		var n int
		require.NoError(t, f.Store.Pool.QueryRow(context.Background(), `SELECT count(*) FROM runs`).Scan(&n))
		return n
	}

	code, out, errOut := cli(f.URL, "run", "--template", "demo", "--var", "topic=tides", "--prompt", "write", "--idempotency-key", "nightly-1")
	require.Zero(t, code, errOut)
	first := runIDs.FindStringSubmatch(out)
	require.NotNil(t, first, out)
	require.Contains(t, out, "queued")

	code, out, errOut = cli(f.URL, "run", "--idempotency-key", "nightly-1", "--template", "demo", "--var", "topic=tides", "--prompt", "write")
	require.Zero(t, code, errOut)
	require.Contains(t, out, "run "+first[1]+" was already submitted under idempotency key nightly-1")

	code, _, errOut = cli(f.URL, "run", "--template", "demo", "--var", "topic=storms", "--prompt", "write", "--idempotency-key", "nightly-1")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "HTTP 422: this Idempotency-Key was used with another request")
	require.Equal(t, 1, runs())

	// A proxy that loses the first answer: the API stored the run, the client
	// saw the connection die. The resend under the CLI's own key is answered
	// with that run.
	target, err := url.Parse(f.URL)
	require.NoError(t, err)
	proxy := httputil.NewSingleHostReverseProxy(target)
	var posts atomic.Int32
	flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && posts.Add(1) == 1 {
			proxy.ServeHTTP(httptest.NewRecorder(), r) // the API answers; the answer is lost
			conn, _, err := w.(http.Hijacker).Hijack()
			require.NoError(t, err)
			require.NoError(t, conn.Close())
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(flaky.Close)
	code, out, errOut = cli(flaky.URL, "run", "--template", "demo", "--var", "topic=waves", "--prompt", "write")
	require.Zero(t, code, errOut)
	require.EqualValues(t, 2, posts.Load(), "sent again after the lost answer")
	require.Contains(t, out, "was already submitted under idempotency key cli-")
	require.Equal(t, 2, runs(), "one run for the lost answer and its resend")
}
