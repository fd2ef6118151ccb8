// Package workspace is the WorkspaceTools server class: file operations confined to
// the run's workspace directory. Every path an agent passes goes through Clean and
// every operation through an os.Root on the workspace, so "..", absolute paths,
// symlinks that lead out, device files and over-size files are refused. Files the
// session changes are snapshotted first, so revert_file can undo them.
package workspace

import (
	"cmp"
	"context"
	"fmt"

	"github.com/aetherium-engine/aetherium/internal/defaults"
	"github.com/aetherium-engine/aetherium/tools"
	"github.com/aetherium-engine/aetherium/wsquota"
)

// Config bounds the workspace tools.
type Config struct {
	// MaxFileBytes caps the files read_file reads and write_file/edit_file write.
	// Default 1 MiB.
	MaxFileBytes int64
	// MaxOutputBytes caps list_files and search_files output. Default 64 KiB.
	MaxOutputBytes int
	// MaxListEntries caps the entries list_files shows. Default 500.
	MaxListEntries int
	// MaxSearchResults caps the results search_files returns (and what max_results
	// may ask for). Default 200.
	MaxSearchResults int
	// ShrinkGuardBytes: write_file refuses to replace a file of at least this size
	// with less than half of it (the usual sign of an agent eliding "the rest
	// unchanged"); the whole-file form of edit_file is the deliberate way. 0 means
	// 1 KiB; negative disables the guard.
	ShrinkGuardBytes int64
	// Owner, when set and the worker runs as root, receives the files and
	// directories the tools write, so the sandbox's non-root user can change them
	// too. toolbox sets it from the Docker executor.
	Owner *Owner
}

// Owner is a uid:gid.
type Owner struct {
	UID, GID int
}

func (c *Config) defaults() {
	c.MaxFileBytes = defaults.Positive(c.MaxFileBytes, 1<<20)
	c.MaxOutputBytes = defaults.Positive(c.MaxOutputBytes, 64<<10)
	c.MaxListEntries = defaults.Positive(c.MaxListEntries, 500)
	c.MaxSearchResults = defaults.Positive(c.MaxSearchResults, 200)
	c.ShrinkGuardBytes = cmp.Or(c.ShrinkGuardBytes, 1<<10)
}

// ReadArgs are read_file's arguments.
type ReadArgs struct {
	Path      string `json:"path" jsonschema:"description=File path relative to the workspace"`
	StartLine int    `json:"start_line,omitempty" jsonschema:"description=First line to return (1-based; default 1),minimum=1"`
	EndLine   int    `json:"end_line,omitempty" jsonschema:"description=Last line to return (default: the end),minimum=1"`
}

// WriteArgs are write_file's arguments.
type WriteArgs struct {
	Path    string `json:"path" jsonschema:"description=File path relative to the workspace"`
	Content string `json:"content" jsonschema:"description=The whole new content of the file"`
}

// EditArgs are edit_file's arguments.
type EditArgs struct {
	Path      string `json:"path" jsonschema:"description=File path relative to the workspace"`
	Search    string `json:"search" jsonschema:"description=Text to find (exact first; whitespace-tolerant when that lands in one place). Empty: create a missing file or with a line range replace those lines"`
	Replace   string `json:"replace" jsonschema:"description=Text to put in place of the match or the line range"`
	StartLine int    `json:"start_line,omitempty" jsonschema:"description=Optional first line (1-based) of a range that confines the search or with an empty search is replaced outright,minimum=1"`
	EndLine   int    `json:"end_line,omitempty" jsonschema:"description=Optional last line of the range (clamped to the end of the file); start_line 1 to the end with an empty search rewrites the whole file,minimum=1"`
}

// PathArgs are revert_file's arguments.
type PathArgs struct {
	Path string `json:"path" jsonschema:"description=File path relative to the workspace"`
}

// server holds the tools' configuration and per-file locks.
type server struct {
	cfg   Config
	locks fileLocks
}

