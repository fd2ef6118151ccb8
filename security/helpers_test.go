package security_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/egress"
)

// newDLP is the gate's DLP with the default rules.
func newDLP(t testing.TB) *egress.DLP {
	t.Helper()
	d, err := egress.NewDLP()
	require.NoError(t, err)
	return d
}
