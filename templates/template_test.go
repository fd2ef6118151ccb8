package templates_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/llm/script"
	"github.com/aetherium-engine/aetherium/templates"
	"github.com/aetherium-engine/aetherium/toolbox"
	"github.com/aetherium-engine/aetherium/tools"
)

// setup returns the registry this build ships (catalog only, no store).
func setup(t *testing.T) *tools.Registry {
	t.Helper()
	reg, err := toolbox.New(toolbox.Deps{})
	require.NoError(t, err)
	return reg
}

// partialBuild is a build whose registry lacks a tool of the design (every seed
// tool is built now; a deployment may still leave one out).
func partialBuild(t *testing.T, missing string) *tools.Registry {
	t.Helper()
	reg := setup(t)
	_, ok := reg.Spec(missing)
	require.True(t, ok, "%s is built: the test removes it", missing)
	reg.Unregister(missing)
	return reg
}

// valid returns a small template that passes validation; tests break one thing each.
func valid() templates.Template {
	return templates.Template{
		Name:  "team",
		Model: llm.ModelConfig{Provider: "script"},
		Supervisor: templates.Node{
			Name: "lead", Prompt: "Lead {{.topic}}", MCPServers: []string{"planning", "orchestration"},
		},
		Workers: []templates.Node{
			{Name: "writer", Prompt: "Write about {{.topic}} for {{.audience}}", MCPServers: []string{"workspace"}, Tools: []string{"write_file"}},
			{Name: "helper", Prompt: "No placeholders here", Tools: []string{"todo"}, Model: &llm.ModelConfig{Provider: "openai", Model: "m"}},
		},
		AllowedDomains: []string{"example.com", "*.example.org"},
		ToolDefaults:   map[string]map[string]any{"write_file": {"path": "out.md"}},
		Script: script.Script{Agents: map[string][]script.Turn{
			"lead":   {{Calls: []script.Call{{Tool: "reply", Args: map[string]any{"message": "hi"}}}}},
			"writer": {{Say: "done"}},
		}},
	}
}

const validYAML = `
name: team
description: a team
model: {provider: openai, model: gpt-test, max_tokens: 100}
supervisor:
  name: lead
  prompt: "Lead"
  mcp_servers: [planning]
  tools: []
workers:
  - name: writer
    prompt: "Write"
    mcp_servers: [workspace]
    tools: [read_file]
    model: {provider: anthropic}
allowed_domains: [example.com]
gpu_services: []
tool_defaults: {read_file: {path: a.txt}}
budget: {max_tokens: 1000}
`

func TestParseYAML(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		raw  string
		want string // error substring; "" means it parses
	}{
		{name: "valid", raw: validYAML},
		{name: "unknown top-level key", raw: validYAML + "colour: blue\n", want: "field colour not found"},
		{name: "unknown node key", raw: strings.Replace(validYAML, "  prompt: \"Lead\"", "  promt: \"Lead\"", 1), want: "field promt not found"},
		{name: "unknown model key", raw: strings.Replace(validYAML, "max_tokens: 100", "temperature: 1", 1), want: "field temperature not found"},
		{name: "unknown budget key", raw: strings.Replace(validYAML, "budget: {max_tokens: 1000}", "budget: {dollars: 5}", 1), want: "field dollars not found"},
		{name: "unknown script key", raw: validYAML + "script: {agents: {lead: [{say: hi, think: x}]}}\n", want: "field think not found"},
		{name: "wrong type", raw: strings.Replace(validYAML, "tools: [read_file]", "tools: read_file", 1), want: "cannot unmarshal"},
		{name: "empty document", raw: "", want: "EOF"},
		{name: "malformed", raw: "name: [", want: "yaml"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tpl, err := templates.ParseYAML([]byte(tc.raw))
			if tc.want != "" {
				require.ErrorIs(t, err, templates.ErrInvalid)
				require.ErrorContains(t, err, tc.want)
				return
			}
			require.NoError(t, err)
			require.Equal(t, "team", tpl.Name)
			require.Equal(t, llm.ModelConfig{Provider: "openai", Model: "gpt-test", MaxTokens: 100}, tpl.Model)
			require.Equal(t, []string{"planning"}, tpl.Supervisor.MCPServers)
			require.Len(t, tpl.Workers, 1)
			require.Equal(t, &llm.ModelConfig{Provider: "anthropic"}, tpl.Workers[0].Model)
			require.Equal(t, map[string]map[string]any{"read_file": {"path": "a.txt"}}, tpl.ToolDefaults)
			require.EqualValues(t, 1000, tpl.Budget.MaxTokens)
			require.NoError(t, tpl.Validate(setup(t)))
		})
	}
}