// Register adds the six workspace tools.
func Register(reg *tools.Registry, cfg Config) {
	cfg.defaults()
	s := &server{cfg: cfg}
	tools.Register(reg, "read_file", "Read and return a file's contents (path relative to the workspace); start_line/end_line return only those lines.",
		s.read, tools.ReadOnly(), tools.Idempotent(), tools.Reads(tools.Private), tools.InGroup("workspace"))
	tools.Register(reg, "write_file", "Create or overwrite a file in the workspace with the given content. "+
		"Replacing a file with much less content is refused: to really rewrite it, use edit_file with an empty search and start_line 1, end_line = the last line.",
		quota(s.write), tools.Idempotent(), tools.WritesPath("path", ""), tools.InGroup("workspace"))
	tools.Register(reg, "edit_file", "Replace a search string with new text in place. Exact match first, then a whitespace-tolerant match when it lands in exactly one place; "+
		"several exact matches are all replaced. An empty search creates a missing file. start_line/end_line confine the search, or with an empty search replace those lines "+
		"(start_line 1 to the last line rewrites the whole file). A miss reports the nearest line.",
		quota(s.edit), tools.WritesPath("path", ""), tools.InGroup("workspace"))
	tools.Register(reg, "list_files", "List the workspace (or a directory in it) as a tree with file sizes; capped.",
		s.list, tools.ReadOnly(), tools.Idempotent(), tools.Reads(tools.Private), tools.InGroup("workspace"))
	tools.Register(reg, "search_files", "Find files by name (glob: *.go, src/**/*.ts) and lines by content (text or regex), read-only, output capped. "+
		"Use it instead of ls, find or grep in run_shell. Dot directories are skipped.",
		s.search, tools.ReadOnly(), tools.Idempotent(), tools.Reads(tools.Private), tools.InGroup("workspace"))
	tools.Register(reg, "revert_file", "Undo this session's edits to a file: restore it as it was before the session first changed it (a file the session created is removed).",
		quota(s.revert), tools.WritesPath("path", ""), tools.InGroup("workspace"))
}

// quota wraps a tool that writes: a write that did not fit the workspace's quota
// (ENOSPC in a quota workspace) fails with "workspace quota exceeded: 1.0 GiB of
// 1.0 GiB (…)" instead of the bare "no space left on device".
func quota[A any](h func(context.Context, tools.Call, A) (tools.Result, error)) func(context.Context, tools.Call, A) (tools.Result, error) {
	return func(ctx context.Context, call tools.Call, a A) (tools.Result, error) {
		res, err := h(ctx, call, a)
		if err != nil {
			if ws, werr := call.Workspace(); werr == nil {
				err = wsquota.Explain(ws, err)
			}
		}
		return res, err
	}
}

// open returns the session's workspace and its session.
func (s *server) open(call tools.Call) (*dir, *tools.Session, error) {
	ws, err := call.Workspace()
	if err != nil {
		return nil, nil, err
	}
	d, err := openDir(ws, s.cfg)
	if err != nil {
		return nil, nil, err
	}
	return d, call.Session, nil
}

// openFile is the start of a tool that names one file: the path cleaned (its
// error names the tool, op), then the session's workspace opened.
func (s *server) openFile(call tools.Call, op, path string) (string, *dir, *tools.Session, error) {
	rel, err := Clean(path)
	if err != nil {
		return "", nil, nil, fmt.Errorf("%s: %w", op, err)
	}
	d, sess, err := s.open(call)
	return rel, d, sess, err
}

// cleanFile is Clean for a tool that writes a file, which the workspace itself
// is not; op names the tool in the error.
func cleanFile(op, path string) (string, error) {
	rel, err := Clean(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", op, err)
	}
	if rel == "." {
		return "", fmt.Errorf("%s: the path names the workspace itself, not a file", op)
	}
	return rel, nil
}

// replace writes content to rel after keeping the file as it was before the
// session first changed it, for revert_file.
func (d *dir) replace(sessionID, rel string, content []byte) error {
	if err := d.snapshot(sessionID, rel); err != nil {
		return err
	}
	return d.writeFile(rel, content, 0o644, true)
}

func (s *server) read(ctx context.Context, call tools.Call, a ReadArgs) (tools.Result, error) {
	rel, d, _, err := s.openFile(call, "read_file", a.Path)
	if err != nil {
		return tools.Result{}, err
	}
	defer d.Close()
	b, _, err := d.readRegular(rel)
	if err != nil {
		return tools.Result{}, fmt.Errorf("read_file: %w", err)
	}
	if a.StartLine == 0 && a.EndLine == 0 {
		return tools.Result{Content: string(b)}, nil
	}
	content := string(b)
	ls := splitLines(content)
	start, end := max(a.StartLine, 1), a.EndLine
	if end == 0 || end > ls.n() {
		end = ls.n()
	}
	if start > ls.n() || end < start {
		return tools.Result{}, fmt.Errorf("read_file: %w: lines %d-%d of %s (%d lines)", ErrBadRange, start, end, rel, ls.n())
	}
	from, to := ls.span(start, end)
	return tools.Result{Content: content[from:to]}, nil
}

