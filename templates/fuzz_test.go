package templates_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/templates"
	"github.com/aetherium-engine/aetherium/toolbox"
	"github.com/aetherium-engine/aetherium/tools"
)

// shipped returns the repository's template files (seeds).
func shipped(f *testing.F) [][]byte {
	paths, err := filepath.Glob("*.yaml")
	require.NoError(f, err)
	var out [][]byte
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		require.NoError(f, err)
		out = append(out, raw)
	}
	require.NotEmpty(f, out)
	return out
}

// checkAccepted is what every accepted template must satisfy: it renders, and the
// rendered team survives the trip a run takes — the API stores it as JSON and the
// worker parses and uses that JSON — unchanged and still valid.
func checkAccepted(t *testing.T, reg *tools.Registry, tpl templates.Template) {
	rendered, err := tpl.Render(map[string]any{"topic": "fuzzing", "audience": "testers"})
	if err != nil {
		require.ErrorIs(t, err, templates.ErrInvalid)
		return
	}
	raw, err := json.Marshal(rendered)
	require.NoError(t, err, "a valid template must be storable as the run's team")
	back, err := templates.ParseJSON(raw)
	require.NoError(t, err, "the worker must be able to read the stored team: %s", raw)
	require.NoError(t, back.Validate(reg), "the stored team must still be valid")
	again, err := json.Marshal(back)
	require.NoError(t, err)
	require.JSONEq(t, string(raw), string(again), "the stored team must read back unchanged")
}

// FuzzParseYAML feeds arbitrary template files through parsing and validation.
func FuzzParseYAML(f *testing.F) {
	for _, s := range shipped(f) {
		f.Add(s)
	}
	f.Add([]byte(validYAML))
	f.Add([]byte("name: x\nmodel: {provider: script}\nsupervisor: {name: s}\nscript: {agents: {s: [{say: hi}]}}\n"))
	f.Add([]byte("name: x\nmodel: {provider: script}\nsupervisor: {name: s}\ntool_defaults: {todo: {items: {1: 2}}}\nscript: {agents: {s: [{say: hi}]}}\n"))
	f.Add([]byte("name: x\nunknown: 1\n"))
	f.Add([]byte("supervisor: {prompt: \"{{.topic\"}\n"))
	f.Add([]byte("- a\n- b\n"))
	reg := registry(f)
	f.Fuzz(func(t *testing.T, raw []byte) {
		tpl, err := templates.ParseYAML(raw)
		if err != nil {
			require.ErrorIs(t, err, templates.ErrInvalid)
			return
		}
		if err := tpl.Validate(reg); err != nil {
			require.ErrorIs(t, err, templates.ErrInvalid)
			return
		}
		checkAccepted(t, reg, tpl)
	})
}

// FuzzParseJSON feeds arbitrary inline teams (the "team" of POST
// /api/orchestrator/run) through parsing and validation.
func FuzzParseJSON(f *testing.F) {
	reg := registry(f)
	for _, s := range shipped(f) {
		tpl, err := templates.ParseYAML(s)
		require.NoError(f, err)
		raw, err := json.Marshal(tpl)
		require.NoError(f, err)
		f.Add(raw)
	}
	f.Add([]byte(`{"name":"x","model":{"provider":"script"},"supervisor":{"name":"s"},"script":{"agents":{"s":[{"say":"hi"}]}}}`))
	f.Add([]byte(`{"name":"x","model":{"provider":"script"},"supervisor":{"name":"s","prompt":"{{.topic}} {{index . \"a\"}}"},"script":{"agents":{"s":[{"calls":[{"tool":"reply","args":{"message":"m"}}]}]}}}`))
	f.Add([]byte(`{"name":"x","extra":true}`))
	f.Add([]byte(`{"name":1}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"name":"x"} {"name":"y"}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		tpl, err := templates.ParseJSON(raw)
		if err != nil {
			require.True(t, errors.Is(err, templates.ErrInvalid), "%v", err)
			return
		}
		if err := tpl.Validate(reg); err != nil {
			require.ErrorIs(t, err, templates.ErrInvalid)
			return
		}
		checkAccepted(t, reg, tpl)
	})
}

// registry is setup for fuzz targets: the registry this build ships.
func registry(tb testing.TB) *tools.Registry {
	reg, err := toolbox.New(toolbox.Deps{})
	require.NoError(tb, err)
	return reg
}

// TestRenderRefusesTheTemplateLanguage: a prompt is text with {{.name}} placeholders.
// Found while writing the fuzz targets above: Go's full template language let an
// inline team's few bytes ({{range 100000000000}}…) run for hours or expand to
// gigabytes inside the API process.
func TestRenderRefusesTheTemplateLanguage(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", 200<<10)
	tests := []struct {
		name, prompt string
		vars         map[string]any
		want         string // error substring; "" means it renders
	}{
		{name: "placeholders", prompt: "about {{.topic}} for {{ .audience }}", want: ""},
		{name: "a field of a map variable", prompt: "{{.who.name}}", vars: map[string]any{"who": map[string]any{"name": "x"}}, want: ""},
		{name: "range over an integer", prompt: "{{range 100000000000}}x{{end}}", want: "only {{.name}} placeholders"},
		{name: "range with an empty body", prompt: "{{range 100000000000}}{{end}}", want: "only {{.name}} placeholders"},
		{name: "printf width", prompt: `{{printf "%0999999999d" 1}}`, want: "only {{.name}} placeholders"},
		{name: "a function on a placeholder", prompt: "{{len .topic}}", want: "only {{.name}} placeholders"},
		{name: "a pipeline", prompt: "{{.topic | printf \"%s\"}}", want: "only {{.name}} placeholders"},
		{name: "if", prompt: "{{if .topic}}y{{end}}", want: "only {{.name}} placeholders"},
		{name: "with", prompt: "{{with .topic}}{{.}}{{end}}", want: "only {{.name}} placeholders"},
		{name: "a variable", prompt: "{{$x := .topic}}{{$x}}", want: "only {{.name}} placeholders"},
		{name: "the whole dot", prompt: "{{.}}", want: "only {{.name}} placeholders"},
		{name: "recursion", prompt: `{{define "a"}}{{template "a"}}{{end}}{{template "a"}}`, want: "only {{.name}} placeholders"},
		{name: "a definition", prompt: `{{define "a"}}x{{end}}{{.topic}}`, want: "template definition"},
		{name: "a big variable repeated past the budget", prompt: strings.Repeat("{{.big}}", 6), vars: map[string]any{"big": big}, want: "rendered prompts are over"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tpl := templates.Template{Name: "x", Supervisor: templates.Node{Name: "s", Prompt: tc.prompt}}
			vars := tc.vars
			if vars == nil {
				vars = map[string]any{"topic": "owls", "audience": "kids"}
			}
			out, err := tpl.Render(vars)
			if tc.want == "" {
				require.NoError(t, err)
				require.NotContains(t, out.Supervisor.Prompt, "{{")
				return
			}
			require.ErrorIs(t, err, templates.ErrInvalid)
			require.ErrorContains(t, err, tc.want)
			require.ErrorContains(t, err, "supervisor.prompt")
		})
	}
	// The budget is shared: many prompts each under it cannot add up past it.
	tpl := templates.Template{Name: "x", Supervisor: templates.Node{Name: "s", Prompt: "{{.big}}"}}
	for i := range 6 {
		tpl.Workers = append(tpl.Workers, templates.Node{Name: fmt.Sprintf("w%d", i), Prompt: "{{.big}}"})
	}
	_, err := tpl.Render(map[string]any{"big": big})
	require.ErrorIs(t, err, templates.ErrRenderTooLarge)
}
