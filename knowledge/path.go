package knowledge

import (
	"fmt"
	"path"
	"strings"
)

// maxPathLen bounds a document path.
const maxPathLen = 1024

// CleanPath validates a document path and returns it cleaned. It refuses empty,
// over-long, absolute and climbing paths, NUL and control characters, and — after
// cleaning, so a/../.frame/x is caught like .frame/x — any component that starts
// with a dot (ErrHiddenPath): dot directories are never indexed.
func CleanPath(p string) (string, error) {
	if p == "" || len(p) > maxPathLen {
		return "", fmt.Errorf("%w: %q must be 1-%d bytes", ErrInvalidPath, clip(p, 80), maxPathLen)
	}
	for _, r := range p {
		if r < 0x20 || r == 0x7f {
			return "", fmt.Errorf("%w: %q contains a control character", ErrInvalidPath, p)
		}
	}
	p = strings.ReplaceAll(p, "\\", "/")
	if path.IsAbs(p) {
		return "", fmt.Errorf("%w: %q is absolute", ErrInvalidPath, p)
	}
	clean := path.Clean(p)
	if clean == "." || clean == ".." || strings.HasPrefix(clean, "../") {
		return "", fmt.Errorf("%w: %q climbs out or names no file", ErrInvalidPath, p)
	}
	if hidden(clean) {
		return "", fmt.Errorf("%w: %q", ErrHiddenPath, p)
	}
	return clean, nil
}

// hidden reports whether a cleaned slash path has a dot component.
func hidden(clean string) bool {
	for _, c := range strings.Split(clean, "/") {
		if strings.HasPrefix(c, ".") {
			return true
		}
	}
	return false
}
