package quality

import (
	"fmt"
	"regexp"
	"strings"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// The empty-state mark has two halves.
//
// HTML pages: a list the page fills at run time is one that ships without its
// items — a <ul>/<ol> with no <li>, a <table> with no <td>, an element with
// role="list" and no child element, or any element with a data-list attribute.
// A list whose items are static markup can never be empty and needs nothing.
// Each runtime list needs an empty state near it: somewhere in its parent
// element (the list itself, its siblings and their descendants) an element whose
// class, id or any attribute contains "empty", or text such as "No tasks yet",
// "Nothing here", "No results" or "… is empty".
//
// Components (.jsx/.tsx/.vue/.svelte/.astro, and .js/.ts with JSX): a file
// that renders a list from data — items.map(x => <li…>), v-for, {#each},
// *ngFor or @for — needs empty-state evidence in the same file: a length test
// (items.length === 0, !items.length, items.length ? … : …), Svelte's
// {#each}…{:else}, Angular's @empty, the word "empty", or such a text. A
// component is its own screen, so the file is the unit. Vanilla scripts that
// build lists with createElement or template strings are judged by the page's
// runtime list instead.

var (
	emptyTextRe  = regexp.MustCompile(`(?i)\bno\b[^.!?<>\n]{0,40}\byet\b|\bnothing\b[^.!?<>\n]{0,20}\b(here|yet|to show|found)\b|\bno (results|items|entries|matches|records|data)\b|\bempty\b`)
	listRenderRe = regexp.MustCompile(`\.map\(\s*(?:\([^)]*\)|[\w$]+)\s*=>\s*\(?\s*<[A-Za-z]|\bv-for\s*=|\{#each\b|\*ngFor\s*=|@for\s*\(`)
	emptyCodeRe  = regexp.MustCompile(`(?i)\.length\s*(?:===?|<=?)\s*0\b|!\s*[\w$.?]+\.length\b|\.length\s*\?|\{:else\}|@empty\b|empty|` + emptyTextRe.String())
)

// checkEmptyState applies both halves to every shipped page and component.
func checkEmptyState(p *shippedProject) ([]FinishingRow, string) {
	var fails []FinishingRow
	lists := 0
	for _, f := range p.files {
		switch {
		case isHTMLFile(f):
			src, ok := p.read(f)
			if !ok {
				continue
			}
			n, rows := htmlEmptyStates(f, src)
			lists += n
			fails = append(fails, rows...)
		case isComponentFile(f):
			src, ok := p.read(f)
			if !ok {
				continue
			}
			loc := listRenderRe.FindStringIndex(src)
			if loc == nil {
				continue
			}
			lists++
			if !emptyCodeRe.MatchString(src) {
				line := lineOfOffset(src, loc[0])
				lineText := strings.Split(src, "\n")[line-1]
				fails = append(fails, FinishingRow{File: f, Line: line,
					Detail: "renders a list with no empty state in this file: " + rowSnippet(lineText)})
			}
		}
	}
	if lists == 0 {
		return fails, "no list screens (no runtime list container in a page, no component rendering a list)"
	}
	return fails, fmt.Sprintf("%d list screen(s), each with an empty state", lists)
}

// htmlEmptyStates finds a page's runtime lists and those without an empty state.
func htmlEmptyStates(file, src string) (int, []FinishingRow) {
	doc, err := html.ParseWithOptions(strings.NewReader(src), html.ParseOptionEnableScripting(false))
	if err != nil {
		return 0, nil
	}
	// The tree has no positions: the k-th <ul> of the tree is the k-th <ul> start
	// tag of the source (lists are never synthesized by the parser).
	tagLines := map[string][]int{}
	walkTags(src, func(tag string, _ map[string]string, line int) { tagLines[tag] = append(tagLines[tag], line) })
	seen := map[string]int{}
	var fails []FinishingRow
	lists := 0
	// skip is set inside <template> (not rendered) and inside a runtime list
	// already counted (a <tbody data-list> of an empty <table> is one list).
	var visit func(n *html.Node, skip bool)
	visit = func(n *html.Node, skip bool) {
		if n.Type == html.ElementNode {
			idx := seen[n.Data]
			seen[n.Data]++
			if n.DataAtom == atom.Template {
				skip = true
			}
			if !skip && runtimeList(n) {
				skip = true
				lists++
				scope := n.Parent
				if scope == nil || scope.Type != html.ElementNode {
					scope = n
				}
				if !hasEmptyState(scope) {
					line := 0
					if ls := tagLines[n.Data]; idx < len(ls) {
						line = ls[idx]
					}
					fails = append(fails, FinishingRow{File: file, Line: line,
						Detail: fmt.Sprintf("<%s%s> is filled at run time and has no empty state beside it", n.Data, describeNode(n))})
				}
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			visit(c, skip)
		}
	}
	visit(doc, false)
	return lists, fails
}

func htmlAttr(n *html.Node, key string) (string, bool) {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val, true
		}
	}
	return "", false
}

func describeNode(n *html.Node) string {
	if id, ok := htmlAttr(n, "id"); ok {
		return fmt.Sprintf(" id=%q", id)
	}
	if c, ok := htmlAttr(n, "class"); ok {
		return fmt.Sprintf(" class=%q", c)
	}
	return ""
}

// runtimeList reports a list container shipped without its items.
func runtimeList(n *html.Node) bool {
	for _, a := range n.Attr {
		if a.Key == "data-list" || strings.HasPrefix(a.Key, "data-list-") {
			return true
		}
	}
	switch n.DataAtom {
	case atom.Ul, atom.Ol:
		return !hasDescendant(n, func(c *html.Node) bool { return c.DataAtom == atom.Li })
	case atom.Table:
		return !hasDescendant(n, func(c *html.Node) bool { return c.DataAtom == atom.Td })
	}
	if role, _ := htmlAttr(n, "role"); strings.EqualFold(role, "list") {
		return !hasDescendant(n, func(c *html.Node) bool { return c.Type == html.ElementNode })
	}
	return false
}

// hasDescendant looks below n, outside <template>s.
func hasDescendant(n *html.Node, match func(*html.Node) bool) bool {
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if c.Type != html.ElementNode {
			continue
		}
		if c.DataAtom == atom.Template {
			continue
		}
		if match(c) || hasDescendant(c, match) {
			return true
		}
	}
	return false
}

// hasEmptyState looks in scope for an element marked empty or an empty text.
func hasEmptyState(scope *html.Node) bool {
	found := false
	var visit func(n *html.Node)
	visit = func(n *html.Node) {
		if found {
			return
		}
		switch n.Type {
		case html.ElementNode:
			for _, a := range n.Attr {
				if strings.Contains(strings.ToLower(a.Key), "empty") || strings.Contains(strings.ToLower(a.Val), "empty") {
					found = true
					return
				}
			}
		case html.TextNode:
			if emptyTextRe.MatchString(n.Data) {
				found = true
				return
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			visit(c)
		}
	}
	visit(scope)
	return found
}
