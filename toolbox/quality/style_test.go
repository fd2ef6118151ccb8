package quality_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/toolbox/quality"
	"github.com/aetherium-engine/aetherium/toolbox/workspace"
)

// styleWorkspace is a workspace holding the fixture stylesheet at css/site.css.
func styleWorkspace(t *testing.T) string {
	t.Helper()
	ws := t.TempDir()
	src, err := os.ReadFile("testdata/style/site.css")
	require.NoError(t, err)
	writeFixtureFiles(t, ws, map[string]string{"css/site.css": string(src)})
	return ws
}

func TestRecordStyleGeneratesThePaletteOfTheStylesheet(t *testing.T) {
	t.Parallel()
	ws := styleWorkspace(t)
	args := quality.StyleArgs{
		Direction:  "Warm paper, ink text, one copper accent.",
		Rules:      "Never add a second accent colour. Body text stays at 4.5:1 or better.",
		Stylesheet: "css/site.css", Out: "docs/STYLE.md",
	}
	out, err := runTool(t, ws, "record_style", args)
	require.NoError(t, err)
	var sum quality.StyleSummary
	require.NoError(t, json.Unmarshal([]byte(out), &sum))
	require.Equal(t, quality.StyleSummary{
		Path: "docs/STYLE.md", Stylesheets: []string{"css/site.css"},
		Colours: 10, ContrastPairs: 5, ContrastFailures: 2, FontFamilies: 5, TypeScale: 5,
		SpacingSteps: 6, RadiusSteps: 3, Shadows: 1, Breakpoints: 3, CustomProperties: 6,
		UnresolvedVars: []string{"--missing"},
	}, sum)

	b, err := os.ReadFile(filepath.Join(ws, "docs", "STYLE.md"))
	require.NoError(t, err)
	doc := string(b)
	require.Equal(t, []string{args.Direction}, recordSection(doc, "Direction"))
	require.Equal(t, []string{args.Rules}, recordSection(doc, "Rules"))

	// The palette is exactly the stylesheet's: every colour once, in its normal
	// form (#1A1A1A, rgb(255 255 255), white, #fff, #FFFFFF, hsl(), rgba(), tomato),
	// with the declarations using it and the custom properties holding it.
	palette := map[string]string{}
	for _, l := range recordSection(doc, "Colours") {
		if !strings.HasPrefix(l, "| `#") {
			continue
		}
		cells := strings.Split(l, "|")
		require.Len(t, cells, 5, l)
		palette[strings.Trim(strings.TrimSpace(cells[1]), "`")] = strings.TrimSpace(strings.TrimSpace(cells[2]) + " " + strings.TrimSpace(cells[3]))
	}
	require.Equal(t, map[string]string{
		"#ffffff":   "4 `--paper`",
		"#00000014": "1",
		"#121212":   "1 `--paper`",
		"#1a1a1a":   "1 `--ink`",
		"#333333":   "1",
		"#aaaaaa":   "1",
		"#b66835":   "1 `--accent`, `--accent-strong`",
		"#dddddd":   "1",
		"#f5f5f5":   "1 `--ink`",
		"#ff6347":   "0 `--unused`",
	}, palette)

	require.Equal(t, []string{
		"Text colour on background colour declared in the same rule; WCAG 2 AA needs 4.5:1 for body text and 3:1 for large text.",
		"",
		"| rule | colour | background | ratio | AA | AA large |",
		"| --- | --- | --- | ---: | --- | --- |",
		"| `body` | `#1a1a1a` | `#ffffff` | 17.40:1 | pass | pass |",
		"| `body with the custom properties of [data-theme=\"dark\"]` | `#f5f5f5` | `#121212` | 17.18:1 | pass | pass |",
		"| `.card` | `#333333` | `#ffffff` | 12.63:1 | pass | pass |",
		"| `.button` | `#ffffff` | `#b66835` | 4.18:1 | fail | pass |",
		"| `.muted` | `#aaaaaa` | `#ffffff` | 2.32:1 | fail | fail |",
	}, recordSection(doc, "Contrast pairs"))
	require.Equal(t, []string{
		"| value | ≈ px | uses |", "| --- | ---: | ---: |",
		"| `0.875rem` | 14 | 1 |", "| `1rem` | 16 | 1 |", "| `1.75rem` | 28 | 1 |", "| `2.5rem` | 40 | 1 |", "| `3rem` | 48 | 1 |",
	}, recordSection(doc, "Type scale"))
	require.Equal(t, []string{
		"| condition | value | ≈ px | uses |", "| --- | --- | ---: | ---: |",
		"| max-width | `480px` | 480 | 1 |", "| min-width | `768px` | 768 | 1 |", "| min-width | `1200px` | 1200 | 1 |",
	}, recordSection(doc, "Breakpoints"))
	require.Contains(t, doc, "| Inter | 1 |  |")
	require.Contains(t, doc, "| Georgia | 1 |  |")
	require.Contains(t, doc, "| `--accent-strong` | `var(--accent)` | `hsl(24, 55%, 46%)` | 1 |")
	require.Contains(t, doc, "`0 1px 2px rgba(0, 0, 0, .08), 0 4px 12px rgba(0, 0, 0, 0.08)`")

	// Same input, same file: no timestamp, stable ordering.
	_, err = runTool(t, ws, "record_style", args)
	require.NoError(t, err)
	again, err := os.ReadFile(filepath.Join(ws, "docs", "STYLE.md"))
	require.NoError(t, err)
	require.Equal(t, doc, string(again))
}

