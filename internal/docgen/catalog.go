package main

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/aetherium-engine/aetherium/tools"
	// The one import of the package that assembles the server classes: when it
	// moves, this line and registry below are the whole change.
	"github.com/aetherium-engine/aetherium/toolbox"
)

// registry is every tool this build registers, as the fleet's router and the
// API's catalog see them (a catalog-only registry: no store, executor or device).
func registry() (*tools.Registry, error) { return toolbox.New(toolbox.Deps{}) }

// toolCatalog renders docs/reference/tool-catalog.md from the registrations: each
// tool's server group, tier, gate flags, description and the arguments of the JSON
// schema the model sees.
func toolCatalog(string) ([]byte, error) {
	reg, err := registry()
	if err != nil {
		return nil, err
	}
	byGroup := map[string][]*tools.Spec{}
	for _, name := range reg.Names() {
		s, _ := reg.Spec(name)
		byGroup[s.Group] = append(byGroup[s.Group], s)
	}
	var b strings.Builder
	b.WriteString(header("Tool catalog", "the registrations the toolset builds (`tools.Register` with `tools.InGroup`, `tools.WithTier` and the other options)"))
	fmt.Fprintf(&b, "This build registers %d tools in %d server groups. A node of a template reaches a tool when\n"+
		"its `mcp_servers` names the tool's group or its `tools` names the tool; the gate runs a\n"+
		"*standard* tool at once, audits an *elevated* one in full, and holds a *restricted* one for a\n"+
		"human ([the gate](../explanation/the-gate.md)). *outbound* tools pass the egress policy and DLP;\n"+
		"*idempotent* ones are safe to re-run after a crash; *escalates* tools may ask a human for some\n"+
		"arguments although their tier does not; an *always human* tool's approval never falls back to\n"+
		"`security.supervisor_fallback`. *reads private* / *reads untrusted* tools label the session that\n"+
		"reads them, *persists* tools write where later runs read, *changes remote* tools can change or\n"+
		"destroy a remote service's state, and *writes* names the argument holding\n"+
		"the workspace path a tool writes: the [flow rules](../flow.md) judge\n"+
		"a labelled session's calls. `aetherium tools` prints the same catalog from a binary,\n"+
		"`GET /api/tools/mcp-schemas` serves it.\n\n", len(reg.Names()), len(byGroup))
	b.WriteString("| tool | group | tier | flags | description |\n| --- | --- | --- | --- | --- |\n")
	for _, g := range tools.Groups {
		for _, s := range byGroup[g] {
			fmt.Fprintf(&b, "| [`%s`](#%s) | %s | %s | %s | %s |\n", s.Name, s.Name, s.Group, s.Tier, flags(s), cell(firstSentence(s.Description)))
		}
	}
	for _, g := range tools.Groups {
		if len(byGroup[g]) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n## Group `%s`\n", g)
		for _, s := range byGroup[g] {
			fmt.Fprintf(&b, "\n### %s\n\n%s\n\n", s.Name, strings.TrimSpace(s.Description))
			fmt.Fprintf(&b, "Group `%s`, tier %s", s.Group, s.Tier)
			if f := flags(s); f != "" {
				fmt.Fprintf(&b, ", %s", f)
			}
			b.WriteString(".\n\n")
			args, err := arguments(s.Schema)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", s.Name, err)
			}
			if len(args) == 0 {
				b.WriteString("No arguments.\n")
				continue
			}
			b.WriteString("| argument | type | required | description |\n| --- | --- | --- | --- |\n")
			for _, a := range args {
				req := ""
				if a.required {
					req = "yes"
				}
				fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", a.name, a.typ, req, cell(a.doc))
			}
		}
	}
	for g := range byGroup {
		if !tools.IsGroup(g) {
			return nil, fmt.Errorf("tool group %q is not in tools.Groups", g)
		}
	}
	return []byte(b.String()), nil
}

