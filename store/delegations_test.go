package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/store"
)

// leasedSession starts a session of runID under a lease and returns its token.
func leasedSession(t *testing.T, st *store.Store, runID, id string) string {
	t.Helper()
	token := uuid.NewString()
	_, ok, err := st.AcquireSession(context.Background(), store.Session{ID: id, RunID: runID, Agent: id, Role: "worker",
		Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}}, token, time.Minute)
	require.NoError(t, err)
	require.True(t, ok)
	return token
}

func dels(runID, session, call string, n int) []store.Delegation {
	out := make([]store.Delegation, n)
	for i := range out {
		out[i] = store.Delegation{ID: fmt.Sprintf("del_%s_%s_%d", session, call, i), RunID: runID, ParentSession: session, ToolCallID: call, Agent: fmt.Sprint("w", i), Task: "t"} // (parent, call, agent) is unique
	}
	return out
}

// The caps hold by the store's count, whatever runs at once: 16 sessions of one
// run each record 3 delegations per call, concurrently, under a run cap of 20 and
// a session cap of 6. Exactly 18 are recorded (whole calls: a 7th would make
// 21), and each session has at most 6.
func TestRecordDelegationsCapsConcurrent(t *testing.T) {
	t.Parallel()
	st, sess, _ := setup(t)
	ctx := context.Background()
	runID := sess.RunID
	lim := store.DelegationLimits{PerSession: 6, PerRun: 20}
	const sessions, callsEach, per = 16, 3, 3
	tokens := make([]string, sessions)
	for i := range tokens {
		tokens[i] = leasedSession(t, st, runID, fmt.Sprintf("w%d:%s", i, runID[:8]))
	}
	var mu sync.Mutex
	scopes := map[string]int{}
	var wg sync.WaitGroup
	for i := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("w%d:%s", i, runID[:8])
			for c := range callsEach {
				err := st.RecordDelegations(ctx, id, tokens[i], dels(runID, id, fmt.Sprint("c", c), per), lim)
				var capErr *store.DelegationCapError
				if err != nil && !errors.As(err, &capErr) {
					t.Errorf("session %s call %d: %v", id, c, err)
					return
				}
				if capErr != nil {
					mu.Lock()
					scopes[capErr.Scope]++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	require.Equal(t, lim.PerRun-lim.PerRun%per, count(t, st, `SELECT count(*) FROM delegations WHERE run_id = $1`, runID),
		"the run cap holds across concurrent sessions (whole calls of 3)")
	var most int
	require.NoError(t, st.Pool.QueryRow(ctx, `SELECT max(n) FROM (SELECT count(*) AS n FROM delegations WHERE run_id = $1 GROUP BY parent_session) x`, runID).Scan(&most))
	require.LessOrEqual(t, most, lim.PerSession)
	var partial int
	require.NoError(t, st.Pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM delegations WHERE run_id = $1 GROUP BY tool_call_id, parent_session HAVING count(*) <> 3) x`, runID).Scan(&partial))
	require.Zero(t, partial, "a call records all its delegations or none")
	require.Positive(t, scopes["run"], "refusals name the run")
}

func TestRecordDelegations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, sess, token := setup(t)
	lim := store.DelegationLimits{PerSession: 4, PerRun: 5}

	require.NoError(t, st.RecordDelegations(ctx, sess.ID, token, dels(sess.RunID, sess.ID, "c1", 3), lim))
	err := st.RecordDelegations(ctx, sess.ID, token, dels(sess.RunID, sess.ID, "c2", 2), lim)
	var capErr *store.DelegationCapError
	require.ErrorAs(t, err, &capErr)
	require.Equal(t, store.DelegationCapError{Scope: "session", Cap: 4, Have: 3, Want: 2}, *capErr)
	require.Equal(t, 3, count(t, st, `SELECT count(*) FROM delegations WHERE run_id = $1`, sess.RunID), "a refused call records none")

	// A redispatched call's delegations are recorded already: it passes even at
	// the cap, and records nothing twice.
	require.NoError(t, st.RecordDelegations(ctx, sess.ID, token, dels(sess.RunID, sess.ID, "c1", 3), store.DelegationLimits{PerSession: 1, PerRun: 1}))
	require.Equal(t, 3, count(t, st, `SELECT count(*) FROM delegations WHERE run_id = $1`, sess.RunID))

	// Another session of the run: the run's count binds.
	other := "o:" + sess.RunID
	otoken := leasedSession(t, st, sess.RunID, other)
	err = st.RecordDelegations(ctx, other, otoken, dels(sess.RunID, other, "c1", 3), lim)
	require.ErrorAs(t, err, &capErr)
	require.Equal(t, store.DelegationCapError{Scope: "run", Cap: 5, Have: 3, Want: 3}, *capErr)

	// A stale step records nothing.
	err = st.RecordDelegations(ctx, other, "not-the-token", dels(sess.RunID, other, "c9", 1), lim)
	require.ErrorIs(t, err, store.ErrLeaseLost)
	require.Equal(t, 3, count(t, st, `SELECT count(*) FROM delegations WHERE run_id = $1`, sess.RunID))
}
