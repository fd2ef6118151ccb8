package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/api"
	"github.com/aetherium-engine/aetherium/store"
)

// GET /api/audit: a submitter reads the audit of its own runs only, read_all
// every run's; filters and pages narrow it.
func TestAuditAcrossRuns(t *testing.T) {
	t.Parallel()
	o := setupOwners(t, 0)
	var rows []store.AuditRow
	for i, run := range []string{o.aliceRun, o.aliceRun, o.aliceRun, o.bobRun} {
		r := store.AuditRow{CallKey: fmt.Sprintf("s:%d", i), At: time.Now(), RunID: run, Agent: "writer", Tool: "write_file",
			Tier: "standard", Allowed: true, Decision: "allowed"}
		if i == 1 {
			r.Tool, r.Tier, r.Allowed, r.Decision, r.DenyLayer, r.DenyReason = "run_shell", "restricted", false, "denied", "rules", "no"
		}
		rows = append(rows, r)
	}
	require.NoError(t, o.Store.InsertAudit(context.Background(), rows))

	list := func(t *testing.T, token, query string) (int, api.AuditPage, string) {
		code, _, raw := o.call(t, token, "GET", "/api/audit"+query, nil)
		var out api.AuditPage
		if code == http.StatusOK {
			require.NoError(t, json.Unmarshal(raw, &out))
		}
		return code, out, string(raw)
	}
	for _, tc := range []struct {
		name, token, query string
		code, n            int
		runs               []string
	}{
		{"own runs only", "alice", "", 200, 3, []string{o.aliceRun}},
		{"the other owner's", "bob", "", 200, 1, []string{o.bobRun}},
		{"bob asks for alice's run", "bob", "?run_id=" + o.aliceRun, 200, 0, nil},
		{"read_all sees all", "auditor", "", 200, 4, []string{o.aliceRun, o.bobRun}},
		{"by run", "auditor", "?run_id=" + o.bobRun, 200, 1, []string{o.bobRun}},
		{"by decision", "alice", "?decision=denied", 200, 1, []string{o.aliceRun}},
		{"by tool and tier", "alice", "?tool=write_file&tier=standard", 200, 2, []string{o.aliceRun}},
		{"bad decision", "alice", "?decision=maybe", 400, 0, nil},
		{"bad run id", "alice", "?run_id=x", 400, 0, nil},
		{"bad limit", "alice", "?limit=0", 400, 0, nil},
		{"no token", "", "", 401, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, raw := list(t, tc.token, tc.query)
			require.Equal(t, tc.code, code, raw)
			if code != http.StatusOK {
				return
			}
			require.Len(t, out.Audit, tc.n, raw)
			seen := map[string]bool{}
			for _, r := range out.Audit {
				seen[r.RunID] = true
			}
			for _, r := range tc.runs {
				require.True(t, seen[r], "rows of run %s", r)
			}
			require.Len(t, seen, len(tc.runs))
		})
	}

	// Pages, newest first, end to end.
	code, first, raw := list(t, "alice", "?limit=2")
	require.Equal(t, http.StatusOK, code, raw)
	require.Len(t, first.Audit, 2)
	require.Greater(t, first.Audit[0].ID, first.Audit[1].ID)
	require.NotZero(t, first.NextBefore)
	code, second, raw := list(t, "alice", fmt.Sprintf("?limit=2&before=%d", first.NextBefore))
	require.Equal(t, http.StatusOK, code, raw)
	require.Len(t, second.Audit, 1)
	require.Zero(t, second.NextBefore)
}
