package shell_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/egress/shell"
)

type effectCase struct {
	line    int
	class   string // "" = allow
	command string
}

// loadEffectCorpus reads testdata/effect_corpus.txt: "escalate [class]
// <command>" or "allow <command>", the command optionally Go-quoted q:"…".
func loadEffectCorpus(t testing.TB) []effectCase {
	t.Helper()
	var out []effectCase
	scanCorpus(t, "testdata/effect_corpus.txt", func(n int, verdict, rest string) {
		c := effectCase{line: n}
		switch verdict {
		case "escalate":
			class, command, ok := strings.Cut(strings.TrimPrefix(rest, "["), "] ")
			require.True(t, ok && strings.HasPrefix(rest, "["), "line %d: want 'escalate [class] <command>'", n)
			c.class, rest = class, command
		case "allow":
		default:
			require.Failf(t, "bad verdict", "line %d: %q", n, verdict)
		}
		c.command = unquoteCommand(t, n, rest)
		out = append(out, c)
	})
	return out
}

// TestDestructiveByEffect judges every command of the effect corpus: each
// class escalates with a reason that names it (the approval card shows the
// reason), in the forms the issue lists — sudo, env, xargs, sh -c, full
// paths, git -C, options in any order, SQL in any case, here-strings —
// and the benign look-alikes of each class pass.
func TestDestructiveByEffect(t *testing.T) {
	t.Parallel()
	cases := loadEffectCorpus(t)
	classes := map[string]int{}
	allow := 0
	for _, c := range cases {
		if c.class == "" {
			allow++
		} else {
			classes[c.class]++
		}
	}
	for _, class := range []string{
		"destroys git history", "discards uncommitted work", "removes software", "stops a service",
		"escapes the sandbox", "downloads and executes", "writes into a system directory",
		"destroys data through a database client", "runs a command through a database client",
		"publishes secrets into a served file", "changes the firewall", "removes a user account",
	} {
		require.GreaterOrEqual(t, classes[class], 3, "commands of class %q in the corpus", class)
	}
	require.GreaterOrEqual(t, allow, 100, "benign look-alikes in the corpus")

	var wrong []string
	for _, c := range cases {
		ok, reason := shell.Destructive(c.command)
		switch {
		case c.class == "" && ok:
			wrong = append(wrong, "line "+strconv.Itoa(c.line)+": want allow, got "+strconv.Quote(reason)+": "+c.command)
		case c.class != "" && !strings.HasPrefix(reason, c.class+": "):
			wrong = append(wrong, "line "+strconv.Itoa(c.line)+": want ["+c.class+"], got "+strconv.Quote(reason)+": "+c.command)
		}
	}
	require.Empty(t, wrong, "%d of %d effect corpus commands judged wrongly:\n%s", len(wrong), len(cases), strings.Join(wrong, "\n"))
}
