package workspace

import (
	"errors"
	"io/fs"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestApplyEdit(t *testing.T) {
	t.Parallel()
	goFile := "package main\n\nfunc main() {\n\tif ok {\n\t\treturn\n\t}\n}\n"
	five := "one\ntwo\nthree\nfour\nfive\n"
	cases := []struct {
		name    string
		content string
		missing bool
		e       edit
		want    string
		err     error
		msg     []string // substrings of the summary or the error
	}{
		// Exact match first.
		{name: "exact single match", content: five, e: edit{Search: "three", Replace: "THREE"},
			want: "one\ntwo\nTHREE\nfour\nfive\n", msg: []string{"1 exact match at line 3"}},
		{name: "exact match spanning lines", content: five, e: edit{Search: "two\nthree\n", Replace: "2\n3\n"},
			want: "one\n2\n3\nfour\nfive\n"},
		{name: "exact match wins over whitespace-tolerant ones", content: "a  b\na b\n", e: edit{Search: "a b", Replace: "X"},
			want: "a  b\nX\n"},
		{name: "several exact matches are all replaced", content: "x = 1\ny = 1\nz = 2\n", e: edit{Search: "= 1", Replace: "= 10"},
			want: "x = 10\ny = 10\nz = 2\n", msg: []string{"2 exact matches (lines 1, 2)"}},
		{name: "multi-match whose insertions outweigh the text is refused", content: "}\n}\n}\n",
			e:   edit{Search: "}", Replace: "}\n\nfunc helper() { return }\n"},
			err: ErrOutweigh, msg: []string{"matches 3 times (lines 1, 2, 3)", "refused rather than repeated", "start_line/end_line"}},
		{name: "multi-match at exactly the file's weight is allowed", content: "ab ab", e: edit{Search: "ab", Replace: "xy"},
			want: "xy xy"},

		// Whitespace-tolerant when exact fails, only when it lands in one place.
		{name: "whitespace-tolerant: indentation differs, replacement re-indented", content: goFile,
			e:    edit{Search: "if ok {\n  return\n}", Replace: "if ok {\n  log()\n  return\n}"},
			want: "package main\n\nfunc main() {\n\tif ok {\n\t  log()\n\t  return\n\t}\n}\n", msg: []string{"whitespace-tolerant match at line 4"}},
		{name: "whitespace-tolerant: search indented less than the file", content: "    alpha()\n    beta()\n",
			e: edit{Search: "alpha()\nbeta()\n", Replace: "alpha()\ngamma()\nbeta()\n"}, want: "    alpha()\n    gamma()\n    beta()\n"},
		{name: "whitespace-tolerant: inside a line", content: "call(a,   b)\n", e: edit{Search: "(a, b)", Replace: "(b, a)"},
			want: "call(b, a)\n"},
		{name: "whitespace-tolerant: trailing spaces in the file", content: "x := 1   \ny := 2\n", e: edit{Search: "x := 1\ny := 2", Replace: "x, y := 1, 2"},
			want: "x, y := 1, 2\n"},
		{name: "whitespace-tolerant: deleting lines takes the line break", content: "keep\n  drop me\nkeep too\n", e: edit{Search: "drop   me", Replace: ""},
			want: "keep\nkeep too\n"},
		{name: "whitespace-tolerant: ambiguous is refused", content: "a  b\nc\na   b\n", e: edit{Search: "a b", Replace: "X"},
			err: ErrAmbiguous, msg: []string{"matches 2 places (lines 1, 3)"}},
		{name: "CRLF file: LF search matches, replacement written with CRLF", content: "one\r\ntwo\r\nthree\r\n",
			e: edit{Search: "one\ntwo", Replace: "1\n2"}, want: "1\r\n2\r\nthree\r\n"},

		// Empty search creates a missing file.
		{name: "empty search creates a missing file", missing: true, e: edit{Replace: "new\n"}, want: "new\n", msg: []string{"created"}},
		{name: "empty search fills an existing empty file", content: "", e: edit{Replace: "new\n"}, want: "new\n"},
		{name: "empty search on an existing file needs a range", content: five, e: edit{Replace: "x"},
			err: ErrNeedSearch, msg: []string{"start_line 1 with end_line 5 rewrites the whole file"}},
		{name: "non-empty search on a missing file", missing: true, e: edit{Search: "x", Replace: "y"},
			err: fs.ErrNotExist, msg: []string{"empty search"}},
		{name: "missing file has no line 2", missing: true, e: edit{StartLine: 2, Replace: "x"}, err: ErrBadRange},

		// start_line/end_line replace a range outright…
		{name: "range replaces lines", content: five, e: edit{StartLine: 2, EndLine: 3, Replace: "TWO-THREE"},
			want: "one\nTWO-THREE\nfour\nfive\n", msg: []string{"replaced lines 2-3"}},
		{name: "start_line alone replaces one line", content: five, e: edit{StartLine: 4, Replace: "FOUR\n"},
			want: "one\ntwo\nthree\nFOUR\nfive\n"},
		{name: "end_line alone starts at line 1", content: five, e: edit{EndLine: 2, Replace: "head"},
			want: "head\nthree\nfour\nfive\n"},
		{name: "empty replace deletes the range", content: five, e: edit{StartLine: 2, EndLine: 4},
			want: "one\nfive\n"},
		{name: "end_line past the end is clamped", content: five, e: edit{StartLine: 4, EndLine: 99, Replace: "tail"},
			want: "one\ntwo\nthree\ntail\n"},
		{name: "start_line just past the end appends", content: "a\nb", e: edit{StartLine: 3, Replace: "c"},
			want: "a\nb\nc", msg: []string{"appended"}},
		{name: "start_line past the end", content: five, e: edit{StartLine: 7, Replace: "x"}, err: ErrBadRange, msg: []string{"5 lines"}},
		{name: "end_line before start_line", content: five, e: edit{StartLine: 3, EndLine: 2, Replace: "x"}, err: ErrBadRange},
		{name: "negative line", content: five, e: edit{StartLine: -1, Replace: "x"}, err: ErrBadRange},

		// …or confine the search.
		{name: "range confines the search", content: "x\ny\nx\ny\n", e: edit{Search: "x", Replace: "X", StartLine: 2, EndLine: 4},
			want: "x\ny\nX\ny\n", msg: []string{"line 3"}},
		{name: "a match outside the range does not count", content: "x\ny\nz\n", e: edit{Search: "x", Replace: "X", StartLine: 2, EndLine: 3},
			err: ErrNoMatch, msg: []string{"(lines 2-3)"}},

		// Whole-file rewrite: 1..end with an empty search, no shrink guard.
		{name: "whole-file rewrite", content: five, e: edit{StartLine: 1, EndLine: 5, Replace: "only\n"},
			want: "only\n", msg: []string{"rewrote all"}},
		{name: "whole-file rewrite with end_line past the end, shrinking", content: strings.Repeat("long line of text\n", 500),
			e: edit{StartLine: 1, EndLine: 100000, Replace: "x"}, want: "x"},

		// A miss reports the nearest line, and the whole-file form when the search
		// was most of the file.
		{name: "miss reports the nearest line", content: "package x\n\nfunc f() {\n\tfmt.Println(value)\n}\n",
			e: edit{Search: "fmt.Printn(valeu)", Replace: "x"}, err: ErrNoMatch,
			msg: []string{"nearest line is 4", "fmt.Println(value)"}},
		{name: "miss names the whole-file form when the search was most of the file", content: "alpha\nbeta\ngamma\n",
			e: edit{Search: "alpha\nbeta\ngamma\ndelta\n", Replace: "x"}, err: ErrNoMatch,
			msg: []string{"most of the file", "start_line 1, end_line 3"}},
		{name: "a small miss does not mention the whole-file form", content: strings.Repeat("filler line\n", 50) + "target\n",
			e: edit{Search: "targte", Replace: "x"}, err: ErrNoMatch, msg: []string{"nearest line is 51"}},

		{name: "identical search and replace", content: five, e: edit{Search: "two", Replace: "two"}, err: ErrNoChange},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.e.Path = "f.txt"
			got, summary, err := applyEdit(c.content, !c.missing, c.e)
			if c.err != nil {
				require.ErrorIs(t, err, c.err)
				for _, m := range c.msg {
					require.Contains(t, err.Error(), m)
				}
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.want, got)
			for _, m := range c.msg {
				require.Contains(t, summary, m)
			}
		})
	}
	// The small-miss case must not suggest rewriting the file.
	_, _, err := applyEdit(strings.Repeat("filler line\n", 50)+"target\n", true, edit{Path: "f", Search: "targte", Replace: "x"})
	require.NotContains(t, err.Error(), "most of the file")
	require.True(t, errors.Is(err, ErrNoMatch))
}

func TestGlobMatch(t *testing.T) {
	t.Parallel()
	cases := []struct {
		pattern, path string
		want          bool
	}{
		{"*.go", "main.go", true},
		{"*.go", "pkg/deep/x.go", true},
		{"*.go", "main.gox", false},
		{"src/*.ts", "src/a.ts", true},
		{"src/*.ts", "src/sub/a.ts", false},
		{"src/**/*.ts", "src/a.ts", true},
		{"src/**/*.ts", "src/sub/deeper/a.ts", true},
		{"src/**/*.ts", "lib/a.ts", false},
		{"**/test_*.py", "a/b/test_x.py", true},
		{"./docs/*.md", "docs/readme.md", true},
	}
	for _, c := range cases {
		require.Equal(t, c.want, globMatch(c.pattern, c.path), "%s ~ %s", c.pattern, c.path)
	}
}
