package knowledge_test

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/knowledge"
)

func TestSplitMarkdown(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("Sentence number one is here. ", 20)
	for _, tc := range []struct {
		name string
		text string
		size int
		want []knowledge.Chunk
	}{
		{"empty", "", 100, nil},
		{"no heading", "alpha\n\nbeta", 100, []knowledge.Chunk{{Body: "alpha\n\nbeta"}}},
		{"heading path", "# A\n\nintro\n\n## B\n\nunder b\n\n### C\n\nunder c\n\n## D\n\nunder d", 100, []knowledge.Chunk{
			{Heading: "A", Body: "intro"}, {Heading: "A > B", Body: "under b"}, {Heading: "A > B > C", Body: "under c"}, {Heading: "A > D", Body: "under d"},
		}},
		{"heading without body is dropped", "# A\n## B\n\ntext", 100, []knowledge.Chunk{{Heading: "A > B", Body: "text"}}},
		{"hash in code is no heading", "# A\n\n```sh\n# not a heading\n\nstill code\n```\n\nafter", 200, []knowledge.Chunk{
			{Heading: "A", Body: "```sh\n# not a heading\n\nstill code\n```\n\nafter"},
		}},
		{"paragraphs packed up to size", "aaaa\n\nbbbb\n\ncccc", 10, []knowledge.Chunk{{Body: "aaaa\n\nbbbb"}, {Body: "cccc"}}},
		{"crlf", "# A\r\n\r\nx\r\ny", 100, []knowledge.Chunk{{Heading: "A", Body: "x\ny"}}},
		{"#hashtag is text", "#hashtag here", 100, []knowledge.Chunk{{Body: "#hashtag here"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, knowledge.SplitMarkdown(tc.text, tc.size))
		})
	}
	t.Run("long paragraph cut at sentences", func(t *testing.T) {
		t.Parallel()
		cs := knowledge.SplitMarkdown(long, 100)
		require.Greater(t, len(cs), 5)
		for _, c := range cs {
			require.LessOrEqual(t, utf8.RuneCountInString(c.Body), 100)
			require.True(t, strings.HasSuffix(c.Body, "."), c.Body)
		}
	})
}

// The chunker's invariants on any input: chunks within size, valid UTF-8 out of
// valid UTF-8 in, no text invented and none lost but headings and blank space.
func FuzzSplitMarkdown(f *testing.F) {
	for _, s := range []string{"# A\n\ntext", "```\n# x\n```", strings.Repeat("wörd ", 300), "## \n#\n###### six\n\ntext. more! x?"} {
		f.Add(s, 50)
	}
	f.Fuzz(func(t *testing.T, text string, size int) {
		size = 20 + abs(size)%500
		if !utf8.ValidString(text) {
			return
		}
		in := nonSpace(text)
		out := 0
		for _, c := range knowledge.SplitMarkdown(text, size) {
			require.LessOrEqual(t, utf8.RuneCountInString(c.Body), size)
			require.True(t, utf8.ValidString(c.Body) && utf8.ValidString(c.Heading))
			require.NotEmpty(t, strings.TrimSpace(c.Body))
			out += nonSpace(c.Body)
		}
		require.LessOrEqual(t, out, in)
		headings := 0
		for _, line := range strings.Split(strings.ReplaceAll(text, "\r", "\n"), "\n") {
			if strings.HasPrefix(strings.TrimLeft(line, " "), "#") {
				headings += nonSpace(line)
			}
		}
		require.GreaterOrEqual(t, out, in-headings, "only heading lines may leave the bodies")
	})
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

func nonSpace(s string) int {
	n := 0
	for _, r := range s {
		if !unicode.IsSpace(r) {
			n++
		}
	}
	return n
}

func TestSlug(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"Deploy checklist":             "deploy-checklist",
		"  Über Größe  ":               "uber-grosse",
		"../../.frame/capture":         "frame-capture",
		".hidden":                      "hidden",
		"":                             "note",
		"日本語":                          "note",
		"a/b\\c:d*e?f":                 "a-b-c-d-e-f",
		"CON":                          "con",
		strings.Repeat("word ", 30):    "word-word-word-word-word-word-word-word-word-word-word-word",
		"x" + strings.Repeat("y", 100): "x" + strings.Repeat("y", knowledge.MaxSlugLen-1),
	} {
		require.Equal(t, want, knowledge.Slug(in), in)
	}
}

func FuzzSlug(f *testing.F) {
	for _, s := range []string{"Deploy", "../.frame", "Über", "\x00", strings.Repeat("-", 100)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, title string) {
		s := knowledge.Slug(title)
		require.NotEmpty(t, s)
		require.LessOrEqual(t, len(s), knowledge.MaxSlugLen)
		require.False(t, strings.HasPrefix(s, "-") || strings.HasSuffix(s, "-") || strings.Contains(s, "--"), s)
		for _, r := range s {
			require.True(t, r == '-' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9', s)
		}
		p, err := knowledge.CleanPath("knowledge/" + s + ".md")
		require.NoError(t, err)
		require.Equal(t, "knowledge/"+s+".md", p)
	})
}

func TestParseAndRenderMarkdownRoundTrip(t *testing.T) {
	t.Parallel()
	raw := knowledge.RenderMarkdown(" Title: with colon ", []string{"a", "a", " b "}, "# Body\n\ntext")
	doc := knowledge.ParseMarkdown("knowledge/x.md", raw)
	require.Equal(t, "Title: with colon", doc.Title)
	require.Equal(t, []string{"a", "b"}, doc.Tags)
	require.Equal(t, "# Body\n\ntext\n", doc.Content)
	require.Equal(t, "Heading", knowledge.ParseMarkdown("x.md", []byte("intro\n# Heading\n")).Title)
	require.Equal(t, "file-name", knowledge.ParseMarkdown("dir/file-name.md", []byte("no heading")).Title)
	require.Equal(t, "---\nnot: [yaml\n---\nbody", knowledge.ParseMarkdown("x.md", []byte("---\nnot: [yaml\n---\nbody")).Content)
}
