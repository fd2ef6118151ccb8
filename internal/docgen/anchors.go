package main

import (
	"regexp"
	"strings"
	"unicode"
)

var inlineLink = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)

// anchor is GitHub's anchor of a heading's text: inline links become their
// text, the text is lowercased, every character but letters, digits, spaces,
// hyphens and underscores is dropped, and spaces become hyphens. (A repeated
// heading's anchor takes -1, -2, …: anchors counts them.)
func anchor(heading string) string {
	heading = inlineLink.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