func TestParseJSON(t *testing.T) {
	t.Parallel()
	base, err := json.Marshal(valid())
	require.NoError(t, err)
	tests := []struct {
		name string
		raw  string
		want string
	}{
		{name: "valid", raw: string(base)},
		{name: "unknown top-level key", raw: `{"name":"x","colour":"blue"}`, want: `unknown field "colour"`},
		{name: "unknown node key", raw: `{"name":"x","supervisor":{"name":"a","promt":"p"}}`, want: `unknown field "promt"`},
		{name: "unknown worker key", raw: `{"name":"x","workers":[{"name":"w","servers":["workspace"]}]}`, want: `unknown field "servers"`},
		{name: "unknown script turn key", raw: `{"script":{"agents":{"a":[{"say":"x","think":"y"}]}}}`, want: `unknown field "think"`},
		{name: "wrong type", raw: `{"name":5}`, want: "cannot unmarshal number"},
		{name: "not an object", raw: `["x"]`, want: "cannot unmarshal array"},
		{name: "empty", raw: ``, want: "EOF"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tpl, err := templates.ParseJSON([]byte(tc.raw))
			if tc.want != "" {
				require.ErrorIs(t, err, templates.ErrInvalid)
				require.ErrorContains(t, err, tc.want)
				return
			}
			require.NoError(t, err)
			require.NoError(t, tpl.Validate(setup(t)))
			require.Equal(t, "lead", tpl.Supervisor.Name)
			require.Equal(t, "done", tpl.Script.Agents["writer"][0].Say)
		})
	}
}

func TestValidateAcceptsValid(t *testing.T) {
	t.Parallel()
	tpl := valid()
	require.NoError(t, tpl.Validate(setup(t)))
}

// TestValidateListsEveryProblem breaks everything at once: one error must name all.
func TestValidateListsEveryProblem(t *testing.T) {
	t.Parallel()
	tpl := templates.Template{
		Name:  "broken",
		Model: llm.ModelConfig{Provider: "script"}, // and no script
		Supervisor: templates.Node{
			Name: "lead", MCPServers: []string{"kitchen"}, Tools: []string{"make_coffee"},
		},
		Workers: []templates.Node{
			{Name: "lead", MCPServers: []string{"workspace"}},
			{Name: "w2", Tools: []string{"finish_image"}, Model: &llm.ModelConfig{Provider: "gpt"}},
			{Name: "bad name!", MCPServers: []string{"workspace"}},
			{Name: "idle"},
			{MCPServers: []string{"workspace"}},
		},
		AllowedDomains: []string{"", "https://example.com", "example.com:443", "two words", "*.*.example.com", "foo*.example.com", "*", "*."},
		ToolDefaults:   map[string]map[string]any{"make_tea": {"x": 1}},
		Budget:         templates.Budget{MaxTokens: -1},
	}
	err := tpl.Validate(partialBuild(t, "finish_image"))
	require.ErrorIs(t, err, templates.ErrInvalid)
	for _, want := range []string{
		`invalid template "broken": `,
		`supervisor.mcp_servers: unknown server group "kitchen"`,
		`supervisor.tools: unknown tool "make_coffee"`,
		`workers[0].name: duplicate agent name "lead"`,
		`workers[1].tools: tool "finish_image" is not available in this build`,
		`workers[1].model.provider: "gpt" is not one of script, openai, anthropic`,
		`workers[2].name: "bad name!" must be letters, digits, - or _ (max 64)`,
		`workers[3]: a worker needs mcp_servers or tools`,
		`workers[4].name: required`,
		`allowed_domains: "" must be a host name`,
		`allowed_domains: "https://example.com" must be`,
		`allowed_domains: "example.com:443" must be`,
		`allowed_domains: "two words" must be`,
		`allowed_domains: "*.*.example.com" must be`,
		`allowed_domains: "foo*.example.com" must be`,
		`allowed_domains: "*" must be`,
		`allowed_domains: "*." must be`,
		`tool_defaults: unknown tool "make_tea"`,
		`budget.max_tokens: must not be negative`,
		`script: provider script needs script.agents`,
	} {
		require.ErrorContains(t, err, want)
	}
}

