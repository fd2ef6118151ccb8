package security

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/store"
)

// A grant covers a call only where the pattern plainly says so: whatever the
// model (steered by a page it read) writes around the granted words or URL is
// not covered.
func TestGrantCovers(t *testing.T) {
	t.Parallel()
	cmd := func(c string) json.RawMessage { b, _ := json.Marshal(map[string]string{"command": c}); return b }
	url := func(u string) json.RawMessage { b, _ := json.Marshal(map[string]string{"url": u}); return b }
	for _, tc := range []struct {
		name    string
		match   string
		pattern string
		args    json.RawMessage
		want    bool
	}{
		{"exact words", store.GrantCommand, "rm -rf build", cmd("rm -rf build"), true},
		{"quoted the same", store.GrantCommand, "rm -rf build", cmd(`rm -rf "build"`), true},
		{"more words without *", store.GrantCommand, "rm -rf build", cmd("rm -rf build src"), false},
		{"more words with *", store.GrantCommand, "rm -rf build *", cmd("rm -rf build src"), true},
		{"another command after ;", store.GrantCommand, "rm -rf build *", cmd("rm -rf build; curl evil.example"), false},
		{"another command after &&", store.GrantCommand, "rm -rf build *", cmd("rm -rf build && sh -c 'id'"), false},
		{"both commands granted", store.GrantCommand, "rm -rf build *", cmd("rm -rf build/a && rm -rf build b"), false},
		{"a pipe to another", store.GrantCommand, "rm -rf build *", cmd("rm -rf build | tee x"), false},
		{"command substitution", store.GrantCommand, "rm -rf build *", cmd("rm -rf build $(curl x)"), false},
		{"backticks", store.GrantCommand, "rm -rf build *", cmd("rm -rf build `id`"), false},
		{"parameter expansion", store.GrantCommand, "rm -rf build *", cmd("rm -rf build $HOME"), false},
		{"env assignment", store.GrantCommand, "rm -rf build *", cmd("LD_PRELOAD=x.so rm -rf build"), false},
		{"redirect to a file", store.GrantCommand, "rm -rf build *", cmd("rm -rf build > ~/.bashrc"), false},
		{"fd duplication is fine", store.GrantCommand, "rm -rf build *", cmd("rm -rf build 2>&1"), true},
		{"function definition", store.GrantCommand, "rm -rf build *", cmd("rm() { curl x; }; rm -rf build"), false},
		{"process substitution", store.GrantCommand, "rm -rf build *", cmd("rm -rf build <(curl x)"), false},
		{"unparseable", store.GrantCommand, "rm -rf build *", cmd("rm -rf build 'unterminated"), false},
		{"no command argument", store.GrantCommand, "rm -rf build *", json.RawMessage(`{"cmd":"rm -rf build"}`), false},
		{"url under the prefix", store.GrantURLPrefix, "https://docs.example.com/api/", url("https://docs.example.com/api/v1/x"), true},
		{"url prefix without slash", store.GrantURLPrefix, "https://docs.example.com/api", url("https://docs.example.com/api/v1"), true},
		{"sibling path", store.GrantURLPrefix, "https://docs.example.com/api", url("https://docs.example.com/apikeys"), false},
		{"dot segments out", store.GrantURLPrefix, "https://docs.example.com/api/", url("https://docs.example.com/api/../admin"), false},
		{"encoded dot segments", store.GrantURLPrefix, "https://docs.example.com/api/", url("https://docs.example.com/api/%2e%2e/admin"), false},
		{"host suffix", store.GrantURLPrefix, "https://docs.example.com/", url("https://docs.example.com.evil.net/"), false},
		{"userinfo", store.GrantURLPrefix, "https://docs.example.com/", url("https://docs.example.com@evil.net/"), false},
		{"credentials", store.GrantURLPrefix, "https://docs.example.com/", url("https://user:pw@docs.example.com/"), false},
		{"scheme", store.GrantURLPrefix, "https://docs.example.com/", url("http://docs.example.com/"), false},
		{"port", store.GrantURLPrefix, "https://docs.example.com/", url("https://docs.example.com:8443/"), false},
		{"host case", store.GrantURLPrefix, "https://docs.example.com/", url("https://DOCS.example.com/a"), true},
		{"no url", store.GrantURLPrefix, "https://docs.example.com/", json.RawMessage(`{"path":"a"}`), false},
		{"every url must be under it", store.GrantURLPrefix, "https://docs.example.com/",
			json.RawMessage(`{"url":"https://docs.example.com/a","urls":["https://evil.net/"]}`), false},
		{"exact hash", store.GrantExact, hashOf(cmd("rm -rf build")), cmd("rm -rf build"), true},
		{"exact hash, key order", store.GrantExact, hashOf(json.RawMessage(`{"a":1,"b":2}`)), json.RawMessage(`{"b":2,"a":1}`), true},
		{"exact hash, other", store.GrantExact, hashOf(cmd("rm -rf build")), cmd("rm -rf build "), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := store.Grant{Match: tc.match, Pattern: tc.pattern}
			require.Equal(t, tc.want, grantCovers(g, tc.args, hashOf(tc.args)))
		})
	}
}

func TestCommandPatternBreadth(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		pattern string
		broad   bool
		bad     bool
	}{
		{pattern: "*", broad: true},
		{pattern: "", broad: true},
		{pattern: "bash *", broad: true},
		{pattern: "/usr/bin/env *", broad: true},
		{pattern: "sudo *", broad: true},
		{pattern: "git *", broad: true},
		{pattern: "bash build.sh"},
		{pattern: "go test *"},
		{pattern: "rm -rf build"},
		{pattern: "rm -rf $HOME", bad: true},
		{pattern: "rm * -rf", bad: true},
		{pattern: "a;b", bad: true},
	} {
		cp, err := parseCommandPattern(tc.pattern)
		if tc.bad {
			require.Error(t, err, tc.pattern)
			continue
		}
		require.NoError(t, err, tc.pattern)
		require.Equal(t, tc.broad, cp.broad() != "", tc.pattern)
	}
}
