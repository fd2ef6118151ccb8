package store_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/internal/testdb"

	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/store"
)

// A delegation round trip in few transactions: the call records its
// delegations (RecordDelegations), the waiting save gives the lease up; a turn starts (lease,
// delegation running, its event) in one AcquireStep; its last save records the
// outcome; the resumed parent leases its existing session with its run and its
// delegations in one AcquireStep.
func TestDelegationRoundTripWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, sess, token := setup(t)
	d := store.Delegation{ID: "del_1", RunID: sess.RunID, ParentSession: sess.ID, ToolCallID: "c1", Agent: "writer", Task: "go"}

	sess.Messages = append(sess.Messages, llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "c1", Name: "delegate"}}})
	sess.Status = "waiting"
	lim := store.DelegationLimits{PerSession: 10, PerRun: 10}
	require.NoError(t, st.RecordDelegations(ctx, sess.ID, token, []store.Delegation{d}, lim))
	require.NoError(t, st.RecordDelegations(ctx, sess.ID, token, []store.Delegation{d}, lim), "a redispatched call records nothing twice")
	taskLabel := json.RawMessage(`{"untrusted":["web_fetch https://evil.test/"]}`)
	w := store.StepWrite{Release: true, Delegated: []string{"del_1", "del_of_another"}, TaskLabel: taskLabel,
		Events: []store.NewEvent{{Key: "delegated:del_1", Type: "delegation.created", Agent: "supervisor", Data: map[string]any{}}}}
	_, err := st.SaveStep(ctx, sess, token, time.Minute, w)
	require.NoError(t, err)
	w.TaskLabel = json.RawMessage(`{}`)
	_, err = st.SaveStep(ctx, sess, token, time.Minute, w) // a redelivered save: nothing twice
	require.NoError(t, err)
	got, err := st.GetDelegation(ctx, "del_1")
	require.NoError(t, err)
	require.Equal(t, store.DelegationPending, got.Status)
	require.Nil(t, got.Tools, "a worker delegation has no tool list of its own")
	require.Nil(t, got.ResultLabel, "no label before the outcome")
	// The turn's read: the delegation with its task's label (stored by the
	// save that recorded it, the first save's: a label once stored stays) and
	// its run, in one statement.
	turn, run, err := st.GetTurn(ctx, "del_1")
	require.NoError(t, err)
	require.Equal(t, sess.RunID, run.ID)
	require.Equal(t, store.DelegationPending, turn.Status)
	require.JSONEq(t, string(taskLabel), string(turn.TaskLabel))
	_, _, err = st.GetTurn(ctx, "del_nope")
	require.ErrorIs(t, err, store.ErrNotFound)
	require.Equal(t, 1, count(t, st, `SELECT count(*) FROM delegations WHERE run_id = $1`, sess.RunID))

	// Released: another delivery takes the lease at once.
	other := uuid.NewString()
	acq, err := st.AcquireStep(ctx, store.Acquire{Initial: store.Session{ID: sess.ID, RunID: sess.RunID}, Token: other, Lease: time.Minute, LoadRun: true})
	require.NoError(t, err)
	require.True(t, acq.Exists)
	require.True(t, acq.OK, "the waiting save gave the lease up")
	require.Equal(t, sess.RunID, acq.Run.ID)
	require.Equal(t, "waiting", acq.Session.Status)
	require.Len(t, acq.Delegations["c1"], 1)
	require.NoError(t, st.ReleaseSession(ctx, sess.ID, other))

	// The turn: its session created, the delegation running, its event stored.
	child := store.Session{ID: "d:del_1", RunID: sess.RunID, Agent: "writer", Role: "worker", DelegationID: "del_1",
		Messages: []llm.Message{{Role: llm.RoleUser, Content: "go"}}}
	ctoken := uuid.NewString()
	start := store.Acquire{Initial: child, Token: ctoken, Lease: time.Minute, StartDelegation: "del_1",
		Events: []store.NewEvent{{Key: "turn:del_1", Type: "agent.turn_started", Agent: "writer", Data: map[string]any{}}}}
	acq, err = st.AcquireStep(ctx, start)
	require.NoError(t, err)
	require.True(t, acq.OK)
	require.Len(t, acq.Events, 1)
	got, _ = st.GetDelegation(ctx, "del_1")
	require.Equal(t, store.DelegationRunning, got.Status)
	busy, err := st.AcquireStep(ctx, store.Acquire{Initial: child, Token: uuid.NewString(), Lease: time.Minute})
	require.NoError(t, err)
	require.False(t, busy.OK, "a live lease is not taken over")

	// The turn's last save: done, the outcome, the lease given up.
	cs := acq.Session
	cs.Status = "done"
	cs.Messages = append(cs.Messages, llm.Message{Role: llm.RoleAssistant, Content: "written"})
	label := json.RawMessage(`{"untrusted":["web_fetch https://evil.example"]}`)
	_, err = st.SaveStep(ctx, &cs, ctoken, time.Minute, store.StepWrite{Release: true,
		Finish: &store.DelegationOutcome{ID: "del_1", Status: store.DelegationCompleted, Result: "written", Label: label}})
	require.NoError(t, err)
	got, _ = st.GetDelegation(ctx, "del_1")
	require.Equal(t, store.DelegationCompleted, got.Status)
	require.Equal(t, "written", got.Result)
	require.JSONEq(t, string(label), string(got.ResultLabel), "the ending save stores the session's label with its outcome")
	// The session's saved context in one read (the flow rules' fallback).
	msgs, err := st.SessionMessages(ctx, "d:del_1")
	require.NoError(t, err)
	require.Equal(t, []string{"go", "written"}, []string{msgs[0].Content, msgs[1].Content})
	_, err = st.SessionMessages(ctx, "d:nope")
	require.ErrorIs(t, err, store.ErrNotFound)

	// A late save under a lost lease records no outcome.
	_, err = st.SaveStep(ctx, &cs, "not-the-token", time.Minute, store.StepWrite{
		Finish: &store.DelegationOutcome{ID: "del_1", Status: store.DelegationFailed}})
	require.ErrorIs(t, err, store.ErrLeaseLost)
	got, _ = st.GetDelegation(ctx, "del_1")
	require.Equal(t, store.DelegationCompleted, got.Status)

	// The resumed parent: its run, session and finished delegation in one read.
	acq, err = st.AcquireStep(ctx, store.Acquire{Initial: store.Session{ID: sess.ID, RunID: sess.RunID}, Token: uuid.NewString(), Lease: time.Minute, LoadRun: true})
	require.NoError(t, err)
	require.True(t, acq.OK)
	require.Equal(t, store.DelegationCompleted, acq.Delegations["c1"][0].Status)
	require.JSONEq(t, string(label), string(acq.Delegations["c1"][0].ResultLabel), "the resume reads the label with the delegation, no history read")

	// An existing-only acquire of a session that does not exist says so.
	none, err := st.AcquireStep(ctx, store.Acquire{Initial: store.Session{ID: "nope", RunID: sess.RunID}, Token: uuid.NewString(), Lease: time.Minute, LoadRun: true})
	require.NoError(t, err)
	require.False(t, none.Exists)
	require.False(t, none.OK)

	// A turn that starts after its run ended announces nothing.
	_, _, err = st.FinishRun(ctx, sess.RunID, store.RunCancelled, "", "", "")
	require.NoError(t, err)
	late := store.Acquire{Initial: store.Session{ID: "d:del_2", RunID: sess.RunID, Agent: "w", Role: "worker", Messages: []llm.Message{}}, Token: uuid.NewString(), Lease: time.Minute,
		Events: []store.NewEvent{{Key: "turn:del_2", Type: "agent.turn_started", Agent: "w", Data: map[string]any{}}}}
	acq, err = st.AcquireStep(ctx, late)
	require.NoError(t, err)
	require.Empty(t, acq.Events)
}