func TestValidateSingleProblems(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(tpl *templates.Template)
		want   []string
	}{
		{name: "missing name", mutate: func(tpl *templates.Template) { tpl.Name = "" }, want: []string{"name: required"}},
		{name: "bad team provider", mutate: func(tpl *templates.Template) { tpl.Model.Provider = "bard" }, want: []string{`model.provider: "bard" is not one of script, openai, anthropic`}},
		{name: "empty team provider", mutate: func(tpl *templates.Template) { tpl.Model.Provider = "" }, want: []string{`model.provider: "" is not one of`}},
		{name: "bad supervisor model", mutate: func(tpl *templates.Template) { tpl.Supervisor.Model = &llm.ModelConfig{Provider: "x"} }, want: []string{`supervisor.model.provider: "x"`}},
		{name: "fallback to an unknown provider", mutate: func(tpl *templates.Template) {
			tpl.Model = llm.ModelConfig{Provider: "openai", Model: "gpt-4o", Fallback: []llm.ModelConfig{{Provider: "gemini", Model: "g"}}}
		}, want: []string{`model.fallback[0].provider: "gemini" is not one of`}},
		{name: "fallback without a model", mutate: func(tpl *templates.Template) {
			tpl.Model = llm.ModelConfig{Provider: "openai", Model: "gpt-4o", Fallback: []llm.ModelConfig{{Provider: "anthropic"}}}
		}, want: []string{`model.fallback[0].model: required`}},
		{name: "nested fallback", mutate: func(tpl *templates.Template) {
			tpl.Workers[0].Model = &llm.ModelConfig{Provider: "openai", Model: "a", Fallback: []llm.ModelConfig{{Provider: "openai", Model: "b", Fallback: []llm.ModelConfig{{Provider: "openai", Model: "c"}}}}}
		}, want: []string{`workers[0].model.fallback[0].fallback: a fallback has no fallbacks of its own`}},
		{name: "fallback to itself", mutate: func(tpl *templates.Template) {
			tpl.Model = llm.ModelConfig{Provider: "openai", Model: "a", Fallback: []llm.ModelConfig{{Provider: "openai", Model: "a"}}}
		}, want: []string{`model.fallback[0]: falls back to the model itself`}},
		{name: "script falls back", mutate: func(tpl *templates.Template) {
			tpl.Model.Fallback = []llm.ModelConfig{{Provider: "openai", Model: "a"}}
		}, want: []string{`the script model neither falls back nor is a fallback`}},
		{name: "too many fallbacks", mutate: func(tpl *templates.Template) {
			tpl.Model = llm.ModelConfig{Provider: "openai", Model: "a", Fallback: []llm.ModelConfig{{Provider: "openai", Model: "b"}, {Provider: "openai", Model: "c"}, {Provider: "openai", Model: "d"}, {Provider: "openai", Model: "e"}}}
		}, want: []string{`model.fallback: 4 fallbacks, at most 3`}},
		{name: "hostile fallback model name", mutate: func(tpl *templates.Template) {
			tpl.Model = llm.ModelConfig{Provider: "openai", Model: "a", Fallback: []llm.ModelConfig{{Provider: "anthropic", Model: "x\u202e|rm -rf"}}}
		}, want: []string{`model.fallback[0].model: "x\u202e|rm -rf" must be`}},
		{name: "negative money budget", mutate: func(tpl *templates.Template) { tpl.Budget.MaxCost = "-1" }, want: []string{`budget.max_cost: amount "-1"`}},
		{name: "money budget in exponent form", mutate: func(tpl *templates.Template) { tpl.Budget.MaxCost = "1e9" }, want: []string{`budget.max_cost: amount "1e9"`}},
		{name: "unknown group", mutate: func(tpl *templates.Template) { tpl.Workers[0].MCPServers = []string{"workspace", "kitchen"} }, want: []string{`workers[0].mcp_servers: unknown server group "kitchen"`}},
		{name: "unknown tool", mutate: func(tpl *templates.Template) { tpl.Workers[1].Tools = []string{"todo", "teleport"} }, want: []string{`workers[1].tools: unknown tool "teleport"`}},
		{name: "design tool missing from build", mutate: func(tpl *templates.Template) { tpl.Supervisor.Tools = []string{"finish_image"} }, want: []string{`supervisor.tools: tool "finish_image" is not available in this build`}},
		{name: "unknown image model", mutate: func(tpl *templates.Template) { tpl.ImageModel = "dalle" }, want: []string{`image_model: "dalle" is not one of sd, qwen`}},
		{name: "image model without its service", mutate: func(tpl *templates.Template) { tpl.ImageModel = "qwen"; tpl.GPUServices = []string{"comfyui"} }, want: []string{"image_model: qwen renders on the comfyui-qwen GPU service: add it to gpu_services"}},
		{name: "duplicate worker names", mutate: func(tpl *templates.Template) { tpl.Workers[1].Name = "writer" }, want: []string{`workers[1].name: duplicate agent name "writer"`}},
		{name: "worker named like the supervisor", mutate: func(tpl *templates.Template) { tpl.Workers[0].Name = "lead" }, want: []string{`workers[0].name: duplicate agent name "lead"`, `script.agents: "writer" is not an agent of this team`}},
		{name: "missing supervisor name", mutate: func(tpl *templates.Template) { tpl.Supervisor.Name = "" }, want: []string{"supervisor.name: required", `script.agents: "lead" is not an agent of this team`}},
		{name: "agent name too long", mutate: func(tpl *templates.Template) { tpl.Workers[1].Name = strings.Repeat("a", 65) }, want: []string{`workers[1].name: "` + strings.Repeat("a", 65) + `" must be letters, digits, - or _ (max 64)`}},
		{name: "worker without permissions", mutate: func(tpl *templates.Template) { tpl.Workers[1].Tools = nil }, want: []string{"workers[1]: a worker needs mcp_servers or tools"}},
		{name: "script names an unknown agent", mutate: func(tpl *templates.Template) { tpl.Script.Agents["ghost"] = []script.Turn{{Say: "boo"}} }, want: []string{`script.agents: "ghost" is not an agent of this team`}},
		{name: "script turn with calls and say", mutate: func(tpl *templates.Template) {
			tpl.Script.Agents["writer"] = []script.Turn{{Say: "x", Calls: []script.Call{{Tool: "todo"}}}}
		}, want: []string{"script.agents.writer[0]: a turn has either calls or say"}},
		{name: "script call without tool", mutate: func(tpl *templates.Template) {
			tpl.Script.Agents["writer"] = []script.Turn{{Calls: []script.Call{{}}}}
		}, want: []string{"script.agents.writer[0].calls[0]: tool is required"}},
		{name: "script provider without script", mutate: func(tpl *templates.Template) { tpl.Script = script.Script{} }, want: []string{"script: provider script needs script.agents"}},
		{name: "node-level script provider without script", mutate: func(tpl *templates.Template) {
			tpl.Model.Provider = "openai"
			tpl.Workers[1].Model = &llm.ModelConfig{Provider: "script"}
			tpl.Script = script.Script{}
		}, want: []string{"script: provider script needs script.agents"}},
		{name: "domain with scheme", mutate: func(tpl *templates.Template) { tpl.AllowedDomains = []string{"http://example.com"} }, want: []string{`allowed_domains: "http://example.com" must be a host name, *.example.com, an IP address or a prefix (10.0.0.0/8)`}},
		{name: "a bad prefix", mutate: func(tpl *templates.Template) { tpl.AllowedDomains = []string{"10.0.0.0/33"} }, want: []string{`allowed_domains: "10.0.0.0/33" must be a host name`}},
		{name: "domain with inner wildcard", mutate: func(tpl *templates.Template) { tpl.AllowedDomains = []string{"api.*.example.com"} }, want: []string{`allowed_domains: "api.*.example.com"`}},
		{name: "unknown tool default", mutate: func(tpl *templates.Template) { tpl.ToolDefaults["fly"] = map[string]any{} }, want: []string{`tool_defaults: unknown tool "fly"`}},
		{name: "huge model name", mutate: func(tpl *templates.Template) { tpl.Model.Model = strings.Repeat("m", 2000) }, want: []string{"model.model: \"mmmm"}},
		{name: "model name with a newline", mutate: func(tpl *templates.Template) {
			tpl.Workers[0].Model = &llm.ModelConfig{Provider: "script", Model: "a\nb"}
		}, want: []string{"workers[0].model.model:"}},
		{name: "huge team name", mutate: func(tpl *templates.Template) { tpl.Name = strings.Repeat("n", 200) }, want: []string{"must be at most 128 characters"}},
		{name: "negative budget", mutate: func(tpl *templates.Template) { tpl.Budget.MaxTokens = -5 }, want: []string{"budget.max_tokens: must not be negative"}},
		// Valid variations.
		{name: "openai team needs no script", mutate: func(tpl *templates.Template) { tpl.Model.Provider = "openai"; tpl.Script = script.Script{} }},
		{name: "anthropic provider", mutate: func(tpl *templates.Template) { tpl.Model.Provider = "anthropic" }},
		{name: "model names as providers spell them", mutate: func(tpl *templates.Template) {
			tpl.Model.Model = "Qwen/Qwen2.5-7B-Instruct"
			tpl.Workers[0].Model = &llm.ModelConfig{Provider: "script", Model: "llama3.1:8b"}
		}},
		{name: "supervisor with no permissions is fine", mutate: func(tpl *templates.Template) { tpl.Supervisor.MCPServers = nil }},
		{name: "no workers", mutate: func(tpl *templates.Template) {
			tpl.Workers = nil
			delete(tpl.Script.Agents, "writer")
		}},
		{name: "no allowed domains", mutate: func(tpl *templates.Template) { tpl.AllowedDomains = nil }},
		{name: "agent names may use capitals, digits, - and _", mutate: func(tpl *templates.Template) { tpl.Workers[1].Name = "Helper_2-b" }},
	}
	reg := partialBuild(t, "finish_image")
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tpl := valid()
			tc.mutate(&tpl)
			err := tpl.Validate(reg)
			if tc.want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, templates.ErrInvalid)
			for _, w := range tc.want {
				require.ErrorContains(t, err, w)
			}
			// Problems are joined with "; " and only the listed ones appear.
			require.Equal(t, len(tc.want), strings.Count(err.Error(), "; ")+1, err.Error())
		})
	}
}

