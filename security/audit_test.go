package security_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/internal/testdb"

	"github.com/aetherium-engine/aetherium/security"
	"github.com/aetherium-engine/aetherium/store"
)

func auditRow(runID string, i int) store.AuditRow {
	return store.AuditRow{
		CallKey: fmt.Sprintf("%s:call-%03d", runID, i), At: time.Now(), RunID: runID, Team: "t", Agent: "a",
		Tool: "read_file", Tier: "standard", Allowed: true, Decision: "allowed", Summary: fmt.Sprintf(`{"i":%d}`, i),
	}
}

func countAudit(t *testing.T, st *store.Store, runID string) int {
	t.Helper()
	rows, err := st.RunAudit(context.Background(), runID, 10000)
	require.NoError(t, err)
	return len(rows)
}

func TestAuditorBatchesAndFlushes(t *testing.T) {
	t.Parallel()
	st := testdb.Store(t)
	ctx := context.Background()

	t.Run("a full batch is written without Flush", func(t *testing.T) {
		t.Parallel()
		a := security.NewAuditor(security.AuditConfig{Buffer: 16, Batch: 3, Interval: time.Hour}, st, nil, nil)
		defer a.Close()
		run := uuid.NewString()
		for i := range 3 {
			require.NoError(t, a.Write(ctx, auditRow(run, i)))
		}
		require.Eventually(t, func() bool { return countAudit(t, st, run) == 3 }, 10*time.Second, 10*time.Millisecond)
	})
	t.Run("Flush writes a partial batch", func(t *testing.T) {
		t.Parallel()
		a := security.NewAuditor(security.AuditConfig{Buffer: 16, Batch: 4, Interval: time.Hour}, st, nil, nil)
		defer a.Close()
		run := uuid.NewString()
		for i := range 10 {
			require.NoError(t, a.Write(ctx, auditRow(run, i)))
		}
		a.Flush()
		require.Equal(t, 10, countAudit(t, st, run))
	})
	t.Run("the interval writes a partial batch", func(t *testing.T) {
		t.Parallel()
		a := security.NewAuditor(security.AuditConfig{Buffer: 16, Batch: 100, Interval: 20 * time.Millisecond}, st, nil, nil)
		defer a.Close()
		run := uuid.NewString()
		require.NoError(t, a.Write(ctx, auditRow(run, 0)))
		require.Eventually(t, func() bool { return countAudit(t, st, run) == 1 }, 10*time.Second, 10*time.Millisecond)
	})
	t.Run("Close writes everything, and a write after Close still lands", func(t *testing.T) {
		t.Parallel()
		a := security.NewAuditor(security.AuditConfig{Buffer: 64, Batch: 7, Interval: time.Hour}, st, nil, nil)
		run := uuid.NewString()
		for i := range 25 {
			require.NoError(t, a.Write(ctx, auditRow(run, i)))
		}
		a.Close()
		require.Equal(t, 25, countAudit(t, st, run))
		a.Close() // idempotent
		a.Flush() // returns after Close
		require.NoError(t, a.Write(ctx, auditRow(run, 25)))
		require.Equal(t, 26, countAudit(t, st, run))
	})
	t.Run("the same call key is written once", func(t *testing.T) {
		t.Parallel()
		a := security.NewAuditor(security.AuditConfig{Batch: 2}, st, nil, nil)
		run := uuid.NewString()
		for range 5 {
			require.NoError(t, a.Write(ctx, auditRow(run, 0)))
		}
		a.Close()
		require.Equal(t, 1, countAudit(t, st, run))
	})
}

// A full buffer makes Write wait (never drop): the table is locked so the writer
// goroutine is stuck in its insert, the one-row buffer fills, and the next Write
// blocks until the lock goes away; then every row lands.
func TestAuditorBackpressure(t *testing.T) {
	t.Parallel()
	st := testdb.Store(t)
	ctx := context.Background()
	var maxDepth, lastDepth atomic.Int64
	depth := func(n int) {
		lastDepth.Store(int64(n))
		for {
			cur := maxDepth.Load()
			if int64(n) <= cur || maxDepth.CompareAndSwap(cur, int64(n)) {
				return
			}
		}
	}
	a := security.NewAuditor(security.AuditConfig{Buffer: 1, Batch: 1, Interval: time.Hour}, st, nil, depth)
	defer a.Close()

	tx, err := st.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "LOCK TABLE tool_audit IN ACCESS EXCLUSIVE MODE")
	require.NoError(t, err)

	run := uuid.NewString()
	const n = 40
	var wg sync.WaitGroup
	var returned atomic.Int64
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			require.NoError(t, a.Write(ctx, auditRow(run, i)))
			returned.Add(1)
		}()
	}
	// At most one row is in the writer's batch and one in the buffer: every other
	// writer must still be waiting, however long we give them.
	require.Never(t, func() bool { return returned.Load() > 2 }, 300*time.Millisecond, 10*time.Millisecond)
	require.NoError(t, tx.Rollback(ctx))

	wg.Wait()
	a.Flush()
	require.Equal(t, n, countAudit(t, st, run), "no row dropped")
	require.EqualValues(t, 2, maxDepth.Load(), "depth counts the buffer and the batch being written, bounded by Buffer+Batch")
	require.Zero(t, lastDepth.Load(), "nothing held once flushed")
}

// A caller whose context ends while the buffer is full writes its row itself.
func TestAuditorWriteWithCancelledContext(t *testing.T) {
	t.Parallel()
	st := testdb.Store(t)
	a := security.NewAuditor(security.AuditConfig{Buffer: 1, Batch: 1, Interval: time.Hour}, st, nil, nil)
	defer a.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	run := uuid.NewString()
	for i := range 5 {
		require.NoError(t, a.Write(ctx, auditRow(run, i)))
	}
	a.Flush()
	require.Equal(t, 5, countAudit(t, st, run))
}

func TestInsertAuditRejectsInvalidUTF8(t *testing.T) {
	t.Parallel()
	st := testdb.Store(t)
	r := auditRow(uuid.NewString(), 0)
	r.Summary = "ab\xe2\x82"
	require.Error(t, st.InsertAudit(context.Background(), []store.AuditRow{r}),
		"PostgreSQL refuses invalid UTF-8, so the gate must never truncate inside a character")
}
