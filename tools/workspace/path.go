package workspace

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// ErrOutside is a path that would leave the workspace.
var ErrOutside = errors.New("path escapes the workspace")

// Resolve maps an agent-supplied relative path to an absolute path inside root.
// It refuses absolute paths, "..", NUL bytes and symlinks that lead out of root;
// the file itself need not exist.
func Resolve(root, rel string) (string, error) {
	if rel == "" {
		return "", errors.New("path is empty")
	}
	if strings.ContainsRune(rel, 0) {
		return "", fmt.Errorf("%w: %q contains a NUL byte", ErrOutside, rel)
	}
	rel = strings.TrimPrefix(rel, "/workspace/")
	if filepath.IsAbs(rel) {
		return "", fmt.Errorf("%w: %q is absolute (paths are relative to the workspace)", ErrOutside, rel)
	}
	clean := filepath.Clean(rel)
	if clean == ".." || strings.HasPrefix(clean, "../") {
		return "", fmt.Errorf("%w: %q", ErrOutside, rel)
	}
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return "", fmt.Errorf("workspace root: %w", err)
	}
	full := filepath.Join(realRoot, clean)
	// Walk up to the deepest existing ancestor and check where it really points:
	// a symlinked directory inside the workspace must not lead outside it.
	probe := full
	for {
		if _, err := os.Lstat(probe); err == nil {
			break
		}
		parent := filepath.Dir(probe)
		if parent == probe {
			break
		}
		probe = parent
	}
	real, err := filepath.EvalSymlinks(probe)
	if err != nil {
		return "", fmt.Errorf("%w: %q: %v", ErrOutside, rel, err)
	}
	if real != realRoot && !strings.HasPrefix(real, realRoot+string(filepath.Separator)) {
		return "", fmt.Errorf("%w: %q resolves outside the workspace", ErrOutside, rel)
	}
	if probe != full {
		return full, nil
	}
	fi, err := os.Lstat(full)
	if err == nil && fi.Mode()&(fs.ModeDevice|fs.ModeNamedPipe|fs.ModeSocket|fs.ModeCharDevice) != 0 {
		return "", fmt.Errorf("%q is not a regular file", rel)
	}
	return real, nil
}
