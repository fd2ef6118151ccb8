package tools_test

import (
	"fmt"

	"github.com/aetherium-engine/aetherium/tools"
)

// Catalog lookups that need no registry (template and configuration validation,
// metrics labels): a tool's server group and tier as tools/catalog.yaml documents
// them, which the boot check keeps equal to the registrations.
func ExampleGroupOf() {
	for _, name := range []string{"write_file", "run_shell", "download_pdf", "delegate", "no_such_tool"} {
		group, ok := tools.GroupOf(name)
		fmt.Println(name, group, ok, tools.TierOf(name))
	}
	t, err := tools.ParseTier("restricted")
	fmt.Println(t == tools.Restricted, err, tools.IsGroup("shell"), tools.IsGroup("shells"))
	// Output:
	// write_file workspace true standard
	// run_shell shell true elevated
	// download_pdf research true restricted
	// delegate orchestration true standard
	// no_such_tool  false standard
	// true <nil> true false
}
