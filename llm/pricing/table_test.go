package pricing_test

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/llm/pricing"
)

const small = `
currency: USD
as_of: 2026-11-01
models:
  - provider: openai
    model: gpt-4o
    input: 2.50
    output: 10.00
    cached_input: 1.25
    aliases: [gpt-4o-2024-08-06]
  - provider: openai
    model: gpt-4o-mini
    input: 0.15
    output: 0.60
  - provider: anthropic
    model: claude-sonnet-4-5
    input: 3
    output: 15
    cached_input: 0.30
    cache_write: 3.75
    match: prefix
`

func parse(t *testing.T, text string) *pricing.Table {
	t.Helper()
	tb, err := pricing.Parse([]byte(text))
	require.NoError(t, err)
	return tb
}

func TestParseReadsPricesExactly(t *testing.T) {
	t.Parallel()
	tb := parse(t, small)
	require.Equal(t, time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), tb.AsOf())
	l, ok := tb.Lookup("openai", "gpt-4o")
	require.True(t, ok)
	require.Equal(t, pricing.Rates{Input: 2_500_000, Output: 10_000_000, CachedInput: 1_250_000, CacheWrite: 2_500_000}, l.Rates)
	require.Equal(t, []string{"gpt-4o-2024-08-06"}, l.Aliases)
	require.False(t, l.Prefix)

	// Unset cache prices default to input.
	l, ok = tb.Lookup("openai", "gpt-4o-mini")
	require.True(t, ok)
	require.Equal(t, pricing.Rates{Input: 150_000, Output: 600_000, CachedInput: 150_000, CacheWrite: 150_000}, l.Rates)

	l, ok = tb.Lookup("anthropic", "claude-sonnet-4-5")
	require.True(t, ok)
	require.Equal(t, pricing.Rates{Input: 3_000_000, Output: 15_000_000, CachedInput: 300_000, CacheWrite: 3_750_000}, l.Rates)
	require.True(t, l.Prefix)
	require.Len(t, tb.Lines(), 3)
}

// A quoted price is decimal text too; yaml's own number forms are not read as
// numbers first (that would go through a float).
func TestParseQuotedAndYAMLNumberForms(t *testing.T) {
	t.Parallel()
	tb := parse(t, strings.Replace(small, "input: 0.15", `input: "0.15"`, 1))
	l, _ := tb.Lookup("openai", "gpt-4o-mini")
	require.Equal(t, llm.Money(150_000), l.Input)
	for _, bad := range []string{"1e3", "0x10", ".inf", ".nan", "0o17", "1_0"} {
		_, err := pricing.Parse([]byte(strings.Replace(small, "input: 0.15", "input: "+bad, 1)))
		require.ErrorContains(t, err, "models[1] (line 11) openai/gpt-4o-mini: input (line 13)", bad)
	}
}

func TestLookup(t *testing.T) {
	t.Parallel()
	tb := parse(t, small)
	for _, tc := range []struct {
		provider, model string
		want            string // the line's model; "" for unpriced
	}{
		{"openai", "gpt-4o", "gpt-4o"},
		{"openai", "gpt-4o-2024-08-06", "gpt-4o"}, // alias
		{"openai", "gpt-4o-mini", "gpt-4o-mini"},
		// gpt-4o is not marked prefix: an unlisted snapshot stays unpriced.
		{"openai", "gpt-4o-2024-11-20", ""},
		// Never another family's price.
		{"openai", "gpt-4o-mini-2024-07-18", ""},
		{"openai", "gpt-4o-minix", ""},
		{"openai", "gpt-4", ""},
		{"openai", "GPT-4O", ""},
		{"openai", "", ""},
		// Provider is part of the key.
		{"azure", "gpt-4o", ""},
		{"anthropic", "gpt-4o", ""},
		// match: prefix takes dated snapshots, and only those.
		{"anthropic", "claude-sonnet-4-5", "claude-sonnet-4-5"},
		{"anthropic", "claude-sonnet-4-5-20250929", "claude-sonnet-4-5"},
		{"anthropic", "claude-sonnet-4-5-2025-09-29", "claude-sonnet-4-5"},
		{"anthropic", "claude-sonnet-4-5-20251399", ""},
		{"anthropic", "claude-sonnet-4-5-latest", ""},
		{"anthropic", "claude-sonnet-4-5-1-20250929", ""},
		{"anthropic", "claude-sonnet-4-20250514", ""},
		{"anthropic", "claude-sonnet-4-5x-20250929", ""},
	} {
		t.Run(tc.provider+"/"+tc.model, func(t *testing.T) {
			t.Parallel()
			l, ok := tb.Lookup(tc.provider, tc.model)
			require.Equal(t, tc.want != "", ok)
			require.Equal(t, tc.want, l.Model)
			_, priced := tb.Cost(tc.provider, tc.model, llm.Usage{InputTokens: 1})
			require.Equal(t, ok, priced)
		})
	}
}

