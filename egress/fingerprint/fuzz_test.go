package fingerprint

import (
	"encoding/base64"
	"encoding/hex"
	"math/rand/v2"
	"testing"
)

// FuzzCarried: Carried never panics, and judges the same input the same way.
func FuzzCarried(f *testing.F) {
	fx := newFixture(f)
	for _, seed := range [][2]string{
		{args(fx.key), ""},
		{args(fx.key2[12:]), args(fx.key2[:12])},
		{base64.StdEncoding.EncodeToString([]byte(fx.note)), ""},
		{hex.EncodeToString([]byte(reversed(fx.key))), "%41%42"},
		{`{"a":"\u00` + "41\\\\\\u0042\\n" + `"}`, `\\\\\\`},
		{"%2525%25%", "===="},
		{"", ""},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, text, prior string) {
		m1, ok1 := fx.set.Carried(text, prior)
		m2, ok2 := fx.set.Carried(text, prior)
		if m1 != m2 || ok1 != ok2 {
			t.Fatalf("Carried is not deterministic: %+v %v, then %+v %v", m1, ok1, m2, ok2)
		}
		if ok1 && (m1.Chars <= 0 || m1.Source == "" || m1.Form == "") {
			t.Fatalf("a match without its facts: %+v", m1)
		}
		// Folding the text in as private makes it carried, when it holds a
		// run long enough to count and is not mostly repetition: a chunk is
		// kept only where it first appears (doc.go, "What is not matched"),
		// so "0222…2210" is not found in itself — and holds nothing to leak.
		s, err := New(Config{})
		if err != nil {
			t.Fatal(err)
		}
		s.Add("fuzz", text)
		norm := appendNorm(nil, text)
		if n := len(norm); n >= 2*DefaultMinRun && distinctGrams(norm, DefaultK) >= (n-DefaultK+1)/2 {
			if _, ok := s.Carried(text); !ok {
				t.Fatalf("a text of %d normalized characters does not carry itself", n)
			}
		}
	})
}

// TestCarriedRandomKeys: every generated key is found whole, reversed and
// base64-encoded inside random prose.
func TestCarriedRandomKeys(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(5, 5))
	words := vocab(r, 500)
	s, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for range 50 {
		k := randKey(r, 16+r.IntN(48))
		keys = append(keys, k)
		s.Add("env", prose(r, words, 300)+" KEY="+k+"\n"+prose(r, words, 300))
	}
	for _, k := range keys {
		for _, text := range []string{k, reversed(k), base64.RawURLEncoding.EncodeToString([]byte(k))} {
			if _, ok := s.Carried(args(prose(r, words, 200) + " " + text + " " + prose(r, words, 200))); !ok {
				t.Errorf("key %s not found as %s", k, text)
			}
		}
	}
}

// distinctGrams counts the different k-byte grams of b.
func distinctGrams(b []byte, k int) int {
	seen := map[string]bool{}
	for i := 0; i+k <= len(b); i++ {
		seen[string(b[i:i+k])] = true
	}
	return len(seen)
}
