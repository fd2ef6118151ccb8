// Package script reads the speaker lines of a voice-over script in the shapes
// agents write them (seed, AudioTools):
//
//	[HOST]                 a cue on its own line: the lines below are HOST's,
//	PIXEL: words           unless a line names its own speaker
//	NAME: words
//	**NAME:** words        (also **NAME**: words)
//	**Host:**              a bold cue on its own line: the words below it are Host's
//
// Stage directions ((laughs), [music fades], *a door creaks*, SFX: thunder),
// markdown headings, rules, code fences, comments and blank lines are not
// spoken. The same parse gives tts_render its lines and a node's
// required_output its spoken-word count, so the two can never disagree.
package script

import (
	"regexp"
	"strings"
	"unicode"
)

// Line is one spoken line.
type Line struct {
	// Speaker is the speaker as first written in the script (Host and HOST are
	// one speaker, spelled as it first appeared).
	Speaker string `json:"speaker"`
	// Text is what is spoken: directions and markdown emphasis removed.
	Text string `json:"text"`
	// Words is Text's word count.
	Words int `json:"words"`
	// SourceLine is the 1-based line of the script it starts on.
	SourceLine int `json:"source_line"`
}

// Script is a parsed script.
type Script struct {
	Lines []Line `json:"lines"`
	// Words is the spoken-word count: the sum of the lines' words.
	Words int `json:"words"`
}

// Speakers are the script's speakers in order of first appearance.
func (s Script) Speakers() []string {
	seen := map[string]bool{}
	var out []string
	for _, l := range s.Lines {
		if k := Key(l.Speaker); !seen[k] {
			seen[k] = true
			out = append(out, l.Speaker)
		}
	}
	return out
}

// WordsBy counts the spoken words of each speaker (by Key).
func (s Script) WordsBy() map[string]int {
	out := map[string]int{}
	for _, l := range s.Lines {
		out[Key(l.Speaker)] += l.Words
	}
	return out
}

// Key is a speaker's identity: case and surrounding space do not matter.
func Key(speaker string) string { return strings.ToLower(strings.TrimSpace(speaker)) }

// SpokenWords is the spoken-word count of text (Parse(text).Words).
func SpokenWords(text string) int { return Parse(text).Words }

// MaxSpeakerRunes bounds a speaker name: longer "NAME:" prefixes are prose.
const MaxSpeakerRunes = 40

var (
	// [HOST] or [Dr. Smith] alone on a line.
	bracketCue = regexp.MustCompile(`^\[([^\[\]]+)\]$`)
	// **Host:** or **Host**: or __Host:__ alone on a line (or followed by words).
	boldCue = regexp.MustCompile(`^(\*\*|__)([^*_:]+?)(?::(\*\*|__)|(\*\*|__):)\s*(.*)$`)
	// NAME: words (the name has no markdown of its own).
	plainCue = regexp.MustCompile(`^([^:*_\[\]()<>#"]+?):\s*(.*)$`)
	// Inline directions: (laughs), [music], *whispers*, _aside_ that stand alone.
	inlineParen  = regexp.MustCompile(`\([^()]*\)`)
	inlineSquare = regexp.MustCompile(`\[[^\[\]]*\]`)
	inlineStar   = regexp.MustCompile(`(^|\s)\*[^*\s][^*]*\*($|[\s.,;:!?])`)
	inlineUnder  = regexp.MustCompile(`(^|\s)_[^_\s][^_]*_($|[\s.,;:!?])`)
	listMark     = regexp.MustCompile(`^(?:[-*+]|\d+[.)])\s+`)
	ruleLine     = regexp.MustCompile(`^(?:-{3,}|\*{3,}|_{3,}|={3,})$`)
)

// directions are labels that look like speakers but introduce what is not
// spoken (NAME: words with one of these names is a direction).
var directions = map[string]bool{
	"sfx": true, "fx": true, "sound": true, "sound effect": true, "music": true, "note": true, "notes": true,
	"scene": true, "setting": true, "title": true, "episode": true, "duration": true, "runtime": true,
	"length": true, "time": true, "date": true, "cast": true, "characters": true, "direction": true,
	"stage direction": true, "cue": true, "pause": true, "beat": true, "intro": true, "outro": true,
	"transition": true, "cut to": true, "fade in": true, "fade out": true, "ambience": true,
	"applause": true, "laughter": true, "laughs": true, "silence": true, "break": true, "end": true,
	"theme": true, "jingle": true, "segment": true, "part": true, "act": true, "voice": true,
	"format": true, "tone": true, "summary": true, "description": true, "source": true, "url": true,
	"http": true, "https": true, "author": true, "written by": true, "word count": true,
}

