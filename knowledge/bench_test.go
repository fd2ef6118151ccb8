package knowledge_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/knowledge"
)

// benchWords is a synthetic vocabulary: word i is i spelt in consonant-vowel
// syllables, so every word is distinct and pronounceable.
func benchWords(n int) []string {
	cons, vows := "bdfgklmnprstvzh", "aeiou"
	out := make([]string, n)
	for i := range out {
		var b strings.Builder
		for x, syl := i+75*75, 0; x > 0 || syl < 2; x, syl = x/75, syl+1 {
			s := x % 75
			b.WriteByte(cons[s/5])
			b.WriteByte(vows[s%5])
		}
		out[i] = b.String()
	}
	return out
}

// benchCorpus generates docs documents of 5 sections each (one chunk a section),
// with words drawn Zipf-distributed from the vocabulary, like natural text.
func benchCorpus(docs, first int, words []string, seed uint64) []knowledge.Document {
	r := rand.New(rand.NewPCG(seed, 100000))
	z := rand.NewZipf(r, 1.07, 2, uint64(len(words)-1))
	sentence := func(n int) string {
		var b strings.Builder
		for i := 0; i < n; i++ {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(words[z.Uint64()])
		}
		b.WriteString(".")
		return b.String()
	}
	out := make([]knowledge.Document, docs)
	for d := range out {
		var b strings.Builder
		for s := 0; s < 5; s++ {
			fmt.Fprintf(&b, "## %s\n\n", sentence(3))
			for p := 0; p < 6; p++ {
				b.WriteString(sentence(8 + r.IntN(12)))
				b.WriteByte(' ')
			}
			b.WriteString("\n\n")
		}
		out[d] = knowledge.Document{Source: knowledge.Pack(fmt.Sprintf("bench%d", d%4)), Path: fmt.Sprintf("d%06d.md", first+d),
			Title: sentence(4), Content: b.String()}
	}
	return out
}

// BenchmarkSearch measures search latency over 100,000 chunks (20,000 documents
// of 5 sections, loaded with COPY; only under -bench). Queries are 2-5 words of
// middling frequency, plus a common word in half of them and a typo in a tenth.
// It reports p50 and p99 per query.
func BenchmarkSearch(b *testing.B) {
	e := setup(b, knowledge.Config{})
	ctx := context.Background()
	words := benchWords(20000)
	start := time.Now()
	total := 0
	for batch := 0; batch < 4; batch++ {
		n, err := e.kb.BulkLoad(ctx, benchCorpus(5000, batch*5000, words, uint64(batch)))
		require.NoError(b, err)
		total += n
	}
	_, err := e.pool.Exec(ctx, `VACUUM (ANALYZE) knowledge_chunks, knowledge_terms`)
	require.NoError(b, err)
	b.Logf("loaded %d chunks in %s", total, time.Since(start).Round(time.Millisecond))
	require.GreaterOrEqual(b, total, 100000)

	r := rand.New(rand.NewPCG(7, 7))
	queries := make([]string, 500)
	for i := range queries {
		var q []string
		for j := 0; j < 2+r.IntN(4); j++ {
			q = append(q, words[50+r.IntN(3000)])
		}
		if i%2 == 0 {
			q = append(q, words[r.IntN(50)])
		}
		if i%10 == 0 {
			w := []byte(q[0])
			w[1], w[2] = w[2], w[1]
			q[0] = string(w)
		}
		queries[i] = strings.Join(q, " ")
	}
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
