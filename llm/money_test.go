package llm_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/llm"
)

func TestParseDollars(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want llm.Money
		err  string
	}{
		{in: "0.50", want: 500_000_000_000},
		{in: "$12", want: 12_000_000_000_000},
		{in: "0.000001", want: 1_000_000},
		{in: "0.000000000001", want: 1},
		{in: ".5", want: 500_000_000_000},
		{in: "5.", want: 5_000_000_000_000},
		{in: "1000000", want: 1_000_000_000_000_000_000},
		{in: "0001.25", want: 1_250_000_000_000},
		{in: "1000000.01", err: "above"},
		{in: "99999999999999999999", err: "above"},
		{in: "0.0000000000001", err: "12 decimals"},
		{in: "-1", err: "plain decimal"},
		{in: "1e3", err: "plain decimal"},
		{in: "1,000", err: "plain decimal"},
		{in: "NaN", err: "plain decimal"},
		{in: "", err: "want dollars"},
		{in: ".", err: "want dollars"},
		{in: "1.2.3", err: "plain decimal"},
	} {
		got, err := llm.ParseDollars(tc.in)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, got, tc.in)
	}
}

func TestMoneyString(t *testing.T) {
	t.Parallel()
	require.Equal(t, "$0.001234", llm.Money(1_234_000_000).String())
	require.Equal(t, "$2.500000", llm.Money(2_500_000_000_000).String())
}
