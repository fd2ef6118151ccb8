package egress

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// ErrNotCanonicalizable is JSON that RFC 8785 cannot give one canonical form:
// invalid syntax, a duplicate object key (parsers disagree on which one wins, so an
// approval must not bind to either), or a number outside IEEE 754 double range.
var ErrNotCanonicalizable = errors.New("json cannot be canonicalized")

// Canonicalize returns the RFC 8785 (JSON Canonicalization Scheme) form of data:
// no whitespace, object members sorted by the UTF-16 code units of their names,
// numbers in the ECMAScript shortest round-trip form, strings with the minimal
// escaping of ECMAScript's JSON.stringify. Equal JSON values get equal bytes,
// whatever key order or number spelling they arrived in (jsonb reorders keys).
func Canonicalize(data []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var buf bytes.Buffer
	if err := canonValue(dec, &buf); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: data after the top-level value", ErrNotCanonicalizable)
	}
	return buf.Bytes(), nil
}

// ArgsHash is the hex SHA-256 of the canonical form of a call's arguments; absent
// arguments hash as the empty object the tool would decode them to.
func ArgsHash(args json.RawMessage) (string, error) {
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage("{}")
	}
	c, err := Canonicalize(args)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(c)
	return hex.EncodeToString(sum[:]), nil
}

func canonValue(dec *json.Decoder, buf *bytes.Buffer) error {
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNotCanonicalizable, err)
	}
	switch v := tok.(type) {
	case json.Delim:
		if v == '[' {
			buf.WriteByte('[')
			for i := 0; dec.More(); i++ {
				if i > 0 {
					buf.WriteByte(',')
				}
				if err := canonValue(dec, buf); err != nil {
					return err
				}
			}
			buf.WriteByte(']')
		} else {
			if err := canonObject(dec, buf); err != nil {
				return err
			}
		}
		_, err := dec.Token() // the closing delimiter
		if err != nil {
			return fmt.Errorf("%w: %v", ErrNotCanonicalizable, err)
		}
	case string:
		canonString(v, buf)
	case json.Number:
		f, err := strconv.ParseFloat(string(v), 64)
		if err != nil {
			return fmt.Errorf("%w: number %s: %v", ErrNotCanonicalizable, v, err)
		}
		s, err := CanonicalNumber(f)
		if err != nil {
			return err
		}
		buf.WriteString(s)
	case bool:
		buf.WriteString(strconv.FormatBool(v))
	case nil:
		buf.WriteString("null")
	}
	return nil
}

func canonObject(dec *json.Decoder, buf *bytes.Buffer) error {
	type member struct {
		key   string
		units []uint16
		value []byte
	}
	var members []member
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("%w: %v", ErrNotCanonicalizable, err)
		}
		key := tok.(string)
		if seen[key] {
			return fmt.Errorf("%w: duplicate key %q", ErrNotCanonicalizable, key)
		}
		seen[key] = true
		var vb bytes.Buffer
		if err := canonValue(dec, &vb); err != nil {
			return err
		}
		members = append(members, member{key, utf16.Encode([]rune(key)), vb.Bytes()})
	}
	sort.Slice(members, func(i, j int) bool { return lessUTF16(members[i].units, members[j].units) })
	buf.WriteByte('{')
	for i, m := range members {
		if i > 0 {
			buf.WriteByte(',')
		}
		canonString(m.key, buf)
		buf.WriteByte(':')
		buf.Write(m.value)
	}
	buf.WriteByte('}')
	return nil
}

func lessUTF16(a, b []uint16) bool {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return len(a) < len(b)
}

// canonString writes s as JSON.stringify does: only '"', '\\' and the control
// characters escaped (the five with short forms, the rest as lowercase \u00xx).
func canonString(s string, buf *bytes.Buffer) {
	const hexDigits = "0123456789abcdef"
	buf.WriteByte('"')
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			buf.WriteRune(r) // the decoder already made invalid UTF-8 U+FFFD
			i += size
			continue
		}
		switch c {
		case '"':
			buf.WriteString(`\"`)
		case '\\':
			buf.WriteString(`\\`)
		case '\b':
			buf.WriteString(`\b`)
		case '\f':
			buf.WriteString(`\f`)
		case '\n':
			buf.WriteString(`\n`)
		case '\r':
			buf.WriteString(`\r`)
		case '\t':
			buf.WriteString(`\t`)
		default:
			if c < 0x20 {
				buf.WriteString(`\u00`)
				buf.WriteByte(hexDigits[c>>4])
				buf.WriteByte(hexDigits[c&0xf])
			} else {
				buf.WriteByte(c)
			}
		}
		i++
	}
	buf.WriteByte('"')
}

// CanonicalNumber formats f as ECMAScript's Number.prototype.toString (RFC 8785
// section 3.2.2.3): the shortest digits that round-trip, in plain notation from
// 1e-6 up to 1e21 and in exponent notation ("1e+21", "5e-324") outside; -0 is 0.
func CanonicalNumber(f float64) (string, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return "", fmt.Errorf("%w: %v is not a JSON number", ErrNotCanonicalizable, f)
	}
	if f == 0 {
		return "0", nil
	}
	sign := ""
	if f < 0 {
		sign, f = "-", -f
	}
	format := byte('e')
	if f >= 1e-6 && f < 1e21 {
		format = 'f'
	}
	s := strconv.FormatFloat(f, format, -1, 64)
	if e := strings.IndexByte(s, 'e'); e > 0 && s[e+2] == '0' {
		s = s[:e+2] + s[e+3:] // Go writes e+09, ECMAScript e+9
	}
	return sign + s, nil
}
