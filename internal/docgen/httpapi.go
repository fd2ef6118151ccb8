package main

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/aetherium-engine/aetherium/api"
)

// openAPIDoc is the part of the OpenAPI document the page shows.
type openAPIDoc struct {
	Info struct {
		Title, Version, Description string
	} `json:"info"`
	Paths      map[string]map[string]operation `json:"paths"`
	Components struct {
		Schemas map[string]*schema `json:"schemas"`
	} `json:"components"`
}

type operation struct {
	OperationID string   `json:"operationId"`
	Summary     string   `json:"summary"`
	Description string   `json:"description"`
	Tags        []string `json:"tags"`
	Roles       []string `json:"x-roles"`
	Parameters  []struct {
		Name        string  `json:"name"`
		In          string  `json:"in"`
		Required    bool    `json:"required"`
		Description string  `json:"description"`
		Schema      *schema `json:"schema"`
	} `json:"parameters"`
	RequestBody *struct {
		Required bool                `json:"required"`
		Content  map[string]mediaDoc `json:"content"`
	} `json:"requestBody"`
	Responses map[string]struct {
		Description string              `json:"description"`
		Content     map[string]mediaDoc `json:"content"`
	} `json:"responses"`
}

type mediaDoc struct {
	Schema    *schema `json:"schema"`
	EventData *schema `json:"x-event-data"`
}

