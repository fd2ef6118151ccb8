package knowledge_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/internal/testdb"

	kb "github.com/aetherium-engine/aetherium/knowledge"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/toolbox/knowledge"
	"github.com/aetherium-engine/aetherium/tools"
)

type fixture struct {
	st      *store.Store
	backend kb.Backend
	router  *tools.Router
}

// setup registers the tools on backend (nil: a fresh PostgreSQL backend with
// cfg).
func setup(t *testing.T, cfg kb.Config, backend kb.Backend) *fixture {
	t.Helper()
	f := &fixture{backend: backend}
	if backend == nil {
		f.st = testdb.Store(t)
		f.backend = kb.NewPostgres(f.st.Pool, cfg)
	}
	reg := tools.NewRegistry()
	knowledge.Register(reg, knowledge.Deps{Backend: f.backend, Config: cfg})
	f.router = tools.NewRouter(reg)
	return f
}

func session(workspace, project string, packs ...string) *tools.Session {
	return &tools.Session{RunID: "r", SessionID: "s", Agent: "a", Role: "worker", Workspace: workspace,
		Project: project, KnowledgePacks: packs,
		Access: tools.Access{Tools: []string{"search_knowledge", "write_knowledge"}}}
}

func (f *fixture) call(t *testing.T, s *tools.Session, tool string, args any) (string, error) {
	t.Helper()
	raw, err := json.Marshal(args)
	require.NoError(t, err)
	res, err := f.router.Dispatch(context.Background(), tools.Call{ID: "c1", Name: tool, Args: raw, Session: s})
	return res.Content, err
}

func (f *fixture) write(t *testing.T, s *tools.Session, title, content string) knowledge.Receipt {
	t.Helper()
	out, err := f.call(t, s, "write_knowledge", knowledge.WriteArgs{Title: title, Content: content, Tags: []string{"t"}})
	require.NoError(t, err)
	var rc knowledge.Receipt
	require.NoError(t, json.Unmarshal([]byte(out), &rc))
	return rc
}

type hits struct {
	Results []kb.Result `json:"results"`
	Note    string      `json:"note"`
}

func (f *fixture) search(t *testing.T, s *tools.Session, q string) hits {
	t.Helper()
	out, err := f.call(t, s, "search_knowledge", knowledge.SearchArgs{Query: q})
	require.NoError(t, err)
	var h hits
	require.NoError(t, json.Unmarshal([]byte(out), &h))
	return h
}

func TestWriteThenSearchWithinTheProject(t *testing.T) {
	t.Parallel()
	f := setup(t, kb.Config{}, nil)
	ws := t.TempDir()
	p := session(ws, "p")
	rc := f.write(t, p, "Deploy checklist", "# Deploy\n\nDrain the canary before the rollout.")
	require.True(t, rc.Indexed)
	require.Equal(t, "knowledge/deploy-checklist.md", rc.Path)
	require.Equal(t, kb.DocID(kb.Project("p"), rc.Path), rc.ID)
	require.Equal(t, 1, rc.Chunks)
	saved, err := os.ReadFile(filepath.Join(ws, rc.Path))
	require.NoError(t, err)
	require.Contains(t, string(saved), "title: Deploy checklist")

	h := f.search(t, p, "canary rollout")
	require.Len(t, h.Results, 1)
	require.Equal(t, "project:p", h.Results[0].Source)
	require.Contains(t, h.Results[0].Snippet, "**canary**")

	// Another project — even on the same workspace path — sees nothing.
	q := f.search(t, session(t.TempDir(), "q"), "canary rollout")
	require.Empty(t, q.Results)
	require.Contains(t, q.Note, "project: q")
}

