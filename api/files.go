package api

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strconv"

	"github.com/gofiber/fiber/v2"

	"github.com/aetherium-engine/aetherium/confine"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/toolbox/workspace"
)

// MaxListedFiles caps GET /api/runs/:id/files: a workspace can hold a
// node_modules tree, and the browser only needs enough to find a file.
const MaxListedFiles = 5000

// FileEntry is one regular file of a run's workspace.
type FileEntry struct {
	// Path is slash-separated, relative to the workspace root.
	Path     string `json:"path"`
	Size     int64  `json:"size"`
	Modified string `json:"modified"`
}

// FileList is the answer of GET /api/runs/:id/files.
type FileList struct {
	Files []FileEntry `json:"files"`
	// Truncated is true when the workspace holds more than MaxListedFiles files.
	Truncated bool `json:"truncated"`
}

// MaxDownloadBytes caps GET /api/runs/:id/file: an agent can leave a sparse file
// of any apparent size, and the download streams what it finds.
const MaxDownloadBytes int64 = 2 << 30

// openWorkspace opens the run's workspace confined (package confine): no symlink
// inside it leads a read outside or into engine state, and nothing but a regular
// file is opened. ok is false when the workspace does not exist (yet, or any
// more).
func (s *Server) openWorkspace(r store.Run) (root *confine.Root, ok bool, err error) {
	if s.d.WorkspaceDir == nil {
		return nil, false, &Error{Status: http.StatusNotImplemented, Message: "this API process does not see the workspaces"}
	}
	root, err = confine.OpenRoot(s.d.WorkspaceDir(r.WorkspaceID()), confine.Config{MaxBytes: MaxDownloadBytes})
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("open workspace of run %s: %w", r.ID, err)
	}
	return root, true, nil
}

func (s *Server) listFiles(c *fiber.Ctx) error {
	r, err := s.loadRun(c)
	if err != nil {
		return err
	}
	out := FileList{Files: []FileEntry{}}
	root, ok, err := s.openWorkspace(r)
	if err != nil || !ok {
		if err != nil {
			return err
		}
		return c.JSON(out)
	}
	defer root.Close()
	// The walk never follows a symlink and leaves engine state out; only regular
	// files are listed, which is all a download serves.
	err = root.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // an unreadable directory is left out, not the whole listing
		}
		if d.IsDir() {
			if p == "lost+found" {
				return fs.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		if len(out.Files) == MaxListedFiles {
			out.Truncated = true
			return fs.SkipAll
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		out.Files = append(out.Files, FileEntry{Path: p, Size: info.Size(), Modified: info.ModTime().UTC().Format("2006-01-02T15:04:05Z07:00")})
		return nil
	})
	if err != nil {
		return fmt.Errorf("list workspace of run %s: %w", r.ID, err)
	}
	return c.JSON(out)
}

// downloadFile serves one workspace file as an attachment. An agent wrote it, so
// it must never be rendered on the API's (and the Studio's) origin: the type is
// opaque, sniffing is off, and a browser that renders it anyway sandboxes it.
func (s *Server) downloadFile(c *fiber.Ctx) error {
	r, err := s.loadRun(c)
	if err != nil {
		return err
	}
	// The path is a query parameter, not a wildcard segment: a wildcard has no
	// OpenAPI form, and the query's decoding is the one every client does.
	raw := c.Query("path")
	if raw == "" {
		return badRequest("path", "path is required: ?path=<a file of the workspace>")
	}
	rel, err := workspace.Clean(raw)
	if err != nil {
		return badRequest("path", "%v", err)
	}
	if rel == "." {
		return badRequest("path", "path names the workspace itself, not a file")
	}
	notFound := &Error{Status: http.StatusNotFound, Field: "path", Message: fmt.Sprintf("no file %q in the workspace of run %s", rel, r.ID)}
	root, ok, err := s.openWorkspace(r)
	if err != nil {
		return err
	}
	if !ok {
		return notFound
	}
	defer root.Close()
	f, err := root.Open(rel)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return notFound
	case err != nil:
		// A symlink out of the workspace or into engine state, a loop, a FIFO,
		// socket, device or directory, a file over MaxDownloadBytes.
		return badRequest("path", "%q cannot be downloaded: %v", rel, err)
	}
	size := f.Info.Size()
	setDownloadHeaders(c, path.Base(rel))
	c.Set("Content-Length", strconv.FormatInt(size, 10))
	// fasthttp closes the file once the body is sent; the limit holds the body to
	// the announced length if the file grows meanwhile.
	return c.SendStream(struct {
		io.Reader
		io.Closer
	}{io.LimitReader(f, size), f}, int(size))
}

// setDownloadHeaders marks a response as an opaque attachment that no browser
// renders or sniffs, and that runs sandboxed (no scripts, no origin) if one does.
func setDownloadHeaders(c *fiber.Ctx, name string) {
	disp := mime.FormatMediaType("attachment", map[string]string{"filename": name})
	if disp == "" {
		disp = "attachment"
	}
	c.Set("Content-Type", "application/octet-stream")
	c.Set("Content-Disposition", disp)
	c.Set("X-Content-Type-Options", "nosniff")
	c.Set("Content-Security-Policy", "sandbox; default-src 'none'")
	c.Set("Cache-Control", "private, no-store")
	c.Set("Cross-Origin-Resource-Policy", "same-origin")
}
