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
	f, err := os.Open("testdata/destructive_corpus.txt")
	require.NoError(t, err)
	defer func() { _ = f.Close() }()
	var out []corpusCase
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		verdict, command, ok := strings.Cut(line, " ")
		require.True(t, ok, "line %d: want '<verdict> <command>'", n)
		require.Contains(t, []string{"escalate", "allow"}, verdict, "line %d", n)
		if q, isQuoted := strings.CutPrefix(command, "q:"); isQuoted {
			command, err = strconv.Unquote(q)
			require.NoError(t, err, "line %d", n)
		}
		out = append(out, corpusCase{line: n, escalate: verdict == "escalate", command: command})
	}
	require.NoError(t, sc.Err())
	return out
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