func TestRender(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		vars map[string]any
		want []string // error substrings; nil means success
	}{
		{name: "all variables", vars: map[string]any{"topic": "owls", "audience": "kids"}},
		{name: "extra variables are fine", vars: map[string]any{"topic": "owls", "audience": "kids", "unused": 1}},
		{name: "missing worker variable", vars: map[string]any{"topic": "owls"}, want: []string{"workers.writer.prompt", "audience"}},
		{name: "missing supervisor variable", vars: map[string]any{"audience": "kids"}, want: []string{"supervisor.prompt", "topic"}},
		{name: "no variables", vars: nil, want: []string{"supervisor.prompt", "topic"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tpl := valid()
			out, err := tpl.Render(tc.vars)
			if tc.want != nil {
				require.ErrorIs(t, err, templates.ErrInvalid)
				for _, w := range tc.want {
					require.ErrorContains(t, err, w)
				}
				return
			}
			require.NoError(t, err)
			require.Equal(t, "Lead owls", out.Supervisor.Prompt)
			require.Equal(t, "Write about owls for kids", out.Workers[0].Prompt)
			require.Equal(t, "No placeholders here", out.Workers[1].Prompt)
			// The source template is left untouched (it is reused across runs).
			require.Equal(t, "Lead {{.topic}}", tpl.Supervisor.Prompt)
			require.Equal(t, "Write about {{.topic}} for {{.audience}}", tpl.Workers[0].Prompt)
			require.Equal(t, tpl.Workers[0].MCPServers, out.Workers[0].MCPServers)
			require.Equal(t, tpl.Name, out.Name)
		})
	}
}

