package quality_test

import (
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/toolbox/quality"
	"github.com/aetherium-engine/aetherium/toolbox/workspace"
	"github.com/aetherium-engine/aetherium/tools"
)

// runTool dispatches one tool call in a session whose workspace is ws.
func runTool(t *testing.T, ws, tool string, args any) (string, error) {
	t.Helper()
	return runToolWith(t, workspace.Config{}, ws, tool, args)
}

// runToolWith is runTool with the tools registered on cfg.
func runToolWith(t *testing.T, cfg workspace.Config, ws, tool string, args any) (string, error) {
	t.Helper()
	reg := tools.NewRegistry()
	quality.RegisterFinishing(reg, cfg)
	raw, err := json.Marshal(args)
	require.NoError(t, err)
	s := &tools.Session{AllowedDomains: []string{"127.0.0.1"}, RunID: "r", SessionID: "s", Agent: "a", Role: "worker", Workspace: ws,
		Access: tools.Access{Tools: []string{"record_style", "check_finishing"}}}
	res, err := tools.NewRouter(reg).Dispatch(context.Background(), tools.Call{ID: "c1", Name: tool, Args: raw, Session: s})
	return res.Content, err
}

// copyFixture copies the fixture directory src into dst.
func copyFixture(t *testing.T, src, dst string) {
	t.Helper()
	require.NoError(t, filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	}))
}

// writeFixtureFiles creates files (slash paths relative to dir) with their content.
func writeFixtureFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for rel, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}
}

// recordSection returns the lines of a Markdown section of doc.
func recordSection(doc, heading string) []string {
	_, rest, ok := strings.Cut(doc, "## "+heading+"\n")
	if !ok {
		return nil
	}
	if i := strings.Index(rest, "\n## "); i >= 0 {
		rest = rest[:i]
	}
	return strings.Split(strings.TrimSpace(rest), "\n")
}
