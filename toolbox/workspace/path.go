package workspace

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/aetherium-engine/aetherium/confine"
)

// Sentinel errors of path confinement: package confine's, so a caller tests for
// one whichever layer refused the path.
var (
	// ErrOutside is a path that would leave the workspace.
	ErrOutside = confine.ErrOutside
	// ErrReserved is a path inside the engine's own .aetherium directory.
	ErrReserved = confine.ErrReserved
	// ErrNotRegular is a device, pipe, socket or other non-regular file.
	ErrNotRegular = confine.ErrNotRegular
	// ErrTooLarge is a file over the configured size limit.
	ErrTooLarge = confine.ErrTooLarge
)

// InternalDir is the workspace directory the engine keeps its own state in (edit
// snapshots). Agents cannot address it (by name here, and through any symlink:
// the I/O resolves paths with package confine), listings and searches skip it,
// and the Docker sandbox hides it behind an empty mount.
const InternalDir = confine.InternalDir

// maxPathLen bounds an agent-supplied path (PATH_MAX is 4096; nobody needs more
// than this in a workspace).
const maxPathLen = 1024

// Clean validates an agent-supplied path and returns it relative to the workspace
// root, slash-separated ("." is the root itself). It refuses empty, over-long and
// absolute paths, NUL and control characters, ".." that climbs out, and the
// engine's InternalDir. "/workspace/…" (the sandbox's view) is accepted as
// relative. Symlinks are checked where the path is used (through an os.Root).
func Clean(rel string) (string, error) {
	if rel == "" {
		return "", errors.New("path is empty (paths are relative to the workspace, e.g. src/main.go)")
	}
	if len(rel) > maxPathLen {
		return "", fmt.Errorf("path is %d bytes long, over the %d byte limit", len(rel), maxPathLen)
	}
	if strings.ContainsRune(rel, 0) {
		return "", fmt.Errorf("%w: %q contains a NUL byte", ErrOutside, rel)
	}
	for _, r := range rel {
		if r < 0x20 || r == 0x7f {
			return "", fmt.Errorf("path %q contains a control character", rel)
		}
	}
	if rel == "/workspace" {
		rel = "."
	}
	rel = strings.TrimPrefix(rel, "/workspace/")
	if path.IsAbs(rel) || filepath.IsAbs(rel) {
		return "", fmt.Errorf("%w: %q is absolute (paths are relative to the workspace)", ErrOutside, rel)
	}
	clean := path.Clean(rel)
	if clean == ".." || strings.HasPrefix(clean, "../") {
		return "", fmt.Errorf("%w: %q climbs out of the workspace", ErrOutside, rel)
	}
	if first, _, _ := strings.Cut(clean, "/"); first == InternalDir {
		return "", fmt.Errorf("%w: %q", ErrReserved, rel)
	}
	return clean, nil
}

// Resolve maps an agent-supplied path to an absolute path inside root. Beyond
// Clean's checks it refuses symlinks that lead out of root and device files; the
// path itself need not exist. Prefer doing the I/O through an os.Root as this
// package does: a path checked here can still be swapped before it is used.
func Resolve(root, rel string) (string, error) {
	clean, err := Clean(rel)
	if err != nil {
		return "", err
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		return "", fmt.Errorf("workspace root: %w", err)
	}
	defer r.Close()
	if err := checkExisting(r, clean, rel); err != nil {
		return "", err
	}
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return "", fmt.Errorf("workspace root: %w", err)
	}
	return filepath.Join(realRoot, filepath.FromSlash(clean)), nil
}

// checkExisting follows clean inside r: its deepest existing ancestor must stay
// inside, and an existing target must be a regular file or a directory.
func checkExisting(r *os.Root, clean, rel string) error {
	probe := clean
	for {
		fi, err := r.Stat(probe)
		if err == nil {
			if probe == clean && !fi.IsDir() && !fi.Mode().IsRegular() {
				return fmt.Errorf("%w: %q", ErrNotRegular, rel)
			}
			return nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return pathErr(rel, err)
		}
		if probe == "." {
			return pathErr(rel, err)
		}
		probe = path.Dir(probe)
	}
}

// pathErr turns an os.Root error into one the agent can act on.
func pathErr(rel string, err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "path escapes from parent"):
		return fmt.Errorf("%w: %q resolves outside the workspace (through a symlink)", ErrOutside, rel)
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s does not exist: %w", rel, fs.ErrNotExist)
	case strings.Contains(msg, "too many levels of symbolic links"):
		return fmt.Errorf("%w: %q is a symlink loop", ErrOutside, rel)
	case strings.Contains(msg, "not a directory"):
		return fmt.Errorf("%s: a parent is not a directory", rel)
	}
	return fmt.Errorf("%s: %w", rel, err)
}
