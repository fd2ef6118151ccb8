package store

import (
	"bytes"
	"encoding/json"
)

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

// JSONBSafe returns JSON text that PostgreSQL's jsonb accepts: valid JSON
// holding an unpaired UTF-16 surrogate escape (\ud800, which jsonb refuses
// while Go's decoder reads it as U+FFFD) is decoded and encoded again; any
// other text is returned as it is. A NUL is not changed: HasNUL refuses it
// where it enters. A model writes a tool call's arguments, so whatever it
// sends must not fail the save of its session (or of an audit row's batch).
func JSONBSafe(b []byte) []byte {
	if !bytes.Contains(bytes.ToLower(b), []byte(`\ud`)) {
		return b
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber() // numbers keep their text
	var v any
	if err := dec.Decode(&v); err != nil || dec.More() {
		return b
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return b
	}
	return bytes.TrimSuffix(out.Bytes(), []byte("\n"))
}
