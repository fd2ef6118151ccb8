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

// Processes report themselves with their contract versions; a stale report
// no longer counts, a very old one is forgotten, and a clean stop leaves.
func TestFleetProcessesReportAndAge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := testdb.Store(t)
	for _, p := range []store.Process{
		{ID: "h:1:a", Role: "worker", Host: "h", PID: 1, Build: "old", Contract: 1, MinContract: 1},
		{ID: "h:2:b", Role: "api", Host: "h", PID: 2, Build: "new", Contract: 2, MinContract: 1},
		{ID: "h:3:c", Role: "scheduler", Host: "h", PID: 3, Build: "new", Contract: 2, MinContract: 1},
	} {
		require.NoError(t, st.ReportProcess(ctx, p))
		require.NoError(t, st.ReportProcess(ctx, p), "a second report updates the row")
	}
	_, err := st.Pool.Exec(ctx, `UPDATE fleet_processes SET seen_at = now() - interval '1 minute' WHERE id = 'h:1:a'`)
	require.NoError(t, err)
	_, err = st.Pool.Exec(ctx, `UPDATE fleet_processes SET seen_at = now() - interval '2 days' WHERE id = 'h:3:c'`)
	require.NoError(t, err)
	live, err := st.LiveProcesses(ctx, 20*time.Second, 24*time.Hour)
	require.NoError(t, err)
	require.Len(t, live, 1)
	require.Equal(t, store.Process{ID: "h:2:b", Role: "api", Host: "h", PID: 2, Build: "new", Contract: 2, MinContract: 1},
		store.Process{ID: live[0].ID, Role: live[0].Role, Host: live[0].Host, PID: live[0].PID, Build: live[0].Build, Contract: live[0].Contract, MinContract: live[0].MinContract})
	var rows int
	require.NoError(t, st.Pool.QueryRow(ctx, `SELECT count(*) FROM fleet_processes`).Scan(&rows))
	require.Equal(t, 2, rows, "the two-day-old row is forgotten, the stale one kept")
	require.NoError(t, st.LeaveProcess(ctx, "h:2:b"))
	live, err = st.LiveProcesses(ctx, 20*time.Second, 24*time.Hour)
	require.NoError(t, err)
	require.Empty(t, live)
}

// A session written by a newer build (sessions.format above SessionFormat)
// is not stepped: AcquireStep says why, and a session of the current format
// still is.
func TestAcquireRefusesASessionOfANewerFormat(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := testdb.Store(t)
	runID := uuid.NewString()
	require.NoError(t, st.CreateRun(ctx, store.Run{ID: runID, Prompt: "p", Team: json.RawMessage(`{}`), Variables: json.RawMessage(`{}`)}))
	initial := store.Session{ID: runID + ":supervisor", RunID: runID, Agent: "supervisor", Role: "supervisor", Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}}
	acq, err := st.AcquireStep(ctx, store.Acquire{Initial: initial, Token: "t1", Lease: time.Minute})
	require.NoError(t, err)
	require.True(t, acq.OK)
	require.NoError(t, st.ReleaseSession(ctx, initial.ID, "t1"))
	_, err = st.Pool.Exec(ctx, `UPDATE sessions SET format = $2 WHERE id = $1`, initial.ID, store.SessionFormat+1)
	require.NoError(t, err)
	for _, a := range []store.Acquire{
		{Initial: initial, Token: "t2", Lease: time.Minute},
		{Initial: store.Session{ID: initial.ID, RunID: runID}, Token: "t3", Lease: time.Minute}, // existing-only form
	} {
		_, err = st.AcquireStep(ctx, a)
		require.ErrorIs(t, err, store.ErrFutureSession)
		require.ErrorContains(t, err, "is format 2")
		_, err = st.Pool.Exec(ctx, `UPDATE sessions SET lease_until = 'epoch' WHERE id = $1`, initial.ID)
		require.NoError(t, err)
	}
}
