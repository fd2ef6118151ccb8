package knowledge_test

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/knowledge"
	"github.com/aetherium-engine/aetherium/knowledge/knowledgetest"
)

// BenchmarkSearch measures search latency over 100,000 chunks (20,000 documents
// of 5 sections, loaded with COPY; only under -bench). Queries are 2-5 words of
// middling frequency, plus a common word in half of them and a typo in a tenth.
// It reports p50 and p99 per query.
func BenchmarkSearch(b *testing.B) {
	e := setup(b, knowledge.Config{})
	ctx := context.Background()
	words := knowledgetest.Words(20000)
	start := time.Now()
	total := 0
	for batch := 0; batch < 4; batch++ {
		n, err := e.kb.BulkLoad(ctx, knowledgetest.Corpus(5000, batch*5000, words, []string{"bench0", "bench1", "bench2", "bench3"}, uint64(batch)))
		require.NoError(b, err)
		total += n
	}
	_, err := e.pool.Exec(ctx, `VACUUM (ANALYZE) knowledge_chunks, knowledge_terms`)
	require.NoError(b, err)
	b.Logf("loaded %d chunks in %s", total, time.Since(start).Round(time.Millisecond))
	require.GreaterOrEqual(b, total, 100000)

	queries := knowledgetest.Queries(500, words, 7)
	scope := knowledge.Scope{Packs: []string{"bench0", "bench1", "bench2", "bench3"}}
	b.Run("100k-chunks", func(b *testing.B) {
		lat := make([]time.Duration, 0, b.N)
		hits := 0
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			res, err := e.kb.Search(ctx, knowledge.Query{Text: queries[i%len(queries)], K: 5, Scope: scope})
			lat = append(lat, time.Since(t0))
			if err != nil {
				b.Fatal(err)
			}
			hits += len(res)
		}
		b.StopTimer()
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
		b.ReportMetric(pct(0.50), "p50-ms")
		b.ReportMetric(pct(0.99), "p99-ms")
		b.ReportMetric(float64(hits)/float64(b.N), "hits/op")
	})
}
