// Package defaults holds the one helper the packages' Config.WithDefaults
// methods share that the standard library lacks. A zero that means "unset" is
// cmp.Or(c.X, DefaultX); Positive is for the numbers whose every value ≤ 0
// means "unset", so that a negative one takes the default as well.
//
// It imports only the standard library, so every package of the module may
// import it, the floors (confine, egress, queue) included.
package defaults

// Positive returns v when it is above zero and d otherwise. WithDefaults
// methods fill a limit, a size or a duration with it where a negative value
// is as meaningless as zero: cmp.Or would keep the negative one.
func Positive[T ~int | ~int32 | ~int64 | ~float64](v, d T) T {
	if v <= 0 {
		return d
	}
	return v
}
