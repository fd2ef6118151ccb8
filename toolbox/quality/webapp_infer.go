package quality

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
)

// maxInferDepth bounds how deep a response is walked: deeper values are typed
// but not described (a hostile or recursive document cannot blow the stack).
const maxInferDepth = 32

// inferFromJSON infers a schema from one JSON body.
func inferFromJSON(body []byte) (*openapi3.Schema, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	// Numbers stay text, so 3 and 3.5 tell integer from number.
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("not JSON: data after the first value")
	}
	return inferValue(v, 0), nil
}

// inferValue types one value. Objects list their properties; a property is
// required when it is present and not null. Arrays describe their items as the
// merge of every element's schema.
func inferValue(v any, depth int) *openapi3.Schema {
	s := &openapi3.Schema{}
	switch x := v.(type) {
	case nil:
		// A null says nothing about the type, only that null is allowed.
		s.Nullable = true
	case bool:
		s.Type = &openapi3.Types{openapi3.TypeBoolean}
	case json.Number:
		if strings.ContainsAny(string(x), ".eE") {
			s.Type = &openapi3.Types{openapi3.TypeNumber}
		} else {
			s.Type = &openapi3.Types{openapi3.TypeInteger}
		}
	case string:
		s.Type = &openapi3.Types{openapi3.TypeString}
	case []any:
		s.Type = &openapi3.Types{openapi3.TypeArray}
		var items *openapi3.Schema
		if depth < maxInferDepth {
			for _, it := range x {
				items = mergeInferred(items, inferValue(it, depth+1))
			}
		}
		if items == nil {
			items = &openapi3.Schema{}
		}
		s.Items = openapi3.NewSchemaRef("", items)
	case map[string]any:
		s.Type = &openapi3.Types{openapi3.TypeObject}
		if depth >= maxInferDepth {
			break
		}
		s.Properties = openapi3.Schemas{}
		for k, val := range x {
			s.Properties[k] = openapi3.NewSchemaRef("", inferValue(val, depth+1))
			if val != nil {
				s.Required = append(s.Required, k)
			}
		}
		sort.Strings(s.Required)
	}
	return s
}

// mixedTypes describes a value seen with unrelated types: its schema has no
// type (any value), which is the honest answer OpenAPI 3.0 allows.
const mixedTypes = "values of several types"

// mergeInferred widens a to also describe b: integer and number make number,
// null makes nullable, objects take the union of properties and the
// intersection of required ones, array items merge, and unrelated types leave
// the type open (mixedTypes).
func mergeInferred(a, b *openapi3.Schema) *openapi3.Schema {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	case unknownSchema(a):
		out := *b
		out.Nullable = a.Nullable || b.Nullable
		return &out
	case unknownSchema(b):
		out := *a
		out.Nullable = a.Nullable || b.Nullable
		return &out
	}
	out := &openapi3.Schema{Nullable: a.Nullable || b.Nullable}
	ta, tb := schemaType(a), schemaType(b)
	switch {
	case ta != "" && ta == tb:
		out.Type = a.Type
	case (ta == openapi3.TypeInteger && tb == openapi3.TypeNumber) || (ta == openapi3.TypeNumber && tb == openapi3.TypeInteger):
		out.Type = &openapi3.Types{openapi3.TypeNumber}
		return out
	default:
		out.Description = mixedTypes
		return out
	}
	switch ta {
	case openapi3.TypeObject:
		if a.Properties == nil && b.Properties == nil {
			break
		}
		out.Properties = openapi3.Schemas{}
		for k, p := range a.Properties {
			out.Properties[k] = p
		}
		for k, p := range b.Properties {
			if q, ok := out.Properties[k]; ok {
				out.Properties[k] = openapi3.NewSchemaRef("", mergeInferred(q.Value, p.Value))
			} else {
				out.Properties[k] = p
			}
		}
		for _, r := range a.Required {
			if inStrings(b.Required, r) {
				out.Required = append(out.Required, r)
			}
		}
	case openapi3.TypeArray:
		var ia, ib *openapi3.Schema
		if a.Items != nil {
			ia = a.Items.Value
		}
		if b.Items != nil {
			ib = b.Items.Value
		}
		out.Items = openapi3.NewSchemaRef("", mergeInferred(ia, ib))
	}
	return out
}

// unknownSchema says nothing about a value's type: a null seen alone, or the
// items of an empty array. Merging it with a typed schema keeps that type.
func unknownSchema(s *openapi3.Schema) bool {
	return s.Type == nil && s.Description == "" && s.Properties == nil && s.Items == nil
}

// schemaType is a schema's single type, "" when it has none or several.
func schemaType(s *openapi3.Schema) string {
	if s == nil || s.Type == nil || len(*s.Type) != 1 {
		return ""
	}
	return (*s.Type)[0]
}
