package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	// inline links and images: [text](target "title")
	mdLink = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	// reference definitions: [name]: target
	mdRef     = regexp.MustCompile(`(?m)^\s{0,3}\[[^\]]+\]:\s+(\S+)`)
	htmlID    = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
	codeSpan  = regexp.MustCompile("`[^`]*`")
	atxHeader = regexp.MustCompile(`^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)
)

// TestDocLinks follows every relative link of README.md and docs/**/*.md: the
// file or directory it names must exist, and its #anchor must be a heading (by
// GitHub's anchor rules) or an <a name> of the page it points at.
func TestDocLinks(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	files := []string{filepath.Join(root, "README.md")}
	err = filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".md") {
			files = append(files, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	anchorsOf := map[string]map[string]bool{}
	pageAnchors := func(file string) (map[string]bool, error) {
		if a, ok := anchorsOf[file]; ok {
			return a, nil
		}
		raw, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		a := anchors(string(raw))
		anchorsOf[file] = a
		return a, nil
	}
	checked := 0
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, file)
		for n, target := range links(string(raw)) {
			_ = n
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			checked++
			path, frag, _ := strings.Cut(target, "#")
			dest := file
			if path != "" {
				dest = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s: link %q: %s does not exist", rel, target, path)
					continue
				}
			}
			if frag == "" {
				continue
			}
			if !strings.HasSuffix(dest, ".md") {
				t.Errorf("%s: link %q: an anchor into a file that is not Markdown", rel, target)
				continue
			}
			a, err := pageAnchors(dest)
			if err != nil {
				t.Errorf("%s: link %q: %v", rel, target, err)
				continue
			}
			if !a[strings.ToLower(frag)] {
				t.Errorf("%s: link %q: no heading of %s has the anchor #%s", rel, target, filepath.Base(dest), frag)
			}
		}
	}
	if checked < 100 {
		t.Errorf("checked only %d relative links: is the link pattern broken?", checked)
	}
	t.Logf("%d files, %d relative links checked", len(files), checked)
}

// links are the link targets of a Markdown page outside code blocks and code spans.
func links(md string) []string {
	var out []string
	for _, l := range proseLines(md) {
		l = codeSpan.ReplaceAllString(l, "")
		for _, m := range mdLink.FindAllStringSubmatch(l, -1) {
			out = append(out, strings.Trim(m[1], "<>"))
		}
		for _, m := range mdRef.FindAllStringSubmatch(l, -1) {
			out = append(out, m[1])
		}
	}
	return out
}

// anchors are a page's heading anchors (GitHub numbers repeats -1, -2, …) and
// its explicit <a name>/<a id> anchors.
func anchors(md string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, l := range proseLines(md) {
		if m := atxHeader.FindStringSubmatch(l); m != nil {
			a := anchor(m[2])
			if n := seen[a]; n > 0 {
				out[fmt.Sprintf("%s-%d", a, n)] = true
			} else {
				out[a] = true
			}
			seen[a]++
		}
		for _, m := range htmlID.FindAllStringSubmatch(l, -1) {
			out[strings.ToLower(m[1])] = true
		}
	}
	return out
}

// proseLines are the lines of md outside fenced code blocks.
func proseLines(md string) []string {
	var out []string
	fence := ""
	for _, l := range strings.Split(md, "\n") {
		t := strings.TrimSpace(l)
		if fence != "" {
			if strings.HasPrefix(t, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~") {
			fence = t[:3]
			continue
		}
		out = append(out, l)
	}
	return out
}
