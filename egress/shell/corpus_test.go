package shell_test

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/egress/shell"
)

// corpusCase is one line of testdata/destructive_corpus.txt.
type corpusCase struct {
	line     int
	escalate bool
	command  string
}

// loadCorpus reads the corpus: "escalate <command>" or "allow <command>",
// the command optionally Go-quoted as q:"…" for text spanning lines.
func loadCorpus(t testing.TB) []corpusCase {
	t.Helper()
	var out []corpusCase
	scanCorpus(t, "testdata/destructive_corpus.txt", func(n int, verdict, command string) {
		require.Contains(t, []string{"escalate", "allow"}, verdict, "line %d", n)
		out = append(out, corpusCase{line: n, escalate: verdict == "escalate", command: unquoteCommand(t, n, command)})
	})
	return out
}

// scanCorpus calls line for each "<verdict> <rest>" line of a corpus file;
// blank lines and lines starting with # are skipped.
func scanCorpus(t testing.TB, path string, line func(n int, verdict, rest string)) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		text := sc.Text()
		if strings.TrimSpace(text) == "" || strings.HasPrefix(text, "#") {
			continue
		}
		verdict, rest, ok := strings.Cut(text, " ")
		require.True(t, ok, "%s line %d: want '<verdict> <command>'", path, n)
		line(n, verdict, rest)
	}
	require.NoError(t, sc.Err())
}

// unquoteCommand decodes a q:"…" command (here-documents and other text
// spanning lines); anything else is the command as written.
func unquoteCommand(t testing.TB, n int, command string) string {
	t.Helper()
	q, isQuoted := strings.CutPrefix(command, "q:")
	if !isQuoted {
		return command
	}
	command, err := strconv.Unquote(q)
	require.NoError(t, err, "line %d", n)
	return command
}

// TestDestructiveCorpusFile judges every command of the corpus: the
// command-running and deleting forms of common tools escalate, as a class;
// everyday work does not.
func TestDestructiveCorpusFile(t *testing.T) {
	t.Parallel()
	cases := loadCorpus(t)
	var nEsc, nAllow int
	for _, c := range cases {
		if c.escalate {
			nEsc++
		} else {
			nAllow++
		}
	}
	require.GreaterOrEqual(t, nEsc, 150, "escalating commands in the corpus")
	require.GreaterOrEqual(t, nAllow, 50, "benign commands in the corpus")

	var wrong []string
	for _, c := range cases {
		ok, reason := shell.Destructive(c.command)
		if ok != c.escalate {
			want := "allow"
			if c.escalate {
				want = "escalate"
			}
			wrong = append(wrong, "line "+strconv.Itoa(c.line)+": want "+want+", got reason "+strconv.Quote(reason)+": "+c.command)
		}
	}
	require.Empty(t, wrong, "%d of %d corpus commands judged wrongly:\n%s", len(wrong), len(cases), strings.Join(wrong, "\n"))
}
