package pricing

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/llm"
)

func TestParsePrice(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want llm.Money
		err  string // a part of the error; "" for none
	}{
		{in: "0.15", want: 150_000},
		{in: "2.5", want: 2_500_000},
		{in: "2.50", want: 2_500_000},
		{in: "10.00", want: 10_000_000},
		{in: "15", want: 15_000_000},
		{in: "0", want: 0},
		{in: "0.0", want: 0},
		{in: "0.075", want: 75_000},
		{in: "0.000001", want: 1},
		{in: "0.275", want: 275_000},
		{in: "007.5", want: 7_500_000},
		{in: "10000", want: MaxPrice},
		{in: "10000.000000", want: MaxPrice},
		{in: "10000.01", err: "above $10000"},
		{in: "10000.000001", err: "above $10000"},
		{in: "99999", err: "above $10000"},
		{in: "123456789012345678901234567890", err: "above $10000"},
		{in: "0.0000001", err: "more than 6 decimals"},
		{in: "0.1500000", err: "more than 6 decimals"},
		{in: "1e3", err: "not a plain decimal"},
		{in: "1E3", err: "not a plain decimal"},
		{in: "-1", err: "negative"},
		{in: "-0", err: "negative"},
		{in: "+1", err: "not a plain decimal"},
		{in: ".5", err: "digit before the point"},
		{in: "5.", err: "digit after the point"},
		{in: ".", err: "digit before the point"},
		{in: "1.2.3", err: "not a plain decimal"},
		{in: "1_000", err: "not a plain decimal"},
		{in: "1,000", err: "not a plain decimal"},
		{in: " 1", err: "not a plain decimal"},
		{in: "0x10", err: "not a plain decimal"},
		{in: ".nan", err: "not a plain decimal"},
		{in: ".inf", err: "not a plain decimal"},
		{in: "NaN", err: "not a plain decimal"},
		{in: "Inf", err: "not a plain decimal"},
		{in: "", err: "empty"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			got, err := ParsePrice(tc.in)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestFormatPriceRoundTrips(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		p    llm.Money
		want string
	}{{150_000, "0.15"}, {2_500_000, "2.5"}, {15_000_000, "15"}, {1, "0.000001"}, {0, "0"}, {MaxPrice, "10000"}} {
		require.Equal(t, tc.want, FormatPrice(tc.p))
		back, err := ParsePrice(tc.want)
		require.NoError(t, err)
		require.Equal(t, tc.p, back)
	}
}

func TestRatesCost(t *testing.T) {
	t.Parallel()
	r := Rates{Input: 3_000_000, Output: 15_000_000, CachedInput: 300_000, CacheWrite: 3_750_000}
	for _, tc := range []struct {
		name string
		u    llm.Usage
		want llm.Money
		ok   bool
	}{
		{"zero", llm.Usage{}, 0, true},
		{"plain", llm.Usage{InputTokens: 1000, OutputTokens: 100}, 1000*3_000_000 + 100*15_000_000, true},
		{"cached", llm.Usage{InputTokens: 1000, CachedInputTokens: 800, OutputTokens: 10}, 200*3_000_000 + 800*300_000 + 10*15_000_000, true},
		{"write", llm.Usage{InputTokens: 1000, CacheWriteTokens: 900}, 100*3_000_000 + 900*3_750_000, true},
		{"all classes", llm.Usage{InputTokens: 1000, CachedInputTokens: 500, CacheWriteTokens: 400, OutputTokens: 7}, 100*3_000_000 + 500*300_000 + 400*3_750_000 + 7*15_000_000, true},
		{"all input cached", llm.Usage{InputTokens: 500, CachedInputTokens: 500}, 500 * 300_000, true},
		// cached+write > input: billed as reported, no uncached input, never negative.
		{"inconsistent", llm.Usage{InputTokens: 10, CachedInputTokens: 800, CacheWriteTokens: 100}, 800*300_000 + 100*3_750_000, true},
		{"cached over input", llm.Usage{InputTokens: 0, CachedInputTokens: math.MaxInt, CacheWriteTokens: math.MaxInt}, math.MaxInt64, true},
		{"negative input", llm.Usage{InputTokens: -1}, 0, false},
		{"negative output", llm.Usage{OutputTokens: -1}, 0, false},
		{"negative cached", llm.Usage{InputTokens: 10, CachedInputTokens: -5}, 0, false},
		{"negative write", llm.Usage{InputTokens: 10, CacheWriteTokens: -5}, 0, false},
		{"product saturates", llm.Usage{OutputTokens: math.MaxInt}, math.MaxInt64, true},
		{"sum saturates", llm.Usage{InputTokens: math.MaxInt64 / 3_000_000, OutputTokens: math.MaxInt64 / 15_000_000}, math.MaxInt64, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, ok := r.Cost(tc.u)
			require.Equal(t, tc.ok, ok)
			require.Equal(t, tc.want, got)
			require.GreaterOrEqual(t, got, llm.Money(0))
		})
	}
}

func TestTrimSnapshot(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, base string
		ok       bool
	}{
		{"gpt-4o-2024-08-06", "gpt-4o", true},
		{"claude-sonnet-4-5-20250929", "claude-sonnet-4-5", true},
		{"gpt-4o-mini", "", false},
		{"gpt-4o-2024-13-06", "", false},
		{"gpt-4o-20241306", "", false},
		{"gpt-4o-latest", "", false},
		{"-20250929", "", false},
		{"20250929", "", false},
		{"x_20250929", "", false},
	} {
		base, ok := trimSnapshot(tc.in)
		require.Equal(t, tc.ok, ok, tc.in)
		require.Equal(t, tc.base, base, tc.in)
	}
}
