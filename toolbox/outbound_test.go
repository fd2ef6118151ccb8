package toolbox_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/toolbox"
)

// urlFields are argument names that carry a destination.
var urlFields = map[string]bool{"url": true, "urls": true, "endpoint": true, "base_url": true, "page": true, "href": true, "uri": true}

// takesURL walks a JSON schema for a field that names a destination (by name or
// by format uri) at any depth.
func takesURL(schema any) (string, bool) {
	switch s := schema.(type) {
	case map[string]any:
		if f, _ := s["format"].(string); f == "uri" || f == "url" || f == "uri-reference" {
			return "(format " + f + ")", true
		}
		if props, ok := s["properties"].(map[string]any); ok {
			for name, p := range props {
				if urlFields[name] {
					return name, true
				}
				if where, ok := takesURL(p); ok {
					return name + "." + where, true
				}
			}
		}
		for _, k := range []string{"items", "additionalProperties", "$defs", "definitions", "anyOf", "oneOf", "allOf"} {
			if where, ok := takesURL(s[k]); ok {
				return where, true
			}
		}
		if k, ok := s["$defs"].(map[string]any); ok {
			for _, d := range k {
				if where, ok := takesURL(d); ok {
					return where, true
				}
			}
		}
	case []any:
		for _, it := range s {
			if where, ok := takesURL(it); ok {
				return where, true
			}
		}
	}
	return "", false
}

// The outbound set is derived from the schemas, not listed: every tool that takes
// a URL is registered as outbound, so the egress and DLP gate sees its calls (a
// URL tool missing from the set would not be checked at all).
func TestEveryURLToolIsOutbound(t *testing.T) {
	t.Parallel()
	reg, err := toolbox.New(toolbox.Deps{})
	require.NoError(t, err)
	var urlTools []string
	for _, name := range reg.Names() {
		spec, ok := reg.Spec(name)
		require.True(t, ok)
		var schema any
		require.NoError(t, json.Unmarshal(spec.Schema, &schema), name)
		if where, ok := takesURL(schema); ok {
			urlTools = append(urlTools, name)
			require.True(t, spec.Outbound, "%s takes a URL (%s) but is not registered with tools.Outbound(): its calls would skip the egress and DLP gate", name, where)
		}
	}
	// The walk itself must find what it is for.
	require.Subset(t, urlTools, []string{"http_request", "http_health_check", "web_fetch", "validate_web_app", "capture_api_schema"})
}

func TestTakesURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		schema string
		want   bool
	}{
		{`{"properties":{"url":{"type":"string"}}}`, true},
		{`{"properties":{"target":{"type":"string","format":"uri"}}}`, true},
		{`{"properties":{"pages":{"type":"array","items":{"properties":{"page":{"type":"string"}}}}}}`, true},
		{`{"$defs":{"X":{"properties":{"base_url":{}}}},"properties":{"x":{"$ref":"#/$defs/X"}}}`, true},
		{`{"properties":{"path":{"type":"string"},"content":{"type":"string"}}}`, false},
	} {
		var s any
		require.NoError(t, json.Unmarshal([]byte(tc.schema), &s))
		_, got := takesURL(s)
		require.Equal(t, tc.want, got, tc.schema)
	}
}
