package fleet_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/store"
)

// A promotion in the split deployment (the compose layout, where the API
// process sees the workspaces read-only): the API process holds the project's
// row and writes the audit row, a worker makes the copy (a run:promote task).
// Without a worker the copy is withdrawn after replay.wait and the answer is a
// 503 that changed nothing, audit included; with one, the project's files are
// the staging run's and the promotion is audited once.
func TestPromoteThroughAWorker(t *testing.T) {
	t.Parallel()
	f := fleettest.Start(t, fleettest.Options{NoWorker: true})
	ctx := context.Background()
	api := f.StartAPIWith(func(c *config.Config) { c.Replay.Wait = 300 * time.Millisecond })
	require.Nil(t, api.Worker, "an API process alone")

	code, _, body := postTo(t, api.URL, "/api/projects", map[string]any{"slug": "site", "name": "Site"}, nil)
	require.Equal(t, 201, code, body)
	p, err := f.Store.GetProject(ctx, "site")
	require.NoError(t, err)
	var sub struct {
		RunID string `json:"run_id"`
	}
	code, _, body = postTo(t, api.URL, "/api/orchestrator/run-from-template", map[string]any{"template": "demo", "prompt": "x",
		"variables": map[string]any{"topic": "t"}, "project": "site", "staging": true}, &sub)
	require.Equal(t, 202, code, body)
	_, err = f.Store.Pool.Exec(ctx, `UPDATE runs SET status = 'completed', finished_at = now() WHERE id = $1`, sub.RunID)
	require.NoError(t, err)
	write := func(ws, content string) {
		dir, err := f.Workspaces.Open(ctx, ws)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "index.html"), []byte(content), 0o644))
	}
	write(store.StagingWorkspace(sub.RunID), "<h1>v2</h1>")
	write(p.Workspace, "<h1>v1</h1>")
	project := func() string {
		dir, err := f.Workspaces.Open(ctx, p.Workspace) // as the next step would
		require.NoError(t, err)
		raw, err := os.ReadFile(filepath.Join(dir, "index.html"))
		require.NoError(t, err)
		return string(raw)
	}
	audited := func() int {
		rows, err := f.Store.ProjectAudit(ctx, p.ID, 10)
		require.NoError(t, err)
		return len(rows)
	}

	// No worker: withdrawn, nothing changed.
	code, _, body = postTo(t, api.URL, "/api/runs/"+sub.RunID+"/promote", nil, nil)
	require.Equal(t, 503, code, body)
	require.Contains(t, body, "no worker took the copy")
	require.Contains(t, body, "nothing was changed")
	require.Equal(t, "<h1>v1</h1>", project())
	require.Zero(t, audited(), "a promotion that did not happen is not audited")
	pending, err := f.Inspector().ListPendingTasks(queue.QueueMaintenance)
	require.NoError(t, err)
	for _, ti := range pending {
		require.NotEqual(t, queue.TypePromote, ti.Type, "the withdrawn copy is not left for a worker to make later")
	}

	// A worker: the copy is made, the promotion audited once.
	f.StartWorker()
	code, _, body = postTo(t, api.URL, "/api/runs/"+sub.RunID+"/promote", nil, nil)
	require.Equal(t, 200, code, body)
	require.Contains(t, body, `"to":"`+p.Workspace+`"`)
	require.Equal(t, "<h1>v2</h1>", project())
	require.Equal(t, 1, audited())
	done, err := f.Inspector().ListCompletedTasks(queue.QueueMaintenance)
	require.NoError(t, err)
	n := 0
	for _, ti := range done {
		if ti.Type == queue.TypePromote {
			n++
		}
	}
	require.Equal(t, 1, n, "one copy, made by the worker")

	// A staging run that made no workspace: the worker's refusal is the
	// API's 409, and nothing is audited.
	none := "01900000-0000-7000-8000-0000000000c1"
	require.NoError(t, f.Store.CreateRun(ctx, store.Run{ID: none, Status: store.RunQueued, Prompt: "p", Team: []byte(`{}`),
		Owner: "admin", ProjectID: p.ID, Workspace: store.StagingWorkspace(none)}))
	_, err = f.Store.Pool.Exec(ctx, `UPDATE runs SET status = 'completed', finished_at = now() WHERE id = $1`, none)
	require.NoError(t, err)
	code, _, body = postTo(t, api.URL, "/api/runs/"+none+"/promote", nil, nil)
	require.Equal(t, 409, code, body)
	require.Contains(t, body, "made no workspace")
	require.Equal(t, "<h1>v2</h1>", project())
	require.Equal(t, 1, audited(), "a refused promotion is not audited")
}
