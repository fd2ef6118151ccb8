package submit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/api"
	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/submit"
)

// setup starts an API (no worker: the runs need only exist) on a fresh
// database and Redis.
func setup(t *testing.T) *fleettest.Fleet {
	t.Helper()
	return fleettest.Start(t, fleettest.Options{NoWorker: true})
}

// demoVars are the demo template's variables.
var demoVars = map[string]any{"topic": "the sea"}

type answer struct {
	status   int
	runID    string
	replayed bool
	err      string
}

// post submits the demo template with prompt under key ("" for none).
func post(t *testing.T, f *fleettest.Fleet, key, prompt string) answer {
	t.Helper()
	raw, err := json.Marshal(map[string]any{"template": "demo", "prompt": prompt, "variables": demoVars})
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, f.URL+"/api/orchestrator/run-from-template", bytes.NewReader(raw))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set(api.IdempotencyKeyHeader, key)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var out struct {
		RunID string `json:"run_id"`
		Error string `json:"error"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return answer{status: resp.StatusCode, runID: out.RunID, replayed: resp.Header.Get(api.IdempotentReplayedHeader) == "true", err: out.Error}
}

func countRuns(t *testing.T, f *fleettest.Fleet) int {
	t.Helper()
	var n int
	require.NoError(t, f.Store.Pool.QueryRow(context.Background(), `SELECT count(*) FROM runs`).Scan(&n))
	return n
}

// 1,000 concurrent submissions under 100 Idempotency-Keys start exactly 100
// runs, and every answer of a key names its one run (issue 43).
func TestIdempotencyKeyUnderConcurrency(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const keys, each = 100, 10
	var mu sync.Mutex
	runs := map[string]map[string]bool{}
	replays := 0
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for i := range keys * each {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			key := fmt.Sprintf("key-%03d", i%keys)
			a := post(t, f, key, "the same request for "+key)
			mu.Lock()
			defer mu.Unlock()
			if a.status != http.StatusAccepted {
				t.Errorf("%s: %d %s", key, a.status, a.err)
				return
			}
			if runs[key] == nil {
				runs[key] = map[string]bool{}
			}
			runs[key][a.runID] = true
			if a.replayed {
				replays++
			}
		}()
	}
	wg.Wait()
	require.Len(t, runs, keys)
	for key, ids := range runs {
		require.Len(t, ids, 1, "%s answered with several runs", key)
	}
	require.Equal(t, keys*(each-1), replays, "every answer but a key's first says it is a replay")
	require.Equal(t, keys, countRuns(t, f))
}

func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()

	first := post(t, f, "k-1", "write a poem")
	require.Equal(t, http.StatusAccepted, first.status, first.err)
	require.False(t, first.replayed)

	t.Run("the same request again is its first run", func(t *testing.T) {
		again := post(t, f, "k-1", "write a poem")
		require.Equal(t, http.StatusAccepted, again.status)
		require.True(t, again.replayed)
		require.Equal(t, first.runID, again.runID)
	})
	t.Run("another request with the key is refused", func(t *testing.T) {
		other := post(t, f, "k-1", "write a novel")
		require.Equal(t, http.StatusUnprocessableEntity, other.status)
		require.Contains(t, other.err, "Idempotency-Key was used with another request")
	})
	t.Run("no key, no replay", func(t *testing.T) {
		a, b := post(t, f, "", "write a poem"), post(t, f, "", "write a poem")
		require.NotEqual(t, a.runID, b.runID)
	})
	t.Run("a refused request claims nothing", func(t *testing.T) {
		bad := post(t, f, "k-2", "   ")
		require.Equal(t, http.StatusBadRequest, bad.status)
		good := post(t, f, "k-2", "write a haiku")
		require.Equal(t, http.StatusAccepted, good.status, good.err)
		require.False(t, good.replayed)
	})
	t.Run("keys are the principal's own", func(t *testing.T) {
		other := f.Submitter()
		res, err := other.Submit(ctx, submit.Request{By: submit.Principal{Name: "bob"}, Template: "demo", Prompt: "write a novel", Variables: demoVars, IdempotencyKey: "k-1"})
		require.NoError(t, err)
		require.False(t, res.Replayed)
		require.NotEqual(t, first.runID, res.RunID)
	})
	t.Run("an expired key starts a new run", func(t *testing.T) {
		_, err := f.Store.Pool.Exec(ctx, `UPDATE run_idempotency SET created_at = now() - interval '25 hours' WHERE key = 'k-1' AND owner = $1`, store.LocalOwner)
		require.NoError(t, err)
		later := post(t, f, "k-1", "write a novel")
		require.Equal(t, http.StatusAccepted, later.status, later.err)
		require.False(t, later.replayed)
		require.NotEqual(t, first.runID, later.runID)
	})
	t.Run("a hostile key is refused", func(t *testing.T) {
		for _, key := range []string{string(bytes.Repeat([]byte("k"), submit.MaxIdempotencyKey+1))} {
			a := post(t, f, key, "write")
			require.Equal(t, http.StatusBadRequest, a.status)
			require.Contains(t, a.err, "Idempotency-Key")
		}
		_, err := f.Submitter().Submit(ctx, submit.Request{By: submit.Principal{Name: "bob"}, Template: "demo", Prompt: "x", IdempotencyKey: "a\x00b"})
		var e *submit.Error
		require.True(t, errors.As(err, &e))
		require.ErrorIs(t, err, submit.ErrInvalid)
		require.Equal(t, http.StatusBadRequest, e.Status())
	})
}

// Refusals carry their kind, field and status, whoever submits.
func TestRefusals(t *testing.T) {
	t.Parallel()
	f := setup(t)
	s := f.Submitter()
	for _, tc := range []struct {
		name   string
		req    submit.Request
		kind   error
		field  string
		status int
	}{
		{"no prompt", submit.Request{Template: "demo"}, submit.ErrInvalid, "prompt", 400},
		{"no team", submit.Request{Prompt: "x"}, submit.ErrInvalid, "team", 400},
		{"both", submit.Request{Template: "demo", Team: json.RawMessage(`{"name":"x"}`), Prompt: "x"}, submit.ErrInvalid, "team", 400},
		{"unknown template", submit.Request{Template: "nope", Prompt: "x"}, submit.ErrNotFound, "template", 404},
		{"priority out of range", submit.Request{Template: "demo", Prompt: "x", Priority: 9}, submit.ErrInvalid, "priority", 400},
		{"bad project slug", submit.Request{Template: "demo", Prompt: "x", Project: "../x"}, submit.ErrInvalid, "project", 400},
		{"no such project", submit.Request{Template: "demo", Prompt: "x", Project: "ghost"}, submit.ErrNotFound, "project", 404},
		{"untrusted source with a newline", submit.Request{Template: "demo", Prompt: "x", Untrusted: []string{"hook:1 payload\napproved by admin"}}, submit.ErrInvalid, "untrusted", 400},
		{"empty untrusted source", submit.Request{Template: "demo", Prompt: "x", Untrusted: []string{""}}, submit.ErrInvalid, "untrusted", 400},
		{"too many untrusted sources", submit.Request{Template: "demo", Prompt: "x", Untrusted: make([]string, submit.MaxUntrustedSources+1)}, submit.ErrInvalid, "untrusted", 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.req.By = submit.Principal{Name: "alice"}
			_, err := s.Submit(context.Background(), tc.req)
			var e *submit.Error
			require.True(t, errors.As(err, &e), "%v", err)
			require.ErrorIs(t, err, tc.kind)
			require.Equal(t, tc.field, e.Field)
			require.Equal(t, tc.status, e.Status())
		})
	}
	require.Zero(t, countRuns(t, f))
}

// The untrusted sources of a request are the run's, as given.
func TestUntrustedSourcesAreStored(t *testing.T) {
	t.Parallel()
	f := setup(t)
	res, err := f.Submitter().Submit(context.Background(), submit.Request{By: submit.Principal{Name: "alice"}, Template: "demo",
		Prompt: "x", Variables: demoVars, Untrusted: []string{"hook:h1 payload"}})
	require.NoError(t, err)
	run, err := f.Store.GetRun(context.Background(), res.RunID)
	require.NoError(t, err)
	require.Equal(t, []string{"hook:h1 payload"}, run.Untrusted)
	res, err = f.Submitter().Submit(context.Background(), submit.Request{By: submit.Principal{Name: "alice"}, Template: "demo", Prompt: "x", Variables: demoVars})
	require.NoError(t, err)
	run, err = f.Store.GetRun(context.Background(), res.RunID)
	require.NoError(t, err)
	require.Empty(t, run.Untrusted)
}

// A team keyed by a variable (fairness_key: var:customer) is keyed by the
// variable's value for a person's request, by its owner when the value came
// from a sender (a webhook's payload): a sender must not fill another
// tenant's run limit.
func TestUntrustedRequestsDoNotChooseTheFairnessKey(t *testing.T) {
	t.Parallel()
	f := setup(t)
	team := json.RawMessage(`{"name":"per-customer","model":{"provider":"script"},"fairness_key":"var:customer",
		"supervisor":{"name":"boss","prompt":"serve {{.customer}}","mcp_servers":["orchestration"]},
		"script":{"agents":{"boss":[{"say":"done"}]}}}`)
	for _, tc := range []struct {
		name      string
		untrusted []string
		want      string
	}{
		{"a person's request", nil, queue.Key("var:customer=acme")},
		{"a webhook's payload", []string{"hook:h1 payload"}, queue.Key("alice")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := f.Submitter().Submit(context.Background(), submit.Request{By: submit.Principal{Name: "alice"}, Team: team,
				Prompt: "x", Variables: map[string]any{"customer": "acme"}, Untrusted: tc.untrusted})
			require.NoError(t, err)
			run, err := f.Store.GetRun(context.Background(), res.RunID)
			require.NoError(t, err)
			require.Equal(t, tc.want, run.FairKey)
		})
	}
}

func TestConfig(t *testing.T) {
	t.Parallel()
	require.Equal(t, submit.DefaultIdempotencyTTL, submit.Config{}.WithDefaults().IdempotencyTTL)
	require.NoError(t, submit.Config{}.WithDefaults().Validate())
	require.Error(t, submit.Config{MaxRunsInFlight: -1}.Validate())
	require.Error(t, submit.Config{IdempotencyTTL: -1}.Validate())
}