// An exact line wins over a prefix line's snapshot rule: a snapshot priced
// differently gets a line of its own.
func TestExactLineBeatsPrefix(t *testing.T) {
	t.Parallel()
	tb := parse(t, `
currency: USD
as_of: 2026-11-01
models:
  - {provider: openai, model: gpt-4o, input: 2.5, output: 10, match: prefix}
  - {provider: openai, model: gpt-4o-2024-05-13, input: 5, output: 15}
`)
	c, ok := tb.Cost("openai", "gpt-4o-2024-05-13", llm.Usage{InputTokens: 1})
	require.True(t, ok)
	require.Equal(t, llm.Money(5_000_000), c)
	c, ok = tb.Cost("openai", "gpt-4o-2024-08-06", llm.Usage{InputTokens: 1})
	require.True(t, ok)
	require.Equal(t, llm.Money(2_500_000), c)
	_, ok = tb.Cost("openai", "gpt-4o-mini-2024-07-18", llm.Usage{InputTokens: 1})
	require.False(t, ok)
}

func TestCostClasses(t *testing.T) {
	t.Parallel()
	tb := parse(t, small)
	for _, tc := range []struct {
		name            string
		provider, model string
		u               llm.Usage
		want            llm.Money
		ok              bool
	}{
		{"input and output", "openai", "gpt-4o", llm.Usage{InputTokens: 1_000_000, OutputTokens: 1_000_000}, 12_500_000_000_000, true},
		{"one token each", "openai", "gpt-4o-mini", llm.Usage{InputTokens: 1, OutputTokens: 1}, 750_000, true},
		{"cached at cached_input", "openai", "gpt-4o", llm.Usage{InputTokens: 1000, CachedInputTokens: 600}, 400*2_500_000 + 600*1_250_000, true},
		{"openai cache write at input", "openai", "gpt-4o", llm.Usage{InputTokens: 1000, CacheWriteTokens: 1000}, 1000 * 2_500_000, true},
		{"anthropic all classes", "anthropic", "claude-sonnet-4-5-20250929",
			llm.Usage{InputTokens: 10_000, CachedInputTokens: 6_000, CacheWriteTokens: 3_000, OutputTokens: 500},
			1_000*3_000_000 + 6_000*300_000 + 3_000*3_750_000 + 500*15_000_000, true},
		{"inconsistent usage is not negative", "anthropic", "claude-sonnet-4-5",
			llm.Usage{InputTokens: 100, CachedInputTokens: 300, CacheWriteTokens: 300}, 300*300_000 + 300*3_750_000, true},
		{"negative tokens are malformed", "openai", "gpt-4o", llm.Usage{InputTokens: 10, OutputTokens: -1}, 0, false},
		{"unknown model", "openai", "gpt-9", llm.Usage{InputTokens: 10}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, ok := tb.Cost(tc.provider, tc.model, tc.u)
			require.Equal(t, tc.ok, ok)
			require.Equal(t, tc.want, got)
		})
	}
}

