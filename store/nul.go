package store

import "bytes"

// HasNUL reports a NUL character in JSON text — a raw 0 byte or a \u0000 escape
// (not an escaped backslash followed by "u0000"). PostgreSQL's text and jsonb
// cannot hold NUL, so such input is refused where it enters (the API's request
// bodies, a model's answer) instead of failing the insert that would store it.
func HasNUL(b []byte) bool {
	if bytes.IndexByte(b, 0) >= 0 {
		return true
	}
	for i := 0; ; {
		j := bytes.Index(b[i:], []byte(`\u0000`))
		if j < 0 {
			return false
		}
		at := i + j
		n := 0 // backslashes before the escape's own
		for k := at - 1; k >= 0 && b[k] == '\\'; k-- {
			n++
		}
		if n%2 == 0 {
			return true
		}
		i = at + 1
	}
}
