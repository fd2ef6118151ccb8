package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/internal/testdb"
	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/memory"
	"github.com/aetherium-engine/aetherium/store"
)

// twoWorkers opens two stores over one fresh database, each with its own
// index: two worker processes sharing PostgreSQL.
func twoWorkers(t *testing.T, maxEntries int) (a, b *store.Store, ia, ib *store.MemoryIndex) {
	t.Helper()
	ctx := context.Background()
	url := testdb.Database(t)
	a, err := store.Open(ctx, url)
	require.NoError(t, err)
	t.Cleanup(a.Close)
	b, err = store.Open(ctx, url)
	require.NoError(t, err)
	t.Cleanup(b.Close)
	ia, err = store.NewMemoryIndex(a, maxEntries)
	require.NoError(t, err)
	ib, err = store.NewMemoryIndex(b, maxEntries)
	require.NoError(t, err)
	return a, b, ia, ib
}

func recallIDs(t *testing.T, r interface {
	RecallMemory(ctx context.Context, project, agent, text string, limit int) ([]store.MemoryEntry, error)
}, project, agent, text string, limit int) []int64 {
	t.Helper()
	got, err := r.RecallMemory(context.Background(), project, agent, text, limit)
	require.NoError(t, err)
	ids := []int64{}
	for _, e := range got {
		ids = append(ids, e.ID)
	}
	return ids
}

// requireSameRecall holds the index's recall equal to the store's: the same
// entries, in the same order, with the same relevance and provenance.
func requireSameRecall(t *testing.T, st *store.Store, ix *store.MemoryIndex, project, agent, text string, limit int) {
	t.Helper()
	ctx := context.Background()
	want, err := st.RecallMemory(ctx, project, agent, text, limit)
	require.NoError(t, err)
	got, err := ix.RecallMemory(ctx, project, agent, text, limit)
	require.NoError(t, err)
	require.Len(t, got, len(want), "agent %s, text %q", agent, text)
	for i := range want {
		require.Equal(t, want[i].ID, got[i].ID, "rank %d: agent %s, text %q", i, agent, text)
		require.Equal(t, want[i].Relevance, got[i].Relevance, "entry %d", want[i].ID)
		require.True(t, want[i].CreatedAt.Equal(got[i].CreatedAt))
		want[i].CreatedAt, got[i].CreatedAt = time.Time{}, time.Time{}
		require.Equal(t, want[i], got[i])
	}
}

func TestMemoryIndexRecallsAsTheStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, other, ix, _ := twoWorkers(t, 10_000)
	words := []string{"widget", "Widget", "inventory", "csv", "42", "café", "naïve", "x-ray", "e-mail@example.com", "the", "a", "über",
		"Ünïcode", "3.14", "don't", "deploy", "friday", "report"}
	rnd := rand.New(rand.NewPCG(3, 4))
	sentence := func(n int) string {
		parts := make([]string, n)
		for i := range parts {
			parts[i] = words[rnd.IntN(len(words))]
		}
		return strings.Join(parts, " ") + "."
	}
	agents := []string{"coder", "writer", ""}
	add := func(s *store.Store, n int) {
		for range n {
			scope, agent := "project", agents[rnd.IntN(len(agents))]
			if rnd.IntN(3) == 0 {
				scope = "agent"
			}
			_, err := s.AddMemory(ctx, store.MemoryEntry{Project: "eq", Tier: store.MemoryLongTerm, Scope: scope, Agent: agent, Content: sentence(1 + rnd.IntN(30))})
			require.NoError(t, err)
		}
	}
	check := func() {
		for range 8 {
			text := sentence(1 + rnd.IntN(6))
			for _, agent := range agents {
				for _, limit := range []int{0, 1, 5, 50} {
					requireSameRecall(t, st, ix, "eq", agent, text, limit)
				}
			}
		}
	}
	add(st, 80)
	check() // the first recall builds the index
	add(other, 20)
	check() // entries another worker wrote: read since the index's generation
	_, err := other.Pool.Exec(ctx, `DELETE FROM agent_memory WHERE project = 'eq' AND id % 3 = 0`)
	require.NoError(t, err)
	check() // a delete: rebuilt
	// Same created_at everywhere: ties go by id, as in the store.
	_, err = other.Pool.Exec(ctx, `INSERT INTO agent_memory (project, tier, scope, agent, content, created_at)
		SELECT 'eq', 'long_term', 'project', '', 'widget report ' || i, '2026-01-01' FROM generate_series(1, 30) i`)
	require.NoError(t, err)
	check()
	_, err = ix.RecallMemory(ctx, "eq", "coder", "widget", -1)
	require.Error(t, err, "a negative limit is refused, as the store refuses it")
}

