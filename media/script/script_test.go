package script

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

type said struct{ speaker, text string }

func lines(s Script) []said {
	var out []said
	for _, l := range s.Lines {
		out = append(out, said{l.Speaker, l.Text})
	}
	return out
}

func TestParseShapes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		in    string
		want  []said
		words int
	}{
		{
			name: "bracket cue then NAME: words",
			in:   "[HOST]\nPIXEL: Hello there, friends.\nWelcome back to the show.\n",
			want: []said{{"PIXEL", "Hello there, friends."}, {"HOST", "Welcome back to the show."}}, words: 8,
		},
		{
			name: "NAME: words",
			in:   "HOST: Good morning.\nGUEST: Morning to you!\nHOST: Let's begin.",
			want: []said{{"HOST", "Good morning."}, {"GUEST", "Morning to you!"}, {"HOST", "Let's begin."}}, words: 7,
		},
		{
			name: "bold NAME: words, both colon placements",
			in:   "**Host:** Welcome, everyone.\n**Guest**: Thanks for having me.",
			want: []said{{"Host", "Welcome, everyone."}, {"Guest", "Thanks for having me."}}, words: 6,
		},
		{
			name: "bold cue on its own line, the words below it",
			in:   "**Host:**\nThis is the first paragraph.\n\nAnd a second one.\n**Guest:**\nMy turn now.",
			want: []said{{"Host", "This is the first paragraph."}, {"Host", "And a second one."}, {"Guest", "My turn now."}}, words: 12,
		},
		{
			name: "directions, headings and blank lines are not spoken",
			in: "# Episode 1: Rain\n\n*A door creaks open.*\n(footsteps)\n[music fades in]\nSFX: thunder\n**SFX:** more thunder\n" +
				"HOST: Hello (laughs) and [beat] welcome.\n---\nJust a description with no speaker.\n",
			want: []said{{"HOST", "Hello and welcome."}}, words: 3,
		},
		{
			name: "a heading ends a cue",
			in:   "[HOST]\nspoken\n## Notes\nnot spoken",
			want: []said{{"HOST", "spoken"}}, words: 1,
		},
		{
			name: "case-insensitive speakers keep their first spelling",
			in:   "Host: one\nHOST: two",
			want: []said{{"Host", "one"}, {"Host", "two"}}, words: 2,
		},
		{
			name: "lists, quotes, code fences and comments",
			in:   "- HOST: in a list\n> GUEST: in a quote\n```\nHOST: code\n```\n<!-- HOST: hidden -->\n<!--\nHOST: hidden too\n-->\nHOST: shown",
			want: []said{{"HOST", "in a list"}, {"GUEST", "in a quote"}, {"HOST", "shown"}}, words: 7,
		},
		{
			name: "prose with a colon is not a speaker",
			in:   "[HOST]\nhere is the thing: it works.\nTime: 10:30",
			want: []said{{"HOST", "here is the thing: it works."}}, words: 6,
		},
		{
			name: "CRLF and a BOM",
			in:   "\ufeffHOST: one two\r\nGUEST: three\r\n",
			want: []said{{"HOST", "one two"}, {"GUEST", "three"}}, words: 3,
		},
		{name: "empty", in: "", want: nil, words: 0},
		{name: "punctuation is not a word", in: "HOST: — ... !", want: nil, words: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := Parse(tc.in)
			require.Equal(t, tc.want, lines(got))
			require.Equal(t, tc.words, got.Words)
			require.Equal(t, tc.words, SpokenWords(tc.in))
		})
	}
}

func TestSpeakersAndWordsBy(t *testing.T) {
	t.Parallel()
	s := Parse("[HOST]\nPIXEL: a b c\nd e\nHost: f")
	require.Equal(t, []string{"PIXEL", "HOST"}, s.Speakers())
	require.Equal(t, map[string]int{"pixel": 3, "host": 3}, s.WordsBy())
}

func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"[HOST]\nPIXEL: words here\nmore words",
		"HOST: a\nGUEST: b",
		"**Host:** hi\n**Guest**: yo",
		"**Host:**\nbelow\n\nand more",
		"# h\n(x)\n[y z]\n*w*\n---\n```\nA: b\n```\n<!-- c -->",
		"\ufeffA: b\r\n",
		"[" + strings.Repeat("A", 100) + "]\nx",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in string) {
		s := Parse(in)
		sum := 0
		for _, l := range s.Lines {
			require.NotEmpty(t, l.Speaker)
			require.NotEmpty(t, l.Text)
			require.NotContains(t, l.Text, "\n")
			require.LessOrEqual(t, utf8.RuneCountInString(l.Speaker), MaxSpeakerRunes)
			require.Positive(t, l.Words)
			require.Equal(t, countWords(l.Text), l.Words)
			sum += l.Words
		}
		require.Equal(t, sum, s.Words)
		require.Equal(t, s.Words, SpokenWords(in), "the count is deterministic")
	})
}
