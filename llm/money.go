package llm

import (
	"fmt"
	"strings"
)

// MaxDollars bounds an amount ParseDollars accepts: a budget or a price above
// it is a typo, and it keeps every sum far from int64's range.
const MaxDollars = 1_000_000

// ParseDollars reads a decimal amount of dollars ("0.50", "12", "0.000001")
// exactly into Money, without going through a float: at most 12 decimals (a
// picodollar), no sign, exponent or separators, at most MaxDollars.
func ParseDollars(s string) (Money, error) {
	t := strings.TrimPrefix(strings.TrimSpace(s), "$")
	whole, frac, dot := strings.Cut(t, ".")
	if whole == "" && frac == "" || dot && frac == "" && whole == "" {
		return 0, fmt.Errorf("amount %q: want dollars as a decimal such as 0.50", s)
	}
	if !digits(whole) || !digits(frac) {
		return 0, fmt.Errorf("amount %q: want dollars as a plain decimal such as 0.50 (no sign, exponent or separators)", s)
	}
	if len(frac) > 12 {
		return 0, fmt.Errorf("amount %q: more than 12 decimals (a picodollar is the smallest unit)", s)
	}
	whole = strings.TrimLeft(whole, "0")
	if len(whole) > 7 {
		return 0, fmt.Errorf("amount %q: above %d dollars", s, MaxDollars)
	}
	var m int64
	for _, c := range whole {
		m = m*10 + int64(c-'0')
	}
	if m > MaxDollars {
		return 0, fmt.Errorf("amount %q: above %d dollars", s, MaxDollars)
	}
	frac += strings.Repeat("0", 12-len(frac))
	var f int64
	for _, c := range frac {
		f = f*10 + int64(c-'0')
	}
	m = m*1e12 + f
	if m > MaxDollars*1e12 {
		return 0, fmt.Errorf("amount %q: above %d dollars", s, MaxDollars)
	}
	return Money(m), nil
}

func digits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
