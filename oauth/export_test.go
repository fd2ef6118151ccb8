package oauth

import "time"

// SetClock replaces the verifier's clock (the JWKS refetch spacing).
func (v *Verifier) SetClock(now func() time.Time) { v.now = now }