// The point of integer picodollars: many calls' costs add up to exactly the
// cost of their summed tokens, class by class.
func TestCostIsExactOverManyCalls(t *testing.T) {
	t.Parallel()
	tb := parse(t, small)
	for _, model := range []string{"gpt-4o", "gpt-4o-mini"} {
		for _, provider := range []string{"openai"} {
			checkExact(t, tb, provider, model)
		}
	}
	checkExact(t, tb, "anthropic", "claude-sonnet-4-5-20250929")
	d := pricing.Default()
	for _, l := range d.Lines() {
		checkExact(t, d, l.Provider, l.Model)
	}
}

func checkExact(t *testing.T, tb *pricing.Table, provider, model string) {
	t.Helper()
	l, ok := tb.Lookup(provider, model)
	require.True(t, ok)
	rng := rand.New(rand.NewPCG(1, 2))
	var sum llm.Money
	var uncached, cached, written, output int64
	for range 100 {
		u := llm.Usage{InputTokens: rng.IntN(200_000), OutputTokens: rng.IntN(32_000)}
		u.CachedInputTokens = rng.IntN(u.InputTokens + 1)
		u.CacheWriteTokens = rng.IntN(u.InputTokens - u.CachedInputTokens + 1)
		c, ok := tb.Cost(provider, model, u)
		require.True(t, ok)
		sum += c
		uncached += int64(u.InputTokens - u.CachedInputTokens - u.CacheWriteTokens)
		cached += int64(u.CachedInputTokens)
		written += int64(u.CacheWriteTokens)
		output += int64(u.OutputTokens)
	}
	want := llm.Money(uncached)*l.Input + llm.Money(cached)*l.CachedInput + llm.Money(written)*l.CacheWrite + llm.Money(output)*l.Output
	require.Equal(t, want, sum, "%s/%s", provider, model)
}

func TestNilTable(t *testing.T) {
	t.Parallel()
	var tb *pricing.Table
	c, ok := tb.Cost("openai", "gpt-4o", llm.Usage{InputTokens: 1})
	require.False(t, ok)
	require.Zero(t, c)
	_, ok = tb.Lookup("openai", "gpt-4o")
	require.False(t, ok)
	require.Nil(t, tb.Lines())
	require.True(t, tb.AsOf().IsZero())
}

