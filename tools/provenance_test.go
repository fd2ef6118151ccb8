package tools_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/tools"
)

func TestLabel(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name               string
		reads              []tools.Provenance
		level              tools.Provenance
		private, untrusted bool
		privSources        string
		untrustedSources   string
	}{
		{name: "nothing read", level: tools.Trusted},
		{name: "trusted reads change nothing", reads: []tools.Provenance{tools.Trusted, tools.Trusted}, level: tools.Trusted},
		{name: "private", reads: []tools.Provenance{tools.Private}, level: tools.Private, private: true, privSources: "s0"},
		{name: "untrusted", reads: []tools.Provenance{tools.Untrusted}, level: tools.Untrusted, untrusted: true, untrustedSources: "s0"},
		{
			name: "both, in order", reads: []tools.Provenance{tools.Private, tools.Untrusted, tools.Private},
			level: tools.Untrusted, private: true, untrusted: true, privSources: "s0; s2", untrustedSources: "s1",
		},
		{
			name:  "sources past the bound are counted",
			reads: []tools.Provenance{tools.Untrusted, tools.Untrusted, tools.Untrusted, tools.Untrusted, tools.Untrusted, tools.Untrusted},
			level: tools.Untrusted, untrusted: true, untrustedSources: "s0; s1; s2; s3; and 2 more",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var l tools.Label
			for i, p := range tc.reads {
				l.Add(p, fmt.Sprintf("s%d", i))
			}
			require.Equal(t, tc.level, l.Level())
			require.Equal(t, tc.private, l.Private())
			require.Equal(t, tc.untrusted, l.Untrusted())
			require.Equal(t, tc.privSources, l.PrivateSources())
			require.Equal(t, tc.untrustedSources, l.UntrustedSources())
		})
	}
}

func TestLabelNamesASourceOnce(t *testing.T) {
	t.Parallel()
	var l tools.Label
	l.Add(tools.Untrusted, "web_fetch https://a.example/ (turn 1)")
	l.Add(tools.Untrusted, "web_fetch https://a.example/ (turn 1)")
	require.Equal(t, "web_fetch https://a.example/ (turn 1)", l.UntrustedSources())
	var nilLabel *tools.Label
	require.False(t, nilLabel.Untrusted())
	require.Equal(t, tools.Trusted, nilLabel.Level())
}

func TestParseProvenance(t *testing.T) {
	t.Parallel()
	for _, p := range []tools.Provenance{tools.Trusted, tools.Private, tools.Untrusted} {
		got, err := tools.ParseProvenance(p.String())
		require.NoError(t, err)
		require.Equal(t, p, got)
	}
	got, err := tools.ParseProvenance("")
	require.NoError(t, err)
	require.Equal(t, tools.Trusted, got)
	_, err = tools.ParseProvenance("public")
	require.ErrorContains(t, err, `unknown provenance "public"`)
}
