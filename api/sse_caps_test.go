package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/api"
	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/fleettest"
)

// streamFleet serves alice and bob (submit, read) with event streams capped at
// perPrincipal each and total for the process.
func streamFleet(t *testing.T, perPrincipal, total int) *fleettest.Fleet {
	t.Helper()
	return fleettest.Start(t, fleettest.Options{NoWorker: true, Configure: func(c *config.Config) {
		c.API.Tokens = []api.Token{
			{Name: "alice", SHA256: api.HashToken("alice-secret"), Roles: []string{api.RoleSubmit, api.RoleRead}},
			{Name: "bob", SHA256: api.HashToken("bob-secret"), Roles: []string{api.RoleSubmit, api.RoleRead}},
		}
		c.API.MaxStreamsPerPrincipal, c.API.MaxStreams = perPrincipal, total
		// The safety re-read (api.sse_poll) is every stream's one legitimate
		// query: opening 1,000 streams on a loaded machine takes longer than
		// its default 30 s, and the first streams' re-reads would fall in the
		// measured window (77 and 101 in 3 s in CI). Ten minutes keeps the
		// window to what an idle stream must not do.
		c.API.SSEPoll = 10 * time.Minute
	}})
}

// streamer opens event streams as one principal and keeps them open until the
// test ends (or close).
type streamer struct {
	t      *testing.T
	f      *fleettest.Fleet
	client *http.Client
	ctx    context.Context
	mu     sync.Mutex
	open   []io.Closer
}

func newStreamer(t *testing.T, f *fleettest.Fleet) *streamer {
	ctx, cancel := context.WithCancel(context.Background())
	s := &streamer{t: t, f: f, ctx: ctx,
		client: fleettest.Client(t, &http.Transport{MaxConnsPerHost: 0, MaxIdleConnsPerHost: -1, DisableKeepAlives: true})}
	t.Cleanup(func() {
		cancel()
		for _, c := range s.open {
			_ = c.Close()
		}
	})
	return s
}

func (s *streamer) submit(token string) string {
	s.t.Helper()
	req, err := http.NewRequest("POST", s.f.URL+"/api/orchestrator/run-from-template",
		strings.NewReader(`{"template":"demo","prompt":"x","variables":{"topic":"y"}}`))
	require.NoError(s.t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token+"-secret")
	resp, err := s.client.Do(req)
	require.NoError(s.t, err)
	defer resp.Body.Close()
	var out struct {
		RunID string `json:"run_id"`
	}
	require.Equal(s.t, http.StatusAccepted, resp.StatusCode)
	require.NoError(s.t, json.NewDecoder(resp.Body).Decode(&out))
	return out.RunID
}

// stream opens one stream of runID as token. An open stream (200) is read up to
// its first event and kept open; a refused one returns its status and body.
func (s *streamer) stream(token, runID string) (int, string) {
	s.t.Helper()
	code, body, err := s.open1(token, runID)
	require.NoError(s.t, err)
	return code, body
}

// tryStream opens one stream that must be served (from any goroutine: it
// returns what went wrong rather than failing the test).
func (s *streamer) tryStream(token, runID string) error {
	code, body, err := s.open1(token, runID)
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("stream refused: %d %s", code, body)
	}
	return err
}

func (s *streamer) open1(token, runID string) (int, string, error) {
	req, err := http.NewRequestWithContext(s.ctx, "GET", s.f.URL+"/api/runs/"+runID+"/events", nil)
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Authorization", "Bearer "+token+"-secret")
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, "", err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			return 0, "", fmt.Errorf("a refusal is a JSON error, got %q: %s", ct, raw)
		}
		return resp.StatusCode, string(raw), nil
	}
	s.mu.Lock()
	s.open = append(s.open, resp.Body)
	s.mu.Unlock()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "event: run.queued") {
			return resp.StatusCode, "", nil
		}
	}
	return 0, "", fmt.Errorf("a stream ended before its first event: %v", sc.Err())
}

// closeOne closes the oldest open stream.
func (s *streamer) closeOne() {
	_ = s.open[0].Close()
	s.open = s.open[1:]
}

// The target: 1,000 idle streams of one principal, the next refused with
// 429 and a JSON error naming the cap; another principal still has room until the
// process's own cap; a closed stream frees its slot. While the 1,000 streams are
// open, PostgreSQL's transaction rate is the idle rate: a stream reads only when
// the events hub announces its run (or on its slow safety tick, 30 s).
func TestEventStreamsAreCappedAndIdleStreamsDoNotQuery(t *testing.T) {
	t.Parallel()
	const perPrincipal = 1000
	f := streamFleet(t, perPrincipal, perPrincipal+1)
	s := newStreamer(t, f)
	runID := s.submit("alice") // no worker: it stays queued, its streams idle

	// The idle rate without streams, over the same window as below: reads of
	// what a stream reads (its run, its events), not transactions, which the
	// fleet's liveness reports and autovacuum make too.
	tables := []string{"runs", "run_events"}
	const window = 3 * time.Second
	x0 := f.Reads(tables...)
	time.Sleep(window)
	idle := f.Reads(tables...) - x0

	// Opened eight at a time: one by one, the 1,000 round trips were 90 s of CI.
	results := make(chan error, perPrincipal)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < perPrincipal; i += 8 {
				results <- s.tryStream("alice", runID)
			}
		})
	}
	wg.Wait()
	close(results)
	for err := range results {
		require.NoError(t, err)
	}
	require.Equal(t, perPrincipal, f.API.StreamWatchers())

	// The streams' first reads are done when the count stops moving (on a
	// loaded machine the last of 1,000 first reads can come seconds late).
	for settled, last, deadline := 0, f.Reads(tables...), time.Now().Add(15*time.Second); settled < 2 && time.Now().Before(deadline); {
		time.Sleep(250 * time.Millisecond)
		if now := f.Reads(tables...); now == last {
			settled++
		} else {
			settled, last = 0, now
		}
	}
	x1 := f.Reads(tables...)
	time.Sleep(window)
	open := f.Reads(tables...) - x1
	perStream := float64(open-idle) / perPrincipal
	t.Logf("reads of %v in %s: %d idle, %d with %d idle streams open (%.3f per stream)", tables, window, idle, open, perPrincipal, perStream)
	require.LessOrEqual(t, perStream, 0.01, "idle streams query PostgreSQL: %d reads in %s with %d streams, %d without", open, window, perPrincipal, idle)

	code, body := s.stream("alice", runID)
	require.Equal(t, http.StatusTooManyRequests, code, body)
	require.Contains(t, body, "alice already has 1000 event streams open (api.max_streams_per_principal)")

	bobRun := s.submit("bob")
	code, body = s.stream("bob", bobRun)
	require.Equal(t, http.StatusOK, code, "another principal has room: %s", body)
	code, body = s.stream("bob", bobRun)
	require.Equal(t, http.StatusTooManyRequests, code, body)
	require.Contains(t, body, "this API process already holds 1001 event streams (api.max_streams)")

	// A closed stream frees its slot once the server noticed the close.
	s.closeOne()
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, body = s.stream("alice", runID)
		if code == http.StatusOK || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	require.Equal(t, http.StatusOK, code, "a closed stream frees its slot: %s", body)
}
