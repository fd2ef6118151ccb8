package cli_test

import (
	"bytes"
	"net/http"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/cli"
	"github.com/aetherium-engine/aetherium/fleettest"
)

// aetherium memory add, list and delete over a running API; bad input is refused
// with the API's or the CLI's message and changes nothing.
func TestMemoryCommand(t *testing.T) {
	t.Parallel()
	f := fleettest.Start(t, fleettest.Options{NoWorker: true})
	code, raw := f.Do("POST", "/api/projects", map[string]any{"slug": "apollo", "name": "Apollo"}, nil)
	require.Equal(t, http.StatusCreated, code, string(raw))
	run := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		full := []string{"memory"}
		if len(args) > 0 {
			full = append(full, args[0], "--api", f.URL)
			full = append(full, args[1:]...)
		}
		c := cli.Main(full, &out, &errOut)
		return c, out.String(), errOut.String()
	}
	// Flags go anywhere: before the text, or among its words.
	c, out, errOut := run("add", "--project", "apollo", "the", "widgets", "live", "--agent", "coder", "in", "inventory.csv")
	require.Equal(t, 0, c, errOut)
	m := regexp.MustCompile(`added memory (\d+) to project apollo \(agent coder\)`).FindStringSubmatch(out)
	require.NotNil(t, m, out)
	id := m[1]
	c, out, errOut = run("add", "--project", "apollo", "deploys\x1b[31m run on Fridays")
	require.Equal(t, 0, c, errOut)
	require.Contains(t, out, "(project-shared)")

	c, out, errOut = run("list", "--project", "apollo")
	require.Equal(t, 0, c, errOut)
	require.Contains(t, out, "#"+id+" ")
	require.Contains(t, out, "agent coder")
	require.Contains(t, out, "    the widgets live in inventory.csv\n")
	require.Contains(t, out, "deploys\uFFFD[31m run on Fridays", "a terminal escape in an entry is not passed through")
	require.NotContains(t, out, "\x1b")

	c, out, _ = run("list", "--project", "apollo", "--json")
	require.Equal(t, 0, c)
	require.Contains(t, out, `"memory"`)

	cases := []struct {
		name string
		args []string
		err  string
	}{
		{"no project", []string{"list"}, "--project is required"},
		{"unknown project", []string{"list", "--project", "nope"}, "HTTP 404"},
		{"empty text", []string{"add", "--project", "apollo"}, "add needs the entry's text"},
		{"bad agent", []string{"add", "--project", "apollo", "--agent", "../x", "text"}, "HTTP 400"},
		{"bad id", []string{"delete", "--project", "apollo", "1; DROP"}, "must be a positive integer"},
		{"missing id", []string{"delete", "--project", "apollo", "999999"}, "HTTP 404"},
		{"unknown subcommand", []string{"purge", "--project", "apollo"}, "unknown subcommand"},
	}
	for _, tc := range cases {
		c, _, errOut := run(tc.args...)
		require.Equal(t, 1, c, tc.name)
		require.Contains(t, errOut, tc.err, tc.name)
	}

	c, out, errOut = run("delete", "--project", "apollo", id)
	require.Equal(t, 0, c, errOut)
	require.Contains(t, out, "deleted memory "+id)
	c, out, _ = run("list", "--project", "apollo")
	require.Equal(t, 0, c)
	require.NotContains(t, out, "#"+id+" ")
	require.Contains(t, out, "Fridays", "the other entry stays")
}