// A supervisor's first step starts its run and records run.started with the lease
// on its new session, in the one AcquireStep; again, nothing twice; and a run that
// ended meanwhile is neither started nor given the event.
func TestFirstAcquireStartsTheRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := testdb.Store(t)
	newRun := func(status string) string {
		id := uuid.NewString()
		require.NoError(t, st.CreateRun(ctx, store.Run{ID: id, Prompt: "p", Team: json.RawMessage(`{}`), Variables: json.RawMessage(`{}`)}))
		if status != store.RunQueued {
			_, err := st.Pool.Exec(ctx, `UPDATE runs SET status = $2 WHERE id = $1`, id, status)
			require.NoError(t, err)
		}
		return id
	}
	first := func(runID, token string) store.Acquired {
		acq, err := st.AcquireStep(ctx, store.Acquire{
			Initial: store.Session{ID: "s:" + runID, RunID: runID, Agent: "supervisor", Role: "supervisor", Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}},
			Token:   token, Lease: time.Minute, StartRun: true,
			Events: []store.NewEvent{{Key: "started", Type: "run.started", Agent: "supervisor", Data: map[string]any{"team": "t"}}},
		})
		require.NoError(t, err)
		return acq
	}
	cases := []struct {
		from, want string
		events     int
	}{
		{store.RunQueued, store.RunRunning, 1},
		{store.RunRunning, store.RunRunning, 1}, // started by an earlier delivery: unchanged
		{store.RunCancelled, store.RunCancelled, 0},
	}
	for _, c := range cases {
		id := newRun(c.from)
		token := uuid.NewString()
		acq := first(id, token)
		require.True(t, acq.OK, c.from)
		require.Len(t, acq.Events, c.events, c.from)
		run, err := st.GetRun(ctx, id)
		require.NoError(t, err)
		require.Equal(t, c.want, run.Status, c.from)
		require.NoError(t, st.ReleaseSession(ctx, "s:"+id, token))
		again := first(id, uuid.NewString()) // a redelivery
		require.True(t, again.OK, c.from)
		require.Empty(t, again.Events, "the started event is stored once")
		require.Equal(t, c.events, count(t, st, `SELECT count(*) FROM run_events WHERE run_id = $1 AND type = 'run.started'`, id), c.from)
	}
}