// A worker's recall as of its session's acquire (RecallMemoryAt): answered
// from memory, with no query, while the index is at the acquire's generation;
// read again when the acquire saw a newer one. Queries are counted as the
// index's pool acquires connections: each statement takes one.
func TestMemoryIndexRecallsAtTheAcquiresGeneration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, other, ix, _ := twoWorkers(t, 10_000)
	runID := uuid.NewString()
	require.NoError(t, other.CreateRun(ctx, store.Run{ID: runID, Prompt: "p", Team: json.RawMessage(`{}`), Variables: json.RawMessage(`{}`)}))
	const task = "widget report for friday"
	n := 0
	acquire := func() store.MemoryAt { // a new session's lease, taken on the other worker's store
		t.Helper()
		n++
		acq, err := other.AcquireStep(ctx, store.Acquire{
			Initial: store.Session{ID: fmt.Sprintf("s:%d", n), RunID: runID, Agent: "coder", Role: "worker", Messages: []llm.Message{{Role: llm.RoleUser, Content: task}}},
			Token:   uuid.NewString(), Lease: time.Minute, Memory: &store.MemoryAt{Project: "gen", Text: task},
		})
		require.NoError(t, err)
		require.NotNil(t, acq.Memory)
		return *acq.Memory
	}
	add := func(content string) int64 {
		t.Helper()
		e, err := other.AddMemory(ctx, store.MemoryEntry{Project: "gen", Tier: store.MemoryLongTerm, Scope: "project", Content: content})
		require.NoError(t, err)
		return e.ID
	}
	// recall returns the ids recalled as of at, and how many statements the
	// index sent PostgreSQL for it.
	recall := func(at store.MemoryAt) (ids []int64, queries int64) {
		t.Helper()
		before := st.Pool.Stat().AcquireCount()
		got, err := ix.RecallMemoryAt(ctx, at, "coder", 10)
		require.NoError(t, err)
		queries = st.Pool.Stat().AcquireCount() - before
		for _, e := range got {
			ids = append(ids, e.ID)
		}
		want, err := st.RecallMemory(ctx, "gen", "coder", task, 10)
		require.NoError(t, err)
		if at.Gen == generationOf(t, st, "gen") { // as of now: the store's answer
			require.Len(t, got, len(want))
			for i := range want {
				require.Equal(t, want[i].ID, got[i].ID)
				require.Equal(t, want[i].Relevance, got[i].Relevance)
			}
		}
		return ids, queries
	}

	old := add("friday widget report")
	at1 := acquire()
	ids, queries := recall(at1)
	require.Equal(t, []int64{old}, ids)
	require.Positive(t, queries, "the first recall loads the project")

	for _, c := range []struct {
		name string
		at   func() store.MemoryAt
		ids  []int64
		read bool
	}{
		{"at the index's generation: no query", func() store.MemoryAt { return at1 }, []int64{old}, false},
		{"a write after the acquire: not in this session's recall, no query", func() store.MemoryAt { add("widget"); return at1 }, []int64{old}, false},
		{"the next session's acquire sees the write: the index reads it", acquire, nil, true},
		{"and answers from memory after", func() store.MemoryAt { return acquire() }, nil, false},
	} {
		at := c.at()
		ids, queries := recall(at)
		if c.ids != nil {
			require.Equal(t, c.ids, ids, c.name)
		} else {
			require.Len(t, ids, 2, c.name)
		}
		if c.read {
			require.Positive(t, queries, c.name)
		} else {
			require.Zero(t, queries, c.name)
		}
	}
	// A delete after the index's generation: rebuilt at the next acquire's.
	_, err := other.Pool.Exec(ctx, `DELETE FROM agent_memory WHERE id = $1`, old)
	require.NoError(t, err)
	ids, queries = recall(acquire())
	require.Len(t, ids, 1)
	require.NotContains(t, ids, old)
	require.Positive(t, queries)
}

