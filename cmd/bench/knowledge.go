package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/aetherium-engine/aetherium/knowledge"
)

// knowledgePacks are the packs section 4's knowledge probe searches.
var knowledgePacks = []string{"bench-k0", "bench-k1", "bench-k2", "bench-k3"}

// knowledgeWords is a synthetic vocabulary: word i spelt in consonant-vowel
// syllables, every word distinct (knowledge's BenchmarkSearch has the same shape).
func knowledgeWords(n int) []string {
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

// seedKnowledge indexes docs documents of five sections (one chunk each), words
// Zipf-distributed like natural text, into knowledgePacks, through COPY in
// batches of 5,000, and returns the probe's queries: 2–5 words of middling
// frequency, a common word in half of them, a typo in a tenth.
func seedKnowledge(ctx context.Context, pool *pgxpool.Pool, kb *knowledge.Postgres, docs int) ([]string, error) {
	words := knowledgeWords(20000)
	r := rand.New(rand.NewPCG(45, 45))
	z := rand.NewZipf(r, 1.07, 2, uint64(len(words)-1))
	sentence := func(n int) string {
		var b strings.Builder
		for i := range n {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(words[z.Uint64()])
		}
		b.WriteString(".")
		return b.String()
	}
	start, chunks := time.Now(), 0
	for first := 0; first < docs; first += 5000 {
		batch := make([]knowledge.Document, min(5000, docs-first))
		for d := range batch {
			var b strings.Builder
			for range 5 {
				fmt.Fprintf(&b, "## %s\n\n", sentence(3))
				for range 6 {
					b.WriteString(sentence(8 + r.IntN(12)))
					b.WriteByte(' ')
				}
				b.WriteString("\n\n")
			}
			n := first + d
			batch[d] = knowledge.Document{Source: knowledge.Pack(knowledgePacks[n%len(knowledgePacks)]), Path: fmt.Sprintf("d%06d.md", n),
				Title: sentence(4), Content: b.String()}
		}
		n, err := kb.BulkLoad(ctx, batch)
		if err != nil {
			return nil, fmt.Errorf("seed knowledge: %w", err)
		}
		chunks += n
		progress("scaling: knowledge: %d of %d documents indexed (%d chunks, %s)", first+len(batch), docs, chunks, time.Since(start).Round(time.Second))
	}
	// The planner's statistics of a freshly loaded index, as a pack indexed
	// long ago has them.
	if _, err := pool.Exec(ctx, `VACUUM (ANALYZE) knowledge_chunks, knowledge_terms`); err != nil {
		return nil, fmt.Errorf("seed knowledge: %w", err)
	}
	queries := make([]string, 500)
	for i := range queries {
		var q []string
		for range 2 + r.IntN(4) {
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
	return queries, nil
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
