package security_test

import (
	"encoding/json"
	"fmt"

	"github.com/aetherium-engine/aetherium/security"
)

// A rules file (config/permissions.yaml): always_deny rules run before the tier
// gate and refuse a call with their reason; always_allow and ask_user are advisory.
// Paths are matched workspace-relative, however the call spells them.
func ExampleParseRules() {
	rules, err := security.ParseRules([]byte(`
rules:
  - match: {tool: run_shell, arg_pattern: "rm -rf|mkfs"}
    action: always_deny
    reason: Destructive shell pattern blocked by policy
  - match: {tool: write_file, path_pattern: "(^|/)\\.github/workflows/"}
    action: always_deny
    reason: CI workflows are owned by the platform team
  - match: {tool: web_fetch}
    action: ask_user
    reason: advisory only
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, call := range []security.CallFacts{
		{Tool: "run_shell", Agent: "writer", Args: json.RawMessage(`{"command":"rm -rf build"}`)},
		{Tool: "write_file", Agent: "writer", Args: json.RawMessage(`{"path":"./src/../.github/workflows/ci.yml","content":"x"}`)},
		{Tool: "write_file", Agent: "writer", Args: json.RawMessage(`{"path":"notes.md","content":"x"}`)},
		{Tool: "web_fetch", Agent: "writer", Args: json.RawMessage(`{"url":"https://example.com"}`)},
	} {
		deny, advisory := rules.Evaluate(call)
		switch {
		case deny != nil:
			fmt.Printf("%s: denied (%s)\n", call.Tool, deny.Reason)
		case len(advisory) > 0:
			fmt.Printf("%s: allowed, advisory %s\n", call.Tool, advisory[0].Action)
		default:
			fmt.Printf("%s: allowed\n", call.Tool)
		}
	}

	_, err = security.ParseRules([]byte("rules:\n  - match: {tool: run_shell}\n    action: maybe\n"))
	fmt.Println(err)
	// Output:
	// run_shell: denied (Destructive shell pattern blocked by policy)
	// write_file: denied (CI workflows are owned by the platform team)
	// write_file: allowed
	// web_fetch: allowed, advisory ask_user
	// permissions: rules[0].action: "maybe" is not always_deny, always_allow or ask_user
}
