package fleet_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/fleet"
	"github.com/aetherium-engine/aetherium/fleettest"
)

// Each role's entry builds the core and only what that role uses; a role run on a
// process opened for another refuses at once instead of dereferencing nil.
func TestOpenRolesBuildOnlyTheirParts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := fleettest.Config(t)
	core := func(t *testing.T, f *fleet.Fleet) {
		require.NotNil(t, f.Store)
		require.NotNil(t, f.Redis)
		require.NotNil(t, f.Queue)
		require.NotNil(t, f.Events)
		require.NotNil(t, f.Metrics)
		require.NotNil(t, f.Policy)
		require.NotNil(t, f.Workspaces)
	}

	t.Run("api", func(t *testing.T) {
		f, err := fleet.OpenAPI(ctx, cfg, fleettest.Logger(t), fleet.Options{})
		require.NoError(t, err)
		t.Cleanup(f.Close)
		core(t, f)
		require.NotNil(t, f.Registry, "the tool catalog")
		require.NotNil(t, f.Approvals)
		require.NotNil(t, f.Leases, "GET /api/leases")
		require.Nil(t, f.Executor, "no sandbox")
		require.Nil(t, f.EgressProxy)
		require.Nil(t, f.Device)
		require.Nil(t, f.GPU)
		require.NotNil(t, f.Rules, "the permissions in force: grants are listed and confirmed under their revision")
		require.Nil(t, f.Router, "the api dispatches no tool")
		require.Nil(t, f.Worker)
		require.ErrorContains(t, f.RunWorker(ctx), "not opened for the worker role")
	})
	t.Run("scheduler", func(t *testing.T) {
		f, err := fleet.OpenScheduler(ctx, cfg, fleettest.Logger(t), fleet.Options{})
		require.NoError(t, err)
		t.Cleanup(f.Close)
		core(t, f)
		require.Nil(t, f.Registry)
		require.Nil(t, f.Mailbox)
		require.Nil(t, f.Leases)
		require.Nil(t, f.Approvals)
		require.Nil(t, f.Executor)
		require.Nil(t, f.Worker)
		require.ErrorContains(t, f.RunAPI(ctx), "not opened for the api role")
		require.ErrorContains(t, f.RunWorker(ctx), "not opened for the worker role")
	})
	t.Run("worker", func(t *testing.T) {
		f, err := fleet.OpenWorker(ctx, cfg, fleettest.Logger(t), fleet.Options{NoSandbox: true})
		require.NoError(t, err)
		t.Cleanup(f.Close)
		core(t, f)
		require.NotNil(t, f.Worker)
		require.NotNil(t, f.Router)
		require.NotNil(t, f.Rules, "the gate")
		require.NotNil(t, f.Approvals)
		require.NotNil(t, f.Mailbox)
		require.NotNil(t, f.Leases)
	})
}
