package templates_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/templates"
)

// Variables are what Render needs: every top-level name the prompts use, once.
func TestVariables(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		supervisor string
		workers    []string
		want       []string
	}{
		{"none", "plain", []string{"also plain"}, []string{}},
		{"one", "about {{.topic}}", nil, []string{"topic"}},
		{"sorted, once", "{{.b}} {{.a}}", []string{"{{.a}} and {{.c}}"}, []string{"a", "b", "c"}},
		{"map variable", "{{.site.name}} at {{.site.url}}", nil, []string{"site"}},
		{"unparsable prompt adds nothing", "{{.x", []string{"{{.y}}"}, []string{"y"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tm := templates.Template{Supervisor: templates.Node{Prompt: tc.supervisor}}
			for _, w := range tc.workers {
				tm.Workers = append(tm.Workers, templates.Node{Prompt: w})
			}
			require.Equal(t, tc.want, tm.Variables())
		})
	}
}
