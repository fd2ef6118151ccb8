package store_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/internal/testdb"
	"github.com/aetherium-engine/aetherium/store"
)

type admissionEnv struct {
	t   *testing.T
	ctx context.Context
	st  *store.Store
	db  *pgxpool.Pool // raw SQL on the same database
}

func setupAdmission(t *testing.T) *admissionEnv {
	t.Helper()
	ctx := context.Background()
	url := testdb.Database(t)
	st, err := store.Open(ctx, url)
	require.NoError(t, err)
	t.Cleanup(st.Close)
	db, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	return &admissionEnv{t: t, ctx: ctx, st: st, db: db}
}

// submit creates a run of key with limit and priority; it reports whether the
// run was admitted at once.
func (e *admissionEnv) submit(key string, limit, priority int) (string, bool) {
	e.t.Helper()
	id := uuid.NewString()
	admitted, err := e.st.CreateRunLimited(e.ctx, store.Run{ID: id, Prompt: "p", Team: json.RawMessage(`{}`), Owner: "alice",
		FairKey: key, RunLimit: limit, Priority: priority, Aging: 30 * time.Second}, 0)
	require.NoError(e.t, err)
	return id, admitted
}

func (e *admissionEnv) finish(id, status string) []string {
	e.t.Helper()
	changed, admitted, err := e.st.FinishRun(e.ctx, id, status, "", "", "")
	require.NoError(e.t, err)
	require.True(e.t, changed)
	var ids []string
	for _, r := range admitted {
		require.NotNil(e.t, r.AdmittedAt)
		ids = append(ids, r.ID)
	}
	return ids
}

func (e *admissionEnv) position(id string) int {
	e.t.Helper()
	n, err := e.st.QueuePosition(e.ctx, id)
	require.NoError(e.t, err)
	return n
}

// A key at its run limit accepts runs that wait in line; every kind of end of
// an admitted run admits the next, in priority order, and a waiting run shows
// its place.
func TestAdmissionLimitAndOrder(t *testing.T) {
	t.Parallel()
	e := setupAdmission(t)
	key := "tenant-" + uuid.NewString()[:8]
	a, ok := e.submit(key, 2, 3)
	require.True(t, ok)
	b, ok := e.submit(key, 2, 3)
	require.True(t, ok)
	low, ok := e.submit(key, 2, 3)
	require.False(t, ok, "over the limit: accepted, waiting")
	high, ok := e.submit(key, 2, 5)
	require.False(t, ok)
	other, ok := e.submit("other-"+key, 2, 1)
	require.True(t, ok, "another key has its own limit")
	require.Equal(t, 2, e.position(low), "the priority-5 run went ahead of it")
	require.Equal(t, 1, e.position(high))
	require.Equal(t, 0, e.position(a), "admitted: no place in line")

	r, err := e.st.GetRun(e.ctx, low)
	require.NoError(t, err)
	require.Nil(t, r.AdmittedAt)
	require.Equal(t, key, r.FairKey)
	require.Equal(t, 3, r.Priority)

	require.Equal(t, []string{high}, e.finish(a, store.RunCancelled), "a cancel frees the slot for the head of the line")
	require.Equal(t, 1, e.position(low))
	require.Empty(t, e.finish(other, store.RunCompleted), "nothing of that key waits")
	require.Equal(t, []string{low}, e.finish(b, store.RunFailed))
	require.Empty(t, e.finish(high, store.RunCompleted))
	_, _, err = e.st.FinishRun(e.ctx, high, store.RunCompleted, "", "", "")
	require.NoError(t, err, "a duplicate end is a no-op")

	// A waiting run that is cancelled leaves the line and admits nobody.
	c, _ := e.submit(key, 1, 3)
	d, ok := e.submit(key, 1, 3)
	require.False(t, ok)
	require.Empty(t, e.finish(d, store.RunCancelled))
	require.Equal(t, 0, e.position(d))
	require.Empty(t, e.finish(c, store.RunCompleted))
	require.Empty(t, e.finish(low, store.RunCompleted))
}