func generationOf(t *testing.T, st *store.Store, project string) int64 {
	t.Helper()
	var gen int64
	require.NoError(t, st.Pool.QueryRow(context.Background(), `SELECT coalesce((SELECT gen FROM agent_memory_generations WHERE project = $1), 0)`, project).Scan(&gen))
	return gen
}

// Every write a worker commits is in the next recall of every other worker;
// every delete is gone from it, whichever path wrote or deleted.
func TestMemoryIndexSeesOtherWorkersChanges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b, ia, ib := twoWorkers(t, 10_000)
	p, err := a.CreateProject(ctx, store.Project{Slug: "shared", Owner: "alice", Name: "shared"})
	require.NoError(t, err)
	add := func(s *store.Store, content string) int64 {
		e, err := s.AddMemory(ctx, store.MemoryEntry{Project: p.ID, Tier: store.MemoryLongTerm, Scope: "project", Content: content})
		require.NoError(t, err)
		return e.ID
	}
	first := add(a, "the widget inventory lives in inventory.csv")
	require.Equal(t, []int64{first}, recallIDs(t, ia, p.ID, "coder", "widget", 10))
	require.Equal(t, []int64{first}, recallIDs(t, ib, p.ID, "coder", "widget", 10))

	second := add(b, "widget counts are in the weekly widget report")
	require.Equal(t, []int64{second, first}, recallIDs(t, ia, p.ID, "coder", "widget", 10), "b's write, on a")
	third := add(a, "deploys run on Fridays")
	require.Equal(t, []int64{second, first, third}, recallIDs(t, ib, p.ID, "coder", "widget", 10), "a's write, on b")

	// A person's delete over the API, on b: gone on a.
	require.NoError(t, b.DeleteMemory(ctx, p, second, "alice"))
	require.Equal(t, []int64{first, third}, recallIDs(t, ia, p.ID, "coder", "widget", 10))
	// A delete by plain SQL (retention, an operator): gone on both.
	_, err = a.Pool.Exec(ctx, `DELETE FROM agent_memory WHERE id = $1`, first)
	require.NoError(t, err)
	require.Equal(t, []int64{third}, recallIDs(t, ib, p.ID, "coder", "widget", 10))
	require.Equal(t, []int64{third}, recallIDs(t, ia, p.ID, "coder", "widget", 10))

	// A write that rolls back is never recalled, and the next one is.
	tx, err := b.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = store.InTx(tx).AddMemory(ctx, store.MemoryEntry{Project: p.ID, Tier: store.MemoryLongTerm, Scope: "project", Content: "rolled back widget"})
	require.NoError(t, err)
	require.Equal(t, []int64{third}, recallIDs(t, ia, p.ID, "coder", "widget", 10), "uncommitted")
	require.NoError(t, tx.Rollback(ctx))
	fourth := add(b, "widget four")
	require.Equal(t, []int64{fourth, third}, recallIDs(t, ia, p.ID, "coder", "widget", 10))

	// Working memory is not recalled and does not disturb the index.
	_, err = b.AddMemory(ctx, store.MemoryEntry{Project: p.ID, Tier: store.MemoryWorking, Scope: "agent", Agent: "coder", SessionID: "s1", Content: "widget notes"})
	require.NoError(t, err)
	require.Equal(t, []int64{fourth, third}, recallIDs(t, ia, p.ID, "coder", "widget", 10))

	// The project deleted on b: nothing left on a.
	require.NoError(t, b.DeleteProject(ctx, p, "alice"))
	require.Empty(t, recallIDs(t, ia, p.ID, "coder", "widget", 10))
	// TRUNCATE (an operator's reset) empties every project's index.
	_, err = a.AddMemory(ctx, store.MemoryEntry{Project: "other", Tier: store.MemoryLongTerm, Scope: "project", Content: "widget elsewhere"})
	require.NoError(t, err)
	require.Len(t, recallIDs(t, ib, "other", "coder", "widget", 10), 1)
	_, err = a.Pool.Exec(ctx, `TRUNCATE agent_memory CASCADE`)
	require.NoError(t, err)
	require.Empty(t, recallIDs(t, ib, "other", "coder", "widget", 10))
}

