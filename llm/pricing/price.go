package pricing

import (
	"fmt"
	"math"
	"strings"

	"github.com/aetherium-engine/aetherium/llm"
)

// MaxPrice is the largest price a table accepts, $10,000 per million tokens,
// in picodollars per token. No model is priced near it: a larger number is a
// typo (a misplaced point, a price per token written as per million), and it
// also keeps a call's cost far from overflowing int64.
const MaxPrice llm.Money = 10_000 * 1_000_000

// Decimals is how many decimals a price may have: a price per million tokens
// exact to the microdollar is exact to the picodollar per token, which is
// llm.Money's unit. A seventh decimal could not be represented, so it is
// refused rather than rounded.
const Decimals = 6

// ParsePrice reads a price written in dollars per million tokens ("2.50",
// "0.075", "15") into picodollars per token, exactly: the text is read digit by
// digit, never through a float. Accepted: digits, optionally a point followed by
// 1 to 6 digits, at most MaxPrice. Refused: a sign, an exponent ("1e3"), ".5" and
// "5." (a lone point reads as a typo in a price list), separators ("1_000",
// "1,000"), NaN and infinities, more than 6 decimals.
func ParsePrice(s string) (llm.Money, error) {
	if s == "" {
		return 0, fmt.Errorf("empty price")
	}
	if s[0] == '-' {
		return 0, fmt.Errorf("price %q is negative", s)
	}
	whole, frac, point := strings.Cut(s, ".")
	if !digits(whole) || !digits(frac) {
		return 0, fmt.Errorf("price %q is not a plain decimal: write digits with at most one point and %d decimals (no sign, exponent, separators or quotes)", s, Decimals)
	}
	if whole == "" {
		return 0, fmt.Errorf("price %q needs a digit before the point (0%s)", s, s)
	}
	if point && frac == "" {
		return 0, fmt.Errorf("price %q needs a digit after the point (%s0, or no point)", s, s)
	}
	if len(frac) > Decimals {
		return 0, fmt.Errorf("price %q has more than %d decimals: a price is exact to the microdollar per million tokens", s, Decimals)
	}
	whole = strings.TrimLeft(whole, "0")
	// MaxPrice has 5 whole digits: a longer number is too large, and stopping
	// here keeps the arithmetic below from overflowing.
	if len(whole) > 5 {
		return 0, fmt.Errorf("price %q is above $%d per million tokens", s, MaxPrice/1_000_000)
	}
	var v int64
	for _, c := range whole {
		v = v*10 + int64(c-'0')
	}
	for i := range Decimals {
		v *= 10
		if i < len(frac) {
			v += int64(frac[i] - '0')
		}
	}
	if llm.Money(v) > MaxPrice {
		return 0, fmt.Errorf("price %q is above $%d per million tokens", s, MaxPrice/1_000_000)
	}
	return llm.Money(v), nil
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// FormatPrice writes p (picodollars per token) as dollars per million tokens,
// in the form ParsePrice reads: "2.5", "0.075", "15".
func FormatPrice(p llm.Money) string {
	sign := ""
	if p < 0 {
		sign, p = "-", -p
	}
	whole, frac := p/1_000_000, p%1_000_000
	if frac == 0 {
		return fmt.Sprintf("%s%d", sign, whole)
	}
	return sign + strings.TrimRight(fmt.Sprintf("%d.%06d", whole, frac), "0")
}

// Rates are one model's prices, each in picodollars per token (which is
// microdollars per million tokens).
type Rates struct {
	Input  llm.Money
	Output llm.Money
	// CachedInput is the price of an input token read from the prompt cache.
	CachedInput llm.Money
	// CacheWrite is the price of an input token written to the prompt cache.
	CacheWrite llm.Money
}

// Cost is what usage u costs at r:
//
//	(Input − Cached − Write)×Input + Cached×CachedInput + Write×CacheWrite + Output×Output
//
// A usage with a negative count is malformed: (0, false). A usage whose cached
// and written tokens exceed its input (a provider adapter that forgot to count
// them into InputTokens) bills them as reported and no uncached input, so the
// cost is never negative and never below what the cache classes cost. A
// product or sum past int64 saturates at math.MaxInt64 (about $9.2 million,
// which needs some 10¹⁵ tokens at the dearest price): a budget check then sees
// an absurd cost instead of a wrapped negative one.
func (r Rates) Cost(u llm.Usage) (llm.Money, bool) {
	if u.InputTokens < 0 || u.OutputTokens < 0 || u.CachedInputTokens < 0 || u.CacheWriteTokens < 0 {
		return 0, false
	}
	// Stepwise, so that neither subtraction can go below zero.
	uncached := max(0, u.InputTokens-u.CachedInputTokens)
	uncached = max(0, uncached-u.CacheWriteTokens)
	c := mul(uncached, r.Input)
	c = add(c, mul(u.CachedInputTokens, r.CachedInput))
	c = add(c, mul(u.CacheWriteTokens, r.CacheWrite))
	c = add(c, mul(u.OutputTokens, r.Output))
	return c, true
}

// mul is n×p for n ≥ 0 and p ≥ 0, saturating at math.MaxInt64.
func mul(n int, p llm.Money) llm.Money {
	if n == 0 || p == 0 {
		return 0
	}
	if int64(n) > math.MaxInt64/int64(p) {
		return math.MaxInt64
	}
	return llm.Money(int64(n) * int64(p))
}

// add is a+b for a ≥ 0 and b ≥ 0, saturating at math.MaxInt64.
func add(a, b llm.Money) llm.Money {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
