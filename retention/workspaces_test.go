package retention_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/retention"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/wsquota"
	"github.com/aetherium-engine/aetherium/wsquota/wsquotatest"
)

// tierManager is a Manager of real quota workspaces with the documented
// tiers' retentions, Production in a location of its own.
func tierManager(t *testing.T, production time.Duration) *wsquota.Manager {
	t.Helper()
	wsquotatest.Require(t)
	tiers := wsquota.DefaultTiers()
	tiers.Production.Quota, tiers.Production.Location, tiers.Production.Retention = 48<<20, "production", production
	m, err := wsquota.New(wsquotatest.Root(t), wsquota.Config{Quota: 16 << 20, Tiers: tiers})
	require.NoError(t, err)
	t.Cleanup(m.Close)
	return m
}

// workspace makes workspace id with a file in it, unmounted, its files (image
// and directory) last changed ago.
func workspace(t *testing.T, m *wsquota.Manager, id string, ago time.Duration) {
	t.Helper()
	ctx := context.Background()
	dir, err := m.Open(ctx, id)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "f"), []byte(id), 0o644))
	require.NoError(t, m.Unmount(ctx, id))
	at := time.Now().Add(-ago)
	for _, p := range []string{m.Image(id), m.Dir(id)} {
		require.NoError(t, os.Chtimes(p, at, at))
	}
}

func (e env) inWorkspace(t *testing.T, runID, ws, projectID string) {
	t.Helper()
	_, err := e.st.Pool.Exec(e.ctx, `UPDATE runs SET workspace = $2, project_id = nullif($3, '')::uuid WHERE id = $1`, runID, ws, projectID)
	require.NoError(t, err)
}

// The check: Temp workspaces past their retention are gone, with their
// images; Production ones are not; nothing in use or inside its retention is.
func TestSweepDeletesTempWorkspacesPastRetentionNotProduction(t *testing.T) {
	t.Parallel()
	e := setup(t)
	m := tierManager(t, 0)

	gone := map[string]string{}
	kept := map[string]string{}
	// Temp (7 days): a plain run's own workspace.
	gone["temp, run ended 10 days ago"] = e.seedRun(t, store.RunCompleted, "alice", 10*day)
	gone["temp, run failed 30 days ago"] = e.seedRun(t, store.RunFailed, "alice", 30*day)
	kept["temp, run ended 2 days ago"] = e.seedRun(t, store.RunCompleted, "alice", 2*day)
	kept["temp, run running for 20 days"] = e.seedRun(t, store.RunRunning, "alice", 20*day)
	gone["temp, run deleted (no row), files 10 days old"] = uuid.NewString()
	kept["temp, no row, files changed yesterday"] = uuid.NewString()
	for name, id := range gone {
		workspace(t, m, id, 20*day)
		_ = name
	}
	for name, id := range kept {
		ago := 20 * day
		if name == "temp, no row, files changed yesterday" {
			ago = day
		}
		workspace(t, m, id, ago)
	}

	// Production: a project's workspace, whose last run ended 100 days ago.
	p, err := e.st.CreateProject(e.ctx, store.Project{Slug: "site-" + uuid.NewString()[:8], Name: "site", Owner: "alice"})
	require.NoError(t, err)
	r := e.seedRun(t, store.RunCompleted, "alice", 100*day)
	e.inWorkspace(t, r, p.Workspace, p.ID)
	workspace(t, m, p.Workspace, 100*day)
	kept["production, project's last run 100 days ago"] = p.Workspace

	// Staging (30 days): a staging run's own.
	st1 := e.seedRun(t, store.RunCompleted, "alice", 40*day)
	e.inWorkspace(t, st1, store.StagingWorkspace(st1), p.ID)
	workspace(t, m, store.StagingWorkspace(st1), 40*day)
	gone["staging, run ended 40 days ago"] = store.StagingWorkspace(st1)
	st2 := e.seedRun(t, store.RunCompleted, "alice", 10*day)
	e.inWorkspace(t, st2, store.StagingWorkspace(st2), p.ID)
	workspace(t, m, store.StagingWorkspace(st2), 40*day)
	kept["staging, run ended 10 days ago"] = store.StagingWorkspace(st2)

	// A live run's workspace that is mounted (in use by the run) stays too.
	live := e.seedRun(t, store.RunRunning, "alice", 30*day)
	dir, err := m.Open(e.ctx, live)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "f"), []byte(live), 0o644))
	kept["temp, live run, mounted"] = live

	images := map[string]string{}
	for _, id := range gone {
		images[id] = m.Image(id)
	}
	s := retention.New(retention.Config{}, retention.Deps{Store: e.st, Workspaces: m})
	rep, err := s.Sweep(e.ctx)
	require.NoError(t, err)
	require.Equal(t, int64(len(gone)), rep.Workspaces)
	for name, id := range gone {
		require.Contains(t, rep.WorkspaceIDs, id, name)
		for _, p := range []string{m.Dir(id), images[id]} {
			_, err := os.Lstat(p)
			require.ErrorIs(t, err, os.ErrNotExist, "%s: %s", name, p)
		}
	}
	for name, id := range kept {
		_, err := os.Stat(m.Image(id))
		require.NoError(t, err, name)
		dir, err := m.Open(e.ctx, id)
		require.NoError(t, err, name)
		data, err := os.ReadFile(filepath.Join(dir, "f"))
		require.NoError(t, err, name)
		require.Equal(t, id, string(data), name)
	}
	// Nothing was touched by the runs' retention (runs: 0 in this Config).
	require.Equal(t, int64(0), rep.Runs)

	// A second sweep finds nothing more.
	rep, err = s.Sweep(e.ctx)
	require.NoError(t, err)
	require.Zero(t, rep.Workspaces)
}

// Production has a retention only for a deleted project's workspace (its
// delete removes it; this is the safety net): a live project's is kept.
func TestSweepDeletesADeletedProjectsWorkspaceAfterProductionRetention(t *testing.T) {
	t.Parallel()
	e := setup(t)
	m := tierManager(t, day)
	live, err := e.st.CreateProject(e.ctx, store.Project{Slug: "live-" + uuid.NewString()[:8], Name: "l", Owner: "alice"})
	require.NoError(t, err)
	dead, err := e.st.CreateProject(e.ctx, store.Project{Slug: "dead-" + uuid.NewString()[:8], Name: "d", Owner: "alice"})
	require.NoError(t, err)
	for _, p := range []store.Project{live, dead} {
		r := e.seedRun(t, store.RunCompleted, "alice", 10*day)
		e.inWorkspace(t, r, p.Workspace, p.ID)
		workspace(t, m, p.Workspace, 10*day)
	}
	require.NoError(t, e.st.DeleteProject(e.ctx, dead, "alice"))

	rep, err := retention.New(retention.Config{}, retention.Deps{Store: e.st, Workspaces: m}).Sweep(e.ctx)
	require.NoError(t, err)
	require.Equal(t, []string{dead.Workspace}, rep.WorkspaceIDs)
	_, err = os.Stat(m.Image(dead.Workspace))
	require.ErrorIs(t, err, os.ErrNotExist)
	_, err = os.Stat(m.Image(live.Workspace))
	require.NoError(t, err)
}
