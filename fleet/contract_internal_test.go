package fleet

import (
	"context"
	"log/slog"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/internal/testdb"
	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/store"
)

// A process writes the newest contract only while every live process reads
// it: a row of an older build, or an asynq worker server with no row at all
// (a build before fleet_processes), holds the fleet at version 1.
func TestContractsAgreeOnWhatEveryProcessReads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := testdb.Store(t)
	rdb := testdb.Connect(t, testdb.Redis(t))
	c := newContracts(st, asynq.NewInspectorFromRedisClient(rdb), slog.New(slog.DiscardHandler))
	require.Equal(t, queue.MinContractVersion, c.Version(), "before the first report")
	c.start(ctx, "worker")
	t.Cleanup(c.close)
	require.Equal(t, queue.ContractVersion, c.Version(), "a fleet of this build")

	// This process's worker server: its own row vouches for it.
	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{Concurrency: 1, LogLevel: asynq.FatalLevel})
	require.NoError(t, srv.Start(asynq.NewServeMux()))
	t.Cleanup(srv.Shutdown)
	c.beat(ctx)
	require.Equal(t, queue.ContractVersion, c.Version())

	old := store.Process{ID: "other:1:x", Role: "api", Host: "other", PID: 1, Contract: 1, MinContract: 1}
	require.NoError(t, st.ReportProcess(ctx, old))
	c.beat(ctx)
	require.Equal(t, 1, c.Version(), "a process of the previous build is live")
	require.NoError(t, st.LeaveProcess(ctx, old.ID))
	c.beat(ctx)
	require.Equal(t, queue.ContractVersion, c.Version(), "it left")

	// Without its row the worker server reads as a build before versions. The
	// beats stop first: one could report the row again between a leave and
	// the read (CI, loaded: it did).
	c.close()
	v, err := c.agree(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, v)
	var rows int
	require.NoError(t, st.Pool.QueryRow(ctx, `SELECT count(*) FROM fleet_processes`).Scan(&rows))
	require.Zero(t, rows, "a clean stop leaves")
}