func TestDefault(t *testing.T) {
	t.Parallel()
	d := pricing.Default()
	require.False(t, d.AsOf().IsZero())
	require.Contains(t, string(pricing.DefaultYAML()), "FROM MEMORY")
	for _, tc := range []struct {
		provider, model string
		line            string
	}{
		{"openai", "gpt-4o", "gpt-4o"},
		{"openai", "gpt-4o-2024-08-06", "gpt-4o"},
		{"openai", "gpt-4o-2024-05-13", "gpt-4o-2024-05-13"},
		{"openai", "gpt-4o-mini", "gpt-4o-mini"},
		{"openai", "gpt-4o-mini-2024-07-18", "gpt-4o-mini"},
		{"openai", "gpt-4.1", "gpt-4.1"},
		{"openai", "gpt-4.1-mini", "gpt-4.1-mini"},
		{"openai", "gpt-4.1-nano-2025-04-14", "gpt-4.1-nano"},
		{"openai", "o3", "o3"},
		{"openai", "o4-mini", "o4-mini"},
		{"openai", "gpt-5", "gpt-5"},
		{"openai", "gpt-5-mini", "gpt-5-mini"},
		{"openai", "gpt-5-mini-2025-08-07", "gpt-5-mini"},
		{"anthropic", "claude-sonnet-4-5-20250929", "claude-sonnet-4-5"},
		{"anthropic", "claude-sonnet-4-20250514", "claude-sonnet-4"},
		{"anthropic", "claude-sonnet-4-0", "claude-sonnet-4"},
		{"anthropic", "claude-opus-4-1-20250805", "claude-opus-4-1"},
		{"anthropic", "claude-opus-4-20250514", "claude-opus-4"},
		{"anthropic", "claude-opus-4-5-20251101", "claude-opus-4-5"},
		{"anthropic", "claude-haiku-4-5-20251001", "claude-haiku-4-5"},
		{"anthropic", "claude-3-5-haiku-20241022", "claude-3-5-haiku"},
		{"anthropic", "claude-3-5-haiku-latest", "claude-3-5-haiku"},
	} {
		l, ok := d.Lookup(tc.provider, tc.model)
		require.True(t, ok, "%s/%s", tc.provider, tc.model)
		require.Equal(t, tc.line, l.Model, "%s/%s", tc.provider, tc.model)
	}
	for _, l := range d.Lines() {
		require.Positive(t, l.Input, l.Model)
		require.Positive(t, l.Output, l.Model)
		require.LessOrEqual(t, l.CachedInput, l.Input, l.Model)
		if l.Provider == "anthropic" {
			// Anthropic: 5-minute cache write 1.25× input, cache read 0.1×.
			require.Equal(t, l.Input*5/4, l.CacheWrite, l.Model)
			require.Equal(t, l.Input/10, l.CachedInput, l.Model)
		}
		if l.Provider == "openai" {
			require.Equal(t, l.Input, l.CacheWrite, l.Model)
		}
	}
	gpt4o, _ := d.Lookup("openai", "gpt-4o")
	mini, _ := d.Lookup("openai", "gpt-4o-mini")
	require.NotEqual(t, gpt4o.Rates, mini.Rates)
}

func TestLoad(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "prices.yaml")
	require.NoError(t, os.WriteFile(path, []byte(small), 0o600))
	tb, err := pricing.Load(path)
	require.NoError(t, err)
	require.Len(t, tb.Lines(), 3)

	_, err = pricing.Load(filepath.Join(dir, "missing.yaml"))
	require.Error(t, err)

	bad := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte(strings.Replace(small, "currency: USD", "currency: EUR", 1)), 0o600))
	_, err = pricing.Load(bad)
	require.ErrorContains(t, err, bad)
	require.ErrorContains(t, err, "US dollars")
}

func TestMerge(t *testing.T) {
	t.Parallel()
	over := parse(t, `
currency: USD
as_of: 2026-10-15
models:
  - provider: openai
    model: gpt-4o
    input: 2.00
    output: 8.00
  - provider: local
    model: llama
    input: 0
    output: 0
`)
	m, err := pricing.Merge(pricing.Default(), over)
	require.NoError(t, err)

	// over's line replaces base's whole, aliases included.
	c, ok := m.Cost("openai", "gpt-4o", llm.Usage{InputTokens: 1, CachedInputTokens: 1})
	require.True(t, ok)
	require.Equal(t, llm.Money(2_000_000), c)
	_, ok = m.Cost("openai", "gpt-4o-2024-08-06", llm.Usage{InputTokens: 1})
	require.False(t, ok)
	l, ok := m.Lookup("openai", "gpt-4o")
	require.True(t, ok)
	require.Equal(t, time.Date(2026, 10, 15, 0, 0, 0, 0, time.UTC), l.AsOf)

	// base's other lines stay, with their own date; over's new ones are added.
	l, ok = m.Lookup("openai", "gpt-4o-mini-2024-07-18")
	require.True(t, ok)
	require.Equal(t, pricing.Default().AsOf(), l.AsOf)
	c, ok = m.Cost("local", "llama", llm.Usage{InputTokens: 1000, OutputTokens: 1000})
	require.True(t, ok)
	require.Zero(t, c)
	require.Len(t, m.Lines(), len(pricing.Default().Lines())+1)

	// The table's date is its stalest line's.
	require.Equal(t, pricing.Default().AsOf(), m.AsOf())

	// A nil side is empty.
	m, err = pricing.Merge(nil, over)
	require.NoError(t, err)
	require.Equal(t, over.Lines(), m.Lines())
	m, err = pricing.Merge(over, nil)
	require.NoError(t, err)
	require.Equal(t, over.Lines(), m.Lines())
}

