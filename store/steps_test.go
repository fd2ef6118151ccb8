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

// setup returns a store on its own database with one run and one session leased to
// the returned token.
func setup(t *testing.T) (*store.Store, *store.Session, string) {
	t.Helper()
	st := testdb.Store(t)
	ctx := context.Background()
	runID := uuid.NewString()
	require.NoError(t, st.CreateRun(ctx, store.Run{ID: runID, Prompt: "p", Team: json.RawMessage(`{}`), Variables: json.RawMessage(`{}`), TokenBudget: 100}))
	initial := store.Session{ID: "s:" + runID, RunID: runID, Agent: "supervisor", Role: "supervisor",
		Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}}
	token := uuid.NewString()
	sess, ok, err := st.AcquireSession(ctx, initial, token, time.Minute)
	require.NoError(t, err)
	require.True(t, ok)
	return st, &sess, token
}

func stepWrite(runID, callKey string) store.StepWrite {
	res := "ok"
	return store.StepWrite{
		Tokens: 7,
		Events: []store.NewEvent{
			{Key: "tool:" + callKey, Type: "tool.call", Agent: "supervisor", Data: map[string]any{"tool": "read_file"}},
			{Key: "msg:" + callKey, Type: "agent.message", Agent: "supervisor", Data: map[string]any{"content": "done"}},
		},
		Audit: []store.AuditRow{{CallKey: callKey, At: time.Now(), RunID: runID, Team: "t", Agent: "supervisor", Role: "supervisor",
			Tool: "read_file", Tier: "standard", Allowed: true, Decision: "allowed", Args: json.RawMessage(`{"path":"a"}`), Result: &res, Summary: "a"}},
	}
}

func count(t *testing.T, st *store.Store, q, runID string) int {
	t.Helper()
	var n int
	require.NoError(t, st.Pool.QueryRow(context.Background(), q, runID).Scan(&n))
	return n
}

func TestSaveStep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("session, tokens, events and audit rows land together, once", func(t *testing.T) {
		t.Parallel()
		st, sess, token := setup(t)
		sess.Messages = append(sess.Messages, llm.Message{Role: llm.RoleAssistant, Content: "done"})
		sess.Steps = 1
		w := stepWrite(sess.RunID, sess.ID+":call_1")
		saved, err := st.SaveStep(ctx, sess, token, time.Minute, w)
		require.NoError(t, err)
		require.EqualValues(t, 7, saved.TokensUsed)
		require.EqualValues(t, 100, saved.TokenBudget)
		require.Equal(t, store.RunQueued, saved.RunStatus)
		require.Len(t, saved.Events, 2)
		require.Equal(t, "tool.call", saved.Events[0].Type, "events keep their order")
		require.Equal(t, "agent.message", saved.Events[1].Type)
		require.Less(t, saved.Events[0].ID, saved.Events[1].ID)

		// A redelivery saving the same step again stores no duplicate.
		saved, err = st.SaveStep(ctx, sess, token, time.Minute, w)
		require.NoError(t, err)
		require.Empty(t, saved.Events, "duplicates are not reported as new")
		require.EqualValues(t, 14, saved.TokensUsed)

		// A save without tokens still reports the run as it is now.
		_, err = st.Pool.Exec(ctx, `UPDATE runs SET status = 'cancelled' WHERE id = $1`, sess.RunID)
		require.NoError(t, err)
		saved, err = st.SaveStep(ctx, sess, token, time.Minute, store.StepWrite{})
		require.NoError(t, err)
		require.Equal(t, store.RunCancelled, saved.RunStatus)
		require.EqualValues(t, 14, saved.TokensUsed)
		require.Equal(t, 2, count(t, st, `SELECT count(*) FROM run_events WHERE run_id = $1`, sess.RunID))
		require.Equal(t, 1, count(t, st, `SELECT count(*) FROM tool_audit WHERE run_id = $1`, sess.RunID))
		rows, err := st.RunAudit(ctx, sess.RunID, 10)
		require.NoError(t, err)
		require.JSONEq(t, `{"path":"a"}`, string(rows[0].Args))
		require.Equal(t, "ok", *rows[0].Result)

		got, ok, err := st.AcquireSession(ctx, *sess, token, time.Minute)
		require.NoError(t, err)
		require.True(t, ok)
		require.Len(t, got.Messages, 2)
		require.Equal(t, 1, got.Steps)
	})

	t.Run("a lost lease writes nothing", func(t *testing.T) {
		t.Parallel()
		st, sess, token := setup(t)
		// Another delivery takes the session over.
		require.NoError(t, st.ReleaseSession(ctx, sess.ID, token))
		_, ok, err := st.AcquireSession(ctx, *sess, uuid.NewString(), time.Minute)
		require.NoError(t, err)
		require.True(t, ok)

		sess.Messages = append(sess.Messages, llm.Message{Role: llm.RoleAssistant, Content: "stale"})
		_, err = st.SaveStep(ctx, sess, token, time.Minute, stepWrite(sess.RunID, sess.ID+":call_1"))
		require.ErrorIs(t, err, store.ErrLeaseLost)
		require.Zero(t, count(t, st, `SELECT count(*) FROM run_events WHERE run_id = $1`, sess.RunID))
		require.Zero(t, count(t, st, `SELECT count(*) FROM tool_audit WHERE run_id = $1`, sess.RunID))
		require.Zero(t, count(t, st, `SELECT tokens_used FROM runs WHERE id = $1`, sess.RunID))
	})

	t.Run("a refused row rolls the whole step back", func(t *testing.T) {
		t.Parallel()
		st, sess, token := setup(t)
		w := stepWrite(sess.RunID, sess.ID+":call_1")
		w.Audit[0].Args = json.RawMessage(`{not json`)
		sess.Messages = append(sess.Messages, llm.Message{Role: llm.RoleAssistant, Content: "x"})
		_, err := st.SaveStep(ctx, sess, token, time.Minute, w)
		require.Error(t, err)
		require.Zero(t, count(t, st, `SELECT count(*) FROM run_events WHERE run_id = $1`, sess.RunID))
		require.Zero(t, count(t, st, `SELECT tokens_used FROM runs WHERE id = $1`, sess.RunID))
		got, ok, err := st.AcquireSession(ctx, *sess, token, time.Minute)
		require.NoError(t, err)
		require.True(t, ok)
		require.Len(t, got.Messages, 1, "the session kept its last saved state")
	})
}
