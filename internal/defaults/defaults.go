// Package defaults holds what the packages' Configs share about their defaults
// that the standard library lacks. A zero that means "unset" is
// cmp.Or(c.X, DefaultX); Positive is for the numbers whose every value ≤ 0
// means "unset", so that a negative one takes the default as well; NotNegative
// is Validate's check of a number whose zero takes the default and whose
// negative value is refused.
//
// It imports only the standard library, so every package of the module may
// import it, the floors (confine, egress, queue) included.
package defaults

import "fmt"

// Positive returns v when it is above zero and d otherwise. WithDefaults
// methods fill a limit, a size or a duration with it where a negative value
// is as meaningless as zero: cmp.Or would keep the negative one.
func Positive[T ~int | ~int32 | ~int64 | ~float64](v, d T) T {
	if v <= 0 {
		return d
	}
	return v
}

// NotNegative reports v below zero, naming its configuration key: for a field
// whose zero takes the default (cmp.Or in WithDefaults) a negative value is a
// mistake, not a request for the default. The message is
// "<key>: must not be negative (0 takes the default), got <v>"; nil when v ≥ 0,
// so its result can go straight into the errors a Validate joins.
func NotNegative[T ~int | ~int32 | ~int64 | ~float64](key string, v T) error {
	if v < 0 {
		return fmt.Errorf("%s: must not be negative (0 takes the default), got %v", key, v)
	}
	return nil
}
