// Package knowledgetest makes synthetic knowledge corpora for benchmarks: the
// knowledge package's own (BenchmarkSearch) and cmd/bench's search probe.
package knowledgetest

import (
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/aetherium-engine/aetherium/knowledge"
)

// Words is a synthetic vocabulary of n words: word i is i spelt in
// consonant-vowel syllables, so every word is distinct and pronounceable.
func Words(n int) []string {
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

// Corpus is docs documents of five sections each (one chunk a section), words
// drawn Zipf-distributed from words like natural text, numbered from first
// (path d<n>.md) and spread over packs in turn. The same seed makes the same
// corpus.
func Corpus(docs, first int, words, packs []string, seed uint64) []knowledge.Document {
	r := rand.New(rand.NewPCG(seed, 100000))
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
	out := make([]knowledge.Document, docs)
	for d := range out {
		var b strings.Builder
		for range 5 {
			fmt.Fprintf(&b, "## %s\n\n", sentence(3))
			for range 6 {
				b.WriteString(sentence(8 + r.IntN(12)))
				b.WriteByte(' ')
			}
			b.WriteString("\n\n")
		}
		out[d] = knowledge.Document{Source: knowledge.Pack(packs[(first+d)%len(packs)]), Path: fmt.Sprintf("d%06d.md", first+d),
			Title: sentence(4), Content: b.String()}
	}
	return out
}

// Queries are n search texts over words: 2–5 words of middling frequency, a
// common word in half of them, a typo (two letters swapped) in a tenth.
func Queries(n int, words []string, seed uint64) []string {
	r := rand.New(rand.NewPCG(seed, seed))
	out := make([]string, n)
	for i := range out {
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
		out[i] = strings.Join(q, " ")
	}
	return out
}
