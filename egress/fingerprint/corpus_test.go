package fingerprint

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// The tests' fixtures are generated here from fixed seeds: nothing is copied.

const base62 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

// randKey is a random base62 key of n characters that secretLike accepts.
func randKey(r *rand.Rand, n int) string {
	for {
		b := make([]byte, n)
		for i := range b {
			b[i] = base62[r.IntN(len(base62))]
		}
		if secretLike(string(b)) {
			return string(b)
		}
	}
}

var syllables = strings.Fields("ka lo mi ne ru sa te vo pi da ge ho ju bel tor mar fin sten gar pol quen rid wes ath ion ent ing con pre tra")

// vocab is a vocabulary of pseudo-words, shared by the private and the
// outbound sides so that they share words and short phrases by chance.
func vocab(r *rand.Rand, n int) []string {
	out := make([]string, n)
	for i := range out {
		var b strings.Builder
		for range 1 + r.IntN(3) {
			b.WriteString(syllables[r.IntN(len(syllables))])
		}
		out[i] = b.String()
	}
	// Frequent English words, so that common phrases recur.
	return append(out, strings.Fields("the a of and to in is that it for on with as by this be are from or an at")...)
}

// prose writes about n bytes of sentences from words, Zipf-like (frequent
// words often).
func prose(r *rand.Rand, words []string, n int) string {
	var b strings.Builder
	zipf := rand.NewZipf(r, 1.2, 2, uint64(len(words)-1))
	for b.Len() < n {
		k := 6 + r.IntN(12)
		for i := range k {
			w := words[zipf.Uint64()]
			if i == 0 {
				w = strings.ToUpper(w[:1]) + w[1:]
			}
			b.WriteString(w)
			if i < k-1 {
				b.WriteByte(' ')
			}
		}
		b.WriteString(". ")
		if r.IntN(6) == 0 {
			b.WriteString("\n\n")
		}
	}
	return b.String()
}

// goCode writes about n bytes of Go-like code: common idioms around random
// identifiers.
func goCode(r *rand.Rand, words []string, n int) string {
	var b strings.Builder
	id := func() string {
		w := words[r.IntN(len(words)-21)]
		u := words[r.IntN(len(words)-21)]
		return w + strings.ToUpper(u[:1]) + u[1:]
	}
	for b.Len() < n {
		fn, arg, typ := id(), id(), id()
		switch r.IntN(4) {
		case 0:
			fmt.Fprintf(&b, "func (s *%s) %s(ctx context.Context, %s string) error {\n\tif err := s.%s(ctx); err != nil {\n\t\treturn fmt.Errorf(%q, err)\n\t}\n\treturn nil\n}\n\n",
				typ, fn, arg, id(), fn+": %w")
		case 1:
			fmt.Fprintf(&b, "type %s struct {\n\t%s string `json:\"%s\"`\n\t%s int `json:\"%s\"`\n}\n\n", typ, fn, arg, id(), id())
		case 2:
			fmt.Fprintf(&b, "\tfor _, %s := range %s {\n\t\tif %s == nil {\n\t\t\tcontinue\n\t\t}\n\t\t%s = append(%s, %s)\n\t}\n", arg, fn, arg, typ, typ, arg)
		default:
			fmt.Fprintf(&b, "// %s %s.\nfunc %s() (*%s, error) {\n\treturn nil, err\n}\n\n", fn, prose(r, words, 40), fn, typ)
		}
	}
	return b.String()
}

// envFile is a .env file of keys.
func envFile(r *rand.Rand) string {
	return fmt.Sprintf("# local settings\nDATABASE_URL=postgres://app:%s@db.internal:5432/app\nSTRIPE_KEY=sk_live_%s\nOPENAI_API_KEY=sk-%s\nAWS_SECRET_ACCESS_KEY=%s\nDEBUG=false\n",
		randKey(r, 20), randKey(r, 32), randKey(r, 40), randKey(r, 40))
}

// privateCorpus is about n bytes of private reads: code, prose, .env files.
func privateCorpus(r *rand.Rand, words []string, n int) []string {
	var out []string
	for total := 0; total < n; {
		var t string
		switch r.IntN(5) {
		case 0, 1:
			t = goCode(r, words, 16<<10)
		case 2, 3:
			t = prose(r, words, 16<<10)
		default:
			t = envFile(r) + prose(r, words, 512)
		}
		out = append(out, t)
		total += len(t)
	}
	return out
}
