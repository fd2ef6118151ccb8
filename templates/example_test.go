package templates_test

import (
	"fmt"

	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/templates"
)

// A team in YAML, as a templates/<name>.yaml file or a run's inline team holds it:
// the supervisor and its workers, the tool groups (mcp_servers) and tools each may
// use, and the variables its prompts ask for.
func ExampleParseYAML() {
	team, err := templates.ParseYAML([]byte(`
name: greeter
model: {provider: script}
supervisor:
  name: lead
  prompt: "Plan, delegate, then reply."
  mcp_servers: [planning, orchestration]
workers:
  - name: writer
    prompt: "Write a greeting about {{.topic}} for {{.audience}}."
    mcp_servers: [workspace]
    tools: [write_file]
budget: {max_tokens: 50000}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(team.Name, team.Model.Provider, team.Budget.MaxTokens)
	fmt.Println("supervisor:", team.Supervisor.Name, team.Supervisor.MCPServers)
	w, _ := team.Worker("writer")
	fmt.Println("worker:", w.Name, w.MCPServers, w.Tools)
	fmt.Println("variables:", team.Variables())
	// Output:
	// greeter script 50000
	// supervisor: lead [planning orchestration]
	// worker: writer [workspace] [write_file]
	// variables: [audience topic]
}

// The same kind of team built in Go, and its prompts rendered with a run's
// variables: placeholders are all a prompt may hold, and a missing variable is an
// error rather than an empty string.
func ExampleTemplate_Render() {
	team := templates.Template{
		Name:       "greeter",
		Model:      llm.ModelConfig{Provider: "script"},
		Supervisor: templates.Node{Name: "lead", Prompt: "Plan, delegate, then reply.", MCPServers: []string{"planning", "orchestration"}},
		Workers: []templates.Node{
			{Name: "writer", Prompt: "Write a greeting about {{.topic}}.", MCPServers: []string{"workspace"}, Tools: []string{"write_file"}},
		},
	}
	run, err := team.Render(map[string]any{"topic": "the fleet"})
	fmt.Println(run.Workers[0].Prompt, err)

	_, err = team.Render(map[string]any{})
	fmt.Println(err != nil)
	// Output:
	// Write a greeting about the fleet. <nil>
	// true
}