func TestRenderBadSyntax(t *testing.T) {
	t.Parallel()
	tpl := valid()
	tpl.Workers[1].Prompt = "broken {{.topic"
	_, err := tpl.Render(map[string]any{"topic": "x", "audience": "y"})
	require.ErrorIs(t, err, templates.ErrInvalid)
	require.ErrorContains(t, err, "workers.helper.prompt")
}

func TestAccessors(t *testing.T) {
	t.Parallel()
	tpl := valid()
	w, ok := tpl.Worker("helper")
	require.True(t, ok)
	require.Equal(t, "helper", w.Name)
	_, ok = tpl.Worker("lead")
	require.False(t, ok, "the supervisor is not a worker")

	require.Equal(t, llm.ModelConfig{Provider: "openai", Model: "m"}, tpl.ModelFor(w))
	require.Equal(t, llm.ModelConfig{Provider: "script"}, tpl.ModelFor(tpl.Supervisor))

	require.EqualValues(t, templates.DefaultMaxTokens, tpl.TokenBudget())
	tpl.Budget.MaxTokens = 42
	require.EqualValues(t, 42, tpl.TokenBudget())
}

func TestShippedTemplates(t *testing.T) {
	t.Parallel()
	reg := setup(t)
	dir := templates.Dir{Path: "../templates"}
	names, err := dir.List()
	require.NoError(t, err)
	for _, want := range []string{"demo", "research-writer", "voice-over", "steam-frame-vr", "media-studio"} {
		require.Contains(t, names, want)
	}
	vars := map[string]any{"topic": "t", "title": "T", "audience": "a"}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tpl, err := dir.Load(name, reg)
			require.NoError(t, err)
			require.Equal(t, name, tpl.Name, "a template's name matches its file")
			rendered, err := tpl.Render(vars)
			require.NoError(t, err)
			require.NotContains(t, rendered.Supervisor.Prompt, "{{")

			// Runs store the team as JSON; it must survive the round trip strictly.
			raw, err := json.Marshal(rendered)
			require.NoError(t, err)
			back, err := templates.ParseJSON(raw)
			require.NoError(t, err)
			require.NoError(t, back.Validate(reg))
			again, err := json.Marshal(back)
			require.NoError(t, err)
			require.JSONEq(t, string(raw), string(again))
		})
	}
}

