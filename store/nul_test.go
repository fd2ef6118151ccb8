package store_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/store"
)

func TestHasNUL(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		want bool
	}{
		{`{"a":"b"}`, false},
		{`{"a":"\u0000"}`, true},
		{`{"a":"x\u0000y"}`, true},
		{`{"a":"\\u0000"}`, false},   // a backslash, then the text u0000
		{`{"a":"\\\u0000"}`, true},   // a backslash, then NUL
		{`{"a":"\\\\u0000"}`, false}, // two backslashes, then the text
		{`{"a":"\u00001"}`, true},
		{"{\"a\":\"\x00\"}", true},
		{`\u0000`, true},
		{`{"a":"\u0001"}`, false},
		{`{"a":"\\u0000 and \u0000"}`, true},
	}
	for _, tc := range cases {
		require.Equal(t, tc.want, store.HasNUL([]byte(tc.in)), tc.in)
	}
}