// Two writers of one project commit in the order of their generations: an
// entry whose transaction started first but committed last is not skipped by
// an index that read in between.
func TestMemoryIndexConcurrentWriters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b, ia, _ := twoWorkers(t, 10_000)
	first, err := a.AddMemory(ctx, store.MemoryEntry{Project: "cw", Tier: store.MemoryLongTerm, Scope: "project", Content: "widget zero"})
	require.NoError(t, err)
	require.Equal(t, []int64{first.ID}, recallIDs(t, ia, "cw", "x", "widget", 10))

	slow, err := a.Pool.Begin(ctx)
	require.NoError(t, err)
	defer slow.Rollback(ctx) //nolint:errcheck // committed below
	early, err := store.InTx(slow).AddMemory(ctx, store.MemoryEntry{Project: "cw", Tier: store.MemoryLongTerm, Scope: "project", Content: "widget early"})
	require.NoError(t, err)
	done := make(chan store.MemoryEntry, 1)
	go func() {
		// Waits for slow's lock on the project's generation.
		e, err := b.AddMemory(ctx, store.MemoryEntry{Project: "cw", Tier: store.MemoryLongTerm, Scope: "project", Content: "widget late"})
		if err != nil {
			t.Error(err)
		}
		done <- e
	}()
	select {
	case <-done:
		t.Fatal("a second writer of the project committed while the first held its generation")
	case <-time.After(200 * time.Millisecond):
	}
	require.Equal(t, []int64{first.ID}, recallIDs(t, ia, "cw", "x", "widget", 10))
	require.NoError(t, slow.Commit(ctx))
	late := <-done
	require.ElementsMatch(t, []int64{first.ID, early.ID, late.ID}, recallIDs(t, ia, "cw", "x", "widget", 10))
}

// A recalled entry carries the label its writer stored, byte for byte, and a
// caller changing it changes nothing in the index.
func TestMemoryIndexKeepsProvenance(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _, ix, _ := twoWorkers(t, 10_000)
	untrusted := json.RawMessage(`{"untrusted":["web:https://evil.example/page"],"private":["file:secrets.md"]}`)
	trusted := json.RawMessage(`{}`)
	for _, c := range []struct {
		content string
		prov    json.RawMessage
	}{{"widget from a hostile page", untrusted}, {"widget from a clean session", trusted}, {"widget a person wrote", nil}} {
		_, err := st.AddMemory(ctx, store.MemoryEntry{Project: "pv", Tier: store.MemoryLongTerm, Scope: "project", Content: c.content, Provenance: c.prov})
		require.NoError(t, err)
	}
	byContent := func() map[string]json.RawMessage {
		got, err := ix.RecallMemory(ctx, "pv", "coder", "widget", 10)
		require.NoError(t, err)
		require.Len(t, got, 3)
		out := map[string]json.RawMessage{}
		for _, e := range got {
			out[e.Content] = e.Provenance
		}
		return out
	}
	got := byContent()
	require.JSONEq(t, string(untrusted), string(got["widget from a hostile page"]))
	require.JSONEq(t, string(trusted), string(got["widget from a clean session"]))
	require.Nil(t, got["widget a person wrote"], "no label stored: none invented")
	requireSameRecall(t, st, ix, "pv", "coder", "widget", 10)

	for i := range got["widget from a hostile page"] {
		got["widget from a hostile page"][i] = ' '
	}
	require.JSONEq(t, string(untrusted), string(byContent()["widget from a hostile page"]), "the caller's copy only")
}