// Parse reads every speaker line of text. It never fails: what it cannot read
// as speech is not spoken.
func Parse(text string) Script {
	var (
		out     Script
		current string // the speaker a cue line set, "" when none
		fence   bool   // inside a ``` code fence
		comment bool   // inside a multi-line <!-- comment -->
		first   = map[string]string{}
	)
	speaker := func(name string) string {
		k := Key(name)
		if s, ok := first[k]; ok {
			return s
		}
		first[k] = name
		return name
	}
	add := func(who, words string, n int) {
		t := spoken(words)
		if t == "" {
			return
		}
		c := countWords(t)
		if c == 0 {
			return
		}
		out.Lines = append(out.Lines, Line{Speaker: speaker(who), Text: t, Words: c, SourceLine: n})
		out.Words += c
	}
	for i, raw := range strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n") {
		n := i + 1
		line := strings.TrimSpace(strings.TrimPrefix(raw, "\ufeff"))
		if comment {
			if _, after, ok := strings.Cut(line, "-->"); ok {
				comment = false
				line = strings.TrimSpace(after)
			} else {
				continue
			}
		}
		if strings.HasPrefix(line, "```") || strings.HasPrefix(line, "~~~") {
			fence = !fence
			continue
		}
		if fence {
			continue
		}
		line = stripComments(line, &comment)
		// Block quotes and list bullets carry lines too.
		for {
			l := strings.TrimSpace(strings.TrimPrefix(line, ">"))
			l = listMark.ReplaceAllString(l, "")
			if l == line {
				break
			}
			line = l
		}
		switch {
		case line == "":
			continue
		case strings.HasPrefix(line, "#"), ruleLine.MatchString(line):
			// A heading or a rule starts a new section: its speaker must be cued
			// again.
			current = ""
			continue
		}
		if m := bracketCue.FindStringSubmatch(line); m != nil {
			if name, ok := speakerName(m[1]); ok && !directions[Key(name)] {
				current = name
			}
			// Otherwise a stage direction ([music fades in]).
			continue
		}
		if m := boldCue.FindStringSubmatch(line); m != nil {
			name, ok := speakerName(m[2])
			if ok && !directions[Key(name)] {
				if rest := strings.TrimSpace(m[5]); rest != "" {
					add(name, rest, n)
				} else {
					current = name
				}
				continue
			}
			if ok {
				continue // **SFX:** thunder
			}
		}
		if m := plainCue.FindStringSubmatch(line); m != nil {
			if name, ok := speakerName(m[1]); ok {
				if directions[Key(name)] {
					continue
				}
				if rest := strings.TrimSpace(m[2]); rest != "" {
					add(name, rest, n)
				} else {
					current = name // HOST: alone on its line
				}
				continue
			}
		}
		if isDirection(line) {
			continue
		}
		if current != "" {
			add(current, line, n)
		}
		// Prose with no speaker (a description, a note) is not spoken.
	}
	return out
}

// stripComments removes <!-- … --> from line, noting one left open.
func stripComments(line string, open *bool) string {
	for {
		before, after, ok := strings.Cut(line, "<!--")
		if !ok {
			return line
		}
		_, rest, closed := strings.Cut(after, "-->")
		if !closed {
			*open = true
			return strings.TrimSpace(before)
		}
		line = strings.TrimSpace(before + " " + rest)
	}
}

// speakerName checks s is a name: 1-4 capitalised words (HOST, Pixel, Dr.
// Smith), at most MaxSpeakerRunes runes, no sentence punctuation. Capitals
// tell a speaker from prose with a colon ("here is the thing: …") and a
// bracketed speaker from a bracketed direction ([music fades in]).
func speakerName(s string) (string, bool) {
	s = strings.TrimSpace(strings.Trim(strings.TrimSpace(s), "*_"))
	if s == "" || len([]rune(s)) > MaxSpeakerRunes || !unicode.IsLetter([]rune(s)[0]) {
		return "", false
	}
	if strings.ContainsAny(s, ",;!?\"`\t/\\=") || len(strings.Fields(s)) > 4 {
		return "", false
	}
	for _, r := range s {
		if !(unicode.IsLetter(r) || unicode.IsDigit(r) || r == ' ' || r == '.' || r == '-' || r == '\'' || r == '_' || r == '&') {
			return "", false
		}
	}
	words := strings.Fields(s)
	for _, w := range words {
		if r := []rune(w)[0]; !unicode.IsUpper(r) && !unicode.IsDigit(r) {
			return "", false
		}
	}
	return strings.Join(words, " "), true
}

// isDirection is a line that is wholly a stage direction: (…), […], *…*, _…_.
func isDirection(line string) bool {
	for _, p := range [][2]string{{"(", ")"}, {"[", "]"}, {"*", "*"}, {"_", "_"}} {
		if len(line) >= 2 && strings.HasPrefix(line, p[0]) && strings.HasSuffix(line, p[1]) {
			inner := strings.Trim(line, p[0]+p[1])
			if p[0] == "*" || p[0] == "_" {
				// **bold**-only lines are emphasis of a spoken line only when a
				// speaker is cued; an *italic* line is a direction.
				if strings.HasPrefix(line, "**") || strings.HasPrefix(line, "__") {
					continue
				}
			}
			if !strings.ContainsAny(inner, p[0]+p[1]) {
				return true
			}
		}
	}
	return false
}

// spoken is the words of s as they are said: inline directions dropped,
// markdown emphasis and links reduced to their text, space collapsed.
func spoken(s string) string {
	s = inlineParen.ReplaceAllString(s, " ")
	s = inlineSquare.ReplaceAllString(s, " ")
	s = inlineStar.ReplaceAllString(s, "$1 $2")
	s = inlineUnder.ReplaceAllString(s, "$1 $2")
	s = strings.NewReplacer("**", "", "__", "", "`", "", "*", "", "~~", "").Replace(s)
	return strings.Join(strings.Fields(s), " ")
}

// countWords counts the words with a letter or a digit ("—" and "..." are not
// words; "don't" and "2026" are).
func countWords(s string) int {
	n := 0
	for _, w := range strings.Fields(s) {
		if strings.IndexFunc(w, func(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }) >= 0 {
			n++
		}
	}
	return n
}
