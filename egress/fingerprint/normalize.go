package fingerprint

import (
	"unicode"
	"unicode/utf8"
)

// appendNorm appends the normalized form of s to dst: ASCII letters and digits
// lower-cased, other letters and digits simply folded (unicode.ToLower, and the
// fullwidth forms U+FF10–FF5A mapped to ASCII), everything else dropped —
// whitespace, punctuation, symbols, control and format characters (a zero-width
// space hides nothing). A run of backslashes with the escape after it is dropped
// as a whole (\n, \t, \", \/, \\\" …) and \uXXXX becomes its character, at any
// nesting depth of JSON or source-code strings, so a JSON argument normalizes as
// the text it encodes. Both sides, the private text and the outbound one, go
// through it, so a literal "\n" in a private source file matches its JSON form.
func appendNorm(dst []byte, s string) []byte {
	for i := 0; i < len(s); {
		if f := fold[s[i]]; f > 1 {
			dst = append(dst, f)
			i++
		} else if f == 0 {
			i++
		} else {
			dst, i = normSlow(dst, s, i)
		}
	}
	return dst
}

// normSlow normalizes the backslash escape or the multi-byte character at
// s[i] and returns where the next one starts.
func normSlow(dst []byte, s string, i int) ([]byte, int) {
	if s[i] != '\\' {
		r, n := utf8.DecodeRuneInString(s[i:])
		return appendRune(dst, r), i + n
	}
	j := i
	for j < len(s) && s[j] == '\\' {
		j++
	}
	if j == len(s) {
		return dst, j
	}
	switch s[j] {
	case 'n', 't', 'r', 'b', 'f', 'v', '"', '\'', '/':
		return dst, j + 1
	case 'u':
		if r, ok := hex4(s, j+1); ok {
			return appendRune(dst, r), j + 5
		}
	}
	return dst, j
}

// rawSpan returns the bytes of s whose normalized form is the normalized
// form's [qa, qb).
func rawSpan(s string, qa, qb int) (from, to int) {
	n, from := 0, -1
	var buf [8]byte
	for i := 0; i < len(s); {
		out, j := buf[:0], i+1
		if f := fold[s[i]]; f > 1 {
			out = append(out, f)
		} else if f == 1 {
			out, j = normSlow(out, s, i)
		}
		if len(out) > 0 {
			if from < 0 && n+len(out) > qa {
				from = i
			}
			if n += len(out); n >= qb {
				return from, j
			}
		}
		i = j
	}
	return max(from, 0), len(s)
}

// spaced reports whether the characters of s[from:to] are spread out: a
// separator (whitespace or punctuation, not an escape's backslash) between
// most of its n normalized characters.
func spaced(s string, n int) bool {
	seps := 0
	for i := 0; i < len(s); i++ {
		if c := s[i]; fold[c] == 0 && c != '\\' {
			seps++
		}
	}
	return n > 1 && seps*3 >= (n-1)*2
}

// fold maps an ASCII byte to its normalized form: the lower-case letter or
// digit, 0 to drop it; 1 for the bytes appendNorm reads further (a backslash,
// the first byte of a multi-byte character).
var fold = func() (t [256]byte) {
	for c := range 256 {
		switch {
		case c >= 'a' && c <= 'z' || c >= '0' && c <= '9':
			t[c] = byte(c)
		case c >= 'A' && c <= 'Z':
			t[c] = byte(c) + 'a' - 'A'
		case c == '\\' || c >= utf8.RuneSelf:
			t[c] = 1
		}
	}
	return t
}()

// appendRune appends the normalized form of one character (nothing when it is
// neither a letter nor a digit).
func appendRune(dst []byte, r rune) []byte {
	switch {
	case r < utf8.RuneSelf:
		c := byte(r)
		switch {
		case c >= 'a' && c <= 'z' || c >= '0' && c <= '9':
			return append(dst, c)
		case c >= 'A' && c <= 'Z':
			return append(dst, c+('a'-'A'))
		}
		return dst
	case r >= 0xFF10 && r <= 0xFF5A: // fullwidth digits and letters: the cheap part of NFKC
		return appendRune(dst, r-0xFEE0)
	case unicode.IsLetter(r) || unicode.IsDigit(r):
		return utf8.AppendRune(dst, unicode.ToLower(r))
	}
	return dst
}

// hex4 reads four hex digits of s at i.
func hex4(s string, i int) (rune, bool) {
	if i+4 > len(s) {
		return 0, false
	}
	var r rune
	for k := i; k < i+4; k++ {
		v := unhex(s[k])
		if v < 0 {
			return 0, false
		}
		r = r<<4 | rune(v)
	}
	return r, true
}

func unhex(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c - 'a' + 10)
	case c >= 'A' && c <= 'F':
		return int(c - 'A' + 10)
	}
	return -1
}

// reverseRunes returns b with its characters (not its bytes) in reverse order.
func reverseRunes(dst, b []byte) []byte {
	dst = dst[:0]
	for i := len(b); i > 0; {
		if b[i-1] < utf8.RuneSelf {
			dst = append(dst, b[i-1])
			i--
			continue
		}
		_, n := utf8.DecodeLastRune(b[:i])
		dst = append(dst, b[i-n:i]...)
		i -= n
	}
	return dst
}
