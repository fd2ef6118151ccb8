package device

import (
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"time"

	"github.com/aetherium-engine/aetherium/confine"
	"github.com/aetherium-engine/aetherium/device/apk"
	"github.com/aetherium-engine/aetherium/toolbox/workspace"
)

// ErrInvalidArg wraps every refused agent-supplied value.
var ErrInvalidArg = errors.New("invalid argument")

var (
	hostRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9.-]{0,252}[A-Za-z0-9])?$|^\[?[0-9A-Fa-f:]+\]?$`)
	userRE = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$`)
)

// ValidatePackage checks an agent-supplied Android package name (see
// apk.ValidatePackage for the grammar).
func ValidatePackage(name string) error {
	if err := apk.ValidatePackage(name); err != nil {
		return fmt.Errorf("%w: package: %w", ErrInvalidArg, err)
	}
	return nil
}

// BoundSeconds turns an agent-supplied number of seconds into a duration within
// [lo, hi]; 0 means def. Anything outside is refused, not clamped: an agent that
// asked for an hour should hear it gets at most thirty minutes.
func BoundSeconds(name string, secs float64, def, lo, hi time.Duration) (time.Duration, error) {
	if secs == 0 {
		return def, nil
	}
	d := time.Duration(secs * float64(time.Second))
	if secs < 0 || d < lo || d > hi || secs != secs {
		return 0, fmt.Errorf("%w: %s: %g s is outside %g–%g s", ErrInvalidArg, name, secs, lo.Seconds(), hi.Seconds())
	}
	return d, nil
}

// snapshotAPK confines rel to the workspace, copies the file (at most max bytes)
// to a private temporary file and validates the copy. The caller installs the copy,
// so the file an agent (or a peer) rewrites after validation is not what reaches the
// headset. The caller removes the returned path.
func snapshotAPK(root, rel string, lim apk.Limits) (string, apk.Info, error) {
	// Resolve gives the agent its errors (outside, absolute, missing, …); the
	// open below is what is trusted.
	if _, err := workspace.Resolve(root, rel); err != nil {
		return "", apk.Info{}, fmt.Errorf("%w: apk: %w", ErrInvalidArg, err)
	}
	clean, err := workspace.Clean(rel)
	if err != nil {
		return "", apk.Info{}, fmt.Errorf("%w: apk: %w", ErrInvalidArg, err)
	}
	max := lim.MaxBytes
	// Through confine: no symlink leads out, a FIFO or socket is refused (a
	// KindError) instead of blocking the open, nothing over max is opened.
	ws, err := confine.OpenRoot(root, confine.Config{MaxBytes: max})
	if err != nil {
		return "", apk.Info{}, fmt.Errorf("apk %s: %w", rel, err)
	}
	defer ws.Close()
	src, err := ws.Open(clean)
	if errors.Is(err, confine.ErrTooLarge) {
		return "", apk.Info{}, fmt.Errorf("%w: apk %s: %w: %v", ErrInvalidArg, rel, apk.ErrInvalid, err)
	}
	if errors.Is(err, confine.ErrNotRegular) {
		return "", apk.Info{}, fmt.Errorf("%w: apk %s is not a regular file: %v", ErrInvalidArg, rel, err)
	}
	if err != nil {
		return "", apk.Info{}, fmt.Errorf("%w: apk %s: %v", ErrInvalidArg, rel, err)
	}
	defer src.Close()
	dst, err := os.CreateTemp("", "aetherium-apk-*.apk")
	if err != nil {
		return "", apk.Info{}, fmt.Errorf("apk snapshot: %w", err)
	}
	keep := false
	defer func() {
		if !keep {
			os.Remove(dst.Name())
		}
	}()
	n, err := io.Copy(dst, io.LimitReader(src, max+1))
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", apk.Info{}, fmt.Errorf("apk snapshot: %w", err)
	}
	if n > max {
		return "", apk.Info{}, fmt.Errorf("%w: apk %s: %w: grew past the %d byte limit while being read", ErrInvalidArg, rel, apk.ErrInvalid, max)
	}
	info, err := apk.Inspect(dst.Name(), lim)
	if err != nil {
		return "", apk.Info{}, fmt.Errorf("%w: apk %s: %w", ErrInvalidArg, rel, err)
	}
	keep = true
	return dst.Name(), info, nil
}
