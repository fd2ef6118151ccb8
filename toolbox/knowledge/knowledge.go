// Package knowledge is the KnowledgeTools server class: search_knowledge and
// write_knowledge over a knowledge.Backend (package knowledge at the module root).
// The scope of a session is its team's packs and its project
// (tools.Session.KnowledgePacks, tools.Session.Project).
//
// write_knowledge saves the document into the project's workspace first
// (knowledge/<slug>.md) and indexes it second: when indexing fails the receipt
// still names the saved file, with indexed: false and the reason, and the call
// does not fail — a worker that retried would only write the same file again.
package knowledge

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/aetherium-engine/aetherium/confine"
	kb "github.com/aetherium-engine/aetherium/knowledge"
	"github.com/aetherium-engine/aetherium/tools"
	"github.com/aetherium-engine/aetherium/wsquota"
)

// MaxVariants bounds the numbered file names a title may take (<slug>-2.md …).
const MaxVariants = 100

// WriteArgs are write_knowledge's arguments.
type WriteArgs struct {
	Title   string   `json:"title" jsonschema:"description=The document's title; writing the same title again updates that document"`
	Content string   `json:"content" jsonschema:"description=Markdown; headings and paragraphs become the searchable chunks"`
	Tags    []string `json:"tags,omitempty"`
}

// SearchArgs are search_knowledge's arguments.
type SearchArgs struct {
	Query string `json:"query" jsonschema:"description=What you are looking for, in words; typos are tolerated"`
	K     int    `json:"k,omitempty" jsonschema:"minimum=1,maximum=20,description=How many documents (default 5)"`
}

// Receipt is write_knowledge's answer.
type Receipt struct {
	ID      string `json:"id"`
	Path    string `json:"path"`
	Chunks  int    `json:"chunks"`
	Indexed bool   `json:"indexed"`
	// Updated is true when the call replaced the document of the same title.
	Updated bool `json:"updated"`
	// Previous is where the replaced version is kept (knowledge/.versions/…,
	// never indexed): an update never silently destroys what another session or
	// a person wrote under the title. Empty when nothing changed.
	Previous string `json:"previous,omitempty"`
	// Reason says why the saved file is not indexed (indexed: false).
	Reason string `json:"reason,omitempty"`
}

// Owner receives the files write_knowledge writes (the sandbox's user), as in
// the workspace tools.
type Owner struct{ UID, GID int }

// Deps are what the tools need.
type Deps struct {
	// Backend stores and searches; nil registers the tools, write_knowledge then
	// saves without indexing and search_knowledge fails.
	Backend kb.Backend
	Config  kb.Config
	// Owner, when set and the worker runs as root, owns the written files.
	Owner *Owner
	Log   *slog.Logger
}

type server struct {
	d     Deps
	locks [64]sync.Mutex
}

// Register adds search_knowledge and write_knowledge.
func Register(reg *tools.Registry, d Deps) {
	d.Config = d.Config.WithDefaults()
	if d.Log == nil {
		d.Log = slog.Default()
	}
	s := &server{d: d}
	tools.Register(reg, "search_knowledge", "Search the knowledge base of this session: the team's knowledge packs and the project's documents "+
		"(written with write_knowledge or added under knowledge/). Returns title, path, a snippet with the matched terms in **bold**, score (0-1) and source.",
		s.search, tools.ReadOnly(), tools.Idempotent(), tools.Reads(tools.Private), tools.InGroup("knowledge"))
	tools.Register(reg, "write_knowledge", "Save a Markdown document into the project knowledge base: it is written to knowledge/<slug>.md in the workspace, then indexed. "+
		"Writing the same title again updates that document. Returns a receipt {id, path, chunks, indexed}; indexed: false (with a reason) still means the file is saved — do not retry.",
		s.write, tools.Idempotent(), tools.Persists(), tools.InGroup("knowledge"))
}

