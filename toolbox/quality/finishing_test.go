package quality_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/toolbox/quality"
)

// checkProject runs check_finishing on path in ws and decodes its report; the human
// table follows the JSON.
func checkProject(t *testing.T, ws, path string) quality.FinishingReport {
	t.Helper()
	out, err := runTool(t, ws, "check_finishing", quality.FinishingArgs{Path: path})
	require.NoError(t, err)
	js, table, ok := strings.Cut(out, "\n\n")
	require.True(t, ok, out)
	var rep quality.FinishingReport
	require.NoError(t, json.Unmarshal([]byte(js), &rep))
	require.Contains(t, table, "| mark | status | where | detail |")
	return rep
}

func passRow(mark, detail string) quality.FinishingRow {
	return quality.FinishingRow{Mark: mark, Status: "PASS", Detail: detail}
}

func failRow(mark, file string, line int, detail string) quality.FinishingRow {
	return quality.FinishingRow{Mark: mark, Status: "FAIL", File: file, Line: line, Detail: detail}
}

func TestCheckFinishingFixtures(t *testing.T) {
	t.Parallel()
	// Files that do not ship: each would fail a mark if it were read.
	noise := map[string]string{
		"node_modules/leftpad/index.js": "// TODO in a dependency\n",
		"vendor/lib/x.go":               "// FIXME vendored\n",
		"dist/index.html":               "<!doctype html><title>React App</title>\n",
		"build/app.js":                  "// TODO build output\n",
		"tests/app.test.js":             "// TODO tests do not ship\n",
		"src/app.test.js":               "// TODO a test file beside the code\n",
		".frame/capture.txt":            "lorem ipsum from the headset\n",
		".github/workflows/ci.yml":      "# TODO: cache\n",
		"venv/lib/site.py":              "# TODO\n",
	}
	// Only the finished fixture has a .gitignore (notes/, *.log).
	ignored := map[string]string{
		"notes/todo.js": "// TODO ignored by .gitignore\n",
		"debug.log":     "TODO lorem ipsum\n",
	}
	for _, tc := range []struct {
		fixture string
		path    string
		passed  bool
		rows    []quality.FinishingRow
	}{
		{"finished", ".", true, []quality.FinishingRow{
			passRow("favicon", "2 HTML page(s), each with a favicon that ships"),
			passRow("scaffold", "9 shipped text file(s) without scaffold leftovers"),
			passRow("readme_images", "the README's 2 local image reference(s) all ship"),
			passRow("version", "package.json: 1.2.0, the head of CHANGELOG.md"),
			passRow("empty_state", "3 list screen(s), each with an empty state"),
		}},
		{"unfinished", ".", false, []quality.FinishingRow{
			failRow("favicon", "index.html", 3, `no <link rel="icon"> and no favicon.ico at the root`),
			failRow("favicon", "settings.html", 5, `links favicon "img/icon.png", which does not exist in the shipped files`),
			failRow("scaffold", "index.html", 5, `default framework title "Vite + React"`),
			failRow("scaffold", "index.html", 8, "default framework logo vite.svg referenced"),
			failRow("scaffold", "index.html", 9, "lorem ipsum placeholder text"),
			failRow("scaffold", "index.html", 10, "placeholder image service via.placeholder.com"),
			failRow("scaffold", "src/main.jsx", 4, "TODO left in shipped code: // TODO: hook up the API"),
			failRow("readme_images", "README.md", 3, `references "docs/screenshot.png", which does not exist in the shipped files`),
			failRow("version", "package.json", 4, "version 0.1.0, but the head of CHANGELOG.md (line 3) is 0.2.0"),
			failRow("empty_state", "index.html", 11, `<ul id="todo-list"> is filled at run time and has no empty state beside it`),
			failRow("empty_state", "src/List.jsx", 4, "renders a list with no empty state in this file: {items.map((i) => <li key={i.id}>{i.text}</li>)}"),
		}},
		// The project in a subdirectory: rows name files from the workspace root.
		{"unfinished", "apps/web", false, nil},
	} {
		t.Run(tc.fixture+" "+tc.path, func(t *testing.T) {
			t.Parallel()
			ws := t.TempDir()
			dir := filepath.Join(ws, filepath.FromSlash(tc.path))
			copyFixture(t, "testdata/"+tc.fixture, dir)
			writeFixtureFiles(t, dir, noise)
			if tc.fixture == "finished" {
				writeFixtureFiles(t, dir, ignored)
			}
			rep := checkProject(t, ws, tc.path)
			require.Equal(t, tc.passed, rep.Passed)
			if tc.rows == nil {
				require.Len(t, rep.Rows, 11)
				require.Equal(t, "apps/web/index.html", rep.Rows[0].File)
				return
			}
			require.Equal(t, tc.rows, rep.Rows)
		})
	}
}

