package fingerprint

import (
	"strings"
	"unicode/utf8"
)

// The byte classes of eachRun.
var (
	isB64 = class(tokenByte)
	isHex = class(func(c byte) bool { return unhex(c) >= 0 })
)

func class(in func(byte) bool) (t [256]bool) {
	for c := range 256 {
		t[c] = in(byte(c))
	}
	return t
}

// eachRun calls f with each maximal run of bytes in the class of at least min
// bytes (base64's trailing '=' padding is not part of a run), until f returns
// false.
func eachRun(s string, in *[256]bool, min int, f func(string) bool) {
	for i := 0; i < len(s); {
		if !in[s[i]] {
			i++
			continue
		}
		j := i + 1
		for j < len(s) && in[s[j]] {
			j++
		}
		if j-i >= min && !f(s[i:j]) {
			return
		}
		i = j
	}
}

var b64val = func() (v [256]int8) {
	for i := range v {
		v[i] = -1
	}
	const std = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	for i := range len(std) {
		v[std[i]] = int8(i)
	}
	v['-'], v['_'] = 62, 63
	return v
}()

// b64 appends to dst the decoding of a run of the base64 or base64url
// alphabet (either, or both mixed) without padding. Carried decodes a run
// aligned at its start and, when its length is not a multiple of 4, also at
// its end (a run whose first characters are not part of the encoding, like a
// "sk_" prefix).
func b64(dst []byte, s string) []byte {
	var acc uint32
	n := 0
	for i := 0; i < len(s); i++ {
		acc = acc<<6 | uint32(b64val[s[i]])
		n++
		if n == 4 {
			dst = append(dst, byte(acc>>16), byte(acc>>8), byte(acc))
			acc, n = 0, 0
		}
	}
	switch n {
	case 2:
		dst = append(dst, byte(acc>>4))
	case 3:
		dst = append(dst, byte(acc>>10), byte(acc>>2))
	}
	return dst
}

// hexPairs appends to dst the decoding of a run of hex digits (a last odd
// digit is dropped; Carried decodes an odd run also one digit in).
func hexPairs(dst []byte, s string) []byte {
	for i := 0; i+1 < len(s); i += 2 {
		dst = append(dst, byte(unhex(s[i])<<4|unhex(s[i+1])))
	}
	return dst
}

// decodePercent decodes %XX escapes (and '+' as a space) in s; ok is false
// when s has none.
func decodePercent(s string) (string, bool) {
	i := strings.IndexByte(s, '%')
	for i >= 0 && i+2 < len(s) && (unhex(s[i+1]) < 0 || unhex(s[i+2]) < 0) {
		j := strings.IndexByte(s[i+1:], '%')
		if j < 0 {
			return "", false
		}
		i += 1 + j
	}
	if i < 0 || i+2 >= len(s) {
		return "", false
	}
	b := make([]byte, 0, len(s))
	b = append(b, s[:i]...)
	for ; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '%' && i+2 < len(s) && unhex(s[i+1]) >= 0 && unhex(s[i+2]) >= 0:
			b = append(b, byte(unhex(s[i+1])<<4|unhex(s[i+2])))
			i += 2
		case c == '+':
			b = append(b, ' ')
		default:
			b = append(b, c)
		}
	}
	return string(b), true
}

// jsonUnescape undoes one level of JSON string escaping (\uXXXX, \n, \/ …)
// wherever a backslash is, so that an encoded run the JSON escaped ("\/" in
// base64) reads whole. Anything that is not an escape is kept.
func jsonUnescape(s string) string {
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 == len(s) {
			b = append(b, c)
			continue
		}
		switch e := s[i+1]; e {
		case '"', '\\', '/', '\'':
			b = append(b, e)
			i++
		case 'n':
			b = append(b, '\n')
			i++
		case 't':
			b = append(b, '\t')
			i++
		case 'r', 'b', 'f':
			b = append(b, ' ')
			i++
		case 'u':
			if r, ok := hex4(s, i+2); ok {
				b = utf8.AppendRune(b, r)
				i += 5
			} else {
				b = append(b, c)
			}
		default:
			b = append(b, c)
		}
	}
	return string(b)
}
