package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/store"
)

// A step reads its agent's todo list with its lease and writes it with its save,
// each in the transaction it takes anyway; both only for the lease's holder.
func TestStepHoldsTodos(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, sess, token := setup(t)
	existing := store.Acquire{Initial: store.Session{ID: sess.ID, RunID: sess.RunID}, Token: token, Lease: time.Minute, Todos: true}

	acq, err := st.AcquireStep(ctx, existing)
	require.NoError(t, err)
	require.True(t, acq.OK)
	require.Equal(t, []store.TodoItem{}, acq.Todos, "no list yet: an empty one, read")
	acq, err = st.AcquireStep(ctx, store.Acquire{Initial: existing.Initial, Token: token, Lease: time.Minute})
	require.NoError(t, err)
	require.Nil(t, acq.Todos, "not asked, not read")

	list := []store.TodoItem{{Text: "outline", Done: true}, {Text: "draft"}}
	w := store.StepWrite{Todos: &list}
	_, err = st.SaveStep(ctx, sess, token, time.Minute, w)
	require.NoError(t, err)
	got, err := st.Todos(ctx, sess.RunID, sess.Agent)
	require.NoError(t, err)
	require.Equal(t, list, got, "stored under the session's run and agent")
	_, err = st.SaveStep(ctx, sess, token, time.Minute, w)
	require.NoError(t, err, "a redelivered save writes the same list again")

	acq, err = st.AcquireStep(ctx, existing)
	require.NoError(t, err)
	require.Equal(t, list, acq.Todos)

	// Another delivery holds the lease: this one neither reads nor writes.
	busy := existing
	busy.Token = uuid.NewString()
	acq, err = st.AcquireStep(ctx, busy)
	require.NoError(t, err)
	require.False(t, acq.OK)
	require.Empty(t, acq.Todos)
	stale := []store.TodoItem{{Text: "stale"}}
	_, err = st.SaveStep(ctx, sess, busy.Token, time.Minute, store.StepWrite{Todos: &stale})
	require.ErrorIs(t, err, store.ErrLeaseLost)
	got, err = st.Todos(ctx, sess.RunID, sess.Agent)
	require.NoError(t, err)
	require.Equal(t, list, got, "a save without the lease writes no list")

	// A new session's first acquire reads the list its agent already has in
	// the run (an earlier session of the same agent wrote it).
	second := store.Session{ID: "s2:" + sess.RunID, RunID: sess.RunID, Agent: sess.Agent, Role: "worker", Messages: sess.Messages[:1]}
	acq, err = st.AcquireStep(ctx, store.Acquire{Initial: second, Token: uuid.NewString(), Lease: time.Minute, Todos: true})
	require.NoError(t, err)
	require.True(t, acq.OK)
	require.Equal(t, list, acq.Todos)
}
