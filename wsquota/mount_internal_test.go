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

func TestHumanBytes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		n, ref int64
		want   string
	}{
		{0, 0, "0 B"},
		{512, 512, "512 B"},
		{1536, 1536, "1.5 KiB"},
		{16 << 20, 16 << 20, "16.0 MiB"},
		{1<<30 - 1<<20, 1 << 30, "1.0 GiB"}, // used shown in the limit's unit
		{15_800_000, 16 << 20, "15.1 MiB"},
		{1 << 60, 1 << 60, "1024.0 PiB"},
		{-(1 << 20), 1 << 20, "-1.0 MiB"},
	}
	for _, c := range cases {
		require.Equal(t, c.want, inUnitOf(c.n, c.ref), "%d in the unit of %d", c.n, c.ref)
	}
}
