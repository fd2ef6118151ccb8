package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/aetherium-engine/aetherium/knowledge"
	"github.com/aetherium-engine/aetherium/knowledge/knowledgetest"
)

// knowledgePacks are the packs section 4's knowledge probe searches.
var knowledgePacks = []string{"bench-k0", "bench-k1", "bench-k2", "bench-k3"}

// seedKnowledge indexes docs documents of five sections (one chunk each) into
// knowledgePacks through COPY, in batches of 5,000 (knowledge's
// BenchmarkSearch corpus), and returns the probe's queries.
func seedKnowledge(ctx context.Context, pool *pgxpool.Pool, kb *knowledge.Postgres, docs int) ([]string, error) {
	words := knowledgetest.Words(20000)
	start, chunks := time.Now(), 0
	for first := 0; first < docs; first += 5000 {
		n, err := kb.BulkLoad(ctx, knowledgetest.Corpus(min(5000, docs-first), first, words, knowledgePacks, uint64(first)))
		if err != nil {
			return nil, fmt.Errorf("seed knowledge: %w", err)
		}
		chunks += n
		progress("scaling: knowledge: %d of %d documents indexed (%d chunks, %s)", min(first+5000, docs), docs, chunks, time.Since(start).Round(time.Second))
	}
	// The planner's statistics of a freshly loaded index, as a pack indexed
	// long ago has them.
	if _, err := pool.Exec(ctx, `VACUUM (ANALYZE) knowledge_chunks, knowledge_terms`); err != nil {
		return nil, fmt.Errorf("seed knowledge: %w", err)
	}
	return knowledgetest.Queries(500, words, 45), nil
}

// knowledgeProbe searches the seeded packs every 200 ms until stopped (a tenth
// of the recall probe's rate: each search is PostgreSQL work, and the probe must
// not load the fleet it measures beside), and returns the sorted latencies.
func knowledgeProbe(ctx context.Context, kb *knowledge.Postgres, queries []string) (stop func() []time.Duration) {
	quit, out := make(chan struct{}), make(chan []time.Duration, 1)
	go func() {
		var lat []time.Duration
		scope := knowledge.Scope{Packs: knowledgePacks}
		for i := 0; ; i++ {
			select {
			case <-quit:
				slices.Sort(lat)
				out <- lat
				return
			case <-time.After(200 * time.Millisecond):
			}
			start := time.Now()
			if _, err := kb.Search(ctx, knowledge.Query{Text: queries[i%len(queries)], K: 5, Scope: scope}); err != nil {
				progress("scaling: knowledge search: %v", err)
				continue
			}
			lat = append(lat, time.Since(start))
		}
	}()
	return func() []time.Duration { close(quit); return <-out }
}
