package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/fleet"
	"github.com/aetherium-engine/aetherium/knowledge"
)

const knowledgeUsage = `usage:
  aetherium knowledge index [--packs DIR] [--project SLUG --workspace DIR]
  aetherium knowledge search [--packs a,b] [--project SLUG] [-k N] [--json] QUERY…
  aetherium knowledge stats [--json]`

// knowledgeCmd is the operator's view of the knowledge base. Like migrate it talks
// to PostgreSQL directly (database_url, AETHERIUM_DATABASE_URL), not to the API:
// indexing reads directories on this machine, and the knowledge tables are
// nothing the API serves.
func knowledgeCmd(ctx context.Context, args []string, out, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New(knowledgeUsage)
	}
	switch args[0] {
	case "index", "search", "stats":
	default:
		return fmt.Errorf("%s\n%s", unknownSub("knowledge", args[0]), knowledgeUsage)
	}
	fs := flag.NewFlagSet("knowledge "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	setUsage(fs, knowledgeUsage)
	packs := fs.String("packs", "", "index: the packs directory (default knowledge.packs_dir); search: comma-separated pack names")
	project := fs.String("project", "", "the project whose documents to index or search")
	workspace := fs.String("workspace", "", "index: the project's workspace (its knowledge/ folder is indexed)")
	k := fs.Int("k", knowledge.DefaultK, "search: how many documents")
	asJSON := fs.Bool("json", false, "print JSON")
	positional, err := parseInterleaved(fs, args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	if err != nil {
		return fmt.Errorf("%w\n%s", err, knowledgeUsage)
	}
	cfg, err := config.Load()
	if err != nil {
		return err
	}
	st, err := fleet.OpenStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer st.Close()
	kb := knowledge.NewPostgres(st.Pool, cfg.Knowledge)
	emit := func(v any) error {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	switch args[0] {
	case "index":
		var reps []knowledge.SyncReport
		var errs []error
		if *project != "" || *workspace != "" {
			if *project == "" || *workspace == "" {
				return errors.New("knowledge index: --project and --workspace go together")
			}
			rep, err := knowledge.IndexFolder(ctx, kb, *project, *workspace)
			reps, errs = append(reps, rep), append(errs, err)
		}
		if *packs != "" || *project == "" {
			dir := *packs
			if dir == "" {
				dir = kb.Config().PacksDir
			}
			rs, err := knowledge.IndexPacks(ctx, kb, dir)
			reps, errs = append(reps, rs...), append(errs, err)
		}
		if *asJSON {
			if err := emit(reps); err != nil {
				return err
			}
		} else {
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SOURCE\tFILES\tINDEXED\tUNCHANGED\tDELETED\tSKIPPED")
			for _, r := range reps {
				fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\n", r.Source, r.Files, r.Indexed, r.Unchanged, r.Deleted, len(r.Skipped))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			for _, r := range reps {
				for _, s := range r.Skipped {
					fmt.Fprintf(out, "skipped (%s): %s\n", r.Source, s)
				}
			}
		}
		return errors.Join(errs...)
	case "search":
		q := strings.Join(positional, " ")
		if strings.TrimSpace(q) == "" {
			return errors.New("knowledge search: no query")
		}
		scope := knowledge.Scope{Project: *project}
		for _, p := range strings.Split(*packs, ",") {
			if p = strings.TrimSpace(p); p != "" {
				scope.Packs = append(scope.Packs, p)
			}
		}
		if scope.Empty() {
			return errors.New("knowledge search: name the scope with --packs and/or --project")
		}
		res, err := kb.Search(ctx, knowledge.Query{Text: q, K: *k, Scope: scope})
		if err != nil {
			return err
		}
		if *asJSON {
			return emit(res)
		}
		for i, r := range res {
			heading := ""
			if r.Heading != "" {
				heading = " › " + r.Heading
			}
			fmt.Fprintf(out, "%d. %.3f  %s  %s%s\n   %s\n   %s\n", i+1, r.Score, r.Source, r.Path, heading, r.Title,
				strings.Join(strings.Fields(r.Snippet), " "))
		}
		if len(res) == 0 {
			fmt.Fprintln(out, "no match above knowledge.score_floor")
		}
		return nil
	case "stats":
		s, err := kb.Stats(ctx)
		if err != nil {
			return err
		}
		if *asJSON {
			return emit(s)
		}
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SOURCE\tLANGUAGE\tDOCS\tCHUNKS\tEMBEDDED")
		for _, x := range s.Sources {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\n", x.Source, x.Language, x.Docs, x.Chunks, x.Embedded)
		}
		fmt.Fprintf(tw, "total\t\t%d\t%d\t\n", s.Docs, s.Chunks)
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintf(out, "vocabulary: %d words\n", s.Terms)
		return nil
	}
	return nil
}
