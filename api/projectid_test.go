package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/api"
)

// projectWorkspace is the directory of the workspace a run works in, as the
// store records it (the worker and the files endpoint use the same).
func (o *owners) runWorkspace(t *testing.T, runID string) string {
	t.Helper()
	r, err := o.Store.GetRun(context.Background(), runID)
	require.NoError(t, err)
	return o.Workspaces.Dir(r.WorkspaceID())
}

func (o *owners) submitInto(t *testing.T, token, project string) string {
	t.Helper()
	body := map[string]any{"template": "demo", "prompt": "x", "variables": map[string]any{"topic": "t"}, "project": project}
	code, _, raw := o.call(t, token, "POST", "/api/orchestrator/run-from-template", body)
	require.Equal(t, http.StatusAccepted, code, string(raw))
	var out struct {
		RunID string `json:"run_id"`
	}
	require.NoError(t, json.Unmarshal(raw, &out))
	return out.RunID
}

// A slug is a name, not an identity: alice deletes project p, bob creates p and
// writes a file; alice's old run of p never reaches bob's files, and bob's run
// never reaches what alice left. Through the real API.
func TestReusedSlugNeverReachesAnotherOwnersFiles(t *testing.T) {
	t.Parallel()
	o := setupOwners(t, 0)
	for _, tc := range []struct{ first, second string }{{"alice", "bob"}, {"bob", "alice"}} {
		t.Run(tc.first+" then "+tc.second, func(t *testing.T) {
			slug := "reuse-" + tc.first
			code, _, raw := o.call(t, tc.first, "POST", "/api/projects", map[string]any{"slug": slug})
			require.Equal(t, http.StatusCreated, code, string(raw))
			oldRun := o.submitInto(t, tc.first, slug)
			oldWS := o.runWorkspace(t, oldRun)
			require.NoError(t, os.MkdirAll(oldWS, 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(oldWS, "mine.txt"), []byte("first owner's"), 0o644))
			code, _, raw = o.call(t, tc.first, "POST", "/api/runs/"+oldRun+"/cancel", nil)
			require.Equal(t, http.StatusOK, code, string(raw))
			code, _, raw = o.call(t, tc.first, "DELETE", "/api/projects/"+slug+"?confirm="+slug, nil)
			require.Equal(t, http.StatusNoContent, code, string(raw))

			code, _, raw = o.call(t, tc.second, "POST", "/api/projects", map[string]any{"slug": slug})
			require.Equal(t, http.StatusCreated, code, "a deleted slug is free again: %s", raw)
			newRun := o.submitInto(t, tc.second, slug)
			newWS := o.runWorkspace(t, newRun)
			require.NotEqual(t, oldWS, newWS, "a new project of a reused slug gets a new workspace")
			require.NoError(t, os.MkdirAll(newWS, 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(newWS, "secret.txt"), []byte("second owner's"), 0o644))

			// The second owner sees its own file, nothing of the first owner's.
			code, _, raw = o.call(t, tc.second, "GET", "/api/runs/"+newRun+"/files", nil)
			require.Equal(t, http.StatusOK, code, string(raw))
			var list api.FileList
			require.NoError(t, json.Unmarshal(raw, &list))
			require.Len(t, list.Files, 1, string(raw))
			require.Equal(t, "secret.txt", list.Files[0].Path)
			code, _, raw = o.call(t, tc.second, "GET", "/api/runs/"+newRun+"/file?path=secret.txt", nil)
			require.Equal(t, http.StatusOK, code, string(raw))

			// The first owner's old run lists and reads nothing of it.
			code, _, raw = o.call(t, tc.first, "GET", "/api/runs/"+oldRun+"/files", nil)
			require.Equal(t, http.StatusOK, code, string(raw))
			require.NotContains(t, string(raw), "secret.txt")
			code, _, raw = o.call(t, tc.first, "GET", "/api/runs/"+oldRun+"/file?path=secret.txt", nil)
			require.Equal(t, http.StatusNotFound, code, string(raw))
			require.NotContains(t, string(raw), "second owner's")
		})
	}
}
