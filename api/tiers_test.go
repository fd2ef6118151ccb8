package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/store"
)

// Storage tiers at the API: a staging run of a project works in a workspace of
// its own, and its owner promotes it into the project's, audited; nobody else
// can, and nothing but a completed staging run is promoted.
func TestPromoteAStagingRunIntoItsProject(t *testing.T) {
	t.Parallel()
	o := setupOwners(t, 0)
	ctx := context.Background()
	code, _, raw := o.call(t, "alice", "POST", "/api/projects", map[string]any{"slug": "site", "name": "Site"})
	require.Equal(t, http.StatusCreated, code, string(raw))
	p, err := o.Store.GetProject(ctx, "site")
	require.NoError(t, err)

	submit := func(body map[string]any) (int, string, []byte) {
		code, _, raw := o.call(t, "alice", "POST", "/api/orchestrator/run-from-template", body)
		var out struct {
			RunID string `json:"run_id"`
		}
		_ = json.Unmarshal(raw, &out)
		return code, out.RunID, raw
	}
	body := map[string]any{"template": "demo", "prompt": "x", "variables": map[string]any{"topic": "t"}, "project": "site", "staging": true}
	code, staged, raw := submit(body)
	require.Equal(t, http.StatusAccepted, code, string(raw))
	tier := func(id string) string {
		code, _, raw := o.call(t, "alice", "GET", "/api/runs/"+id, nil)
		require.Equal(t, 200, code, string(raw))
		var v struct {
			Tier string `json:"workspace_tier"`
		}
		require.NoError(t, json.Unmarshal(raw, &v))
		return v.Tier
	}
	require.Equal(t, "staging", tier(staged))
	require.Equal(t, "temp", tier(o.aliceRun))
	r, err := o.Store.GetRun(ctx, staged)
	require.NoError(t, err)
	require.Equal(t, store.StagingWorkspace(staged), r.WorkspaceID())
	// Its request, as cloned, says staging again.
	code, _, raw = o.call(t, "alice", "GET", "/api/runs/"+staged+"/request", nil)
	require.Equal(t, 200, code, string(raw))
	require.Contains(t, string(raw), `"staging":true`)

	// Staging needs a project.
	delete(body, "project")
	code, _, raw = submit(body)
	require.Equal(t, http.StatusBadRequest, code, string(raw))
	require.Contains(t, string(raw), "staging needs a project")

	promote := func(token, id string) (int, []byte) {
		code, _, raw := o.call(t, token, "POST", "/api/runs/"+id+"/promote", nil)
		return code, raw
	}
	code, raw = promote("alice", staged)
	require.Equal(t, http.StatusConflict, code, string(raw))
	require.Contains(t, string(raw), "only a completed staging run")
	_, err = o.Store.Pool.Exec(ctx, `UPDATE runs SET status = 'completed', finished_at = now() WHERE id = $1`, staged)
	require.NoError(t, err)
	code, raw = promote("alice", staged)
	require.Equal(t, http.StatusConflict, code, string(raw))
	require.Contains(t, string(raw), "made no workspace")

	sdir, err := o.Workspaces.Open(ctx, store.StagingWorkspace(staged))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(sdir, "index.html"), []byte("<h1>v2</h1>"), 0o644))
	pdir, err := o.Workspaces.Open(ctx, p.Workspace)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(pdir, "index.html"), []byte("<h1>v1</h1>"), 0o644))

	// Another's run: the missing-run 404; a reader without submit: 403.
	code, raw = promote("bob", staged)
	require.Equal(t, http.StatusNotFound, code, string(raw))
	require.JSONEq(t, `{"error":"run `+staged+` not found","field":"id"}`, string(raw))
	code, raw = promote("auditor", staged)
	require.Equal(t, http.StatusForbidden, code, string(raw))
	// Not a staging run; not a run id at all (a path is never one).
	code, raw = promote("alice", o.aliceRun)
	require.Equal(t, http.StatusConflict, code, string(raw))
	code, raw = promote("alice", "..%2F..%2Fetc")
	require.Equal(t, http.StatusBadRequest, code, string(raw))

	// A project run in flight in the project's workspace: not now.
	delete(body, "staging")
	body["project"] = "site"
	code, live, raw := submit(body)
	require.Equal(t, http.StatusAccepted, code, string(raw))
	code, raw = promote("alice", staged)
	require.Equal(t, http.StatusConflict, code, string(raw))
	require.Contains(t, string(raw), "project has runs in flight")
	data, err := os.ReadFile(filepath.Join(o.Workspaces.Dir(p.Workspace), "index.html"))
	require.NoError(t, err)
	require.Equal(t, "<h1>v1</h1>", string(data), "nothing changed")
	_, err = o.Store.Pool.Exec(ctx, `UPDATE runs SET status = 'cancelled', finished_at = now() WHERE id = $1`, live)
	require.NoError(t, err)

	code, raw = promote("alice", staged)
	require.Equal(t, http.StatusOK, code, string(raw))
	var got struct {
		RunID   string `json:"run_id"`
		Project string `json:"project"`
		From    string `json:"from"`
		To      string `json:"to"`
	}
	require.NoError(t, json.Unmarshal(raw, &got))
	require.Equal(t, staged, got.RunID)
	require.Equal(t, "site", got.Project)
	require.Equal(t, store.StagingWorkspace(staged), got.From)
	require.Equal(t, p.Workspace, got.To)
	pdir, err = o.Workspaces.Open(ctx, p.Workspace) // the new image, mounted as the next step would
	require.NoError(t, err)
	data, err = os.ReadFile(filepath.Join(pdir, "index.html"))
	require.NoError(t, err)
	require.Equal(t, "<h1>v2</h1>", string(data))

	audit, err := o.Store.ProjectAudit(ctx, p.ID, 10)
	require.NoError(t, err)
	require.Len(t, audit, 1, "one promotion, audited once (the refusals left no row)")
	require.Equal(t, "workspace.promote", audit[0].Action)
	require.Equal(t, "alice", audit[0].Principal)
	require.Contains(t, audit[0].Detail, staged)
}
