package store_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/internal/testdb"

	"github.com/aetherium-engine/aetherium/store"
)

// setupMCP returns a store with alice's live MCP run of profile ide and one
// queued call in it.
func setupMCP(t *testing.T) (*store.Store, store.Run, store.MCPCall) {
	t.Helper()
	st := testdb.Store(t)
	ctx := context.Background()
	run, err := st.EnsureMCPRun(ctx, "alice", "ide", json.RawMessage(`{"name":"mcp:ide"}`), "")
	require.NoError(t, err)
	call := store.MCPCall{ID: "mcp_" + uuid.NewString()[:8], RunID: run.ID, Profile: "ide", Principal: "alice", Tool: "read_file", Args: `{"path":"a"}`}
	require.NoError(t, st.CreateMCPCall(ctx, call, 0))
	return st, run, call
}

func TestEnsureMCPRun(t *testing.T) {
	t.Parallel()
	st, run, _ := setupMCP(t)
	ctx := context.Background()
	require.Equal(t, store.RunRunning, run.Status, "never queued: no supervisor picks it up")
	require.Equal(t, "mcp:ide", run.Template)
	require.Equal(t, "alice", run.Owner)

	team := json.RawMessage(`{"name":"mcp:ide"}`)
	// Concurrent first calls converge on one live run.
	var wg sync.WaitGroup
	ids := make([]string, 8)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := st.EnsureMCPRun(ctx, "dave", "ide", team, "")
			require.NoError(t, err)
			ids[i] = r.ID
		}()
	}
	wg.Wait()
	for _, id := range ids {
		require.Equal(t, ids[0], id)
	}
	for _, c := range []struct {
		name, owner, profile string
		team                 json.RawMessage
		same                 bool
	}{
		{"same principal and profile", "alice", "ide", team, true},
		{"another principal", "bob", "ide", team, false},
		{"another profile", "alice", "ops", team, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, err := st.EnsureMCPRun(ctx, c.owner, c.profile, c.team, "")
			require.NoError(t, err)
			require.Equal(t, c.same, r.ID == run.ID)
		})
	}
	t.Run("a changed profile replaces the run", func(t *testing.T) {
		r, err := st.EnsureMCPRun(ctx, "alice", "ide", json.RawMessage(`{"name":"mcp:ide","allowed_domains":["x.org"]}`), "")
		require.NoError(t, err)
		require.NotEqual(t, run.ID, r.ID)
		old, err := st.GetRun(ctx, run.ID)
		require.NoError(t, err)
		require.Equal(t, store.RunCompleted, old.Status)
		require.Equal(t, "mcp_profile_changed", old.Reason)
	})
	t.Run("a missing project", func(t *testing.T) {
		for _, id := range []string{uuid.NewString(), "no-such-project"} {
			_, err := st.EnsureMCPRun(ctx, "carol", "ide", team, id)
			require.ErrorIs(t, err, store.ErrNoProject, id)
		}
	})
}

func TestMCPCallTransitions(t *testing.T) {
	t.Parallel()
	st, run, call := setupMCP(t)
	ctx := context.Background()

	c, ok, err := st.ClaimMCPCall(ctx, call.ID, "t1", time.Minute)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, 1, c.Attempts)

	_, ok, err = st.ClaimMCPCall(ctx, call.ID, "t2", time.Minute)
	require.NoError(t, err)
	require.False(t, ok, "a fresh claim is not taken over")

	ok, err = st.ReleaseMCPCall(ctx, call.ID, "t2", store.MCPCallWaiting, "apr_x")
	require.NoError(t, err)
	require.False(t, ok, "only the claim's holder parks the call")
	ok, err = st.ReleaseMCPCall(ctx, call.ID, "t1", store.MCPCallWaiting, "apr_x")
	require.NoError(t, err)
	require.True(t, ok)
	c, err = st.GetMCPCall(ctx, call.ID)
	require.NoError(t, err)
	require.Equal(t, store.MCPCallWaiting, c.Status)
	require.Equal(t, "apr_x", c.ApprovalID)

	// The approval's resume claims it again; the holder dies, its claim goes stale.
	_, ok, err = st.ClaimMCPCall(ctx, call.ID, "t3", time.Minute)
	require.NoError(t, err)
	require.True(t, ok)
	_, err = st.Pool.Exec(ctx, `UPDATE mcp_calls SET claimed_at = now() - interval '1 hour' WHERE id = $1`, call.ID)
	require.NoError(t, err)
	c, ok, err = st.ClaimMCPCall(ctx, call.ID, "t4", time.Minute)
	require.NoError(t, err)
	require.True(t, ok, "a stale claim is taken over")
	require.Equal(t, 3, c.Attempts)
	for token, want := range map[string]bool{"t3": false, "t4": true} {
		renewed, err := st.RenewMCPCall(ctx, call.ID, token)
		require.NoError(t, err)
		require.Equal(t, want, renewed, "only the holder renews (%s)", token)
	}

	row := store.AuditRow{CallKey: "m:" + call.ID + ":" + call.ID, At: time.Now(), RunID: run.ID, Team: "mcp:ide", Agent: "alice",
		Role: "mcp", Tool: "read_file", Tier: "standard", Allowed: true, Decision: "allowed", Summary: `{"path":"a"}`}
	out := store.MCPCall{Decision: "allowed", Result: "contents\x00"}
	for _, c := range []struct {
		name  string
		token string
		done  bool
	}{
		{"the taken-over claim cannot finish", "t3", false},
		{"the holder finishes", "t4", true},
		{"a second finish is a no-op", "t4", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			done, err := st.FinishMCPCall(ctx, call.ID, c.token, out, &row)
			require.NoError(t, err)
			require.Equal(t, c.done, done)
		})
	}
	c, err = st.GetMCPCall(ctx, call.ID)
	require.NoError(t, err)
	require.Equal(t, store.MCPCallDone, c.Status)
	require.Equal(t, "contents\uFFFD", c.Result, "a NUL in a result cannot fail its write")
	_, ok, err = st.ClaimMCPCall(ctx, call.ID, "t5", 0)
	require.NoError(t, err)
	require.False(t, ok, "a done call is never claimed again")
	rows, err := st.RunAudit(ctx, run.ID, 10)
	require.NoError(t, err)
	require.Len(t, rows, 1, "outcome and audit row land together, once")
}

