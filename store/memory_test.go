package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/store"
)

func TestMemoryWithTheFinalSave(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, sess, token := setup(t)
	entry := &store.MemoryEntry{Project: "p1", Tier: store.MemoryLongTerm, Scope: "project", Agent: "supervisor", RunID: sess.RunID,
		SessionID: sess.ID, Content: "Task: count the widgets Outcome: there are 42 widgets"}
	w := stepWrite(sess.RunID, uuid.NewString())
	w.Memory = entry
	sess.Status = "done"
	_, err := st.SaveStep(ctx, sess, token, time.Minute, w)
	require.NoError(t, err)
	// Redelivered: the same final save adds no second entry.
	_, err = st.SaveStep(ctx, sess, token, time.Minute, store.StepWrite{Memory: entry})
	require.NoError(t, err)
	got, err := st.ListMemory(ctx, "p1", 10)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, entry.Content, got[0].Content)
	require.Equal(t, sess.RunID, got[0].RunID)

	// A save under a lost lease writes no memory.
	other := *entry
	other.SessionID, other.Content = "another-session", "never"
	_, err = st.SaveStep(ctx, sess, "not-the-token", time.Minute, store.StepWrite{Memory: &other})
	require.ErrorIs(t, err, store.ErrLeaseLost)
	got, err = st.ListMemory(ctx, "p1", 10)
	require.NoError(t, err)
	require.Len(t, got, 1)
}

func TestRecallMemory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _, _ := setup(t)
	add := func(project, scope, agent, content string) int64 {
		e, err := st.AddMemory(ctx, store.MemoryEntry{Project: project, Tier: store.MemoryLongTerm, Scope: scope, Agent: agent, Content: content})
		require.NoError(t, err)
		return e.ID
	}
	widgets := add("p1", "project", "", "the widget inventory lives in inventory.csv")
	mine := add("p1", "agent", "coder", "coder prefers table-driven tests for widget code")
	add("p1", "agent", "writer", "writer notes about widget prose") // another agent's: not seen by coder
	add("p2", "project", "", "widget facts of another project")     // another project's: never seen
	unrelated := add("p1", "project", "", "deploys run on Fridays")

	got, err := st.RecallMemory(ctx, "p1", "coder", "where is the widget inventory", 10)
	require.NoError(t, err)
	ids := []int64{}
	for _, e := range got {
		ids = append(ids, e.ID)
		require.GreaterOrEqual(t, e.Relevance, 0.0)
		require.Less(t, e.Relevance, 1.0)
	}
	require.Equal(t, []int64{widgets, mine, unrelated}, ids, "most relevant first; other agents' and projects' entries absent")
	require.Greater(t, got[0].Relevance, got[1].Relevance)
	require.Zero(t, got[2].Relevance)

	require.NoError(t, st.DeleteMemory(ctx, "p1", mine))
	require.ErrorIs(t, st.DeleteMemory(ctx, "p1", mine), store.ErrNotFound)
	require.ErrorIs(t, st.DeleteMemory(ctx, "p2", widgets), store.ErrNotFound, "an id of another project")
}
