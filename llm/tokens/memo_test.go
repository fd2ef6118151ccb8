package tokens_test

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aetherium-engine/aetherium/llm/tokens"
	"github.com/stretchr/testify/require"
)

// counting counts calls to an Estimate.
type counting struct{ calls atomic.Int32 }

func (c *counting) Count(s string) int { c.calls.Add(1); return tokens.Estimate{}.Count(s) }
func (c *counting) Name() string       { return "counting" }

func TestMemo(t *testing.T) {
	t.Parallel()
	long := func(i int) string { return strings.Repeat(string(rune('a'+i)), 600) }
	tests := []struct {
		name  string
		size  int
		texts []string
		calls int32
	}{
		{name: "a long text is counted once", size: 4, texts: []string{long(0), long(0), long(0)}, calls: 1},
		{name: "short texts are always counted", size: 4, texts: []string{"hi", "hi", "hi"}, calls: 3},
		{name: "the oldest is forgotten", size: 2, texts: []string{long(0), long(1), long(2), long(0), long(2)}, calls: 4},
		{name: "size below one is one", size: 0, texts: []string{long(0), long(0), long(1), long(0)}, calls: 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := &counting{}
			m := tokens.NewMemo(c, tc.size)
			require.Equal(t, "counting", m.Name())
			for _, s := range tc.texts {
				require.Equal(t, tokens.Estimate{}.Count(s), m.Count(s))
			}
			require.Equal(t, tc.calls, c.calls.Load())
		})
	}
}

func TestMemoConcurrent(t *testing.T) {
	t.Parallel()
	m := tokens.NewMemo(tokens.ForModel("gpt-4o"), 8)
	want := tokens.ForModel("gpt-4o").Count(strings.Repeat(english, 5))
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 50 {
				require.Equal(t, want, m.Count(strings.Repeat(english, 5)))
				m.Count(strings.Repeat(english, 6+(i+j)%10))
			}
		})
	}
	wg.Wait()
}