func flags(s *tools.Spec) string {
	var f []string
	if s.Outbound {
		f = append(f, "outbound")
	}
	if s.OutboundWhen != nil {
		f = append(f, "outbound when networked")
	}
	if s.Idempotent {
		f = append(f, "idempotent")
	}
	if s.Escalate != nil {
		f = append(f, "escalates")
	}
	if s.AlwaysHuman {
		f = append(f, "always human")
	}
	if s.Reads != tools.Trusted {
		f = append(f, "reads "+s.Reads.String())
	}
	if s.Persists {
		f = append(f, "persists")
	}
	if s.ChangesRemote != nil {
		f = append(f, "changes remote")
	}
	if s.WritesPath != "" {
		f = append(f, "writes `"+s.WritesPath+"`")
	}
	return strings.Join(f, ", ")
}

func firstSentence(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if i := strings.Index(s, ". "); i >= 0 {
		return s[:i+1]
	}
	return s
}

// argument is one property of a tool's argument schema (nested objects and
// lists of objects flattened with dots and []).
type argument struct {
	name, typ, doc string
	required       bool
}

type schema struct {
	Type                 any                `json:"type"`
	Description          string             `json:"description"`
	Properties           map[string]*schema `json:"properties"`
	Required             []string           `json:"required"`
	Items                *schema            `json:"items"`
	Enum                 []any              `json:"enum"`
	Ref                  string             `json:"$ref"`
	Defs                 map[string]*schema `json:"$defs"`
	Default              any                `json:"default"`
	AdditionalProperties json.RawMessage    `json:"additionalProperties"`
	Const                any                `json:"const"`
	OneOf                []*schema          `json:"oneOf"`
	// Discriminator names, for a oneOf union, the property whose value picks
	// the member (OpenAPI's discriminator).
	Discriminator *struct {
		PropertyName string            `json:"propertyName"`
		Mapping      map[string]string `json:"mapping"`
	} `json:"discriminator"`
}

// UnmarshalJSON reads a schema, or a boolean schema (true: anything) as an
// empty one.
func (s *schema) UnmarshalJSON(b []byte) error {
	if t := strings.TrimSpace(string(b)); t == "true" || t == "false" {
		*s = schema{}
		return nil
	}
	type plain schema
	return json.Unmarshal(b, (*plain)(s))
}

func arguments(raw json.RawMessage) ([]argument, error) {
	var s schema
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, err
	}
	var out []argument
	flatten(&s, s.Defs, "", &out, 0)
	return out, nil
}

func flatten(s *schema, defs map[string]*schema, prefix string, out *[]argument, depth int) {
	s = resolve(s, defs)
	names := make([]string, 0, len(s.Properties))
	for n := range s.Properties {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := resolve(s.Properties[n], defs)
		a := argument{name: prefix + n, typ: schemaType(p, defs), doc: p.Description, required: contains(s.Required, n)}
		if len(p.Enum) > 0 {
			vals := make([]string, len(p.Enum))
			for i, v := range p.Enum {
				vals[i] = fmt.Sprintf("`%v`", v)
			}
			a.doc = strings.TrimSpace(a.doc + " One of " + strings.Join(vals, ", ") + ".")
		}
		if p.Default != nil {
			a.doc = strings.TrimSpace(fmt.Sprintf("%s Default `%v`.", a.doc, p.Default))
		}
		*out = append(*out, a)
		if depth > 3 {
			continue
		}
		if len(p.Properties) > 0 {
			flatten(p, defs, a.name+".", out, depth+1)
		} else if p.Items != nil {
			if it := resolve(p.Items, defs); len(it.Properties) > 0 {
				flatten(it, defs, a.name+"[].", out, depth+1)
			}
		}
	}
}

func resolve(s *schema, defs map[string]*schema) *schema {
	for i := 0; s.Ref != "" && i < 8; i++ {
		d, ok := defs[strings.TrimPrefix(s.Ref, "#/$defs/")]
		if !ok {
			break
		}
		s = d
	}
	return s
}

func schemaType(s *schema, defs map[string]*schema) string {
	t := ""
	switch v := s.Type.(type) {
	case string:
		t = v
	case []any:
		var parts []string
		for _, x := range v {
			parts = append(parts, fmt.Sprint(x))
		}
		t = strings.Join(parts, " or ")
	}
	if t == "array" && s.Items != nil {
		return "array of " + schemaType(resolve(s.Items, defs), defs)
	}
	if t == "" {
		t = "any"
	}
	return t
}