// httpAPIReference renders docs/reference/http-api-reference.md from
// api.OpenAPI(), the document GET /api/openapi.json serves.
func httpAPIReference(string) ([]byte, error) {
	raw, err := api.OpenAPI()
	if err != nil {
		return nil, err
	}
	var d openAPIDoc
	if err := json.Unmarshal(raw, &d); err != nil {
		return nil, err
	}
	type op struct {
		method, path string
		operation
	}
	byTag := map[string][]op{}
	for p, methods := range d.Paths {
		for m, o := range methods {
			tag := "operations"
			if len(o.Tags) > 0 {
				tag = o.Tags[0]
			}
			byTag[tag] = append(byTag[tag], op{strings.ToUpper(m), p, o})
		}
	}
	tags := make([]string, 0, len(byTag))
	for t, ops := range byTag {
		tags = append(tags, t)
		sort.Slice(ops, func(i, j int) bool {
			if ops[i].path != ops[j].path {
				return ops[i].path < ops[j].path
			}
			return ops[i].method < ops[j].method
		})
	}
	sort.Strings(tags)

	var b strings.Builder
	b.WriteString(header("HTTP API reference", "the OpenAPI document of package `api` (`api.OpenAPI`, served at `GET "+api.OpenAPIPath+"`)"))
	fmt.Fprintf(&b, "%s, version %s. %s\n\nThe [HTTP API](http-api.md) page explains the endpoints by task.\n\n",
		d.Info.Title, d.Info.Version, strings.TrimSpace(d.Info.Description))
	b.WriteString("| operation | summary |\n| --- | --- |\n")
	for _, t := range tags {
		for _, o := range byTag[t] {
			h := o.method + " " + o.path
			fmt.Fprintf(&b, "| [`%s`](#%s) | %s |\n", h, anchor(h), cell(o.Summary))
		}
	}
	for _, t := range tags {
		fmt.Fprintf(&b, "\n## %s\n", t)
		for _, o := range byTag[t] {
			fmt.Fprintf(&b, "\n### %s %s\n\n", o.method, o.path)
			if o.Summary != "" {
				fmt.Fprintf(&b, "%s\n\n", strings.TrimSpace(o.Summary))
			}
			if o.Description != "" {
				fmt.Fprintf(&b, "%s\n\n", strings.TrimSpace(o.Description))
			}
			if len(o.Roles) == 0 {
				b.WriteString("No token needed.\n\n")
			}
			if len(o.Parameters) > 0 {
				b.WriteString("| parameter | in | type | required | description |\n| --- | --- | --- | --- | --- |\n")
				for _, p := range o.Parameters {
					req := ""
					if p.Required {
						req = "yes"
					}
					typ := "string"
					doc := p.Description
					if p.Schema != nil {
						typ = refType(p.Schema)
						if len(p.Schema.Enum) > 0 {
							doc = strings.TrimSpace(doc + " One of " + enumList(p.Schema.Enum) + ".")
						}
					}
					fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", p.Name, p.In, typ, req, cell(doc))
				}
				b.WriteString("\n")
			}
			if rb := o.RequestBody; rb != nil {
				for _, media := range sortedKeys(rb.Content) {
					req := "optional"
					if rb.Required {
						req = "required"
					}
					fmt.Fprintf(&b, "Request body (%s, %s): %s.\n\n", media, req, refType(rb.Content[media].Schema))
				}
			}
			b.WriteString("| status | answer |\n| --- | --- |\n")
			for _, st := range sortedKeys(o.Responses) {
				r := o.Responses[st]
				var parts []string
				for _, media := range sortedKeys(r.Content) {
					c := r.Content[media]
					s := media
					if c.Schema != nil {
						s += " " + refType(c.Schema)
					}
					if c.EventData != nil {
						s += "; each event's data: " + refType(c.EventData)
					}
					parts = append(parts, s)
				}
				answer := cell(r.Description)
				if len(parts) > 0 {
					answer += " — " + strings.Join(parts, "; ")
				}
				fmt.Fprintf(&b, "| %s | %s |\n", st, answer)
			}
		}
	}

	b.WriteString("\n## Schemas\n")
	for _, name := range sortedKeys(d.Components.Schemas) {
		s := d.Components.Schemas[name]
		fmt.Fprintf(&b, "\n### %s\n\n", name)
		if s.Description != "" {
			fmt.Fprintf(&b, "%s\n\n", cell(s.Description))
		}
		if dis := s.Discriminator; dis != nil {
			fmt.Fprintf(&b, "One of these, by `%s`:\n\n| %s | schema |\n| --- | --- |\n", dis.PropertyName, dis.PropertyName)
			for _, v := range sortedKeys(dis.Mapping) {
				fmt.Fprintf(&b, "| `%s` | %s |\n", v, refType(&schema{Ref: dis.Mapping[v]}))
			}
			continue
		}
		if len(s.Properties) == 0 {
			fmt.Fprintf(&b, "A %s.\n", refType(s))
			if len(s.Enum) > 0 {
				fmt.Fprintf(&b, "One of %s.\n", enumList(s.Enum))
			}
			continue
		}
		b.WriteString("| field | type | required | description |\n| --- | --- | --- | --- |\n")
		for _, f := range sortedKeys(s.Properties) {
			p := s.Properties[f]
			req := ""
			if contains(s.Required, f) {
				req = "yes"
			}
			doc := p.Description
			if doc == "" && len(p.OneOf) > 0 {
				doc = p.OneOf[0].Description
			}
			if len(p.Enum) > 0 {
				doc = strings.TrimSpace(doc + " One of " + enumList(p.Enum) + ".")
			}
			if p.Const != nil {
				doc = strings.TrimSpace(fmt.Sprintf("Always `%v`. %s", p.Const, doc))
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", f, refType(p), req, cell(doc))
		}
	}
	return []byte(b.String()), nil
}

// refType names a schema's type, linking a component to its section.
func refType(s *schema) string {
	if s.Ref != "" {
		name := s.Ref[strings.LastIndex(s.Ref, "/")+1:]
		return fmt.Sprintf("[%s](#%s)", name, anchor(name))
	}
	if len(s.OneOf) > 0 && s.Discriminator == nil {
		alts := make([]string, len(s.OneOf))
		for i, o := range s.OneOf {
			alts[i] = refType(o)
		}
		return strings.Join(alts, " or ")
	}
	t := schemaType(s, nil)
	if t == "array" || strings.HasPrefix(t, "array of") {
		if s.Items != nil {
			return "array of " + refType(s.Items)
		}
	}
	if t == "any" && s.AdditionalProperties != nil {
		t = "object"
	}
	return t
}

func enumList(vals []any) string {
	out := make([]string, len(vals))
	for i, v := range vals {
		out[i] = fmt.Sprintf("`%v`", v)
	}
	return strings.Join(out, ", ")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
