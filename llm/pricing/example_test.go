package pricing_test

import (
	"context"
	"fmt"

	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/llm/pricing"
)

// A call's cost is exact integer picodollars: tokens of each class times that
// class's price, which the table reads from the decimal text of the file.
func ExampleTable_Cost() {
	table, err := pricing.Parse([]byte(`
currency: USD
as_of: 2026-11-01
models:
  - provider: anthropic
    model: claude-sonnet-4-5
    input: 3.00          # dollars per million tokens
    output: 15.00
    cached_input: 0.30   # cache read
    cache_write: 3.75    # 5-minute cache write
    match: prefix        # also prices claude-sonnet-4-5-YYYYMMDD
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	u := llm.Usage{
		InputTokens:       12_000, // all input, cache included
		CachedInputTokens: 10_000,
		CacheWriteTokens:  1_500,
		OutputTokens:      800,
	}
	cost, priced := table.Cost("anthropic", "claude-sonnet-4-5-20250929", u)
	fmt.Println(priced, int64(cost), cost)

	// 500 uncached × $3/M + 10,000 cached × $0.30/M + 1,500 written × $3.75/M
	// + 800 output × $15/M.
	fmt.Println(500*3_000_000+10_000*300_000+1_500*3_750_000+800*15_000_000 == int64(cost))

	// Another family, or a name the table does not list, is not priced.
	_, priced = table.Cost("anthropic", "claude-sonnet-4-5-latest", u)
	fmt.Println(priced)
	// Output:
	// true 22125000000 $0.022125
	// true
	// false
}

// Meter wraps a provider so that every answer carries its cost.
func ExampleMeter() {
	table := pricing.Default()
	var p llm.Provider = answer{}
	p = pricing.Meter(func() *pricing.Table { return table })(p)
	resp, _ := p.Complete(context.Background(), llm.Request{})
	fmt.Println(resp.Model, resp.Priced, resp.Cost)
	// Output: gpt-4o-mini-2024-07-18 true $0.000750
}

type answer struct{}

func (answer) Name() string { return "openai" }

func (answer) Complete(context.Context, llm.Request) (llm.Response, error) {
	return llm.Response{Model: "gpt-4o-mini-2024-07-18", Usage: llm.Usage{InputTokens: 1000, OutputTokens: 1000}}, nil
}