// media-studio: the qwen image model on its own service, the video service,
// one node per media group (each seeing only its own group's tools), and the
// narrator held to its script.
func TestMediaStudioTemplate(t *testing.T) {
	t.Parallel()
	reg := setup(t)
	tpl, err := templates.Dir{Path: "../templates"}.Load("media-studio", reg)
	require.NoError(t, err)
	require.Equal(t, "qwen", tpl.ImageModel)
	require.ElementsMatch(t, []string{templates.ImageModels["qwen"], "comfyui-video"}, tpl.GPUServices)
	groups := map[string][]string{}
	for _, n := range tpl.Workers {
		groups[n.Name] = n.MCPServers
	}
	require.Equal(t, map[string][]string{"artist": {"workspace", "comfyui"}, "animator": {"workspace", "video"}, "narrator": {"workspace", "audio"}}, groups)
	for _, n := range tpl.Workers {
		for _, tool := range n.Tools {
			g, ok := tools.GroupOf(tool)
			require.True(t, ok, tool)
			require.Contains(t, n.MCPServers, g, "%s's %s is in a group it lists", n.Name, tool)
		}
	}
	narrator := tpl.Workers[2]
	require.NotNil(t, narrator.RequiredOutput)
	require.Equal(t, "narration.md", narrator.RequiredOutput.File)
	// The script's narration meets its own bar.
	var content string
	for _, turn := range tpl.Script.Agents["narrator"] {
		for _, c := range turn.Calls {
			if c.Tool == "write_file" {
				content, _ = c.Args["content"].(string)
			}
		}
	}
	require.GreaterOrEqual(t, len(strings.Fields(strings.ReplaceAll(content, "NARRATOR:", ""))), narrator.RequiredOutput.MinSpokenWords)
}

func TestDirLoadErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "broken.yaml"), []byte("name: broken\nmodel: {provider: nope}\nsupervisor: {name: s}\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "strict.yaml"), []byte("name: strict\nextra: 1\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "README.md"), []byte("not a template"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "Bad Name.yaml"), []byte(""), 0o600))
	// A template outside the directory that traversal would reach.
	require.NoError(t, os.WriteFile(filepath.Join(filepath.Dir(dir), "x.yaml"), []byte(validYAML), 0o600))
	d := templates.Dir{Path: dir}
	reg := setup(t)

	tests := []struct {
		name    string
		tpl     string
		wantIs  error
		wantMsg string
	}{
		{name: "parent traversal", tpl: "../x", wantIs: templates.ErrUnknownTemplate},
		{name: "deep traversal", tpl: "../../etc/passwd", wantIs: templates.ErrUnknownTemplate},
		{name: "subdirectory", tpl: "a/b", wantIs: templates.ErrUnknownTemplate},
		{name: "absolute path", tpl: "/etc/passwd", wantIs: templates.ErrUnknownTemplate},
		{name: "backslash", tpl: `a\b`, wantIs: templates.ErrUnknownTemplate},
		{name: "empty", tpl: "", wantIs: templates.ErrUnknownTemplate},
		{name: "upper case", tpl: "Demo", wantIs: templates.ErrUnknownTemplate},
		{name: "with extension", tpl: "broken.yaml", wantIs: templates.ErrUnknownTemplate},
		{name: "hidden", tpl: ".hidden", wantIs: templates.ErrUnknownTemplate},
		{name: "no such file", tpl: "absent", wantIs: templates.ErrUnknownTemplate, wantMsg: "no absent.yaml in"},
		{name: "invalid content", tpl: "broken", wantIs: templates.ErrInvalid, wantMsg: `model.provider: "nope"`},
		{name: "unknown key", tpl: "strict", wantIs: templates.ErrInvalid, wantMsg: "field extra not found"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := d.Load(tc.tpl, reg)
			require.ErrorIs(t, err, tc.wantIs)
			if tc.wantMsg != "" {
				require.ErrorContains(t, err, tc.wantMsg)
			}
		})
	}

	names, err := d.List()
	require.NoError(t, err)
	require.Equal(t, []string{"broken", "strict"}, names, "List shows only loadable names")

	_, err = templates.Dir{Path: filepath.Join(dir, "missing")}.List()
	require.ErrorContains(t, err, "templates dir")
}

func TestValidateRequiredOutput(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		ro   *templates.RequiredOutput
		want string
	}{
		{name: "absent", ro: nil},
		{name: "a script and a word count", ro: &templates.RequiredOutput{File: "script.md", MinSpokenWords: 200}},
		{name: "a file only", ro: &templates.RequiredOutput{File: "out/notes.md"}},
		{name: "no file", ro: &templates.RequiredOutput{MinSpokenWords: 5}, want: "workers[0].required_output.file: required"},
		{name: "traversal", ro: &templates.RequiredOutput{File: "../x.md"}, want: "workers[0].required_output.file: " + `path escapes the workspace: "../x.md" climbs out`},
		{name: "absolute", ro: &templates.RequiredOutput{File: "/etc/passwd"}, want: "is absolute"},
		{name: "the workspace", ro: &templates.RequiredOutput{File: "."}, want: "is the workspace itself"},
		{name: "negative", ro: &templates.RequiredOutput{File: "s.md", MinSpokenWords: -1}, want: "min_spoken_words: -1 is outside 0..1000000"},
		{name: "huge", ro: &templates.RequiredOutput{File: "s.md", MinSpokenWords: 2_000_000}, want: "min_spoken_words: 2000000 is outside"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tpl := valid()
			tpl.Workers[0].RequiredOutput = tc.ro
			err := tpl.Validate(setup(t))
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, templates.ErrInvalid)
			require.ErrorContains(t, err, tc.want)
		})
	}
	// The key parses from YAML, strictly.
	raw := strings.Replace(validYAML, "    tools: [read_file]\n", "    tools: [read_file]\n    required_output: {file: script.md, min_spoken_words: 120}\n", 1)
	tpl, err := templates.ParseYAML([]byte(raw))
	require.NoError(t, err)
	require.Equal(t, &templates.RequiredOutput{File: "script.md", MinSpokenWords: 120}, tpl.Workers[0].RequiredOutput)
	_, err = templates.ParseYAML([]byte(strings.Replace(raw, "min_spoken_words", "min_words", 1)))
	require.ErrorContains(t, err, "field min_words not found")
}

// Private destinations are reached only when the allowlist names them
// (security.egress.private: allowlist), so an entry may be an address or a
// network prefix.
func TestAllowedDomainsTakeAddressesAndPrefixes(t *testing.T) {
	t.Parallel()
	tpl := valid()
	tpl.AllowedDomains = []string{"api.example.com", "*.corp.example", "127.0.0.1", "10.0.0.0/8", "::1", "[fd00::1]", "fc00::/7"}
	require.NoError(t, tpl.Validate(setup(t)))
}