// A new session's acquire reads, with its lease, what its memory recall needs:
// the project's memory generation as of that transaction and the task's
// lexemes (PostgreSQL's parser); a later write is in the next acquire's.
func TestAcquireReadsMemoryGeneration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := testdb.Store(t)
	runID := uuid.NewString()
	require.NoError(t, st.CreateRun(ctx, store.Run{ID: runID, Prompt: "p", Team: json.RawMessage(`{}`), Variables: json.RawMessage(`{}`)}))
	acquire := func(session string, mem *store.MemoryAt) store.Acquired {
		t.Helper()
		acq, err := st.AcquireStep(ctx, store.Acquire{
			Initial: store.Session{ID: session, RunID: runID, Agent: "coder", Role: "worker", Messages: []llm.Message{{Role: llm.RoleUser, Content: "go"}}},
			Token:   uuid.NewString(), Lease: time.Minute, Memory: mem,
		})
		require.NoError(t, err)
		require.True(t, acq.OK)
		return acq
	}
	const text = "Deploy the Widget report, then deploy it again!"

	require.Nil(t, acquire("s:none", nil).Memory, "not asked: not read")

	first := acquire("s:1", &store.MemoryAt{Project: "p1", Text: text}).Memory
	require.Equal(t, &store.MemoryAt{Project: "p1", Text: text, Gen: 0, Lexemes: []string{"again", "deploy", "it", "report", "the", "then", "widget"}}, first,
		"a project without memory is at generation 0; the lexemes are distinct and lower-cased")

	_, err := st.AddMemory(ctx, store.MemoryEntry{Project: "p1", Tier: store.MemoryLongTerm, Scope: "project", Content: "widget report"})
	require.NoError(t, err)
	second := acquire("s:2", &store.MemoryAt{Project: "p1", Text: text}).Memory
	require.Greater(t, second.Gen, first.Gen, "a write is in the next acquire's generation")
	require.Equal(t, generationOf(t, st, "p1"), second.Gen)
	require.Equal(t, first.Lexemes, second.Lexemes)
	require.Zero(t, acquire("s:3", &store.MemoryAt{Project: "p2", Text: ""}).Memory.Gen, "another project's generation")
}

// A delegation's task label is stored only by a save of the session that
// recorded it, holding its lease, and only once.
func TestTaskLabelIsFencedAndKept(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, sess, token := setup(t)
	lim := store.DelegationLimits{PerSession: 10, PerRun: 10}
	for _, id := range []string{"del_a", "del_b"} {
		d := store.Delegation{ID: id, RunID: sess.RunID, ParentSession: sess.ID, ToolCallID: "c_" + id, Agent: "writer", Task: "go"}
		require.NoError(t, st.RecordDelegations(ctx, sess.ID, token, []store.Delegation{d}, lim))
	}
	// Another session of the run, with a delegation of its own.
	other, ok, err := st.AcquireSession(ctx, store.Session{ID: "w:" + sess.RunID, RunID: sess.RunID, Agent: "writer", Role: "worker",
		Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}}, "tok-other", time.Minute)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, st.RecordDelegations(ctx, other.ID, "tok-other", []store.Delegation{{ID: "del_c", RunID: sess.RunID, ParentSession: other.ID, ToolCallID: "c", Agent: "editor", Task: "go"}}, lim))

	labelOf := func(id string) json.RawMessage {
		t.Helper()
		d, _, err := st.GetTurn(ctx, id)
		require.NoError(t, err)
		return d.TaskLabel
	}
	// A save that names another session's delegation labels only its own.
	_, err = st.SaveStep(ctx, sess, token, time.Minute, store.StepWrite{Delegated: []string{"del_a", "del_c"}, TaskLabel: json.RawMessage(`{}`)})
	require.NoError(t, err)
	require.JSONEq(t, `{}`, string(labelOf("del_a")), "clean, stored as such")
	require.Nil(t, labelOf("del_c"), "another session's delegation")
	require.Nil(t, labelOf("del_b"), "not named by the save")

	// A save without the lease stores nothing.
	_, err = st.SaveStep(ctx, sess, "tok-stale", time.Minute, store.StepWrite{Delegated: []string{"del_b"}, TaskLabel: json.RawMessage(`{"private":["x"]}`)})
	require.ErrorIs(t, err, store.ErrLeaseLost)
	require.Nil(t, labelOf("del_b"))

	// Without a label nothing is stored, whatever the save names.
	_, err = st.SaveStep(ctx, sess, token, time.Minute, store.StepWrite{Delegated: []string{"del_b"}})
	require.NoError(t, err)
	require.Nil(t, labelOf("del_b"))
}