// The file rule: a title owns the file whose front matter has that title; a
// different title with the same slug, or a person's file, is never overwritten.
func TestWriteNeverOverwritesAnotherDocument(t *testing.T) {
	t.Parallel()
	f := setup(t, kb.Config{}, nil)
	ws := t.TempDir()
	s := session(ws, "p")
	require.NoError(t, os.MkdirAll(filepath.Join(ws, "knowledge"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(ws, "knowledge", "runbook.md"), []byte("# Runbook\n\nA person's notes."), 0o644))

	for _, tc := range []struct {
		title, content, path string
		updated              bool
	}{
		{"Runbook", "the agent's runbook", "knowledge/runbook-2.md", false}, // the person's file stays
		{"runbook", "the agent's runbook, again", "knowledge/runbook-2.md", true},
		{"Run book!", "another title, same slug", "knowledge/run-book.md", false},
		{"RUNBOOK ", "case and spaces do not make another document", "knowledge/runbook-2.md", true},
		{"Runbook?", "same slug, other title", "knowledge/runbook-3.md", false},
		{"../../.frame/capture", "a hostile title", "knowledge/frame-capture.md", false},
		{"Über Größe", "accents fold", "knowledge/uber-grosse.md", false},
	} {
		rc := f.write(t, s, tc.title, tc.content)
		require.Equal(t, tc.path, rc.Path, tc.title)
		require.Equal(t, tc.updated, rc.Updated, tc.title)
		require.True(t, rc.Indexed, rc.Reason)
	}
	person, err := os.ReadFile(filepath.Join(ws, "knowledge", "runbook.md"))
	require.NoError(t, err)
	require.Equal(t, "# Runbook\n\nA person's notes.", string(person))
	entries, err := os.ReadDir(filepath.Join(ws, "knowledge"))
	require.NoError(t, err)
	for _, e := range entries {
		if e.Name() == knowledge.VersionsFolder {
			continue // the replaced versions, kept on purpose (TestUpdateKeepsThePreviousVersion)
		}
		require.False(t, strings.HasPrefix(e.Name(), "."), "no temporary file is left: %s", e.Name())
	}
	_, err = os.Stat(filepath.Join(ws, ".frame"))
	require.ErrorIs(t, err, os.ErrNotExist)
	// Redelivery: the same call again is the same file, unchanged in the index.
	rc := f.write(t, s, "Über Größe", "accents fold")
	require.Equal(t, "knowledge/uber-grosse.md", rc.Path)
	require.True(t, rc.Updated)
}

func TestWriteRefusesAKnowledgeFolderLeadingIntoADotDirectory(t *testing.T) {
	t.Parallel()
	f := setup(t, kb.Config{}, nil)
	ws := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(ws, ".frame"), 0o755))
	require.NoError(t, os.Symlink(".frame", filepath.Join(ws, "knowledge")))
	_, err := f.call(t, session(ws, "p"), "write_knowledge", knowledge.WriteArgs{Title: "x", Content: "y"})
	require.ErrorIs(t, err, kb.ErrHiddenPath)
	entries, err := os.ReadDir(filepath.Join(ws, ".frame"))
	require.NoError(t, err)
	require.Empty(t, entries)
}

// failing is a backend whose index step fails (injection).
type failing struct{ kb.Backend }

func (failing) Index(context.Context, kb.Document) (kb.Indexed, error) {
	return kb.Indexed{}, errors.New("injected: index unavailable")
}

func TestWriteSavesTheFileWhenIndexingFails(t *testing.T) {
	t.Parallel()
	t.Run("injected failure", func(t *testing.T) {
		t.Parallel()
		f := setup(t, kb.Config{}, failing{})
		ws := t.TempDir()
		rc := f.write(t, session(ws, "p"), "Lessons", "Keep the canary small.")
		require.False(t, rc.Indexed)
		require.Contains(t, rc.Reason, "injected: index unavailable")
		require.Equal(t, "knowledge/lessons.md", rc.Path)
		require.Equal(t, kb.DocID(kb.Project("p"), rc.Path), rc.ID, "the id is known without the index")
		require.FileExists(t, filepath.Join(ws, rc.Path))
	})
	t.Run("table locked", func(t *testing.T) {
		t.Parallel()
		f := setup(t, kb.Config{IndexTimeout: 300 * time.Millisecond}, nil)
		ctx := context.Background()
		tx, err := f.st.Pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = tx.Exec(ctx, `LOCK TABLE knowledge_docs IN ACCESS EXCLUSIVE MODE`)
		require.NoError(t, err)
		ws := t.TempDir()
		start := time.Now()
		rc := f.write(t, session(ws, "p"), "Lessons", "Keep the canary small.")
		require.Less(t, time.Since(start), 5*time.Second)
		require.False(t, rc.Indexed)
		require.NotEmpty(t, rc.Reason)
		require.FileExists(t, filepath.Join(ws, rc.Path))
		require.NoError(t, tx.Rollback(ctx))
		// The next run start indexes what was saved.
		rep, err := kb.IndexFolder(ctx, f.backend, "p", ws)
		require.NoError(t, err)
		require.Equal(t, 1, rep.Indexed)
		require.Len(t, f.search(t, session(ws, "p"), "canary").Results, 1)
	})
	t.Run("no project", func(t *testing.T) {
		t.Parallel()
		f := setup(t, kb.Config{}, failing{})
		ws := t.TempDir()
		rc := f.write(t, session(ws, ""), "Lessons", "Keep the canary small.")
		require.False(t, rc.Indexed)
		require.Contains(t, rc.Reason, "no project")
		require.FileExists(t, filepath.Join(ws, rc.Path))
	})
	t.Run("no backend", func(t *testing.T) {
		t.Parallel()
		reg := tools.NewRegistry()
		knowledge.Register(reg, knowledge.Deps{})
		f := &fixture{router: tools.NewRouter(reg)}
		ws := t.TempDir()
		rc := f.write(t, session(ws, "p"), "Lessons", "Keep the canary small.")
		require.False(t, rc.Indexed)
		require.FileExists(t, filepath.Join(ws, rc.Path))
		_, err := f.call(t, session(ws, "p"), "search_knowledge", knowledge.SearchArgs{Query: "canary"})
		require.ErrorContains(t, err, "not configured")
	})
}

