package wsquota

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestUnescapeMountinfo(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		`/data/workspaces/r1`:       "/data/workspaces/r1",
		`/data/my\040workspaces/r1`: "/data/my workspaces/r1",
		`/a\011b\012c\134d`:         "/a\tb\nc\\d",
		`/trailing\04`:              `/trailing\04`,
		`/not\999octal`:             `/not\999octal`,
	}
	for in, want := range cases {
		require.Equal(t, want, unescapeMountinfo(in), in)
	}
}
