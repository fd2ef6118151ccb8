package metrics_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/metrics"
)

func TestLabelSetMapsUnknownValuesToOther(t *testing.T) {
	t.Parallel()
	s := metrics.NewLabelSet("gpt-4o-mini", "")
	s.Add("claude-sonnet-4-5")
	cases := []struct{ in, want string }{
		{"gpt-4o-mini", "gpt-4o-mini"},
		{"claude-sonnet-4-5", "claude-sonnet-4-5"},
		{"", metrics.OtherLabel},
		{strings.Repeat("m", 2000), metrics.OtherLabel},
		{"gpt-4o-mini ", metrics.OtherLabel},
	}
	for _, tc := range cases {
		require.Equal(t, tc.want, s.Value(tc.in), "%.40q", tc.in)
	}
	var nilSet *metrics.LabelSet
	require.Equal(t, metrics.OtherLabel, nilSet.Value("x"))
}