func TestArgumentsAreChecked(t *testing.T) {
	t.Parallel()
	f := setup(t, kb.Config{}, failing{})
	s := session(t.TempDir(), "p")
	for _, tc := range []struct {
		tool string
		args any
		want string
	}{
		{"write_knowledge", map[string]any{"content": "x"}, "missing required field"},
		{"write_knowledge", knowledge.WriteArgs{Title: "  ", Content: "x"}, "title is empty"},
		{"write_knowledge", knowledge.WriteArgs{Title: "t", Content: " \n"}, "content is empty"},
		{"write_knowledge", knowledge.WriteArgs{Title: "t", Content: strings.Repeat("x", kb.MaxDocumentBytes+1)}, "limit"},
		{"search_knowledge", knowledge.SearchArgs{Query: " "}, "query is empty"},
	} {
		_, err := f.call(t, s, tc.tool, tc.args)
		require.ErrorContains(t, err, tc.want)
	}
}

func TestSearchSeesTheTeamsPacksAndPeoplesFiles(t *testing.T) {
	t.Parallel()
	f := setup(t, kb.Config{}, nil)
	ctx := context.Background()
	packs := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(packs, "ops"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(packs, "ops", "pager.md"), []byte("# Pager\n\nThe pager rotates weekly."), 0o644))
	_, err := kb.IndexPacks(ctx, f.backend, packs)
	require.NoError(t, err)
	ws := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(ws, "knowledge", "people"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(ws, "knowledge", "people", "oncall.md"), []byte("# On call\n\nThe pager goes to Dana this week."), 0o644))
	_, err = kb.IndexFolder(ctx, f.backend, "p", ws)
	require.NoError(t, err)

	withPack := f.search(t, session(ws, "p", "ops"), "pager")
	var sources []string
	for _, r := range withPack.Results {
		sources = append(sources, r.Source+" "+r.Path)
	}
	require.ElementsMatch(t, []string{"pack:ops pager.md", "project:p knowledge/people/oncall.md"}, sources)
	require.Len(t, f.search(t, session(ws, "p"), "pager").Results, 1, "without the pack in the team, only the project")
}

// An update never silently destroys the version it replaces (issue 49): the old
// file is kept under knowledge/.versions (never indexed) and the receipt names
// it; a retried identical call keeps nothing new.
func TestUpdateKeepsThePreviousVersion(t *testing.T) {
	t.Parallel()
	f := setup(t, kb.Config{}, nil)
	ws := t.TempDir()
	s := session(ws, "p")
	first := f.write(t, s, "Deploy policy", "Deploys need two reviewers.")
	require.Empty(t, first.Previous)
	second := f.write(t, s, "Deploy policy", "Deploys need no review.")
	require.True(t, second.Updated)
	require.True(t, strings.HasPrefix(second.Previous, "knowledge/.versions/deploy-policy."), second.Previous)
	kept, err := os.ReadFile(filepath.Join(ws, second.Previous))
	require.NoError(t, err)
	require.Contains(t, string(kept), "Deploys need two reviewers.")
	again := f.write(t, s, "Deploy policy", "Deploys need no review.")
	require.True(t, again.Updated)
	require.Empty(t, again.Previous, "an identical write changes nothing")
	versions, err := os.ReadDir(filepath.Join(ws, "knowledge", knowledge.VersionsFolder))
	require.NoError(t, err)
	require.Len(t, versions, 1)
	h := f.search(t, s, "two reviewers")
	for _, r := range h.Results {
		require.NotContains(t, r.Path, knowledge.VersionsFolder, "the kept version is not in the index")
		require.NotContains(t, r.Snippet, "two", "the index holds the new version only")
	}
}
