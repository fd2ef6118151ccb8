package tokens_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/aetherium-engine/aetherium/llm/tokens"
	"github.com/stretchr/testify/require"
)

const english = "The quick brown fox jumps over the lazy dog. Context windows must be managed: " +
	"each request's tokens are counted before the model call, and a session that would pass " +
	"the threshold is compacted first, so the provider never refuses it for its length."

// counters are every Counter the package ships, each held to the same rules.
func counters(t *testing.T) []tokens.Counter {
	t.Helper()
	var cs []tokens.Counter
	for _, enc := range []string{tokens.O200kBase, tokens.Cl100kBase} {
		c, err := tokens.NewTiktoken(enc)
		require.NoError(t, err)
		cs = append(cs, c)
	}
	return append(cs, tokens.Estimate{})
}

func TestCounterConformance(t *testing.T) {
	t.Parallel()
	odd := []string{
		"plain ASCII text",
		"日本語のテキストとトークン数の見積もり",
		"emoji 🎉🚀👩‍👩‍👧‍👦 and flags 🇫🇷",
		"invalid \xff\xfe\xc3\x28 UTF-8 \xed\xa0\x80",
		"NUL \x00 bytes \x00\x00",
		"<|endoftext|> special-token text <|endofprompt|>",
		strings.Repeat(" ", 1000),
		strings.Repeat("a", 5000),
		`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`,
	}
	for _, c := range counters(t) {
		t.Run(c.Name(), func(t *testing.T) {
			t.Parallel()
			require.NotEmpty(t, c.Name())
			require.Zero(t, c.Count(""), "empty text is no tokens")
			for _, s := range odd {
				n := c.Count(s)
				require.Positive(t, n, "%q", s)
				require.LessOrEqual(t, n, len(s), "%q: never more tokens than bytes", s)
			}
			// Monotone-ish: more of the same text is more tokens.
			prev := 0
			for i := 1; i <= 8; i++ {
				n := c.Count(strings.Repeat(english, i))
				require.Greater(t, n, prev, "%d copies", i)
				prev = n
			}
			// English runs 3 to 6 bytes a token in every tokenizer in use.
			n := c.Count(english)
			require.GreaterOrEqual(t, n, len(english)/6)
			require.LessOrEqual(t, n, len(english)/3+1)
		})
	}
}

func TestEstimateIsAtOrAboveTheTokenizersOnEnglish(t *testing.T) {
	t.Parallel()
	est := tokens.Estimate{}.Count(english)
	for _, c := range counters(t) {
		n := c.Count(english)
		require.GreaterOrEqual(t, est, n, c.Name())
		require.LessOrEqual(t, est, 2*n, "%s: the estimate is high, not absurd", c.Name())
	}
}

func TestTiktokenKnownCounts(t *testing.T) {
	t.Parallel()
	// Counts of OpenAI's tiktoken for these texts (its README's example for
	// cl100k_base: [83, 1609, 5963, 374, 2294, 0]).
	tests := []struct {
		enc, text string
		want      int
	}{
		{tokens.Cl100kBase, "hello world", 2},
		{tokens.O200kBase, "hello world", 2},
		{tokens.Cl100kBase, "tiktoken is great!", 6},
	}
	for _, tc := range tests {
		t.Run(tc.enc+"/"+tc.text, func(t *testing.T) {
			t.Parallel()
			c, err := tokens.NewTiktoken(tc.enc)
			require.NoError(t, err)
			require.Equal(t, tc.want, c.Count(tc.text))
		})
	}
}

func TestNewTiktokenUnknownEncoding(t *testing.T) {
	t.Parallel()
	_, err := tokens.NewTiktoken("p50k_base")
	require.ErrorContains(t, err, `unknown encoding "p50k_base"`)
}

func TestTiktokenConcurrentFirstUse(t *testing.T) {
	t.Parallel()
	c, err := tokens.NewTiktoken(tokens.Cl100kBase)
	require.NoError(t, err)
	want := c.Count(english)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			other, err := tokens.NewTiktoken(tokens.Cl100kBase)
			if err == nil {
				require.Equal(t, want, other.Count(english))
			}
		})
	}
	wg.Wait()
}

