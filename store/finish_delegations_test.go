package store_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/events"
	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/store"
)

// openDelegations is a running run with three delegations of its supervisor's
// call: one pending, one running (its worker session leased to token), one
// already completed and announced by its worker.
type openDelegations struct {
	st                     *store.Store
	run                    string
	pending, running, done string
	worker                 store.Session
	token                  string
}

func setupOpenDelegations(t *testing.T) openDelegations {
	t.Helper()
	st, sess, _ := setup(t)
	ctx := context.Background()
	ok, err := st.StartRun(ctx, sess.RunID)
	require.NoError(t, err)
	require.True(t, ok)
	ds := dels(sess.RunID, sess.ID, "c1", 3)
	for _, d := range ds {
		_, err := st.InsertDelegation(ctx, d)
		require.NoError(t, err)
	}
	o := openDelegations{st: st, run: sess.RunID, pending: ds[0].ID, running: ds[1].ID, done: ds[2].ID, token: uuid.NewString()}
	require.NoError(t, st.MarkDelegationRunning(ctx, o.running))
	o.worker, ok, err = st.AcquireSession(ctx, store.Session{ID: "w1:" + o.run[:8], RunID: o.run, Agent: "w1", Role: "worker",
		DelegationID: o.running, Messages: []llm.Message{{Role: llm.RoleUser, Content: "t"}}}, o.token, time.Minute)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, st.MarkDelegationRunning(ctx, o.done))
	finished, err := st.FinishDelegation(ctx, o.done, store.DelegationCompleted, "the answer", "")
	require.NoError(t, err)
	require.True(t, finished)
	_, _, err = st.AppendEvent(ctx, o.run, events.DelegationFinishedKey(o.done), events.DelegationFinished, "w2",
		events.FinishedDelegation(o.done, store.DelegationCompleted, "the answer", ""))
	require.NoError(t, err)
	return o
}

// finishedEvents maps each delegation.finished event of a run to its data, and
// reports whether they all come before the run's terminal event (the last one).
func finishedEvents(t *testing.T, st *store.Store, runID string) (map[string]map[string]any, bool) {
	t.Helper()
	evs, err := st.EventsAfter(context.Background(), runID, 0, 100)
	require.NoError(t, err)
	out := map[string]map[string]any{}
	terminalLast := len(evs) > 0 && events.Terminal(evs[len(evs)-1].Type)
	for _, e := range evs {
		if e.Type != events.DelegationFinished {
			continue
		}
		var data map[string]any
		require.NoError(t, json.Unmarshal(e.Data, &data))
		id, _ := data["delegation_id"].(string)
		require.NotContains(t, out, id, "one delegation.finished event per delegation")
		out[id] = data
	}
	return out, terminalLast
}