func TestMergeRefusesClashes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, over, err string
	}{
		{"alias names a base model", `{provider: openai, model: gpt-4o-new, input: 1, output: 1, aliases: [gpt-4o-mini]}`,
			`over models[0] (line 4) openai/gpt-4o-new: aliases[0]: "gpt-4o-mini" is the model of base models[`},
		{"alias names a base alias", `{provider: openai, model: gpt-4o-new, input: 1, output: 1, aliases: [gpt-4o-2024-08-06]}`,
			`"gpt-4o-2024-08-06" is already an alias of gpt-4o`},
		{"model names a base alias", `{provider: openai, model: gpt-4o-2024-08-06, input: 1, output: 1}`,
			`openai/gpt-4o: aliases[0]: "gpt-4o-2024-08-06" is the model of over models[0] (line 4)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			over := parse(t, "currency: USD\nas_of: 2026-11-01\nmodels:\n  - "+tc.over+"\n")
			_, err := pricing.Merge(pricing.Default(), over)
			require.ErrorContains(t, err, "pricing: merge: ")
			require.ErrorContains(t, err, tc.err)
		})
	}
}

func TestParseRefuses(t *testing.T) {
	t.Parallel()
	const head = "currency: USD\nas_of: 2026-11-01\nmodels:\n"
	const ok = "  - {provider: openai, model: gpt-4o, input: 2.5, output: 10}\n"
	for _, tc := range []struct {
		name, text, err string
	}{
		{"empty", "", "empty price table"},
		{"not yaml", "currency: [", "pricing: yaml"},
		{"unknown top field", head + ok + "vendor: x\n", "field vendor not found"},
		{"unknown line field", head + "  - {provider: openai, model: gpt-4o, input: 2.5, output: 10, cache_read: 1}\n", "field cache_read not found"},
		{"two documents", head + ok + "---\n" + head + ok, "one YAML document"},
		{"no currency", "as_of: 2026-11-01\nmodels:\n" + ok, "currency: missing"},
		{"euro", "currency: EUR\nas_of: 2026-11-01\nmodels:\n" + ok, `currency (line 1): "EUR" is not supported: llm.Money is in US dollars`},
		{"lower usd", "currency: usd\nas_of: 2026-11-01\nmodels:\n" + ok, `"usd" is not supported`},
		{"no as_of", "currency: USD\nmodels:\n" + ok, "as_of: missing"},
		{"bad as_of", "currency: USD\nas_of: 2026-13-01\nmodels:\n" + ok, `as_of (line 2): "2026-13-01" is not a date`},
		{"as_of with time", "currency: USD\nas_of: 2026-11-01T10:00:00Z\nmodels:\n" + ok, "is not a date"},
		{"as_of a list", "currency: USD\nas_of: [2026]\nmodels:\n" + ok, "line 2: want a single value"},
		{"no models", head, "models: no model lines"},
		{"no provider", head + ok + "  - {model: gpt-4o-mini, input: 1, output: 1}\n", "models[1] (line 5): provider: missing"},
		{"empty provider", head + "  - {provider: '', model: x, input: 1, output: 1}\n", "models[0] (line 4): provider: missing"},
		{"no model", head + "  - {provider: openai, input: 1, output: 1}\n", "models[0] (line 4): model: missing"},
		{"no input", head + "  - {provider: openai, model: x, output: 1}\n", "models[0] (line 4) openai/x: input: missing"},
		{"null output", head + "  - provider: openai\n    model: x\n    input: 1\n    output:\n", "models[0] (line 4) openai/x: output: missing"},
		{"negative input", head + "  - {provider: openai, model: x, input: -1, output: 1}\n", `models[0] (line 4) openai/x: input (line 4): price "-1" is negative`},
		{"absurd output", head + "  - provider: openai\n    model: x\n    input: 1\n    output: 10000.01\n", `models[0] (line 4) openai/x: output (line 7): price "10000.01" is above $10000`},
		{"too precise cached", head + "  - {provider: openai, model: x, input: 1, output: 1, cached_input: 0.0000001}\n", "cached_input (line 4): price \"0.0000001\" has more than 6 decimals"},
		{"exponent cache_write", head + "  - {provider: openai, model: x, input: 1, output: 1, cache_write: 1e3}\n", `cache_write (line 4): price "1e3" is not a plain decimal`},
		{"price a list", head + "  - {provider: openai, model: x, input: [1], output: 1}\n", "want a single value"},
		{"bad match", head + "  - {provider: openai, model: x, input: 1, output: 1, match: glob}\n", `match (line 4): "glob"`},
		{"duplicate line", head + ok + ok, "models[1] (line 5): openai/gpt-4o is already priced by models[0] (line 4)"},
		{"alias names another model", head + ok + "  - {provider: openai, model: x, input: 1, output: 1, aliases: [gpt-4o]}\n", `models[1] (line 5) openai/x: aliases[0]: "gpt-4o" is the model of models[0] (line 4)`},
		{"alias twice", head + "  - {provider: openai, model: x, input: 1, output: 1, aliases: [a]}\n  - {provider: openai, model: y, input: 1, output: 1, aliases: [a]}\n", `models[1] (line 5) openai/y: aliases[0]: "a" is already an alias of x`},
		{"alias twice on a line", head + "  - {provider: openai, model: x, input: 1, output: 1, aliases: [a, a]}\n", `aliases[1]: "a" is already an alias of x`},
		{"alias is own model", head + "  - {provider: openai, model: x, input: 1, output: 1, aliases: [x]}\n", `aliases[0]: "x" is the line's own model`},
		{"empty entry", head + "  - {}\n", "models[0] (line 4): provider: missing"},
		{"entry line is its first key's", head + ok + "  - model: x\n    provider: openai\n    output: 1\n", "models[1] (line 5) openai/x: input: missing"},
		{"key twice", head + "  - {provider: openai, model: x, input: 1, input: 2, output: 1}\n", `mapping key "input" already defined`},
		{"model with a space", head + "  - {provider: openai, model: 'gpt-4o ', input: 1, output: 1}\n", `models[0] (line 4): model (line 4): "gpt-4o " has spaces`},
		{"alias with a tab", head + "  - {provider: openai, model: x, input: 1, output: 1, aliases: [\"a\\tb\"]}\n", `aliases[0] (line 4): "a\tb" has spaces`},
		{"empty alias", head + "  - {provider: openai, model: x, input: 1, output: 1, aliases: ['']}\n", "aliases[0] (line 4): empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := pricing.Parse([]byte(tc.text))
			require.ErrorContains(t, err, tc.err)
		})
	}
}

// One model name may be priced by two providers: the key is provider+model.
func TestSameModelTwoProviders(t *testing.T) {
	t.Parallel()
	tb := parse(t, `
currency: USD
as_of: 2026-11-01
models:
  - {provider: openai, model: gpt-4o, input: 2.5, output: 10}
  - {provider: azure, model: gpt-4o, input: 2.75, output: 11}
`)
	a, _ := tb.Cost("openai", "gpt-4o", llm.Usage{InputTokens: 1})
	b, _ := tb.Cost("azure", "gpt-4o", llm.Usage{InputTokens: 1})
	require.Equal(t, llm.Money(2_500_000), a)
	require.Equal(t, llm.Money(2_750_000), b)
}
