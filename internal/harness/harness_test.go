package harness_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/internal/harness"
	"github.com/aetherium-engine/aetherium/internal/testdb"
	"github.com/aetherium-engine/aetherium/internal/testinfra"
	"github.com/aetherium-engine/aetherium/templates"
	"github.com/aetherium-engine/aetherium/toolbox"
)

func TestTeamsAreValidAndCounted(t *testing.T) {
	t.Parallel()
	reg, err := toolbox.New(toolbox.Deps{})
	require.NoError(t, err)
	tests := []struct {
		name string
		team templates.Template
		want harness.Expect
	}{
		{"tool loop", harness.ToolLoop(5, 20, "todo", map[string]any{"action": "read"}), harness.Expect{
			ModelTurns: 2 + 6, ToolCalls: 2 + 100, Delegations: 1,
			Turns: map[string]int{"supervisor": 2, "caller": 6}, Calls: map[string]int{"supervisor": 2, "caller": 100}}},
		{"relay", harness.Relay(5), harness.Expect{
			ModelTurns: 6 + 5, ToolCalls: 6, Delegations: 5,
			Turns: map[string]int{"supervisor": 6, "echo": 1}, Calls: map[string]int{"supervisor": 6, "echo": 0}}},
		{"crew", harness.Crew(3), harness.Expect{
			ModelTurns: 3 + 2*6, ToolCalls: 5 + 2*9, Delegations: 2,
			Turns: map[string]int{"supervisor": 3, "a": 6, "b": 6}, Calls: map[string]int{"supervisor": 5, "a": 9, "b": 9}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.NoError(t, tc.team.Validate(reg))
			require.Equal(t, tc.want, harness.ExpectOf(tc.team))
			require.Equal(t, tc.want.ToolCalls*3, harness.ExpectOf(tc.team).Times(3).ToolCalls)
		})
	}
}

func TestFleetConfigIsAValidConfigFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "aetherium.yaml")
	require.NoError(t, harness.FleetConfig{
		RedisURL: "redis://127.0.0.1:1/3", DatabaseURL: "postgres://u@127.0.0.1:2/db?sslmode=disable",
		Workspaces: "/w", Templates: "/t", Permissions: "/p.yaml", APIAddr: "127.0.0.1:3", BodyLimit: 4096,
		Concurrency: 7, ScriptLatency: 150 * time.Millisecond, ShutdownTimeout: 2 * time.Second,
		StepLease: 5 * time.Second, TaskCheckInterval: 50 * time.Millisecond, SchedulerPeriod: 2 * time.Second,
	}.Write(path))
	cfg, err := config.LoadFrom(path, func(string) (string, bool) { return "", false })
	require.NoError(t, err)
	require.Equal(t, "redis://127.0.0.1:1/3", cfg.RedisURL)
	require.Equal(t, "/p.yaml", cfg.Security.PermissionsFile)
	require.Equal(t, 4096, cfg.API.BodyLimit)
	require.Equal(t, 7, cfg.Worker.Concurrency)
	require.Equal(t, 150*time.Millisecond, cfg.Worker.ScriptLatency)
	require.Equal(t, 5*time.Second, cfg.Worker.StepLease)
	require.Equal(t, 2*time.Second, cfg.Scheduler.Period)
	require.Empty(t, cfg.Worker.MetricsAddr, "processes sharing a machine must not fight over the metrics port")
	require.Equal(t, "local", cfg.Sandbox.Kind)

	// Zero fields keep the product defaults.
	require.NoError(t, harness.FleetConfig{RedisURL: "redis://127.0.0.1:1/0", DatabaseURL: "postgres://u@h/db", Workspaces: "/w", Templates: "/t"}.Write(path))
	cfg, err = config.LoadFrom(path, func(string) (string, bool) { return "", false })
	require.NoError(t, err)
	def := config.Default()
	require.Equal(t, def.Worker.Concurrency, cfg.Worker.Concurrency)
	require.Equal(t, def.Worker.StepLease, cfg.Worker.StepLease)
	require.Zero(t, cfg.Worker.ScriptLatency)
}

func TestWithDB(t *testing.T) {
	t.Parallel()
	require.Equal(t, "postgres://u@h:5/other?sslmode=disable", testinfra.WithDB("postgres://u@h:5/postgres?sslmode=disable", "other"))
	require.Equal(t, "postgres://u@h/x", testinfra.WithDB("postgres://u@h/y", "x"))
}

func TestWaitTerminalFollowsEachRunToItsEnd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := pgxpool.New(ctx, testdb.Database(t))
	require.NoError(t, err)
	t.Cleanup(db.Close)
	ids := []string{uuid.NewString(), uuid.NewString(), uuid.NewString()}
	for _, id := range ids {
		_, err := db.Exec(ctx, `INSERT INTO runs (id, status, prompt, team) VALUES ($1, 'running', 'p', '{}')`, id)
		require.NoError(t, err)
	}
	_, err = db.Exec(ctx, `UPDATE runs SET status = 'completed' WHERE id = $1`, ids[0])
	require.NoError(t, err)
	go func() {
		// One ends while the wait polls, the other a while later.
		time.Sleep(100 * time.Millisecond)
		_, _ = db.Exec(ctx, `UPDATE runs SET status = 'failed', reason = 'tool_failed', error = 'boom' WHERE id = $1`, ids[1])
		time.Sleep(100 * time.Millisecond)
		_, _ = db.Exec(ctx, `UPDATE runs SET status = 'cancelled' WHERE id = $1`, ids[2])
	}()
	var seen []harness.RunCounts
	c, err := harness.WaitTerminal(ctx, db, ids, 30*time.Second, func(c harness.RunCounts) { seen = append(seen, c) })
	require.NoError(t, err)
	require.Equal(t, 3, c.Total)
	require.Equal(t, map[string]int{"completed": 1, "failed": 1, "cancelled": 1}, c.ByStatus)
	require.Equal(t, map[string]int{"tool_failed": 1}, c.Reasons)
	require.Equal(t, []string{"tool_failed: boom"}, c.Errors)

	// A run that never ends (or does not exist) is a timeout naming the counts.
	stuck := uuid.NewString()
	_, err = db.Exec(ctx, `INSERT INTO runs (id, status, prompt, team) VALUES ($1, 'running', 'p', '{}')`, stuck)
	require.NoError(t, err)
	c, err = harness.WaitTerminal(ctx, db, append(ids, stuck, uuid.NewString()), 300*time.Millisecond, nil)
	require.ErrorIs(t, err, harness.ErrTimeout)
	require.ErrorContains(t, err, "3 of 5 runs terminal")
	require.Equal(t, 4, c.Total, "the unknown id is not counted")
	require.Equal(t, 1, c.ByStatus["running"])
}