// However a run ends — each way store.FinishRun is called by the fleet — none of
// its delegations stays pending or running: in the same transaction they are
// closed with a status that says why (failed with a failed run, else
// cancelled), and the run's terminal event is preceded by their
// delegation.finished events, once however often it is recorded. A delegation
// that had finished keeps its outcome and its one event.
func TestFinishRunClosesDelegations(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, status, reason, errMsg string
		want                         string
		wantError                    []string
	}{
		{"completed", store.RunCompleted, "", "", store.DelegationCancelled, []string{"the run completed before this delegation finished"}},
		{"failed by the circuit breaker", store.RunFailed, "circuit_breaker", "writer: 3 consecutive failed tool calls",
			store.DelegationFailed, []string{"the run failed", "circuit_breaker", "writer: 3 consecutive failed tool calls"}},
		{"failed on its budget", store.RunFailed, "budget_exceeded", "token budget of 100 exceeded (120 used)",
			store.DelegationFailed, []string{"budget_exceeded", "token budget of 100 exceeded"}},
		{"cancelled", store.RunCancelled, "cancelled", "cancelled by request",
			store.DelegationCancelled, []string{"the run was cancelled", "cancelled by request"}},
		{"failed as stuck", store.RunFailed, "stuck", "no progress for 1h0m0s", store.DelegationFailed, []string{"stuck", "no progress"}},
		{"failed as a task that exhausted its retries", store.RunFailed, "task_failed", "turn failed 4 times: boom",
			store.DelegationFailed, []string{"task_failed", "turn failed 4 times"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			o := setupOpenDelegations(t)
			changed, _, err := o.st.FinishRun(ctx, o.run, tc.status, "", tc.errMsg, tc.reason)
			require.NoError(t, err)
			require.True(t, changed)

			ds, err := o.st.RunDelegations(ctx, o.run)
			require.NoError(t, err)
			require.Len(t, ds, 3)
			for _, d := range ds {
				require.NotContains(t, []string{store.DelegationPending, store.DelegationRunning}, d.Status, "delegation %s of a %s run", d.ID, tc.status)
				require.NotNil(t, d.CompletedAt)
				if d.ID == o.done {
					require.Equal(t, store.DelegationCompleted, d.Status, "a finished delegation keeps its outcome")
					require.Equal(t, "the answer", d.Result)
					continue
				}
				require.Equal(t, tc.want, d.Status, d.ID)
				for _, s := range tc.wantError {
					require.Contains(t, d.Error, s, d.ID)
				}
			}

			// The run's terminal event, recorded twice (a redelivery), brings
			// the closed delegations' events first, once each.
			r, err := o.st.GetRun(ctx, o.run)
			require.NoError(t, err)
			rec := &events.Recorder{Store: o.st}
			require.NoError(t, rec.EmitTerminal(ctx, r))
			require.NoError(t, rec.EmitTerminal(ctx, r))
			got, terminalLast := finishedEvents(t, o.st, o.run)
			require.True(t, terminalLast, "the delegations' events precede the terminal one")
			require.Len(t, got, 3)
			require.Equal(t, store.DelegationCompleted, got[o.done]["status"], "the worker's event stands")
			for _, id := range []string{o.pending, o.running} {
				require.Equal(t, tc.want, got[id]["status"], id)
				require.Contains(t, got[id]["error"], tc.wantError[0], id)
			}
			left, err := o.st.UnannouncedDelegations(ctx, o.run)
			require.NoError(t, err)
			require.Empty(t, left)
		})
	}
}

// A worker session that ends after its run did cannot reopen or overwrite the
// delegation the run's end closed, nor announce an outcome its row does not
// hold: SaveStep stores its session but not its delegation.finished event, and
// the run's terminal event announces the stored one.
func TestLateStepAfterRunEnd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o := setupOpenDelegations(t)
	changed, _, err := o.st.FinishRun(ctx, o.run, store.RunFailed, "", "writer: 3 consecutive failed tool calls", "circuit_breaker")
	require.NoError(t, err)
	require.True(t, changed)

	sess := o.worker
	sess.Messages = append(sess.Messages, llm.Message{Role: llm.RoleAssistant, Content: "late answer"})
	sess.Status = "done"
	out := store.DelegationOutcome{ID: o.running, Status: store.DelegationCompleted, Result: "late answer"}
	saved, err := o.st.SaveStep(ctx, &sess, o.token, time.Minute, store.StepWrite{Release: true, Finish: &out, Events: []store.NewEvent{
		{Key: events.DelegationFinishedKey(o.running), Type: events.DelegationFinished, Agent: sess.Agent,
			Data: events.FinishedDelegation(o.running, out.Status, out.Result, "")},
		{Key: "msg:late", Type: events.ModelAnswered, Agent: sess.Agent, Data: map[string]any{"content": "late answer"}},
	}})
	require.NoError(t, err)
	require.Equal(t, store.RunFailed, saved.RunStatus)
	require.Len(t, saved.Events, 1, "the answer's event is stored, not a delegation outcome the row does not hold")
	require.Equal(t, events.ModelAnswered, saved.Events[0].Type)

	d, err := o.st.GetDelegation(ctx, o.running)
	require.NoError(t, err)
	require.Equal(t, store.DelegationFailed, d.Status, "the run's end stands")
	r, err := o.st.GetRun(ctx, o.run)
	require.NoError(t, err)
	require.NoError(t, (&events.Recorder{Store: o.st}).EmitTerminal(ctx, r))
	got, _ := finishedEvents(t, o.st, o.run)
	require.Equal(t, store.DelegationFailed, got[o.running]["status"])
}
