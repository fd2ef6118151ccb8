package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/fleet"
	"github.com/aetherium-engine/aetherium/retention"
)

// AnyOwner is the --owner of runs import that takes an archive of any owner
// (an operator restoring every tenant's runs says so explicitly).
const AnyOwner = "*"

// runsImport writes retention archives back into the database (docs/retention.md),
// one transaction per archive, and says what each did. Unlike the other runs
// subcommands it talks to PostgreSQL directly (database_url), like migrate: it
// restores what retention deleted, which the API no longer has.
func runsImport(ctx context.Context, files []string, owner string, asJSON bool, stdout io.Writer, fail func(string, ...any) int) int {
	if len(files) == 0 {
		return fail("import needs one or more archive files (%s)\n%s", retention.ArchiveExt, runsUsage)
	}
	if owner == "" {
		return fail("import: --owner is required: the principal the archived runs must belong to (%q: any)", AnyOwner)
	}
	if owner == AnyOwner {
		owner = ""
	}
	cfg, err := config.Load()
	if err != nil {
		return fail("%v", err)
	}
	st, err := fleet.OpenStore(ctx, cfg)
	if err != nil {
		return fail("%v", err)
	}
	defer st.Close()
	type result struct {
		File string `json:"file"`
		retention.ImportResult
		Error string `json:"error,omitempty"`
	}
	var results []result
	failed := 0
	for i, file := range files {
		res, err := retention.ImportFile(ctx, st, file, owner)
		r := result{File: file, ImportResult: res}
		if err != nil {
			failed++
			r.Error = err.Error()
		}
		results = append(results, r)
		if asJSON {
			continue
		}
		progress := fmt.Sprintf("[%d/%d] ", i+1, len(files))
		switch {
		case err != nil:
			fmt.Fprintf(stdout, "%s%v (nothing of it was written)\n", progress, err)
		case res.AlreadyPresent:
			fmt.Fprintf(stdout, "%srun %s is already present, as archived: nothing to do\n", progress, res.RunID)
		default:
			fmt.Fprintf(stdout, "%simported run %s: %d rows (aetherium runs show %s)\n", progress, res.RunID, res.Rows, res.RunID)
		}
		if errors.Is(ctx.Err(), context.Canceled) {
			break
		}
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(map[string]any{"imports": results})
	}
	if failed > 0 {
		return fail("%d of %d archives not imported", failed, len(files))
	}
	return 0
}
