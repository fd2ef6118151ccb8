package review_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/review"
)

const good = `{"severity":"major","file":"app.py","line":3,"title":"SQL built by concatenation","detail":"user input reaches the query","suggestion":"use parameters"}`

func TestParse(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		answer string
		n      int
		err    string
	}{
		{"one finding", "[" + good + "]", 1, ""},
		{"empty review", " [] ", 0, ""},
		{"fenced", "```json\n[" + good + "]\n```", 1, ""},
		{"bare fence", "```\n[]\n```", 0, ""},
		{"prose around", "Here is my review: [" + good + "]", 0, "must be a JSON array"},
		{"object not array", good, 0, "must be a JSON array"},
		{"unclosed fence", "```json\n[]", 0, "unclosed code fence"},
		{"truncated", "[" + good, 0, "not a JSON array"},
		{"element not object", `["major"]`, 0, "finding 1: must be an object"},
		{"bad severity", `[` + strings.Replace(good, `"major"`, `"blocker"`, 1) + `]`, 0, `severity "blocker" is not one of`},
		{"line as string", `[` + strings.Replace(good, `"line":3`, `"line":"3"`, 1) + `]`, 0, "finding 1"},
		{"line fractional", `[` + strings.Replace(good, `"line":3`, `"line":3.5`, 1) + `]`, 0, "finding 1"},
		{"negative line", `[` + strings.Replace(good, `"line":3`, `"line":-1`, 1) + `]`, 0, "line -1 is negative"},
		{"missing suggestion", `[{"severity":"nit","file":"a","line":0,"title":"t","detail":"d"}]`, 0, `missing field "suggestion"`},
		{"unknown field", `[` + strings.Replace(good, `"title"`, `"titel"`, 1) + `]`, 0, "unknown field"},
		{"empty file", `[` + strings.Replace(good, `"app.py"`, `" "`, 1) + `]`, 0, "file is empty"},
		{"long title", `[` + strings.Replace(good, `SQL built by concatenation`, strings.Repeat("x", 201), 1) + `]`, 0, "title is 201 bytes"},
		{"second bad", `[` + good + `,{"severity":"nit"}]`, 0, "finding 2"},
		{"too many", "[" + strings.TrimSuffix(strings.Repeat(good+",", review.MaxFindings+1), ",") + "]", 0, "at most 200"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fs, err := review.Parse(tc.answer)
			if tc.err != "" {
				require.ErrorIs(t, err, review.ErrSchema)
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Len(t, fs, tc.n)
		})
	}
}

func TestNewResultOrdersAndCounts(t *testing.T) {
	t.Parallel()
	fs := []review.Finding{{Severity: "nit", Title: "a"}, {Severity: "critical", Title: "b"}, {Severity: "nit", Title: "c"}, {Severity: "major", Title: "d"}}
	r := review.NewResult(fs)
	titles := []string{}
	for _, f := range r.Findings {
		titles = append(titles, f.Title)
	}
	require.Equal(t, []string{"b", "d", "a", "c"}, titles)
	require.Equal(t, map[string]int{"critical": 1, "major": 1, "minor": 0, "nit": 2}, r.Counts)
	require.Equal(t, "nit", fs[0].Severity, "the input is not reordered")
}

// FuzzParse: any answer is either refused with ErrSchema or parsed into
// findings that satisfy the schema and survive a round trip.
func FuzzParse(f *testing.F) {
	f.Add("[" + good + "]")
	f.Add("```json\n[]\n```")
	f.Add(`[{"severity":"nit","file":"a","line":0,"title":"t","detail":"","suggestion":""}]`)
	f.Add("[1,2]")
	f.Fuzz(func(t *testing.T, answer string) {
		fs, err := review.Parse(answer)
		if err != nil {
			if !errors.Is(err, review.ErrSchema) {
				t.Fatalf("error without ErrSchema: %v", err)
			}
			return
		}
		for _, x := range fs {
			if x.Line < 0 || strings.TrimSpace(x.File) == "" || strings.TrimSpace(x.Title) == "" || len(x.Title) > review.MaxTitle {
				t.Fatalf("accepted a finding outside the schema: %+v", x)
			}
		}
		raw, err := json.Marshal(fs)
		if err != nil {
			t.Fatal(err)
		}
		again, err := review.Parse(string(raw))
		if err != nil || len(again) != len(fs) {
			t.Fatalf("round trip: %v (%d vs %d)", err, len(again), len(fs))
		}
	})
}
