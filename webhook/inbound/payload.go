package inbound

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/url"
	"strconv"
	"strings"
)

// Errors of Parse and Resolve.
var (
	// ErrTooDeep is reason too_deep.
	ErrTooDeep = errors.New("inbound webhook: payload nested too deep")
	// ErrBadJSON is reason bad_json.
	ErrBadJSON = errors.New("inbound webhook: payload is not a JSON value")
	// ErrNowhere is reason unmapped: a pointer names no value of the payload.
	ErrNowhere = errors.New("inbound webhook: JSON pointer names no value of the payload")
	// ErrPointer is an ill-formed JSON pointer (RFC 6901), refused at creation.
	ErrPointer = errors.New("invalid JSON pointer")
)

// Depth reports whether body's nesting of objects and arrays stays within
// maxDepth, in one pass over its bytes without parsing it (strings and their
// escapes skipped): a payload nested 10⁵ deep is refused for the cost of
// reading it, before encoding/json's recursive descent sees it.
func Depth(body []byte, maxDepth int) error {
	depth, inString, escaped := 0, false, false
	for _, c := range body {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
			if depth > maxDepth {
				return fmt.Errorf("%w: over %d levels", ErrTooDeep, maxDepth)
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return nil
}

// Payload extracts the JSON document of a delivery's body by its content
// type: JSON (application/json, any +json type, or no type) as it is; a form
// (application/x-www-form-urlencoded, GitHub's other content type) by its
// "payload" field. Any other type is ErrBadJSON. The signature was checked
// over the raw body before.
func Payload(contentType string, body []byte) ([]byte, error) {
	mt, _, err := mime.ParseMediaType(contentType)
	if contentType == "" {
		mt, err = "application/json", nil
	}
	switch {
	case err != nil:
		return nil, fmt.Errorf("%w: content type %q", ErrBadJSON, contentType)
	case mt == "application/json" || strings.HasSuffix(mt, "+json") || mt == "text/plain":
		return body, nil
	case mt == "application/x-www-form-urlencoded":
		form, err := url.ParseQuery(string(body))
		if err != nil || len(form["payload"]) != 1 {
			return nil, fmt.Errorf("%w: a form delivery needs exactly one payload field", ErrBadJSON)
		}
		return []byte(form.Get("payload")), nil
	default:
		return nil, fmt.Errorf("%w: content type %q (send application/json, or a form with a payload field)", ErrBadJSON, mt)
	}
}

// Parse checks the depth (Depth) and decodes doc as one JSON value, numbers
// kept as json.Number (a large integer stays exact).
func Parse(doc []byte, maxDepth int) (any, error) {
	if err := Depth(doc, maxDepth); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadJSON, err)
	}
	if _, err := dec.Token(); err == nil {
		return nil, fmt.Errorf("%w: trailing data after the value", ErrBadJSON)
	}
	return v, nil
}

// EventID is the payload's top-level "id" when it is a string (a Stripe
// event's evt_…), else "".
func EventID(v any) string {
	if m, ok := v.(map[string]any); ok {
		if id, ok := m["id"].(string); ok {
			return id
		}
	}
	return ""
}

// CheckPointer reports whether p is a JSON pointer (RFC 6901): "" (the whole
// document) or "/"-prefixed reference tokens in which "~" is followed only by
// "0" or "1".
func CheckPointer(p string) error {
	if p == "" {
		return nil
	}
	if !strings.HasPrefix(p, "/") {
		return fmt.Errorf("%w %q: must be empty or start with /", ErrPointer, p)
	}
	for i := 0; i < len(p); i++ {
		if p[i] == '~' && (i+1 == len(p) || (p[i+1] != '0' && p[i+1] != '1')) {
			return fmt.Errorf("%w %q: ~ must be followed by 0 or 1", ErrPointer, p)
		}
	}
	return nil
}

// Resolve returns the value p names in v (a decoded JSON document), or an
// error wrapping ErrNowhere. An array index is decimal digits without a
// leading zero; "-" (past the end) names nothing.
func Resolve(v any, p string) (any, error) {
	if err := CheckPointer(p); err != nil {
		return nil, err
	}
	if p == "" {
		return v, nil
	}
	for _, tok := range strings.Split(p[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch cur := v.(type) {
		case map[string]any:
			next, ok := cur[tok]
			if !ok {
				return nil, fmt.Errorf("%w: %q (no member %q)", ErrNowhere, p, tok)
			}
			v = next
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(cur) || (len(tok) > 1 && tok[0] == '0') || tok[0] == '+' {
				return nil, fmt.Errorf("%w: %q (no index %q of %d)", ErrNowhere, p, tok, len(cur))
			}
			v = cur[i]
		default:
			return nil, fmt.Errorf("%w: %q (%q is inside a scalar)", ErrNowhere, p, tok)
		}
	}
	return v, nil
}

// Map resolves every variable's pointer in v: the variables a run is
// submitted with. The first pointer to nowhere is the error (ErrNowhere).
func Map(v any, mapping map[string]string) (map[string]any, error) {
	out := make(map[string]any, len(mapping))
	for name, p := range mapping {
		val, err := Resolve(v, p)
		if err != nil {
			return nil, fmt.Errorf("variable %s: %w", name, err)
		}
		out[name] = val
	}
	return out, nil
}
