package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

const memoryUsage = `usage:
  aetherium memory list   --project SLUG [--json]
  aetherium memory add    --project SLUG [--agent NAME] TEXT…
  aetherium memory delete --project SLUG ID`

// memoryEntry is what the CLI shows of a long-term memory entry.
type memoryEntry struct {
	ID        int64     `json:"id"`
	Scope     string    `json:"scope"`
	Agent     string    `json:"agent"`
	RunID     string    `json:"run_id"`
	Author    string    `json:"author"`
	Content   string    `json:"content"`
	CreatedAt time.Time `json:"created_at"`
}

// memoryCmd lists, adds and deletes a project's long-term memory over the API
// (ADR 5), so what a person changes is owner-checked and audited like any
// request.
func memoryCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "aetherium memory: "+format+"\n", a...)
		return 1
	}
	if len(args) == 0 {
		return fail("%s", memoryUsage)
	}
	switch args[0] {
	case "list", "add", "delete":
	default:
		return fail("%s\n%s", unknownSub("memory", args[0]), memoryUsage)
	}
	fs := flag.NewFlagSet("memory "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	setUsage(fs, memoryUsage)
	base := fs.String("api", apiURL(), "API base URL (AETHERIUM_API_URL)")
	project := fs.String("project", "", "the project's slug")
	agent := fs.String("agent", "", "add: the one agent that recalls the entry (default: the whole project)")
	asJSON := fs.Bool("json", false, "list: print the API's JSON")
	positional, err := parseInterleaved(fs, args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *project == "" {
		return fail("--project is required\n%s", memoryUsage)
	}
	root := *base + "/api/projects/" + url.PathEscape(*project) + "/memory"
	switch args[0] {
	case "list":
		var raw json.RawMessage
		if err := getJSON(ctx, root, &raw); err != nil {
			return fail("%v", err)
		}
		if *asJSON {
			fmt.Fprintln(stdout, string(raw))
			return 0
		}
		var out struct {
			Memory []memoryEntry `json:"memory"`
		}
		if err := json.Unmarshal(raw, &out); err != nil {
			return fail("decode the answer: %v", err)
		}
		if len(out.Memory) == 0 {
			fmt.Fprintf(stdout, "project %s has no memory\n", *project)
			return 0
		}
		for _, e := range out.Memory {
			printMemory(stdout, e)
		}
		return 0
	case "add":
		text := strings.TrimSpace(strings.Join(positional, " "))
		if text == "" {
			return fail("add needs the entry's text")
		}
		var e memoryEntry
		if err := postJSON(ctx, root, map[string]string{"content": text, "agent": *agent}, &e); err != nil {
			return fail("%v", err)
		}
		fmt.Fprintf(stdout, "added memory %d to project %s (%s)\n", e.ID, *project, scopeOf(e))
		return 0
	case "delete":
		if len(positional) != 1 {
			return fail("delete needs one entry id")
		}
		id, err := strconv.ParseInt(positional[0], 10, 64)
		if err != nil || id <= 0 {
			return fail("entry id %q: must be a positive integer", positional[0])
		}
		if err := doJSON(ctx, "DELETE", root+"/"+strconv.FormatInt(id, 10), nil, nil); err != nil {
			return fail("%v", err)
		}
		fmt.Fprintf(stdout, "deleted memory %d of project %s\n", id, *project)
		return 0
	}
	return 2
}

func scopeOf(e memoryEntry) string {
	if e.Scope == "agent" {
		return "agent " + e.Agent
	}
	return "project-shared"
}

// printMemory writes one entry: its id, when, whose, where it came from, then
// its text indented on one line.
func printMemory(w io.Writer, e memoryEntry) {
	from := "by " + e.Author
	if e.RunID != "" {
		from = "from run " + e.RunID
	}
	fmt.Fprintf(w, "#%d  %s  %s  %s\n", e.ID, e.CreatedAt.Local().Format(time.DateTime), scopeOf(e), from)
	fmt.Fprintf(w, "    %s\n", printable(oneLine(e.Content, 400)))
}

// printable replaces control characters (a terminal escape sequence in model
// output would otherwise reach the operator's terminal) with U+FFFD.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return utf8.RuneError
		}
		return r
	}, s)
}
