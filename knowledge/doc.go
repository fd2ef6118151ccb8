// Package knowledge is the knowledge base behind search_knowledge and
// write_knowledge (issue 17): documents of packs (directories of Markdown shipped
// under knowledge/packs/ or configured) and of projects (what agents write with
// write_knowledge and what people put in a project's knowledge/ folder), chunked by
// headings and paragraphs and searched within a Scope.
//
// Backend is the storage interface; Postgres is the default and only required
// implementation: a tsvector per chunk (the source's language plus simple) under a
// GIN index, queries ranked by IDF-weighted term coverage blended with ts_rank_cd
// (both 0..1), a vocabulary with a pg_trgm index that corrects misspelt query
// words, and, when an OpenAI-compatible embeddings endpoint is configured, cosine
// re-ranking of the top candidates. Hits under Config.ScoreFloor are dropped.
//
// Paths under a dot directory (.frame/ above all: headset captures) are never
// indexed, whatever path leads there: Index refuses them after cleaning, and the
// folder walkers skip dot entries and every symlink that resolves outside the
// folder or into a dot directory.
package knowledge

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// Sentinel errors.
var (
	// ErrHiddenPath is a document path inside a dot directory (or a dot file).
	ErrHiddenPath = errors.New("path is inside a dot directory")
	// ErrInvalidPath is an empty, absolute or climbing document path.
	ErrInvalidPath = errors.New("invalid document path")
	// ErrInvalidDocument is a document without a title or source, or too large.
	ErrInvalidDocument = errors.New("invalid document")
	// ErrNotFound is a document that is not indexed.
	ErrNotFound = errors.New("document not found")
	// ErrEmbeddings is a failure of the embeddings endpoint.
	ErrEmbeddings = errors.New("embeddings")
)

// Source kinds.
const (
	KindPack    = "pack"
	KindProject = "project"
)

// Source is where a document belongs: one pack or one project.
type Source struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
}

// Pack is the source of pack name.
func Pack(name string) Source { return Source{Kind: KindPack, Name: name} }

// Project is the source of a project, named by the project's id (store.Project.ID),
// never by its slug: a later project of the same slug is another source.
func Project(id string) Source { return Source{Kind: KindProject, Name: id} }

// String is "pack:<name>" or "project:<id>", the form results carry.
func (s Source) String() string { return s.Kind + ":" + s.Name }

func (s Source) validate() error {
	if s.Kind != KindPack && s.Kind != KindProject {
		return fmt.Errorf("%w: source kind %q is neither %s nor %s", ErrInvalidDocument, s.Kind, KindPack, KindProject)
	}
	if s.Name == "" || len(s.Name) > 200 {
		return fmt.Errorf("%w: source name must be 1-200 bytes", ErrInvalidDocument)
	}
	return nil
}

// Scope decides what a search sees: the team's packs and the project. Nothing
// else is searched; an empty scope finds nothing.
type Scope struct {
	Packs   []string `json:"packs,omitempty"`
	Project string   `json:"project,omitempty"`
}

// Empty reports whether the scope names no source.
func (s Scope) Empty() bool { return len(s.Packs) == 0 && s.Project == "" }

// Document is one Markdown document to index.
type Document struct {
	Source Source
	// Path is slash-separated and relative (to the pack directory, or to the
	// project's workspace: knowledge/<slug>.md). Dot components are refused.
	Path    string
	Title   string
	Tags    []string
	Content string
	// Language is the text-search configuration (english, german, simple, …);
	// empty takes the backend's default.
	Language string
}

// DocID is the stable id of the document at path in src: known before indexing
// (write_knowledge's receipt names it even when indexing fails) and kept across
// re-indexing.
func DocID(src Source, path string) string {
	h := sha256.Sum256([]byte(src.Kind + "\x00" + src.Name + "\x00" + path))
	return "kd_" + hex.EncodeToString(h[:10])
}

// Indexed is the outcome of indexing one document.
type Indexed struct {
	ID     string `json:"id"`
	Chunks int    `json:"chunks"`
	// Changed is false when the document was already indexed with the same
	// content hash (nothing was written).
	Changed bool `json:"changed"`
	// Embedded is true when its chunks carry embeddings.
	Embedded bool `json:"embedded"`
}

// DocInfo describes an indexed document.
type DocInfo struct {
	ID          string    `json:"id"`
	Source      Source    `json:"source"`
	Path        string    `json:"path"`
	Title       string    `json:"title"`
	ContentHash string    `json:"content_hash"`
	Chunks      int       `json:"chunks"`
	IndexedAt   time.Time `json:"indexed_at"`
}

// Query is one search.
type Query struct {
	Text  string
	K     int
	Scope Scope
}

// Result is one hit: the best chunk of one document.
type Result struct {
	DocID   string `json:"id"`
	Title   string `json:"title"`
	Path    string `json:"path"`
	Heading string `json:"heading,omitempty"`
	// Snippet is the chunk's best passage with the matched terms in **bold**.
	Snippet string  `json:"snippet"`
	Score   float64 `json:"score"`
	// Source is "pack:<name>" or "project:<slug>".
	Source string `json:"source"`
}

// SourceStats counts one source's documents and chunks.
type SourceStats struct {
	Source   Source `json:"source"`
	Language string `json:"language"`
	Docs     int    `json:"docs"`
	Chunks   int    `json:"chunks"`
	Embedded int    `json:"embedded"`
}

// Stats describes the whole index.
type Stats struct {
	Docs    int           `json:"docs"`
	Chunks  int           `json:"chunks"`
	Terms   int           `json:"terms"`
	Sources []SourceStats `json:"sources"`
}

// Backend stores and searches documents. Implementations must make Index
// idempotent (an unchanged document is a no-op) and atomic per document.
type Backend interface {
	// Index adds or replaces one document.
	Index(ctx context.Context, doc Document) (Indexed, error)
	// Delete removes the document at path in src (ErrNotFound when absent).
	Delete(ctx context.Context, src Source, path string) error
	// Docs lists the documents of src.
	Docs(ctx context.Context, src Source) ([]DocInfo, error)
	// Search returns at most q.K hits in q.Scope, best first, none under the
	// score floor.
	Search(ctx context.Context, q Query) ([]Result, error)
	// Stats describes the index.
	Stats(ctx context.Context) (Stats, error)
}
