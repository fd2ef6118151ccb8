package egress_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/egress"
)

// The examples of RFC 8785: section 3.2.2 (values), 3.2.3 (sorting) and appendix B
// (numbers).
func TestCanonicalizeRFC8785(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, in, want string }{
		{"3.2.2 value serialization",
			`{
  "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}`,
			`{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`},
		{"3.2.3 sorting by UTF-16 code units",
			`{
  "\u20ac": "Euro Sign",
  "\r": "Carriage Return",
  "\ufb33": "Hebrew Letter Dalet With Dagesh",
  "1": "One",
  "\ud83d\ude00": "Emoji: Grinning Face",
  "\u0080": "Control",
  "\u00f6": "Latin Small Letter O With Diaeresis"
}`,
			"{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u0080\":\"Control\",\"ö\":\"Latin Small Letter O With Diaeresis\"," +
				"\"€\":\"Euro Sign\",\"😀\":\"Emoji: Grinning Face\",\"\ufb33\":\"Hebrew Letter Dalet With Dagesh\"}"},
		{"nested objects sorted, arrays kept in order",
			`{"b": [3, {"z": 1, "a": 2}], "a": {"y": "x", "x": "y"}}`,
			`{"a":{"x":"y","y":"x"},"b":[3,{"a":2,"z":1}]}`},
		{"scalar top level", ` "x" `, `"x"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := egress.Canonicalize([]byte(tc.in))
			require.NoError(t, err)
			require.Equal(t, tc.want, string(got))
		})
	}
}

func TestCanonicalNumberRFC8785AppendixB(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		bits uint64
		want string
	}{
		{0x0000000000000000, "0"},
		{0x8000000000000000, "0"},
		{0x0000000000000001, "5e-324"},
		{0x8000000000000001, "-5e-324"},
		{0x7fefffffffffffff, "1.7976931348623157e+308"},
		{0xffefffffffffffff, "-1.7976931348623157e+308"},
		{0x4340000000000000, "9007199254740992"},
		{0xc340000000000000, "-9007199254740992"},
		{0x4430000000000000, "295147905179352830000"},
		{0x44b52d02c7e14af5, "9.999999999999997e+22"},
		{0x44b52d02c7e14af6, "1e+23"},
		{0x44b52d02c7e14af7, "1.0000000000000001e+23"},
		{0x444b1ae4d6e2ef4e, "999999999999999700000"},
		{0x444b1ae4d6e2ef4f, "999999999999999900000"},
		{0x444b1ae4d6e2ef50, "1e+21"},
		{0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"},
		{0x3eb0c6f7a0b5ed8d, "0.000001"},
		{0x41b3de4355555553, "333333333.3333332"},
		{0x41b3de4355555554, "333333333.33333325"},
		{0x41b3de4355555555, "333333333.3333333"},
		{0x41b3de4355555556, "333333333.3333334"},
		{0x41b3de4355555557, "333333333.33333343"},
		{0xbecbf647612f3696, "-0.0000033333333333333333"},
		{0x43143ff3c1cb0959, "1424953923781206.2"},
	} {
		got, err := egress.CanonicalNumber(math.Float64frombits(tc.bits))
		require.NoError(t, err, "%016x", tc.bits)
		require.Equal(t, tc.want, got, "%016x", tc.bits)
	}
	for _, bits := range []uint64{0x7fffffffffffffff, 0x7ff0000000000000, 0xfff0000000000000} {
		_, err := egress.CanonicalNumber(math.Float64frombits(bits))
		require.ErrorIs(t, err, egress.ErrNotCanonicalizable, "NaN and infinities have no JSON form")
	}
}

func TestCanonicalizeRefuses(t *testing.T) {
	t.Parallel()
	for name, in := range map[string]string{
		"duplicate key":       `{"command": "ls", "command": "rm -rf /"}`,
		"nested duplicate":    `{"a": {"k": 1, "k": 2}}`,
		"number out of range": `{"n": 1e400}`,
		"syntax":              `{"a": }`,
		"trailing data":       `{} {}`,
		"empty":               ``,
	} {
		_, err := egress.Canonicalize([]byte(in))
		require.ErrorIs(t, err, egress.ErrNotCanonicalizable, name)
	}
}

// The hash binds the value, not its spelling: key order, whitespace, escapes and
// number forms that jsonb or a client may change do not change it; any change of
// a value does.
func TestArgsHashBindsTheValue(t *testing.T) {
	t.Parallel()
	base, err := egress.ArgsHash([]byte(`{"command":"ls -la","timeout":30}`))
	require.NoError(t, err)
	for _, same := range []string{
		`{"timeout": 30, "command": "ls -la"}`,
		`{"command":"ls\u0020-la","timeout":3.0e1}`,
		"{\n\t\"command\" : \"ls -la\" , \"timeout\" : 30.000 }",
	} {
		h, err := egress.ArgsHash([]byte(same))
		require.NoError(t, err)
		require.Equal(t, base, h, same)
	}
	for _, other := range []string{
		`{"command":"ls -la ","timeout":30}`,
		`{"command":"ls -la","timeout":31}`,
		`{"command":"ls -la","timeout":"30"}`,
		`{"command":"ls -la","timeout":30,"cwd":"/"}`,
	} {
		h, err := egress.ArgsHash([]byte(other))
		require.NoError(t, err)
		require.NotEqual(t, base, h, other)
	}
	empty, err := egress.ArgsHash(nil)
	require.NoError(t, err)
	obj, err := egress.ArgsHash([]byte(`{}`))
	require.NoError(t, err)
	require.Equal(t, obj, empty, "absent arguments are the empty object")
	require.Len(t, base, 64)
}