func TestRecordStyleSeveralStylesheetsAndDefaultOut(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	writeFixtureFiles(t, ws, map[string]string{
		"a.css": ":root { --brand: #0af; }\n@font-face { font-family: 'Brand Sans'; src: url(brand.woff2); }\n",
		"b.css": "a { color: var(--brand); font-family: 'Brand Sans', sans-serif; font-size: 1.0REM !important; }\n" +
			"@container card (min-width: 30rem) { .title { color: rebeccapurple; } }\n",
	})
	out, err := runTool(t, ws, "record_style", quality.StyleArgs{Direction: "d", Rules: "r", Stylesheet: "a.css", MoreStylesheets: []string{"b.css", "a.css"}})
	require.NoError(t, err)
	var sum quality.StyleSummary
	require.NoError(t, json.Unmarshal([]byte(out), &sum))
	require.Equal(t, "STYLE.md", sum.Path)
	require.Equal(t, []string{"a.css", "b.css"}, sum.Stylesheets)
	b, err := os.ReadFile(filepath.Join(ws, "STYLE.md"))
	require.NoError(t, err)
	// var() across files; a rule inside @container (streamed raw by the parser)
	// still counts; an @font-face declaration is not a use.
	require.Contains(t, string(b), "| `#00aaff` | 1 | `--brand` |")
	require.Contains(t, string(b), "| `#663399` | 1 |  |")
	require.Contains(t, string(b), "| Brand Sans | 1 | yes |")
	require.Contains(t, string(b), "| `1rem` | 16 | 1 |")
}

// TestRecordStyleHandsTheRecordToTheSandboxUser: as with write_file, a worker
// running as root gives the record (and the directories it made) to the sandbox's
// user, and a record over the file limit is refused.
func TestRecordStyleHandsTheRecordToTheSandboxUser(t *testing.T) {
	t.Parallel()
	ws := styleWorkspace(t)
	cfg := workspace.Config{Owner: &workspace.Owner{UID: 4321, GID: 4322}}
	_, err := runToolWith(t, cfg, ws, "record_style", quality.StyleArgs{Direction: "d", Rules: "r", Stylesheet: "css/site.css", Out: "new/dir/STYLE.md"})
	require.NoError(t, err)
	if os.Geteuid() == 0 {
		for _, p := range []string{"new", "new/dir", "new/dir/STYLE.md"} {
			fi, err := os.Stat(filepath.Join(ws, p))
			require.NoError(t, err)
			st := fi.Sys().(*syscall.Stat_t)
			require.Equal(t, [2]uint32{4321, 4322}, [2]uint32{st.Uid, st.Gid}, p)
		}
	}
	_, err = runToolWith(t, workspace.Config{MaxFileBytes: 1000}, ws, "record_style", quality.StyleArgs{Direction: "d", Rules: "r", Stylesheet: "css/site.css"})
	require.ErrorContains(t, err, "the record would be")
	require.ErrorIs(t, err, workspace.ErrTooLarge)
}

