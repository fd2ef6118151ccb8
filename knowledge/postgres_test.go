package knowledge_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/knowledge"
)

var (
	packOps  = knowledge.Pack("ops")
	packDev  = knowledge.Pack("dev")
	projectP = knowledge.Project("p")
	projectQ = knowledge.Project("q")
)

func TestIndexIsIdempotentAndReplacesChangedDocuments(t *testing.T) {
	t.Parallel()
	e := setup(t, knowledge.Config{ChunkSize: 200})
	ctx := context.Background()
	body := "# Backups\n\nThe nightly backup copies the database to cold storage.\n\n## Restore\n\nRestoring takes the newest snapshot."
	first := e.index(t, packOps, "backups.md", "Backups", body)
	require.True(t, first.Changed)
	require.Equal(t, 2, first.Chunks)
	require.Equal(t, knowledge.DocID(packOps, "backups.md"), first.ID)

	again := e.index(t, packOps, "backups.md", "Backups", body)
	require.False(t, again.Changed, "an unchanged document is a no-op")
	require.Equal(t, first.ID, again.ID)
	require.Equal(t, 2, again.Chunks)

	changed := e.index(t, packOps, "backups.md", "Backups", "Backups now go to a tape robot.")
	require.True(t, changed.Changed)
	require.Equal(t, 1, changed.Chunks)
	scope := knowledge.Scope{Packs: []string{"ops"}}
	require.Empty(t, e.search(t, scope, "snapshot", 5), "the old chunks are gone")
	require.Equal(t, []string{"backups.md"}, paths(e.search(t, scope, "tape robot", 5)))

	var chunks int
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT count(*) FROM knowledge_chunks`).Scan(&chunks))
	require.Equal(t, 1, chunks)
	requireVocabularyExact(t, e)
}

// The incremental vocabulary equals one computed from scratch after concurrent
// indexing, replacing and deleting of documents sharing words (and nothing
// deadlocks).
func TestConcurrentIndexingKeepsTheVocabularyExact(t *testing.T) {
	t.Parallel()
	e := setup(t, knowledge.Config{})
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 6; i++ {
				doc := knowledge.Document{Source: projectP, Path: fmt.Sprintf("knowledge/d%d.md", (w+i)%10), Title: "shared title",
					Content: fmt.Sprintf("common words everywhere, writer %d round %d\n\nanother paragraph with lease and mailbox", w, i)}
				if _, err := e.kb.Index(ctx, doc); err != nil {
					errs <- err
				}
				if i%3 == 2 {
					if err := e.kb.Delete(ctx, projectP, doc.Path); err != nil && !strings.Contains(err.Error(), "not found") {
						errs <- err
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	requireVocabularyExact(t, e)
}

func requireVocabularyExact(t *testing.T, e *env) {
	t.Helper()
	var diff int
	require.NoError(t, e.pool.QueryRow(context.Background(), `
		WITH truth AS (
			SELECT u.lexeme AS word, count(*) AS df FROM knowledge_chunks c,
				unnest(to_tsvector('simple', c.title || ' ' || c.heading || ' ' || c.body)) u GROUP BY u.lexeme
			UNION ALL SELECT '', count(*) FROM knowledge_chunks),
		kept AS (SELECT word, df FROM knowledge_terms WHERE df <> 0)
		SELECT count(*) FROM (
			(SELECT * FROM truth EXCEPT SELECT * FROM kept) UNION ALL (SELECT * FROM kept EXCEPT SELECT * FROM truth)) x`).Scan(&diff))
	require.Zero(t, diff, "knowledge_terms differs from the chunks' real document frequencies")
}

func TestSearchSeesOnlyItsScope(t *testing.T) {
	t.Parallel()
	e := setup(t, knowledge.Config{})
	for _, src := range []knowledge.Source{packOps, packDev, projectP, projectQ} {
		e.index(t, src, "knowledge/gateway.md", "Gateway notes of "+src.Name, "The gateway rotates its certificates every month.")
	}
	for _, tc := range []struct {
		name  string
		scope knowledge.Scope
		want  []string
	}{
		{"one pack", knowledge.Scope{Packs: []string{"ops"}}, []string{"pack:ops"}},
		{"two packs", knowledge.Scope{Packs: []string{"ops", "dev"}}, []string{"pack:dev", "pack:ops"}},
		{"project only", knowledge.Scope{Project: "p"}, []string{"project:p"}},
		{"packs and project", knowledge.Scope{Packs: []string{"dev"}, Project: "q"}, []string{"pack:dev", "project:q"}},
		{"a pack named like a project", knowledge.Scope{Packs: []string{"p"}}, nil},
		{"empty scope", knowledge.Scope{}, nil},
		{"unknown project", knowledge.Scope{Project: "nope"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var got []string
			for _, r := range e.search(t, tc.scope, "gateway certificates", 10) {
				got = append(got, r.Source)
				require.Contains(t, r.Snippet, "**", "the snippet marks the matched terms")
				require.Greater(t, r.Score, 0.0)
				require.LessOrEqual(t, r.Score, 1.0)
			}
			require.ElementsMatch(t, tc.want, got)
		})
	}
}

func TestSearchRanksAndTolerates(t *testing.T) {
	t.Parallel()
	e := setup(t, knowledge.Config{})
	docs := map[string]string{
		"retrieval.md": "# Retrieval\n\nRetrieval quality is measured with recall and reciprocal rank over a labelled query set.",
		"leases.md":    "# GPU leases\n\nA lease holds one slot of a GPU service; the fencing token grows with every grant.",
		"mailbox.md":   "# Mailboxes\n\nAgents read their mailbox at the start of a turn and acknowledge after saving.",
		"approvals.md": "# Approvals\n\nRestricted calls wait for a person; an approval expires after five minutes.",
	}
	for p, c := range docs {
		e.index(t, projectP, "knowledge/"+p, strings.TrimPrefix(strings.Split(c, "\n")[0], "# "), c)
	}
	scope := knowledge.Scope{Project: "p"}
	for _, tc := range []struct{ query, want string }{
		{"fencing token", "knowledge/leases.md"},
		{"how is retrieval measured", "knowledge/retrieval.md"},
		{"retreival qualty", "knowledge/retrieval.md"},     // typos
		{"mailbx acknowledgement", "knowledge/mailbox.md"}, // typo and another form
		{"approvals expiring", "knowledge/approvals.md"},   // stemming
		{"GPU", "knowledge/leases.md"},                     // case
	} {
		t.Run(tc.query, func(t *testing.T) {
			t.Parallel()
			got := e.search(t, scope, tc.query, 3)
			require.NotEmpty(t, got)
			require.Equal(t, tc.want, got[0].Path, "results %v", paths(got))
		})
	}
	t.Run("nothing relevant", func(t *testing.T) {
		t.Parallel()
		require.Empty(t, e.search(t, scope, "zebra xylophone", 5))
		require.Empty(t, e.search(t, scope, "the of and", 5), "stop words alone find nothing")
	})
}

func TestScoreFloorDropsWeakHits(t *testing.T) {
	t.Parallel()
	low := setup(t, knowledge.Config{ScoreFloor: 0.0001})
	high := setup(t, knowledge.Config{ScoreFloor: 0.99})
	for _, e := range []*env{low, high} {
		e.index(t, packOps, "a.md", "Alpha", "alpha beta gamma delta")
	}
	scope := knowledge.Scope{Packs: []string{"ops"}}
	require.Len(t, low.search(t, scope, "beta unrelated words here", 5), 1)
	require.Empty(t, high.search(t, scope, "beta unrelated words here", 5))
}

func TestHiddenPathsAreNeverIndexed(t *testing.T) {
	t.Parallel()
	e := setup(t, knowledge.Config{})
	for _, p := range []string{
		".frame/capture.md", "a/../.frame/capture.md", "knowledge/.frame/x.md", "./.git/config.md",
		"knowledge/./.hidden.md", `knowledge\..\.frame\x.md`, "knowledge/sub/../../.frame/y.md",
	} {
		t.Run(p, func(t *testing.T) {
			t.Parallel()
			_, err := e.kb.Index(context.Background(), knowledge.Document{Source: projectP, Path: p, Title: "t", Content: "frame capture"})
			require.ErrorIs(t, err, knowledge.ErrHiddenPath)
		})
	}
	for _, p := range []string{"", "/etc/passwd.md", "../up.md", "a/../../up.md", ".", "a\x00b.md"} {
		t.Run(fmt.Sprintf("invalid %q", p), func(t *testing.T) {
			t.Parallel()
			_, err := e.kb.Index(context.Background(), knowledge.Document{Source: projectP, Path: p, Title: "t", Content: "x"})
			require.ErrorIs(t, err, knowledge.ErrInvalidPath)
		})
	}
}

func TestLanguagePerSource(t *testing.T) {
	t.Parallel()
	e := setup(t, knowledge.Config{})
	ctx := context.Background()
	_, err := e.kb.Index(ctx, knowledge.Document{Source: knowledge.Pack("de"), Path: "a.md", Title: "Häuser", Language: "german",
		Content: "Die Häuser der Stadt wurden renoviert."})
	require.NoError(t, err)
	// German stemming: Haus/Häuser share a stem only under the german configuration.
	got := e.search(t, knowledge.Scope{Packs: []string{"de"}}, "renovierte Häuser", 5)
	require.Len(t, got, 1)
	_, err = e.kb.Index(ctx, knowledge.Document{Source: knowledge.Pack("xx"), Path: "a.md", Title: "t", Language: "klingon", Content: "x"})
	require.ErrorIs(t, err, knowledge.ErrInvalidDocument)
}

func TestDeleteAndStats(t *testing.T) {
	t.Parallel()
	e := setup(t, knowledge.Config{})
	ctx := context.Background()
	e.index(t, packOps, "a.md", "A", "alpha")
	e.index(t, packOps, "b.md", "B", "beta")
	e.index(t, projectP, "knowledge/c.md", "C", "gamma")
	st, err := e.kb.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, st.Docs)
	require.Equal(t, 3, st.Chunks)
	require.Len(t, st.Sources, 2)
	require.NoError(t, e.kb.Delete(ctx, packOps, "a.md"))
	require.ErrorIs(t, e.kb.Delete(ctx, packOps, "a.md"), knowledge.ErrNotFound)
	docs, err := e.kb.Docs(ctx, packOps)
	require.NoError(t, err)
	require.Len(t, docs, 1)
	require.Equal(t, "b.md", docs[0].Path)
	requireVocabularyExact(t, e)

	n, err := e.kb.DeleteSource(ctx, projectP)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Empty(t, e.search(t, knowledge.Scope{Project: "p"}, "gamma", 5))
	st, err = e.kb.Stats(ctx)
	require.NoError(t, err)
	require.Len(t, st.Sources, 1, "the project is gone from the sources too")
	requireVocabularyExact(t, e)
}