// TestCheckFinishingMarks pins each mark's edges on small projects.
func TestCheckFinishingMarks(t *testing.T) {
	t.Parallel()
	page := func(head, body string) string {
		return "<!doctype html>\n<html>\n<head>\n" + head + "\n</head>\n<body>\n" + body + "\n</body>\n</html>\n"
	}
	for _, tc := range []struct {
		name  string
		files map[string]string
		mark  string
		want  []quality.FinishingRow
	}{
		{"favicon.ico at the root serves a page without a link", map[string]string{
			"index.html": page("<title>x</title>", ""), "public/favicon.ico": "ico",
		}, "favicon", []quality.FinishingRow{passRow("favicon", "1 HTML page(s), each with a favicon that ships")}},
		{"external and data favicons", map[string]string{
			"a.html": page(`<link rel="icon" href="https://cdn.example.com/i.png">`, ""),
			"b.html": page(`<link rel="icon" href="data:image/svg+xml,<svg/>">`, ""),
		}, "favicon", []quality.FinishingRow{failRow("favicon", "a.html", 4, `links favicon "https://cdn.example.com/i.png", which is external (not shipped with the project)`)}},
		{"a gitignored favicon does not ship", map[string]string{
			".gitignore": "*.png\n!keep.png\n", "index.html": page(`<link rel="icon" href="icon.png">`, ""), "icon.png": "png",
			"b.html": page(`<link rel="icon" href="keep.png">`, ""), "keep.png": "png",
		}, "favicon", []quality.FinishingRow{failRow("favicon", "index.html", 4, `links favicon "icon.png", which does not exist in the shipped files`)}},
		{"a fragment is not a page", map[string]string{
			"partials/card.html": "<div class=card>x</div>\n",
		}, "favicon", []quality.FinishingRow{passRow("favicon", "no HTML pages ship")}},
		{"nested .gitignore and test names", map[string]string{
			"src/.gitignore": "generated/\n", "src/generated/api.js": "// TODO generated\n",
			"src/a.spec.ts": "// TODO\n", "src/ok.ts": "export const todos = []; // Todo list, TODO_KEY\n",
			"pkg/x_test.go": "// TODO\n", "app/test_x.py": "# FIXME\n",
		}, "scaffold", []quality.FinishingRow{passRow("scaffold", "1 shipped text file(s) without scaffold leftovers")}},
		{"next.js default title and logo", map[string]string{
			"app/layout.tsx": "export const metadata = {\n  title: \"Create Next App\",\n};\n",
			"app/page.tsx":   "import Image from 'next/image';\nexport default () => <Image src=\"/next.svg\" alt=\"\" />;\n",
		}, "scaffold", []quality.FinishingRow{
			failRow("scaffold", "app/layout.tsx", 2, `default framework title "Create Next App"`),
			failRow("scaffold", "app/page.tsx", 2, "default framework logo next.svg referenced"),
		}},
		{"README: reference images, html img, code is not a reference", map[string]string{
			"README.md":         "# x\n\n![shot][s]\n<img src=\"docs/a.png\" width=300>\n`![x](nope.png)`\n![badge](https://x.io/b.svg)\n[![local](b.png)](https://x.io)\n\n[s]: docs/shot%20one.png\n",
			"docs/shot one.png": "png",
		}, "readme_images", []quality.FinishingRow{
			failRow("readme_images", "README.md", 4, `references "docs/a.png", which does not exist in the shipped files`),
			failRow("readme_images", "README.md", 7, `references "b.png", which does not exist in the shipped files`),
		}},
		{"no README", map[string]string{"index.js": "x"}, "readme_images", []quality.FinishingRow{failRow("readme_images", "", 0, "no README.md at the project root")}},
		{"pyproject, Cargo and VERSION against the head", map[string]string{
			"pyproject.toml": "[project]\nname = \"x\"\nversion = \"2.0.0\"\n",
			"Cargo.toml":     "[package]\nname = \"x\"\nversion = \"2.0.1\"\n",
			"VERSION":        "v2.0.0\n",
			"CHANGELOG.md":   "# Changelog\n\n## Unreleased\n\n```\n## 9.9.9\n```\n\n## v2.0.0 — 2026-12-01\n",
		}, "version", []quality.FinishingRow{failRow("version", "Cargo.toml", 3, "version 2.0.1, but the head of CHANGELOG.md (line 9) is 2.0.0")}},
		{"no manifest, no changelog", map[string]string{"index.js": "x"}, "version", []quality.FinishingRow{
			failRow("version", "", 0, "no manifest states a version (package.json, pyproject.toml, Cargo.toml, VERSION)"),
			failRow("version", "", 0, "no CHANGELOG.md at the project root"),
		}},
		{"static lists need nothing; templates and svelte else", map[string]string{
			"index.html":  page("", "<ul><li>a</li></ul>\n<template><ul></ul></template>\n<div role=\"list\"><div>x</div></div>"),
			"List.svelte": "{#each items as item}\n<li>{item}</li>\n{:else}\n<p>Nothing here</p>\n{/each}\n",
			"Rows.vue":    "<tr v-for=\"r in rows\">{{ r }}</tr>\n<p v-if=\"!rows.length\">No rows</p>\n",
		}, "empty_state", []quality.FinishingRow{passRow("empty_state", "2 list screen(s), each with an empty state")}},
		{"runtime lists without empty state", map[string]string{
			"index.html": page("", "<section>\n<table><thead><tr><th>a</th></tr></thead><tbody></tbody></table>\n</section>\n<div data-list></div>\n<div role=\"list\"></div>"),
			"Grid.tsx":   "export const G = ({xs}) => (\n  <div>{xs.map(x =>\n    <Card key={x.id} />)}</div>\n);\n",
		}, "empty_state", []quality.FinishingRow{
			failRow("empty_state", "Grid.tsx", 2, "renders a list with no empty state in this file: <div>{xs.map(x =>"),
			failRow("empty_state", "index.html", 8, "<table> is filled at run time and has no empty state beside it"),
			failRow("empty_state", "index.html", 10, "<div> is filled at run time and has no empty state beside it"),
			failRow("empty_state", "index.html", 11, "<div> is filled at run time and has no empty state beside it"),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ws := t.TempDir()
			writeFixtureFiles(t, ws, tc.files)
			rep := checkProject(t, ws, ".")
			var got []quality.FinishingRow
			for _, r := range rep.Rows {
				if r.Mark == tc.mark {
					got = append(got, r)
				}
			}
			require.Equal(t, tc.want, got)
		})
	}
}

