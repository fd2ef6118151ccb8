package store_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/internal/testdb"
	"github.com/aetherium-engine/aetherium/store"
)

func setupHook(t *testing.T) (*store.Store, store.Hook) {
	t.Helper()
	st := testdb.Store(t)
	h, err := st.CreateHook(context.Background(), store.Hook{Owner: "alice", Name: "h", Scheme: "github", Secret: "a-long-enough-secret",
		Template: "demo", Prompt: "p", Variables: map[string]string{"topic": "/t"}, Enabled: true})
	require.NoError(t, err)
	return st, h
}

// Of concurrent claims of one key exactly one wins; the others see the winner.
// A refused claim frees its key; refusals never hold one.
func TestClaimHookDelivery(t *testing.T) {
	t.Parallel()
	st, h := setupHook(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins, ids := 0, map[int64]bool{}
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, claimed, err := st.ClaimHookDelivery(ctx, h.ID, "d", "k1")
			require.NoError(t, err)
			mu.Lock()
			defer mu.Unlock()
			if claimed {
				wins++
			}
			ids[d.ID] = true
		}()
	}
	wg.Wait()
	require.Equal(t, 1, wins)
	require.Len(t, ids, 1, "every loser names the winner")

	var winner int64
	for id := range ids {
		winner = id
	}
	run := uuid.NewString()
	require.NoError(t, st.SetHookDeliveryRun(ctx, winner, run))
	d, claimed, err := st.ClaimHookDelivery(ctx, h.ID, "d", "k1")
	require.NoError(t, err)
	require.False(t, claimed)
	require.Equal(t, run, d.RunID)

	// A refusal recorded with key k2's delivery id does not hold k2.
	require.NoError(t, st.RecordHookRefusal(ctx, store.HookDelivery{HookID: h.ID, DeliveryID: "k2", Reason: "bad_signature"}, 10))
	d2, claimed, err := st.ClaimHookDelivery(ctx, h.ID, "k2", "k2")
	require.NoError(t, err)
	require.True(t, claimed)
	require.NoError(t, st.RefuseHookDelivery(ctx, d2.ID, "submit_refused", "quota"))
	_, claimed, err = st.ClaimHookDelivery(ctx, h.ID, "k2", "k2")
	require.NoError(t, err)
	require.True(t, claimed, "a refused claim frees its key")
}

// Only the newest keep refusals of a hook are kept; accepted deliveries all are.
func TestHookRefusalsAreBounded(t *testing.T) {
	t.Parallel()
	st, h := setupHook(t)
	ctx := context.Background()
	_, claimed, err := st.ClaimHookDelivery(ctx, h.ID, "ok", "ok")
	require.NoError(t, err)
	require.True(t, claimed)
	for i := range 7 {
		require.NoError(t, st.RecordHookRefusal(ctx, store.HookDelivery{HookID: h.ID, DeliveryID: fmt.Sprint("r", i), Reason: "bad_signature", Detail: "x\x00y"}, 3))
	}
	ds, err := st.ListHookDeliveries(ctx, h.ID, 0, 100)
	require.NoError(t, err)
	var got []string
	for _, d := range ds {
		got = append(got, d.DeliveryID)
	}
	require.Equal(t, []string{"r6", "r5", "r4", "ok"}, got)
	require.Equal(t, "xy", ds[0].Detail)

	require.NoError(t, st.DeleteHook(ctx, h.ID))
	ds, err = st.ListHookDeliveries(ctx, h.ID, 0, 100)
	require.NoError(t, err)
	require.Empty(t, ds)
	require.ErrorIs(t, st.DeleteHook(ctx, h.ID), store.ErrNotFound)
}
