package quality

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"

	"github.com/aetherium-engine/aetherium/toolbox/workspace"
	"github.com/aetherium-engine/aetherium/tools"
)

// errDotPath is a path through a dot directory (.frame, .git, .aetherium…): the
// engine's state and the headset's captures live there, and they are never read.
var errDotPath = errors.New("path goes through a dot directory, which is never read")

// cleanPathArg checks an agent-supplied path the way the workspace tools do
// (relative, no "..", no NUL, not the engine's directory) and additionally
// refuses every dot component.
func cleanPathArg(p string) (string, error) {
	clean, err := workspace.Clean(p)
	if err != nil {
		return "", err
	}
	if clean == "." {
		return clean, nil
	}
	for _, part := range strings.Split(clean, "/") {
		if strings.HasPrefix(part, ".") {
			return "", fmt.Errorf("%w: %q", errDotPath, p)
		}
	}
	return clean, nil
}

// openSessionRoot opens the calling session's workspace as an os.Root: every
// later open resolves beneath it, so a symlink swapped in after a check still
// cannot lead out.
func openSessionRoot(call tools.Call) (*os.Root, string, error) {
	ws, err := call.Workspace()
	if err != nil {
		return nil, "", err
	}
	r, err := os.OpenRoot(ws)
	if err != nil {
		return nil, "", fmt.Errorf("open workspace: %w", err)
	}
	return r, ws, nil
}

// rootPathErr turns an os.Root error into one the agent can act on.
func rootPathErr(rel string, err error) error {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "path escapes from parent"):
		return fmt.Errorf("%w: %q resolves outside the workspace (through a symlink)", workspace.ErrOutside, rel)
	case strings.Contains(msg, "too many levels of symbolic links"):
		return fmt.Errorf("%w: %q is a symlink loop", workspace.ErrOutside, rel)
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s does not exist: %w", rel, fs.ErrNotExist)
	}
	return fmt.Errorf("%s: %w", rel, err)
}

// readRootFile reads a regular file of at most limit bytes through root.
func readRootFile(root *os.Root, rel string, limit int64) ([]byte, error) {
	fi, err := root.Stat(rel)
	if err != nil {
		return nil, rootPathErr(rel, err)
	}
	if err := checkRegularSize(rel, fi, limit); err != nil {
		return nil, err
	}
	// O_NONBLOCK: a path swapped for a FIFO after the Stat must not hang the call.
	f, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, rootPathErr(rel, err)
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return nil, fmt.Errorf("%s: %w", rel, err)
	}
	if err := checkRegularSize(rel, fi, limit); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", rel, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%w: %s grew past %d bytes", workspace.ErrTooLarge, rel, limit)
	}
	return b, nil
}

func checkRegularSize(rel string, fi fs.FileInfo, limit int64) error {
	switch {
	case fi.IsDir():
		return fmt.Errorf("%s is a directory, not a file", rel)
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%w: %s", workspace.ErrNotRegular, rel)
	case fi.Size() > limit:
		return fmt.Errorf("%w: %s is %d bytes, the limit is %d", workspace.ErrTooLarge, rel, fi.Size(), limit)
	}
	return nil
}

// writeRootFile replaces rel atomically (a temporary file renamed over it),
// creating missing parent directories; new files and directories go to owner
// when the worker runs as root, so the sandbox's user can change them.
func writeRootFile(root *os.Root, rel string, data []byte, owner *workspace.Owner) error {
	if owner != nil && os.Geteuid() != 0 {
		owner = nil
	}
	dir := path.Dir(rel)
	if dir != "." {
		parts := strings.Split(dir, "/")
		for i := range parts {
			p := strings.Join(parts[:i+1], "/")
			fi, err := root.Stat(p)
			if err == nil {
				if !fi.IsDir() {
					return fmt.Errorf("%s exists and is not a directory", p)
				}
				continue
			}
			if !errors.Is(err, fs.ErrNotExist) {
				return rootPathErr(p, err)
			}
			if err := root.Mkdir(p, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return rootPathErr(p, err)
			}
			if owner != nil {
				if err := root.Lchown(p, owner.UID, owner.GID); err != nil {
					return fmt.Errorf("mkdir %s: %w", p, err)
				}
			}
		}
	}
	if fi, err := root.Lstat(rel); err == nil && fi.IsDir() {
		return fmt.Errorf("%s is a directory", rel)
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	tmp := path.Join(dir, "."+path.Base(rel)+".tmp-"+hex.EncodeToString(b))
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return rootPathErr(rel, err)
	}
	done := false
	defer func() {
		if !done {
			_ = root.Remove(tmp)
		}
	}()
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", rel, err)
	}
	if owner != nil {
		if err := f.Chown(owner.UID, owner.GID); err != nil {
			f.Close()
			return fmt.Errorf("write %s: %w", rel, err)
		}
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", rel, err)
	}
	if err := root.Rename(tmp, rel); err != nil {
		return rootPathErr(rel, err)
	}
	done = true
	return nil
}