func TestCheckFinishingRefusals(t *testing.T) {
	t.Parallel()
	outside := t.TempDir()
	writeFixtureFiles(t, outside, map[string]string{"README.md": "# secret\n"})
	ws := t.TempDir()
	writeFixtureFiles(t, ws, map[string]string{"file.txt": "x", ".frame/README.md": "x", "proj/README.md": "x"})
	require.NoError(t, os.Symlink(outside, filepath.Join(ws, "out")))
	for _, tc := range []struct{ path, want string }{
		{"../", "climbs out of the workspace"},
		{"/etc", "is absolute"},
		{"out", "resolves outside the workspace"},
		{".frame", "dot directory"},
		{"proj/../.frame", "dot directory"},
		{".aetherium", "reserved for the engine"},
		{"file.txt", "is not a directory"},
		{"missing", "missing does not exist"},
		{"a\x00b", "NUL"},
	} {
		t.Run(tc.path, func(t *testing.T) {
			t.Parallel()
			_, err := runTool(t, ws, "check_finishing", quality.FinishingArgs{Path: tc.path})
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
		})
	}
	// A symlink inside the project that leads out is not followed.
	require.NoError(t, os.Symlink(filepath.Join(outside, "README.md"), filepath.Join(ws, "proj", "CHANGELOG.md")))
	rep := checkProject(t, ws, "proj")
	for _, r := range rep.Rows {
		require.NotContains(t, r.Detail, "secret")
		if r.Mark == "version" {
			require.Equal(t, "FAIL", r.Status)
		}
	}
	require.Contains(t, rep.Rows, failRow("version", "", 0, "no CHANGELOG.md at the project root"))
}