// Aging: a lower priority submitted long enough before a higher one is ahead
// of it (each level is worth Aging of waiting).
func TestAdmissionAging(t *testing.T) {
	t.Parallel()
	e := setupAdmission(t)
	key := "aging-" + uuid.NewString()[:8]
	first, _ := e.submit(key, 1, 3)
	id := uuid.NewString()
	_, err := e.st.CreateRunLimited(e.ctx, store.Run{ID: id, Prompt: "p", Team: json.RawMessage(`{}`), Owner: "alice",
		FairKey: key, RunLimit: 1, Priority: 1, Aging: time.Millisecond}, 0)
	require.NoError(t, err)
	time.Sleep(20 * time.Millisecond)
	_, err = e.st.CreateRunLimited(e.ctx, store.Run{ID: uuid.NewString(), Prompt: "p", Team: json.RawMessage(`{}`), Owner: "alice",
		FairKey: key, RunLimit: 1, Priority: 5, Aging: time.Millisecond}, 0)
	require.NoError(t, err)
	require.Equal(t, []string{id}, e.finish(first, store.RunCompleted), "20 ms of waiting beats 4 levels of 1 ms")
}

// The limit is exact when many submits and ends race: never more admitted
// runs in flight than the limit, and nothing left waiting once all ended.
func TestAdmissionExactUnderRace(t *testing.T) {
	t.Parallel()
	e := setupAdmission(t)
	key := "race-" + uuid.NewString()[:8]
	const limit, runs = 3, 40
	count := func() int {
		var n int
		require.NoError(t, e.db.QueryRow(e.ctx, `SELECT count(*) FROM runs WHERE fair_key = $1
			AND admitted_at IS NOT NULL AND status IN ('queued','running','waiting')`, key).Scan(&n))
		return n
	}
	var mu sync.Mutex
	var admitted []string
	var wg sync.WaitGroup
	for range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := uuid.NewString()
			ok, err := e.st.CreateRunLimited(e.ctx, store.Run{ID: id, Prompt: "p", Team: json.RawMessage(`{}`), Owner: "alice",
				FairKey: key, RunLimit: limit, Aging: time.Second}, 0)
			if err != nil {
				t.Error(err)
				return
			}
			if ok {
				mu.Lock()
				admitted = append(admitted, id)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Len(t, admitted, limit)
	require.Equal(t, limit, count())
	// End the admitted runs from several goroutines; each end admits the next.
	done := 0
	for len(admitted) > 0 {
		batch := admitted
		admitted = nil
		var wg sync.WaitGroup
		for _, id := range batch {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, next, err := e.st.FinishRun(e.ctx, id, store.RunCompleted, "", "", "")
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, r := range next {
					admitted = append(admitted, r.ID)
				}
				mu.Unlock()
			}()
		}
		wg.Wait()
		done += len(batch)
		require.LessOrEqual(t, count(), limit)
	}
	require.Equal(t, runs, done, "every run was admitted and ended")
}

// AdmitWaiting admits what a raised limit (or a lost admission) left waiting;
// QueuedRuns only returns admitted runs.
func TestAdmitWaitingSweep(t *testing.T) {
	t.Parallel()
	e := setupAdmission(t)
	key := "sweep-" + uuid.NewString()[:8]
	_, ok := e.submit(key, 1, 3)
	require.True(t, ok)
	waiting, ok := e.submit(key, 1, 3)
	require.False(t, ok)
	_, err := e.db.Exec(e.ctx, `UPDATE runs SET run_limit = 2 WHERE id = $1`, waiting)
	require.NoError(t, err)
	admitted, err := e.st.AdmitWaiting(e.ctx, 1000)
	require.NoError(t, err)
	var ids []string
	for _, r := range admitted {
		ids = append(ids, r.ID)
	}
	require.Contains(t, ids, waiting)
	queued, err := e.st.QueuedRuns(e.ctx, 0, 1000)
	require.NoError(t, err)
	ids = nil
	for _, r := range queued {
		ids = append(ids, r.ID)
	}
	require.Contains(t, ids, waiting, "admitted and not started: the sweep starts it")
}

// Bad priorities and limits are refused before anything is stored.
func TestCreateRunRefusesBadFairness(t *testing.T) {
	t.Parallel()
	e := setupAdmission(t)
	for _, r := range []store.Run{{Priority: 6}, {Priority: -1}, {RunLimit: -1}} {
		r.ID, r.Prompt, r.Team = uuid.NewString(), "p", json.RawMessage(`{}`)
		_, err := e.st.CreateRunLimited(e.ctx, r, 0)
		require.Error(t, err)
		_, err = e.st.GetRun(e.ctx, r.ID)
		require.ErrorIs(t, err, store.ErrNotFound)
	}
}
