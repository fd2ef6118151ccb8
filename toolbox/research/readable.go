package research

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"golang.org/x/net/html"
)

// skipped elements carry no readable text (or only page chrome).
var skipped = map[string]bool{
	"script": true, "style": true, "noscript": true, "template": true, "svg": true, "canvas": true,
	"iframe": true, "object": true, "embed": true, "head": true, "nav": true, "header": true,
	"footer": true, "aside": true, "form": true, "button": true, "select": true, "input": true,
	"textarea": true, "dialog": true, "menu": true,
}

// blocks start and end on a line of their own.
var blocks = map[string]bool{
	"p": true, "div": true, "section": true, "article": true, "main": true, "blockquote": true,
	"figure": true, "figcaption": true, "table": true, "tr": true, "dl": true, "dt": true, "dd": true,
	"ul": true, "ol": true, "address": true, "details": true, "summary": true, "body": true, "html": true,
}

// HTMLText renders an HTML tree as Markdown-like text: headings as #, list items as
// "-" or "1.", block quotes with ">", preformatted text fenced, table cells split by
// " | ", and links as numbered footnotes listed at the end (absolute, http(s) only).
// Scripts, styles, forms and page chrome are left out.
func HTMLText(n *html.Node, base *url.URL) string {
	w := &textWriter{base: base, linkNo: map[string]int{}}
	w.node(n, 0)
	out := w.finish()
	if len(w.links) > 0 {
		var b strings.Builder
		b.WriteString(out)
		b.WriteString("\n\nLinks:\n")
		for i, l := range w.links {
			fmt.Fprintf(&b, "[%d] %s\n", i+1, l)
		}
		out = strings.TrimRight(b.String(), "\n")
	}
	return out
}

type textWriter struct {
	b      strings.Builder
	base   *url.URL
	links  []string
	linkNo map[string]int
	// prefix is written at the start of each line (block quotes).
	prefix string
	// space is a pending blank between inline runs.
	space bool
	// depth guards against pathological nesting.
	depth int
}

var blankLines = regexp.MustCompile(`\n[ \t>]*\n([ \t>]*\n)+`)

func (w *textWriter) finish() string {
	s := blankLines.ReplaceAllString(w.b.String(), "\n\n")
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " \t")
	}
	return strings.TrimSpace(strings.Join(lines, "\n"))
}

// newline ends the current line (once).
func (w *textWriter) newline() {
	s := w.b.String()
	if s != "" && !strings.HasSuffix(s, "\n") {
		w.b.WriteString("\n")
	}
	w.space = false
}

// paragraph leaves a blank line.
func (w *textWriter) paragraph() {
	w.newline()
	if s := w.b.String(); s != "" && !strings.HasSuffix(s, "\n\n") {
		w.b.WriteString(w.prefix + "\n")
	}
}

func (w *textWriter) startLine() {
	if s := w.b.String(); s == "" || strings.HasSuffix(s, "\n") {
		w.b.WriteString(w.prefix)
	}
}

func (w *textWriter) text(s string) {
	// Whitespace collapses to one blank, written only between words (and not at
	// the start of a line), without splitting s into a slice of words.
	pending := w.space
	wrote := false
	for i := 0; i < len(s); {
		j := i
		for j < len(s) && !isSpace(s[j]) {
			j++
		}
		if j > i {
			if !wrote {
				w.startLine()
			}
			if cur := w.b.String(); (pending || wrote) && cur != "" && !strings.HasSuffix(cur, "\n") && !strings.HasSuffix(cur, " ") && (w.prefix == "" || !strings.HasSuffix(cur, w.prefix)) {
				w.b.WriteByte(' ')
			}
			w.b.WriteString(s[i:j])
			wrote, pending = true, false
		}
		if j < len(s) {
			pending = true
		}
		for j < len(s) && isSpace(s[j]) {
			j++
		}
		i = j
	}
	w.space = pending
}

func isSpace(c byte) bool { return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\f' }

func (w *textWriter) children(n *html.Node, list int) {
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		w.node(c, list)
	}
}

// node renders n; list is the nesting depth of lists around it.
func (w *textWriter) node(n *html.Node, list int) {
	if w.depth > 512 {
		return
	}
	w.depth++
	defer func() { w.depth-- }()
	switch n.Type {
	case html.TextNode:
		w.text(n.Data)
		return
	case html.DocumentNode:
		w.children(n, list)
		return
	case html.ElementNode:
	default:
		return
	}
	tag := n.Data
	if skipped[tag] || attr(n, "hidden") != "" || attr(n, "aria-hidden") == "true" {
		return
	}
	switch tag {
	case "h1", "h2", "h3", "h4", "h5", "h6":
		w.paragraph()
		w.startLine()
		w.b.WriteString(strings.Repeat("#", int(tag[1]-'0')) + " ")
		w.space = false
		w.children(n, list)
		w.paragraph()
	case "br":
		w.newline()
	case "hr":
		w.paragraph()
		w.startLine()
		w.b.WriteString("---")
		w.paragraph()
	case "pre":
		w.paragraph()
		w.startLine()
		w.b.WriteString("```\n")
		w.b.WriteString(strings.Trim(textOf(n), "\n"))
		w.b.WriteString("\n```")
		w.paragraph()
	case "li":
		w.newline()
		w.startLine()
		marker := "- "
		if p := n.Parent; p != nil && p.Data == "ol" {
			i := 1
			for s := n.PrevSibling; s != nil; s = s.PrevSibling {
				if s.Type == html.ElementNode && s.Data == "li" {
					i++
				}
			}
			marker = fmt.Sprintf("%d. ", i)
		}
		w.b.WriteString(strings.Repeat("  ", max(list-1, 0)) + marker)
		w.space = false
		w.children(n, list)
		w.newline()
	case "ul", "ol":
		if list == 0 {
			w.paragraph()
		} else {
			w.newline()
		}
		w.children(n, list+1)
		if list == 0 {
			w.paragraph()
		}
	case "blockquote":
		w.paragraph()
		old := w.prefix
		w.prefix += "> "
		w.children(n, list)
		w.newline()
		w.prefix = old
		w.paragraph()
	case "td", "th":
		if s := w.b.String(); !strings.HasSuffix(s, "\n") && s != "" {
			w.b.WriteString(" | ")
			w.space = false
		}
		w.children(n, list)
	case "img":
		if alt := clean(attr(n, "alt")); alt != "" {
			w.text(" [image: " + alt + "] ")
		}
	case "a":
		w.children(n, list)
		if u := w.link(attr(n, "href")); u != "" {
			no, ok := w.linkNo[u]
			if !ok {
				w.links = append(w.links, u)
				no = len(w.links)
				w.linkNo[u] = no
			}
			w.b.WriteString(fmt.Sprintf("[%d]", no))
		}
	default:
		if blocks[tag] {
			w.paragraph()
			w.children(n, list)
			w.paragraph()
			return
		}
		w.children(n, list)
	}
}

// link resolves href against the page; only http(s) targets become footnotes.
func (w *textWriter) link(href string) string {
	href = strings.TrimSpace(href)
	if href == "" || strings.HasPrefix(href, "#") {
		return ""
	}
	u, err := url.Parse(href)
	if err != nil {
		return ""
	}
	if w.base != nil {
		u = w.base.ResolveReference(u)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return ""
	}
	u.Fragment = ""
	return u.String()
}