// The index holds at most its entries, evicting the least recently recalled
// project; a project larger than the bound recalls from PostgreSQL.
func TestMemoryIndexBounds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _, ix, _ := twoWorkers(t, 10)
	fill := func(project string, n int) {
		_, err := st.Pool.Exec(ctx, `INSERT INTO agent_memory (project, tier, scope, content)
			SELECT $1, 'long_term', 'project', 'widget ' || i FROM generate_series(1, $2::int) i`, project, n)
		require.NoError(t, err)
	}
	fill("small-a", 4)
	fill("small-b", 4)
	fill("big", 20)
	for _, c := range []struct {
		project           string
		entries, projects int
		recalled          int
	}{
		{"small-a", 5, 1, 4},
		{"small-b", 10, 2, 4},
		{"small-a", 10, 2, 4}, // both fit: 2 × (4 + 1)
		{"big", 10, 2, 10},    // too big: not indexed, the others stay
		{"small-b", 10, 2, 4},
	} {
		require.Len(t, recallIDs(t, ix, c.project, "coder", "widget", 10), c.recalled, c.project)
		entries, projects := ix.Len()
		require.Equal(t, c.entries, entries, c.project)
		require.Equal(t, c.projects, projects, c.project)
		requireSameRecall(t, st, ix, c.project, "coder", "widget", 30)
	}
	fill("small-a", 1) // small-a grows to 5 + 1: small-b (least recently recalled before it) goes
	require.Len(t, recallIDs(t, ix, "small-a", "coder", "widget", 10), 5)
	entries, projects := ix.Len()
	require.Equal(t, 6, entries)
	require.Equal(t, 1, projects)

	_, err := store.NewMemoryIndex(st, 0)
	require.Error(t, err)
	tx := testdb.TestTx(t)
	_, err = store.NewMemoryIndex(store.InTx(tx), 10)
	require.Error(t, err, "an index over one transaction would cache writes that roll back")
}

// BenchmarkMemoryRecall is a new session's recall at 10,000 entries (store's
// BenchmarkMemoryInjection's project): the candidates, ranked and formatted,
// from PostgreSQL (uncached) and from a MemoryIndex (cached), beside a SELECT 1
// (select1: the floor of the cached recall's one round trip). Reports p50, p99
// and the index's heap per entry.
func BenchmarkMemoryRecall(b *testing.B) {
	ctx := context.Background()
	st := testdb.Store(b)
	_, err := st.Pool.Exec(ctx, `INSERT INTO agent_memory (project, tier, scope, agent, content, created_at)
		SELECT 'bench', 'long_term', CASE WHEN i % 10 = 0 THEN 'agent' ELSE 'project' END,
			CASE WHEN i % 10 = 0 THEN 'agent' || (i % 7) ELSE '' END,
			(SELECT string_agg('w' || ((i * 7919 + j * 104729) % 2000), ' ') FROM generate_series(1, 50) j),
			now() - (i % 1440) * interval '1 hour'
		FROM generate_series(1, 10000) i`)
	require.NoError(b, err)
	_, err = st.Pool.Exec(ctx, `VACUUM ANALYZE agent_memory, agent_memory_terms`)
	require.NoError(b, err)
	ix, err := store.NewMemoryIndex(st, memory.DefaultCacheEntries)
	require.NoError(b, err)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err = ix.RecallMemory(ctx, "bench", "agent3", "w1", 1) // builds the index
	require.NoError(b, err)
	runtime.GC()
	runtime.ReadMemStats(&after)
	cfg := memory.Config{}.WithDefaults()
	task := "Update w17 and w1234 in the report, then check w999 against w5 and summarize the w42 findings for the team"
	at, err := st.MemoryAt(ctx, "bench", task)
	require.NoError(b, err)
	for _, c := range []struct {
		name   string
		recall func(ctx context.Context, project, agent, text string, limit int) ([]store.MemoryEntry, error)
	}{{"uncached", st.RecallMemory}, {"cached", ix.RecallMemory}, {"cached-at", func(ctx context.Context, project, agent, text string, limit int) ([]store.MemoryEntry, error) {
		// A worker's recall: the generation and lexemes read by the session's
		// acquire (here once), the index current: no round trip.
		return ix.RecallMemoryAt(ctx, at, agent, limit)
	}}, {"select1", func(ctx context.Context, _, _, _ string, _ int) ([]store.MemoryEntry, error) {
		// The floor of a recall that asks PostgreSQL anything: one round trip.
		var one int
		return []store.MemoryEntry{{Scope: "project", Content: "x"}}, st.Pool.QueryRow(ctx, "SELECT 1").Scan(&one)
	}}} {
		b.Run(c.name, func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			for b.Loop() {
				start := time.Now()
				cands, err := c.recall(ctx, "bench", "agent3", task, cfg.Candidates)
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
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
			if c.name == "cached" {
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/10000, "index-B/entry")
			}
		})
	}
}
