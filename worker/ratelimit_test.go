package worker

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/events"
	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/store"
)

// TestStepParksOnRateLimit: a model call held back by a rate limit snoozes the
// task (not a failure), leaves the session as saved, tells the Studio once, and
// the run goes on when the limit lets it; a wait past MaxWait fails the run
// with reason rate_limited.
func TestStepParksOnRateLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	limited := func(after time.Duration, cause error) func(llm.Request) (llm.Response, error) {
		return func(llm.Request) (llm.Response, error) {
			return llm.Response{}, &llm.WaitError{After: after, Limit: "answers/test rpm", Cause: cause}
		}
	}
	reply := calls(call("r", "reply", `{"message":"done"}`))
	priced := func(req llm.Request) (llm.Response, error) {
		resp, err := reply(req)
		resp.Provider, resp.Model, resp.Cost, resp.Priced = "answers", "test-1", 1234, true
		return resp, err
	}

	t.Run("parks, then answers", func(t *testing.T) {
		t.Parallel()
		w, b := setup(t)
		runID := b.newRun(t)
		http429 := &llm.APIError{Provider: "answers", Status: 429, Message: "slow down", RetryAfter: 2 * time.Second}
		b.model.next = []func(llm.Request) (llm.Response, error){limited(2*time.Second, http429), limited(time.Millisecond, nil), priced}

		err := supervise(t, w, runID)
		require.ErrorIs(t, err, ErrRateLimitWaiting)
		require.ErrorIs(t, err, llm.ErrRateLimited)
		require.False(t, isFailure(err), "a park is not the task's failure")
		require.Equal(t, 2*time.Second, retryDelay(1, err, nil), "the task runs again when the limit said")

		err = supervise(t, w, runID)
		require.ErrorIs(t, err, ErrRateLimitWaiting)
		require.Equal(t, busyRetry, retryDelay(1, err, nil), "a wait shorter than a busy retry is rounded up")

		require.NoError(t, supervise(t, w, runID))
		run, err := b.st.GetRun(ctx, runID)
		require.NoError(t, err)
		require.Equal(t, store.RunCompleted, run.Status)
		require.EqualValues(t, 1234, run.Cost, "the answer's cost is the run's")
		evs, err := b.st.EventsAfter(ctx, runID, 0, 100)
		require.NoError(t, err)
		var waits int
		for _, e := range evs {
			var data map[string]any
			require.NoError(t, json.Unmarshal(e.Data, &data))
			if e.Type == events.ModelWaiting {
				waits++
				require.Equal(t, "answers/test rpm", data["limit"])
			}
			if e.Type == events.ModelAnswered {
				require.Equal(t, "test-1", data["model"])
				require.Equal(t, "$0.000000", data["cost"], "1234 picodollars")
			}
		}
		require.Equal(t, 1, waits, "one event per wait, not per park")
		lines, err := b.st.Costs(ctx, store.CostScope{RunID: runID})
		require.NoError(t, err)
		require.Len(t, lines, 1)
		require.EqualValues(t, 1, lines[0].Calls)
		require.EqualValues(t, 1234, lines[0].Cost)
	})

	t.Run("a wait past max_wait fails the run", func(t *testing.T) {
		t.Parallel()
		w, b := setup(t)
		w.cfg.MaxWait = time.Minute
		runID := b.newRun(t)
		b.model.next = []func(llm.Request) (llm.Response, error){limited(2*time.Minute, errors.New("HTTP 429"))}
		require.NoError(t, supervise(t, w, runID), "a failed run is a handled task")
		run, err := b.st.GetRun(ctx, runID)
		require.NoError(t, err)
		require.Equal(t, store.RunFailed, run.Status)
		require.Equal(t, "rate_limited", run.Reason)
		require.Contains(t, run.Error, "llm.max_wait")
	})

	t.Run("a money budget stops the run at the call that crosses it", func(t *testing.T) {
		t.Parallel()
		w, b := setup(t)
		runID := uuid.NewString()
		require.NoError(t, b.st.CreateRun(ctx, store.Run{ID: runID, Prompt: "do it", Team: json.RawMessage(testTeam), Variables: json.RawMessage(`{}`), CostBudget: 2000}))
		read := func(req llm.Request) (llm.Response, error) {
			resp, err := calls(call("c", "read_file", `{"path":"a"}`))(req)
			resp.Cost, resp.Priced = 1500, true
			return resp, err
		}
		b.model.next = []func(llm.Request) (llm.Response, error){read, read, read}
		require.NoError(t, supervise(t, w, runID))
		run, err := b.st.GetRun(ctx, runID)
		require.NoError(t, err)
		require.Equal(t, store.RunFailed, run.Status)
		require.Equal(t, "budget_exceeded", run.Reason)
		require.Contains(t, run.Error, "cost budget of $0.000000 exceeded")
		require.EqualValues(t, 3000, run.Cost, "the second call crossed it; no third was made")
		require.Len(t, b.model.next, 1)
	})
}
