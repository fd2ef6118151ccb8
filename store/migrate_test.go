package store_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/internal/testdb"
	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/store"
)

// Migration 00019 moves every session's jsonb history into session_messages
// rows, in order, and its down migration puts them back: a deployment
// upgraded mid-run resumes its sessions where they were.
func TestSessionHistoryMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := testdb.Store(t)
	p, closeDB, err := st.Migrator()
	require.NoError(t, err)
	t.Cleanup(func() { _ = closeDB() })
	_, err = p.DownTo(ctx, 18)
	require.NoError(t, err)

	runID, sessID := uuid.NewString(), uuid.NewString()+":supervisor"
	msgs := []llm.Message{{Role: llm.RoleSystem, Content: "lead"}, {Role: llm.RoleUser, Content: "task ü"},
		{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "c1", Name: "read_file", Args: json.RawMessage(`{"path": "a"}`)}}},
		{Role: llm.RoleTool, ToolCallID: "c1", Name: "read_file", Content: "contents", Provenance: &llm.Provenance{Private: []string{"a"}}}}
	raw, err := json.Marshal(msgs)
	require.NoError(t, err)
	_, err = st.Pool.Exec(ctx, `INSERT INTO runs (id, status, prompt, team, variables) VALUES ($1, 'running', 'p', '{}', '{}')`, runID)
	require.NoError(t, err)
	_, err = st.Pool.Exec(ctx, `INSERT INTO sessions (id, run_id, agent, role, messages, steps) VALUES ($1, $2, 'boss', 'supervisor', $3, 1)`, sessID, runID, raw)
	require.NoError(t, err)

	_, err = p.Up(ctx)
	require.NoError(t, err)
	got, ok, err := st.AcquireSession(ctx, store.Session{ID: sessID, RunID: runID, Agent: "boss", Role: "supervisor", Messages: msgs[:2]}, "tok", 60e9)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, msgs, got.Messages, "the history, whole and in order")
	require.Equal(t, len(msgs), got.Saved)
	require.Equal(t, 1, got.Steps)

	_, err = p.DownTo(ctx, 18)
	require.NoError(t, err)
	var back []llm.Message
	require.NoError(t, st.Pool.QueryRow(ctx, `SELECT messages FROM sessions WHERE id = $1`, sessID).Scan(&back))
	require.Equal(t, msgs, back, "the down migration puts the history back")
	_, err = p.Up(ctx)
	require.NoError(t, err)
}