func (s *server) search(ctx context.Context, call tools.Call, a SearchArgs) (tools.Result, error) {
	sess := call.Session
	if sess == nil {
		return tools.Result{}, errors.New("search_knowledge: no session")
	}
	if strings.TrimSpace(a.Query) == "" {
		return tools.Result{}, errors.New("search_knowledge: query is empty")
	}
	if s.d.Backend == nil {
		return tools.Result{}, errors.New("search_knowledge: the knowledge base is not configured in this deployment")
	}
	scope := kb.Scope{Packs: sess.KnowledgePacks, Project: sess.Project}
	res, err := s.d.Backend.Search(ctx, kb.Query{Text: a.Query, K: a.K, Scope: scope})
	if err != nil {
		// The database failing is not the call's fault: the step is retried.
		return tools.Result{}, tools.Infrastructure(fmt.Errorf("search_knowledge: %w", err))
	}
	out := map[string]any{"results": res}
	if len(res) == 0 {
		out["results"] = []kb.Result{}
		out["note"] = fmt.Sprintf("nothing in this session's knowledge scope (packs: %s; project: %s) matched well enough",
			listOrNone(scope.Packs), orNone(scope.Project))
	}
	return tools.JSON(out)
}

func listOrNone(xs []string) string {
	if len(xs) == 0 {
		return "none"
	}
	return strings.Join(xs, ", ")
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func (s *server) write(ctx context.Context, call tools.Call, a WriteArgs) (tools.Result, error) {
	if _, err := call.Workspace(); err != nil {
		return tools.Result{}, fmt.Errorf("write_knowledge: %w", err)
	}
	sess := call.Session
	title := strings.Join(strings.Fields(a.Title), " ")
	switch {
	case title == "":
		return tools.Result{}, errors.New("write_knowledge: title is empty")
	case len([]rune(title)) > 300:
		return tools.Result{}, errors.New("write_knowledge: title is over 300 characters")
	case strings.TrimSpace(a.Content) == "":
		return tools.Result{}, errors.New("write_knowledge: content is empty")
	case len(a.Content) > kb.MaxDocumentBytes:
		return tools.Result{}, fmt.Errorf("write_knowledge: content is %d bytes, over the %d byte limit", len(a.Content), kb.MaxDocumentBytes)
	}
	data := kb.RenderMarkdown(title, a.Tags, a.Content)
	rel, updated, previous, err := s.save(sess.Workspace, title, data)
	if err != nil {
		return tools.Result{}, fmt.Errorf("write_knowledge: %w", wsquota.Explain(sess.Workspace, err))
	}
	rc := Receipt{ID: kb.DocID(kb.Project(sess.Project), rel), Path: rel, Updated: updated, Previous: previous}
	switch {
	case s.d.Backend == nil:
		rc.Reason = "the knowledge index is not configured in this deployment; the file is saved"
	case sess.Project == "":
		rc.Reason = "this session has no project to index into; the file is saved"
	default:
		doc := kb.ParseMarkdown(rel, data)
		doc.Source, doc.Path = kb.Project(sess.Project), rel
		ictx, cancel := context.WithTimeout(ctx, s.d.Config.IndexTimeout)
		res, err := s.d.Backend.Index(ictx, doc)
		cancel()
		if err != nil {
			s.d.Log.Warn("write_knowledge: saved but not indexed", "path", rel, "project", sess.Project, "err", err)
			rc.Reason = "indexing failed, the file is saved (it is indexed again at the next run start): " + err.Error()
		} else {
			rc.ID, rc.Chunks, rc.Indexed = res.ID, res.Chunks, true
		}
	}
	return tools.JSON(rc)
}

// save writes data to knowledge/<slug>.md, or to the first free
// knowledge/<slug>-N.md. The rule: a title owns the file whose front matter
// carries that title (compared case- and space-insensitively), and writing it
// again replaces that file; any other file — another title with the same slug, a
// file a person wrote — is never overwritten. New files are linked into place
// (failing if the name was taken meanwhile), replacements renamed over: both
// atomic, so a reader never sees half a document.
func (s *server) save(workspace, title string, data []byte) (rel string, updated bool, previous string, err error) {
	// The folder may be a link, but only to a real directory of the workspace
	// outside dot directories: a knowledge/ → .frame link writes nothing.
	if _, err := kb.FolderOf(workspace); err != nil {
		return "", false, "", err
	}
	root, err := os.OpenRoot(workspace)
	if err != nil {
		return "", false, "", fmt.Errorf("open workspace: %w", err)
	}
	defer root.Close()
	// Existing documents are the agent's files: read through confine, so a FIFO
	// or socket under a document's name is refused instead of blocking the
	// open, and nothing over MaxDocumentBytes is read.
	conf, err := confine.OpenRoot(workspace, confine.Config{MaxBytes: kb.MaxDocumentBytes})
	if err != nil {
		return "", false, "", fmt.Errorf("open workspace: %w", err)
	}
	defer conf.Close()
	if err := root.MkdirAll(kb.FolderName, 0o755); err != nil {
		return "", false, "", err
	}
	s.chown(root, kb.FolderName)
	slug := kb.Slug(title)
	unlock := s.lock(workspace + "\x00" + slug)
	defer unlock()
	// A dot name: IndexFolder never reads it, even if a crash leaves it behind.
	tmp := path.Join(kb.FolderName, ".write-"+rand.Text()+".tmp")
	if err := root.WriteFile(tmp, data, 0o644); err != nil {
		return "", false, "", err
	}
	defer func() { _ = root.Remove(tmp) }()
	s.chown(root, tmp)
	for n := 1; n <= MaxVariants; n++ {
		name := slug + ".md"
		if n > 1 {
			name = fmt.Sprintf("%s-%d.md", slug, n)
		}
		rel := path.Join(kb.FolderName, name)
		old, err := conf.ReadFile(rel)
		switch {
		case errors.Is(err, confine.ErrNotRegular), errors.Is(err, confine.ErrTooLarge),
			errors.Is(err, confine.ErrLoop), errors.Is(err, confine.ErrOutside):
			continue // the name is taken by something that is no document of ours
		case errors.Is(err, fs.ErrNotExist):
			if err := root.Link(tmp, rel); errors.Is(err, fs.ErrExist) {
				continue // taken meanwhile (another worker): look again
			} else if err != nil {
				return "", false, "", err
			}
			return rel, false, "", nil
		case err != nil:
			return "", false, "", err
		case sameTitle(kb.ParseMarkdown(rel, old).Title, title) && hasFrontMatter(old):
			if bytes.Equal(old, data) {
				return rel, true, "", nil // a retried call: nothing changes, nothing to keep
			}
			kept, err := s.keep(root, name, old)
			if err != nil {
				return "", false, "", err
			}
			if err := root.Rename(tmp, rel); err != nil {
				return "", false, "", err
			}
			return rel, true, kept, nil
		}
	}
	return "", false, "", fmt.Errorf("%d documents already take the name %s: choose another title", MaxVariants, slug)
}

// VersionsFolder keeps the versions write_knowledge replaced, below the
// knowledge folder: a dot folder, which the index never reads.
const VersionsFolder = ".versions"

// keep writes the version a replacement is about to overwrite to
// knowledge/.versions/<name without .md>.<UTC time>.<random>.md.
func (s *server) keep(root *os.Root, name string, old []byte) (string, error) {
	dir := path.Join(kb.FolderName, VersionsFolder)
	if err := root.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	s.chown(root, dir)
	rel := path.Join(dir, fmt.Sprintf("%s.%s.%s.md", strings.TrimSuffix(name, ".md"), time.Now().UTC().Format("20060102T150405Z"), rand.Text()[:6]))
	if err := root.WriteFile(rel, old, 0o644); err != nil {
		return "", fmt.Errorf("keep the previous version: %w", err)
	}
	s.chown(root, rel)
	return rel, nil
}

func hasFrontMatter(b []byte) bool { return strings.HasPrefix(string(b), "---\n") }

func sameTitle(a, b string) bool {
	return strings.EqualFold(strings.Join(strings.Fields(a), " "), strings.Join(strings.Fields(b), " "))
}

func (s *server) chown(root *os.Root, rel string) {
	if o := s.d.Owner; o != nil && os.Geteuid() == 0 {
		_ = root.Lchown(rel, o.UID, o.GID)
	}
}

// lock serializes writers of one slug in one workspace within this process
// (striped; other processes are kept apart by the link-or-retry in save).
func (s *server) lock(key string) func() {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	m := &s.locks[h.Sum32()%uint32(len(s.locks))]
	m.Lock()
	return m.Unlock
}