func TestEncoding(t *testing.T) {
	t.Parallel()
	tests := []struct{ model, want string }{
		{"gpt-4o", tokens.O200kBase},
		{"gpt-4o-mini-2024-07-18", tokens.O200kBase},
		{"GPT-4o", tokens.O200kBase},
		{"openai/gpt-4.1", tokens.O200kBase},
		{"gpt-4.1-nano", tokens.O200kBase},
		{"gpt-5", tokens.O200kBase},
		{"gpt-5-mini", tokens.O200kBase},
		{"o1", tokens.O200kBase},
		{"o3-mini", tokens.O200kBase},
		{"o4-mini", tokens.O200kBase},
		{"gpt-4", tokens.Cl100kBase},
		{"gpt-4-turbo", tokens.Cl100kBase},
		{"gpt-3.5-turbo", tokens.Cl100kBase},
		{"text-embedding-3-small", tokens.Cl100kBase},
		{"o1x-custom", ""},
		{"claude-sonnet-4-5", ""},
		{"llama-3.1-70b", ""},
		{"script", ""},
		{"", ""},
	}
	for _, tc := range tests {
		t.Run(tc.model, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, tokens.Encoding(tc.model))
			want := tc.want
			if want == "" {
				want = tokens.Estimate{}.Name()
			}
			require.Equal(t, want, tokens.ForModel(tc.model).Name())
		})
	}
}

// BenchmarkCount measures the counters on agent-like text (prose, code and
// JSON): the tokenizers' throughput bounds how often a session can be
// recounted in full.
func BenchmarkCount(b *testing.B) {
	text := strings.Repeat(english+"\nfunc main() { fmt.Println(`{\"path\": \"a.txt\"}`) }\n", 100)
	for _, model := range []string{"gpt-4o", "gpt-4", "claude-sonnet-4-5"} {
		c := tokens.ForModel(model)
		b.Run(c.Name(), func(b *testing.B) {
			c.Count("warm up")
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				c.Count(text)
			}
		})
	}
}

// FuzzCount: no bytes make a counter panic, and a count never exceeds the
// bytes counted (a byte-level BPE has a token for every byte at worst).
func FuzzCount(f *testing.F) {
	for _, s := range []string{"", "hello", "\xff\xfe", "\x00", "日本語", "🎉", "<|endoftext|>", "  \n\t"} {
		f.Add(s)
	}
	cs := []tokens.Counter{tokens.ForModel("gpt-4o"), tokens.ForModel("gpt-4"), tokens.Estimate{}}
	f.Fuzz(func(t *testing.T, s string) {
		for _, c := range cs {
			n := c.Count(s)
			if n < 0 || n > len(s) || (s == "") != (n == 0) {
				t.Fatalf("%s: %d tokens for %d bytes %q", c.Name(), n, len(s), s)
			}
		}
	})
}

// A long run of mixed whitespace is counted as its length, never given to the
// port's quadratic merging (40 KB of " \n" took it 3.7 s); the count equal to
// the length shows the tokenizer was skipped, so the test times nothing.
func TestTiktokenLongMixedWhitespaceIsItsLength(t *testing.T) {
	t.Parallel()
	for _, enc := range []string{tokens.O200kBase, tokens.Cl100kBase} {
		c, err := tokens.NewTiktoken(enc)
		require.NoError(t, err)
		for _, unit := range []string{" \n", "\t\n ", " \r\n"} {
			run := strings.Repeat(unit, 40000/len(unit))
			require.Equal(t, c.Count("start")+len(run)+c.Count("end"), c.Count("start"+run+"end"), "%s %q", enc, unit)
			// A short one goes to the tokenizer, which merges it.
			short := "a" + strings.Repeat(unit, 30/len(unit)) + "b"
			require.Less(t, c.Count(short), len(short), "%s %q", enc, unit)
		}
		for _, unit := range []string{" ", "\n", "\t"} {
			// A run of one byte is counted exactly, and merges.
			text := "a" + strings.Repeat(unit, 2000) + "b"
			require.Less(t, c.Count(text), 1000, "%s %q", enc, unit)
		}
	}
}
