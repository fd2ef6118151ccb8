package store_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/internal/testdb"

	"github.com/aetherium-engine/aetherium/memory"
	"github.com/aetherium-engine/aetherium/store"
)

func TestMemoryWithTheFinalSave(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, sess, token := setup(t)
	entry := &store.MemoryEntry{Project: "p1", Tier: store.MemoryLongTerm, Scope: "project", Agent: "supervisor", RunID: sess.RunID,
		SessionID: sess.ID, Content: "Task: count the widgets Outcome: there are 42 widgets"}
	w := stepWrite(sess.RunID, uuid.NewString())
	w.Memory = entry
	sess.Status = "done"
	_, err := st.SaveStep(ctx, sess, token, time.Minute, w)
	require.NoError(t, err)
	// Redelivered: the same final save adds no second entry.
	_, err = st.SaveStep(ctx, sess, token, time.Minute, store.StepWrite{Memory: entry})
	require.NoError(t, err)
	got, err := st.ListMemory(ctx, "p1", 10)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, entry.Content, got[0].Content)
	require.Equal(t, sess.RunID, got[0].RunID)

	// A save under a lost lease writes no memory.
	other := *entry
	other.SessionID, other.Content = "another-session", "never"
	_, err = st.SaveStep(ctx, sess, "not-the-token", time.Minute, store.StepWrite{Memory: &other})
	require.ErrorIs(t, err, store.ErrLeaseLost)
	got, err = st.ListMemory(ctx, "p1", 10)
	require.NoError(t, err)
	require.Len(t, got, 1)
}

func TestRecallMemory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _, _ := setup(t)
	// Memory belongs to a project's id (migration 00017), never its slug.
	p1, p2 := store.Project{ID: uuid.NewString(), Slug: "p1", Owner: "alice"}, store.Project{ID: uuid.NewString(), Slug: "p2", Owner: "bob"}
	add := func(project, scope, agent, content string) int64 {
		e, err := st.AddMemory(ctx, store.MemoryEntry{Project: project, Tier: store.MemoryLongTerm, Scope: scope, Agent: agent, Content: content})
		require.NoError(t, err)
		return e.ID
	}
	widgets := add(p1.ID, "project", "", "the widget inventory lives in inventory.csv")
	mine := add(p1.ID, "agent", "coder", "coder prefers table-driven tests for widget code")
	add(p1.ID, "agent", "writer", "writer notes about widget prose") // another agent's: not seen by coder
	add(p2.ID, "project", "", "widget facts of another project")     // another project's: never seen
	unrelated := add(p1.ID, "project", "", "deploys run on Fridays")

	got, err := st.RecallMemory(ctx, p1.ID, "coder", "where is the widget inventory", 10)
	require.NoError(t, err)
	ids := []int64{}
	for _, e := range got {
		ids = append(ids, e.ID)
		require.GreaterOrEqual(t, e.Relevance, 0.0)
		require.Less(t, e.Relevance, 1.0)
	}
	require.Equal(t, []int64{widgets, mine, unrelated}, ids, "most relevant first; other agents' and projects' entries absent")
	require.Greater(t, got[0].Relevance, got[1].Relevance)
	require.Zero(t, got[2].Relevance)

	require.NoError(t, st.DeleteMemory(ctx, p1, mine, "alice"))
	require.ErrorIs(t, st.DeleteMemory(ctx, p1, mine, "alice"), store.ErrNotFound)
	require.ErrorIs(t, st.DeleteMemory(ctx, p2, widgets, "bob"), store.ErrNotFound, "an id of another project")

	// The deletion is audited: who, which entry, what it said.
	audit, err := st.ProjectAudit(ctx, p1.ID, 10)
	require.NoError(t, err)
	require.Len(t, audit, 1, "one deletion happened; the refused ones left no row")
	require.Equal(t, "memory.delete", audit[0].Action)
	require.Equal(t, "alice", audit[0].Principal)
	require.Equal(t, "p1", audit[0].Slug)
	require.Contains(t, audit[0].Detail, "coder prefers table-driven tests")
}