func TestRecordStyleRefusals(t *testing.T) {
	t.Parallel()
	outside := t.TempDir()
	writeFixtureFiles(t, outside, map[string]string{"secret.css": "body { color: red; }"})
	ws := t.TempDir()
	writeFixtureFiles(t, ws, map[string]string{
		"ok.css":           "body { color: red; }",
		"broken.css":       "body { color red; }",
		"notes.txt":        "x",
		".frame/grab.css":  "body { color: red; }",
		"big.css":          strings.Repeat("a{}", (1<<20)/3+1),
		"bin.css":          "body\x00{}",
		"dir.css/keep.txt": "x",
	})
	require.NoError(t, os.Symlink(filepath.Join(outside, "secret.css"), filepath.Join(ws, "link.css")))
	require.NoError(t, os.Symlink(outside, filepath.Join(ws, "linkdir")))
	for _, tc := range []struct {
		name string
		args quality.StyleArgs
		want string
	}{
		{"climbs out", quality.StyleArgs{Stylesheet: "../secret.css"}, "climbs out of the workspace"},
		{"absolute", quality.StyleArgs{Stylesheet: "/etc/site.css"}, "is absolute"},
		{"symlink out", quality.StyleArgs{Stylesheet: "link.css"}, "resolves outside the workspace"},
		{"symlinked dir out", quality.StyleArgs{Stylesheet: "linkdir/secret.css"}, "resolves outside the workspace"},
		{"dot directory", quality.StyleArgs{Stylesheet: ".frame/grab.css"}, "dot directory"},
		{"engine directory", quality.StyleArgs{Stylesheet: ".aetherium/x.css"}, "reserved for the engine"},
		{"missing", quality.StyleArgs{Stylesheet: "nope.css"}, "nope.css does not exist"},
		{"not css", quality.StyleArgs{Stylesheet: "notes.txt"}, "is not a .css file"},
		{"a directory", quality.StyleArgs{Stylesheet: "dir.css"}, "is a directory"},
		{"unparseable", quality.StyleArgs{Stylesheet: "broken.css"}, "does not parse: broken.css: expected colon in declaration on line 1"},
		{"too large", quality.StyleArgs{Stylesheet: "big.css"}, "over the size limit"},
		{"binary", quality.StyleArgs{Stylesheet: "bin.css"}, "not UTF-8 text"},
		{"out climbs", quality.StyleArgs{Stylesheet: "ok.css", Out: "../STYLE.md"}, "climbs out of the workspace"},
		{"out not md", quality.StyleArgs{Stylesheet: "ok.css", Out: "STYLE.txt"}, "must be a .md file"},
		{"out dot dir", quality.StyleArgs{Stylesheet: "ok.css", Out: ".frame/STYLE.md"}, "dot directory"},
		{"out through symlink", quality.StyleArgs{Stylesheet: "ok.css", Out: "linkdir/STYLE.md"}, "resolves outside the workspace"},
		{"no prose", quality.StyleArgs{Stylesheet: "ok.css", Direction: " "}, "direction and rules are both required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := tc.args
			if a.Direction == "" {
				a.Direction = "d"
			}
			if a.Rules == "" {
				a.Rules = "r"
			}
			_, err := runTool(t, ws, "record_style", a)
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
		})
	}
	_, err := os.Stat(filepath.Join(outside, "STYLE.md"))
	require.ErrorIs(t, err, os.ErrNotExist)
}

func TestNormalizeColour(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"#ABC", "#aabbcc"},
		{"#aabbcc", "#aabbcc"},
		{"#abcd", "#aabbccdd"},
		{"#AABBCCFF", "#aabbcc"},
		{"rgb(170, 187, 204)", "#aabbcc"},
		{"rgb(170 187 204)", "#aabbcc"},
		{"rgba(0,0,0,.5)", "#00000080"},
		{"rgb(0 0 0 / 50%)", "#00000080"},
		{"rgb(100%, 0%, 0%)", "#ff0000"},
		{"hsl(0, 100%, 50%)", "#ff0000"},
		{"hsl(120deg 100% 25%)", "#008000"},
		{"hsla(240, 100%, 50%, 0.25)", "#0000ff40"},
		{"hsl(0.5turn 100% 50%)", "#00ffff"},
		{"RebeccaPurple", "#663399"},
		{"transparent", "#00000000"},
		{"currentColor", ""},
		{"#abcde", ""},
		{"#ggg", ""},
		{"oklch(0.7 0.1 120)", ""},
		{"rgb(1, 2)", ""},
	} {
		got, ok := quality.NormalizeColour(tc.in)
		require.Equal(t, tc.want != "", ok, tc.in)
		require.Equal(t, tc.want, got, tc.in)
	}
}