// A client withdraws a call no worker runs: the call is done (withdrawn), its
// pending approval cancelled and the audit says so, once; a running or
// finished call is not withdrawn.
func TestWithdrawMCPCall(t *testing.T) {
	t.Parallel()
	st, run, call := setupMCP(t)
	ctx := context.Background()
	claimed, ok, err := st.ClaimMCPCall(ctx, call.ID, "tok", time.Minute)
	require.NoError(t, err)
	require.True(t, ok)
	_, withdrawn, err := st.WithdrawMCPCall(ctx, call.ID, "alice (mcp client)", "tasks/cancel")
	require.NoError(t, err)
	require.False(t, withdrawn, "a running call finishes on its worker")

	a, created, err := st.RequestApproval(ctx, store.Approval{ID: "apr_" + uuid.NewString()[:8], RunID: run.ID, SessionID: "m:" + call.ID,
		CallID: call.ID, Team: "mcp:ide", Agent: "alice", Tool: claimed.Tool, Tier: "restricted", Args: json.RawMessage(`{"path":"a"}`)}, time.Minute)
	require.NoError(t, err)
	require.True(t, created)
	ok, err = st.ReleaseMCPCall(ctx, call.ID, "tok", store.MCPCallWaiting, a.ID)
	require.NoError(t, err)
	require.True(t, ok)

	out, withdrawn, err := st.WithdrawMCPCall(ctx, call.ID, "alice (mcp client)", "tasks/cancel")
	require.NoError(t, err)
	require.True(t, withdrawn)
	require.Equal(t, store.MCPCallDone, out.Status)
	require.Equal(t, store.MCPDecisionWithdrawn, out.Decision)
	require.True(t, out.IsError)
	closed, err := st.GetApproval(ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, store.ApprovalCancelled, closed.Status)
	require.Equal(t, "alice (mcp client)", closed.DecidedBy)
	rows, err := st.RunAudit(ctx, run.ID, 10)
	require.NoError(t, err)
	require.Len(t, rows, 1)
	require.Equal(t, "denied", rows[0].Decision)
	require.Equal(t, "approval", rows[0].DenyLayer)
	require.Equal(t, "restricted", rows[0].Tier)
	require.Contains(t, rows[0].DenyReason, "withdrawn by the MCP client (tasks/cancel)")

	_, again, err := st.WithdrawMCPCall(ctx, call.ID, "alice (mcp client)", "again")
	require.NoError(t, err)
	require.False(t, again, "withdrawn once")
	rows, err = st.RunAudit(ctx, run.ID, 10)
	require.NoError(t, err)
	require.Len(t, rows, 1)
}

// One statement reads the states of many calls: the row's version and whether
// its run ended.
func TestMCPCallStates(t *testing.T) {
	t.Parallel()
	st, run, call := setupMCP(t)
	ctx := context.Background()
	states, err := st.MCPCallStates(ctx, []string{call.ID, "mcp_missing"})
	require.NoError(t, err)
	require.Len(t, states, 1)
	before := states[call.ID]
	require.False(t, before.RunTerminal)
	_, _, err = st.ClaimMCPCall(ctx, call.ID, "tok", time.Minute)
	require.NoError(t, err)
	_, _, err = st.FinishRun(ctx, run.ID, store.RunCancelled, "", "", "test")
	require.NoError(t, err)
	states, err = st.MCPCallStates(ctx, []string{call.ID})
	require.NoError(t, err)
	require.True(t, states[call.ID].RunTerminal)
	require.True(t, states[call.ID].UpdatedAt.After(before.UpdatedAt))
}