// TestRecallMemoryRankIsTsRankCD holds RecallMemory's relevance, summed from
// agent_memory_terms, equal to PostgreSQL's ts_rank_cd of the entry against the
// OR of the text's words, normalized by 32, over entries with repeated words,
// punctuation, numbers and non-ASCII text.
func TestRecallMemoryRankIsTsRankCD(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _, _ := setup(t)
	words := []string{"widget", "Widget", "inventory", "csv", "42", "café", "naïve", "x-ray", "e-mail@example.com", "the", "a", "über", "Ünïcode", "3.14", "don't"}
	rnd := rand.New(rand.NewPCG(1, 2))
	sentence := func(n int) string {
		parts := make([]string, n)
		for i := range parts {
			parts[i] = words[rnd.IntN(len(words))]
		}
		return strings.Join(parts, " ") + "."
	}
	for range 60 {
		_, err := st.AddMemory(ctx, store.MemoryEntry{Project: "eq", Tier: store.MemoryLongTerm, Scope: "project", Content: sentence(1 + rnd.IntN(40))})
		require.NoError(t, err)
	}
	for range 10 {
		text := sentence(1 + rnd.IntN(8))
		got, err := st.RecallMemory(ctx, "eq", "coder", text, 100)
		require.NoError(t, err)
		require.Len(t, got, 60)
		for _, e := range got {
			var want float32
			// The lexemes quoted as tsquery literals, not re-parsed by to_tsquery
			// (which would turn x-ray into a phrase).
			require.NoError(t, st.Pool.QueryRow(ctx, `SELECT ts_rank_cd(to_tsvector('simple', $1), array_to_string(ARRAY(
				SELECT '''' || replace(replace(l, '\', '\\'), '''', '''''') || '''' FROM unnest(tsvector_to_array(to_tsvector('simple', $2))) AS l), ' | ')::tsquery, 32)`,
				e.Content, text).Scan(&want))
			require.InDelta(t, float64(want), e.Relevance, 1e-6, "entry %q against %q", e.Content, text)
		}
	}
}

// BenchmarkMemoryInjection is the cost of memory injection per turn with 10,000
// entries in the project: recall the candidates, rank them, format the block.
// Reports p50 and p99 (target p99 ≤ 2 ms).
func BenchmarkMemoryInjection(b *testing.B) {
	ctx := context.Background()
	st := testdb.Store(b)
	// 10,000 entries of 50 words from a 2,000-word vocabulary, a tenth agent-scoped,
	// spread over 60 days.
	_, err := st.Pool.Exec(ctx, `INSERT INTO agent_memory (project, tier, scope, agent, content, created_at)
		SELECT 'bench', 'long_term', CASE WHEN i % 10 = 0 THEN 'agent' ELSE 'project' END,
			CASE WHEN i % 10 = 0 THEN 'agent' || (i % 7) ELSE '' END,
			(SELECT string_agg('w' || ((i * 7919 + j * 104729) % 2000), ' ') FROM generate_series(1, 50) j),
			now() - (i % 1440) * interval '1 hour'
		FROM generate_series(1, 10000) i`)
	require.NoError(b, err)
	// The recall's index-only scan needs the visibility map autovacuum keeps
	// on a live table.
	_, err = st.Pool.Exec(ctx, `VACUUM ANALYZE agent_memory, agent_memory_terms`)
	require.NoError(b, err)
	cfg := memory.Config{}.WithDefaults()
	task := "Update w17 and w1234 in the report, then check w999 against w5 and summarize the w42 findings for the team"
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		cands, err := st.RecallMemory(ctx, "bench", "agent3", task, cfg.Candidates)
		if err != nil {
			b.Fatal(err)
		}
		es := make([]memory.Entry, len(cands))
		for j, c := range cands {
			es[j] = memory.Entry{ID: c.ID, Scope: c.Scope, Agent: c.Agent, RunID: c.RunID, Content: c.Content, At: c.CreatedAt, Relevance: c.Relevance}
		}
		if memory.Format(memory.Rank(cfg, es, "agent3", time.Now())) == "" {
			b.Fatal("nothing recalled")
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}
