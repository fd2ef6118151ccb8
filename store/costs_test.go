package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/store"
)

func TestModelCallCosts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("a call's cost lands with the save, by run, owner and model", func(t *testing.T) {
		t.Parallel()
		st, sess, token := setup(t)
		_, err := st.Pool.Exec(ctx, `UPDATE runs SET cost_budget = 500, team = '{"name":"writers"}' WHERE id = $1`, sess.RunID)
		require.NoError(t, err)
		calls := []store.ModelCall{
			{Agent: "a", Provider: "openai", Model: "gpt-4o", InputTokens: 100, OutputTokens: 10, CachedTokens: 50, Cost: 200, Priced: true},
			{Agent: "a", Provider: "anthropic", Model: "claude", Fallback: true, InputTokens: 30, OutputTokens: 3, CacheWriteTokens: 20, Cost: 350, Priced: true},
			{Agent: "b", Provider: "openai", Model: "gpt-4o", InputTokens: 1, OutputTokens: 1, Cost: 5, Priced: true},
			{Agent: "b", Provider: "openai", Model: "mystery", InputTokens: 1, OutputTokens: 1},
		}
		var saved store.StepSaved
		for _, c := range calls {
			saved, err = st.SaveStep(ctx, sess, token, time.Minute, store.StepWrite{Tokens: int(c.InputTokens + c.OutputTokens), Call: &c})
			require.NoError(t, err)
		}
		require.EqualValues(t, 555, saved.Cost)
		require.EqualValues(t, 500, saved.CostBudget)
		run, err := st.GetRun(ctx, sess.RunID)
		require.NoError(t, err)
		require.EqualValues(t, 555, run.Cost)

		lines, err := st.Costs(ctx, store.CostScope{RunID: sess.RunID})
		require.NoError(t, err)
		require.Equal(t, []store.CostLine{
			{Provider: "anthropic", Model: "claude", Calls: 1, Fallbacks: 1, InputTokens: 30, OutputTokens: 3, CacheWriteTokens: 20, Cost: 350},
			{Provider: "openai", Model: "gpt-4o", Calls: 2, InputTokens: 101, OutputTokens: 11, CachedTokens: 50, Cost: 205},
			{Provider: "openai", Model: "mystery", Calls: 1, Unpriced: 1, InputTokens: 1, OutputTokens: 1},
		}, lines)
		byTeam, err := st.Costs(ctx, store.CostScope{Team: "writers"})
		require.NoError(t, err)
		require.Equal(t, lines, byTeam)
		spent, err := st.SpentToday(ctx, store.LocalOwner)
		require.NoError(t, err)
		require.EqualValues(t, 555, spent)
		later, err := st.Costs(ctx, store.CostScope{RunID: sess.RunID, Since: time.Now().Add(time.Hour)})
		require.NoError(t, err)
		require.Empty(t, later)
		_, err = st.Costs(ctx, store.CostScope{})
		require.ErrorContains(t, err, "exactly one")
	})

	t.Run("a call costing more than an int4 of picodollars is saved", func(t *testing.T) {
		t.Parallel()
		st, sess, token := setup(t)
		// $5 is 5·10¹² picodollars: the statement once typed the amount int4
		// and refused any call over $0.0021.
		big := int64(5_000_000_000_000)
		saved, err := st.SaveStep(ctx, sess, token, time.Minute, store.StepWrite{Tokens: 3_000_000_000, Call: &store.ModelCall{Provider: "openai", Model: "m", Cost: big, Priced: true}})
		require.NoError(t, err)
		require.Equal(t, big, saved.Cost)
		require.EqualValues(t, 3_000_000_000, saved.TokensUsed)
	})

	t.Run("a lost lease records no call and no cost", func(t *testing.T) {
		t.Parallel()
		st, sess, _ := setup(t)
		_, err := st.SaveStep(ctx, sess, uuid.NewString(), time.Minute, store.StepWrite{Tokens: 3, Call: &store.ModelCall{Provider: "openai", Model: "m", Cost: 9, Priced: true}})
		require.ErrorIs(t, err, store.ErrLeaseLost)
		require.Zero(t, count(t, st, `SELECT count(*) FROM llm_calls WHERE run_id = $1`, sess.RunID))
		require.Zero(t, count(t, st, `SELECT cost FROM runs WHERE id = $1`, sess.RunID))
	})

	t.Run("the wait of a parked step starts once and ends with a save", func(t *testing.T) {
		t.Parallel()
		st, sess, token := setup(t)
		since, now, err := st.MarkWaiting(ctx, sess.ID, token)
		require.NoError(t, err)
		require.False(t, now.Before(since))
		again, _, err := st.MarkWaiting(ctx, sess.ID, token)
		require.NoError(t, err)
		require.True(t, since.Equal(again), "a second park keeps the first start")
		_, err = st.SaveStep(ctx, sess, token, time.Minute, store.StepWrite{})
		require.NoError(t, err)
		fresh, _, err := st.MarkWaiting(ctx, sess.ID, token)
		require.NoError(t, err)
		require.True(t, fresh.After(since), "a save ends the wait")
		_, _, err = st.MarkWaiting(ctx, sess.ID, uuid.NewString())
		require.ErrorIs(t, err, store.ErrLeaseLost)
	})
}