func (s *server) write(ctx context.Context, call tools.Call, a WriteArgs) (tools.Result, error) {
	rel, err := cleanFile("write_file", a.Path)
	if err != nil {
		return tools.Result{}, err
	}
	if int64(len(a.Content)) > s.cfg.MaxFileBytes {
		return tools.Result{}, fmt.Errorf("write_file: %w: %d bytes for %s, the limit is %d", ErrTooLarge, len(a.Content), rel, s.cfg.MaxFileBytes)
	}
	d, sess, err := s.open(call)
	if err != nil {
		return tools.Result{}, err
	}
	defer d.Close()
	defer s.locks.lock(sess.Workspace, rel)()
	exists, err := d.exists(rel)
	if err != nil {
		return tools.Result{}, fmt.Errorf("write_file: %w", err)
	}
	if exists && s.cfg.ShrinkGuardBytes > 0 {
		old, _, err := d.readRegular(rel)
		if err != nil {
			return tools.Result{}, fmt.Errorf("write_file: %w", err)
		}
		if int64(len(old)) >= s.cfg.ShrinkGuardBytes && 2*len(a.Content) < len(old) {
			return tools.Result{}, fmt.Errorf("write_file: refused to shrink %s from %d to %d bytes (an elided \"rest unchanged\" would lose the file): "+
				"change parts of it with edit_file, or rewrite it deliberately with edit_file, an empty search, start_line 1 and end_line %d",
				rel, len(old), len(a.Content), splitLines(string(old)).n())
		}
	}
	if err := d.replace(sess.SessionID, rel, []byte(a.Content)); err != nil {
		return tools.Result{}, fmt.Errorf("write_file: %w", err)
	}
	verb := "created"
	if exists {
		verb = "overwrote"
	}
	return tools.Text("%s %s (%s)", verb, rel, size(a.Content)), nil
}

func (s *server) edit(ctx context.Context, call tools.Call, a EditArgs) (tools.Result, error) {
	rel, err := cleanFile("edit_file", a.Path)
	if err != nil {
		return tools.Result{}, err
	}
	d, sess, err := s.open(call)
	if err != nil {
		return tools.Result{}, err
	}
	defer d.Close()
	defer s.locks.lock(sess.Workspace, rel)()
	exists, err := d.exists(rel)
	if err != nil {
		return tools.Result{}, fmt.Errorf("edit_file: %w", err)
	}
	var content []byte
	if exists {
		if content, _, err = d.readRegular(rel); err != nil {
			return tools.Result{}, fmt.Errorf("edit_file: %w", err)
		}
	}
	updated, summary, err := applyEdit(string(content), exists, edit{
		Path: rel, Search: a.Search, Replace: a.Replace, StartLine: a.StartLine, EndLine: a.EndLine,
	})
	if err != nil {
		return tools.Result{}, fmt.Errorf("edit_file: %w", err)
	}
	if int64(len(updated)) > s.cfg.MaxFileBytes {
		return tools.Result{}, fmt.Errorf("edit_file: %w: the result would be %d bytes, the limit is %d", ErrTooLarge, len(updated), s.cfg.MaxFileBytes)
	}
	if err := d.replace(sess.SessionID, rel, []byte(updated)); err != nil {
		return tools.Result{}, fmt.Errorf("edit_file: %w", err)
	}
	return tools.Text("%s; the file now has %s", summary, size(updated)), nil
}

func (s *server) revert(ctx context.Context, call tools.Call, a PathArgs) (tools.Result, error) {
	rel, d, sess, err := s.openFile(call, "revert_file", a.Path)
	if err != nil {
		return tools.Result{}, err
	}
	defer d.Close()
	defer s.locks.lock(sess.Workspace, rel)()
	snap, err := d.revert(sess.SessionID, rel)
	if err != nil {
		return tools.Result{}, fmt.Errorf("revert_file: %w", err)
	}
	if !snap.Existed {
		return tools.Text("reverted %s: removed it (it did not exist before this session)", rel), nil
	}
	return tools.Text("reverted %s to its state before this session's first edit (%s)", rel, size(string(snap.Content))), nil
}
