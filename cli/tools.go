package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/aetherium-engine/aetherium/toolbox"
	"github.com/aetherium-engine/aetherium/tools"
)

// toolsCmd prints the catalog this binary registers (no server needed).
func toolsCmd(_ context.Context, args []string, out, stderr io.Writer) error {
	fs := flag.NewFlagSet("tools", flag.ContinueOnError)
	fs.SetOutput(stderr)
	setUsage(fs, "usage: aetherium tools [--json]\nThe tool catalog this binary registers (no server needed).")
	asJSON := fs.Bool("json", false, "print the schemas as JSON")
	if err := fs.Parse(args); err != nil {
		return err
	}
	reg, err := toolbox.New(toolbox.Deps{})
	if err != nil {
		return err
	}
	if *asJSON {
		defs := reg.Definitions(tools.Access{Tools: reg.Names()})
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(defs)
	}
	docs, err := tools.Catalog()
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOOL\tGROUP\tTIER\tPURPOSE")
	for _, d := range docs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", d.Name, d.Group, d.Tier, d.Purpose)
	}
	return tw.Flush()
}
