package fleet_test

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/fleet"
	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/store"
)

// replayCovered names, for every shipped template (templates/*.yaml), the
// end-to-end test of this package that runs it through a fleet and replays the
// finished run (issue 44: 100 % of every shipped template's recorded runs
// replay with no divergence and no tool executed).
// TestEveryShippedTemplateReplays holds new templates to it.
var replayCovered = map[string]string{
	"demo":            "TestReplayOfARecordedRun",
	"media-studio":    "TestMediaStudioTemplateOnSimulators",
	"steam-frame-vr":  "TestSteamFrameTemplateOnSimulator",
	"research-writer": "TestResearchWriterTemplateReplays",
	"voice-over":      "TestAudioRequiredOutputEndToEnd",
}

// A template added to templates/ without an end-to-end run that replays fails
// here; so does a table entry whose test is gone, no longer replays, or never
// names its template.
func TestEveryShippedTemplateReplays(t *testing.T) {
	t.Parallel()
	shipped, err := filepath.Glob(fleettest.RepoPath(t, "templates/*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, shipped)
	fset := token.NewFileSet()
	pkgFiles, err := filepath.Glob("*_test.go")
	require.NoError(t, err)
	// test function name -> (calls a replay, the string literals of its file)
	type testFunc struct {
		replays  bool
		literals map[string]bool
	}
	funcs := map[string]testFunc{}
	for _, path := range pkgFiles {
		file, err := parser.ParseFile(fset, path, nil, 0)
		require.NoError(t, err, path)
		lits := map[string]bool{}
		ast.Inspect(file, func(n ast.Node) bool {
			if b, ok := n.(*ast.BasicLit); ok && b.Kind == token.STRING {
				if s, err := strconv.Unquote(b.Value); err == nil {
					lits[s] = true
				}
			}
			return true
		})
		for _, d := range file.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv != nil || !strings.HasPrefix(fd.Name.Name, "Test") {
				continue
			}
			replays := false
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				c, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				switch fn := c.Fun.(type) {
				case *ast.Ident:
					replays = replays || fn.Name == "requireCleanReplay"
				case *ast.SelectorExpr:
					replays = replays || fn.Sel.Name == "Replay"
				}
				return true
			})
			funcs[fd.Name.Name] = testFunc{replays: replays, literals: lits}
		}
	}
	names := map[string]bool{}
	for _, p := range shipped {
		name := strings.TrimSuffix(filepath.Base(p), ".yaml")
		names[name] = true
		test, ok := replayCovered[name]
		require.True(t, ok, "template %s ships without an end-to-end run that replays: add a test that runs it and calls requireCleanReplay, and name it in replayCovered", name)
		fn, ok := funcs[test]
		require.True(t, ok, "template %s: its replay test %s is not in the fleet package", name, test)
		require.True(t, fn.replays, "template %s: %s replays no run (requireCleanReplay)", name, test)
		require.True(t, fn.literals[name], "template %s: the file of %s never names the template", name, test)
	}
	for name := range replayCovered {
		require.True(t, names[name], "replayCovered names %s, which templates/ no longer ships", name)
	}
}

// scriptedTemplates returns a templates directory holding the shipped template
// name unchanged (its prompts, tools, servers and required outputs) but for its
// model, the script model, and the script its agents play.
func scriptedTemplates(t *testing.T, name string, script map[string]any) string {
	t.Helper()
	raw, err := os.ReadFile(fleettest.RepoPath(t, filepath.Join("templates", name+".yaml")))
	require.NoError(t, err)
	var tm map[string]any
	require.NoError(t, yaml.Unmarshal(raw, &tm))
	require.Equal(t, name, tm["name"])
	tm["model"] = map[string]any{"provider": "script"}
	tm["script"] = map[string]any{"agents": script}
	out, err := yaml.Marshal(tm)
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, name+".yaml"), out, 0o600))
	return dir
}

// The shipped research-writer template on the script model: the lead plans,
// delegates a section to the writer, who writes and reads it back; the run
// completes and replays with no divergence and nothing executed.
func TestResearchWriterTemplateReplays(t *testing.T) {
	t.Parallel()
	dir := scriptedTemplates(t, "research-writer", map[string]any{
		"lead": []map[string]any{
			{"calls": []map[string]any{{"tool": "create_plan", "args": map[string]any{"goal": "A short guide", "steps": []string{"Write intro.md", "Reply"}}}}},
			call("delegate", map[string]any{"agent": "writer", "task": "Write intro.md: the introduction, 80 words, plain tone"}),
			{"calls": []map[string]any{
				{"tool": "update_plan", "args": map[string]any{"step": 1, "status": "completed", "result": "intro.md written"}},
				{"tool": "report_progress", "args": map[string]any{"percent": 90, "message": "intro written"}},
			}},
			call("reply", map[string]any{"message": "The guide's introduction is in intro.md"}),
		},
		"writer": []map[string]any{
			call("write_file", map[string]any{"path": "intro.md", "content": "# Tide pools\n\nA short guide for families.\n"}),
			call("read_file", map[string]any{"path": "intro.md"}),
			{"say": "intro.md: the introduction, in a plain tone"},
		},
	})
	f := fleettest.Start(t, fleettest.Options{Configure: func(c *config.Config) { c.Templates = dir }})
	id := f.Submit("research-writer", "write the guide", map[string]any{"title": "Tide pools", "audience": "families"})
	run := f.WaitTerminal(id, 60*time.Second)
	require.Equal(t, store.RunCompleted, run.Status, run.Error)
	data, err := os.ReadFile(filepath.Join(f.Cfg.Workspaces, id, "intro.md"))
	require.NoError(t, err)
	require.Contains(t, string(data), "Tide pools")
	requireCleanReplay(t, f, id)
}

// requireCleanReplay replays a finished run of a shipped template (issue 44:
// every template's recorded runs replay): no divergence, no tool executed,
// nothing written to its audit or its events.
func requireCleanReplay(t *testing.T, f *fleettest.Fleet, id string) {
	t.Helper()
	ctx := context.Background()
	count := func() (int, int) {
		audit, err := f.Store.RunAudit(ctx, id, 10_000)
		require.NoError(t, err)
		evs, err := f.Store.EventsAfter(ctx, id, 0, 10_000)
		require.NoError(t, err)
		return len(audit), len(evs)
	}
	// The run's post-run work writes after its terminal event: the record is
	// settled when its events stop changing.
	last := -1
	require.Eventually(t, func() bool {
		_, n := count()
		settled := n == last
		last = n
		return settled
	}, 20*time.Second, 300*time.Millisecond)
	audit, evs := count()
	rep, err := f.Replay(ctx, id, fleet.ReplayOptions{})
	require.NoError(t, err)
	require.False(t, rep.Diverged, "the run diverges on replay: %+v", rep.Divergence)
	require.Zero(t, rep.ToolExecutions)
	require.Positive(t, rep.Steps)
	a2, e2 := count()
	require.Equal(t, audit, a2, "the replay wrote no audit row")
	require.Equal(t, evs, e2, "the replay emitted no event")
}
