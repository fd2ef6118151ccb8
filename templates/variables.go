package templates

import (
	"slices"
	"text/template"
	"text/template/parse"
)

// Variables names the top-level variables the team's prompts use ({{.topic}},
// {{.a.b}} uses a), sorted: what a form must ask for before Render can succeed
// (it renders with missingkey=error). A prompt that does not parse contributes
// nothing here; Render reports it.
func (t Template) Variables() []string {
	seen := map[string]bool{}
	collect := func(s string) {
		tpl, err := template.New("").Parse(s)
		if err != nil || tpl.Tree == nil {
			return
		}
		for _, n := range tpl.Tree.Root.Nodes {
			a, ok := n.(*parse.ActionNode)
			if !ok || a.Pipe == nil {
				continue
			}
			for _, cmd := range a.Pipe.Cmds {
				for _, arg := range cmd.Args {
					if f, ok := arg.(*parse.FieldNode); ok && len(f.Ident) > 0 {
						seen[f.Ident[0]] = true
					}
				}
			}
		}
	}
	collect(t.Supervisor.Prompt)
	for _, w := range t.Workers {
		collect(w.Prompt)
	}
	out := make([]string, 0, len(seen))
	for v := range seen {
		out = append(out, v)
	}
	slices.Sort(out)
	return out
}
