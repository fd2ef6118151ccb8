package store_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/internal/testdb"

	"github.com/aetherium-engine/aetherium/store"
)

// TestWorkspaceIdle is what the workspace sweep asks before it unmounts: a
// project's workspace stays mounted while any run working in it (an MCP run
// included) is in flight and for the unmount delay after the last one ended; a
// run's own workspace follows its run.
func TestWorkspaceIdle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := testdb.Store(t)
	p, err := st.CreateProject(ctx, store.Project{Slug: "idle-" + uuid.NewString()[:8], Name: "n", Owner: "alice"})
	require.NoError(t, err)
	run := func(project string) string {
		id := uuid.NewString()
		require.NoError(t, st.CreateRun(ctx, store.Run{ID: id, Prompt: "p", Team: json.RawMessage(`{}`), Owner: "alice", ProjectID: project}))
		return id
	}
	finish := func(id string) {
		_, _, err := st.FinishRun(ctx, id, store.RunCompleted, "", "", "")
		require.NoError(t, err)
	}
	idle := func(id string, after time.Duration) bool {
		t.Helper()
		ok, err := st.WorkspaceIdle(ctx, id, after)
		require.NoError(t, err)
		return ok
	}

	require.True(t, idle(p.Workspace, 0), "no run has used it")
	require.False(t, idle(p.Workspace, time.Hour), "made less than an hour ago: files may be put there before its first run")
	a := run(p.ID)
	got, err := st.GetRun(ctx, a)
	require.NoError(t, err)
	require.Equal(t, p.Workspace, got.WorkspaceID(), "a project run works in its project's workspace")
	require.False(t, idle(p.Workspace, 0), "a queued run")
	b := run(p.ID)
	finish(a)
	require.False(t, idle(p.Workspace, 0), "b is still queued")
	finish(b)
	require.True(t, idle(p.Workspace, 0))
	require.False(t, idle(p.Workspace, time.Hour), "the last run ended less than an hour ago")

	m, err := st.EnsureMCPRun(ctx, "alice", "ide", json.RawMessage(`{"name":"mcp:ide"}`), p.ID)
	require.NoError(t, err)
	require.Equal(t, p.Workspace, m.WorkspaceID())
	require.False(t, idle(p.Workspace, 0), "a live MCP run works in it")
	finish(m.ID)
	require.True(t, idle(p.Workspace, 0))

	own := run("")
	require.False(t, idle(own, 0), "a run's own workspace while it is queued")
	finish(own)
	require.True(t, idle(own, 0))
	require.False(t, idle(own, time.Hour))
	require.True(t, idle(uuid.NewString(), time.Hour), "a run that no longer exists")
	require.True(t, idle("project-"+uuid.NewString(), time.Hour), "a workspace no run names")
}
