package workspace

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"os"
	"path"
	"sync"
	"syscall"

	"github.com/aetherium-engine/aetherium/confine"
)

// dir is one workspace opened as an os.Root: every operation through it stays
// beneath the workspace even when a path component is swapped for a symlink
// between a check and its use (the kernel resolves each step against the root).
type dir struct {
	root *os.Root
	// conf resolves an agent's path the way the kernel will, to refuse one
	// that leads into engine state through a symlink (meta -> .aetherium).
	conf  *confine.Root
	cfg   Config
	owner *Owner
	// engine marks the engine's own writes (snapshots into InternalDir).
	engine bool
}

func openDir(workspace string, cfg Config) (*dir, error) {
	r, err := os.OpenRoot(workspace)
	if err != nil {
		return nil, fmt.Errorf("open workspace: %w", err)
	}
	c, err := confine.OpenRoot(workspace, confine.Config{MaxBytes: cfg.MaxFileBytes})
	if err != nil {
		_ = r.Close()
		return nil, fmt.Errorf("open workspace: %w", err)
	}
	d := &dir{root: r, conf: c, cfg: cfg}
	if cfg.Owner != nil && os.Geteuid() == 0 {
		d.owner = cfg.Owner
	}
	return d, nil
}

func (d *dir) Close() {
	_ = d.root.Close()
	if d.conf != nil {
		_ = d.conf.Close()
	}
}

// confined refuses rel when it resolves, through any symlink, out of the
// workspace, into engine state (InternalDir) or into a symlink loop; Clean
// checks the name only.
func (d *dir) confined(rel string) error {
	if d.engine || d.conf == nil {
		return nil
	}
	if _, err := d.conf.Resolve(rel); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// readRegular reads a regular file (symlinks followed only inside the workspace),
// refusing devices, pipes and files over the size limit. It returns the file's
// permission bits for a later rewrite.
func (d *dir) readRegular(rel string) ([]byte, fs.FileMode, error) {
	if err := d.confined(rel); err != nil {
		return nil, 0, err
	}
	fi, err := d.root.Stat(rel)
	if err != nil {
		return nil, 0, pathErr(rel, err)
	}
	if err := d.checkRegular(rel, fi); err != nil {
		return nil, 0, err
	}
	// O_NONBLOCK: a path swapped for a FIFO after the Stat must not hang the call.
	f, err := d.root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, 0, pathErr(rel, err)
	}
	defer f.Close()
	fi, err = f.Stat()
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", rel, err)
	}
	if err := d.checkRegular(rel, fi); err != nil {
		return nil, 0, err
	}
	b, err := io.ReadAll(io.LimitReader(f, d.cfg.MaxFileBytes+1))
	if err != nil {
		return nil, 0, fmt.Errorf("read %s: %w", rel, err)
	}
	if int64(len(b)) > d.cfg.MaxFileBytes {
		return nil, 0, fmt.Errorf("%w: %s grew past %d bytes", ErrTooLarge, rel, d.cfg.MaxFileBytes)
	}
	return b, fi.Mode().Perm(), nil
}

func (d *dir) checkRegular(rel string, fi fs.FileInfo) error {
	switch {
	case fi.IsDir():
		return fmt.Errorf("%s is a directory (list it with list_files)", rel)
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%w: %s is a %s", ErrNotRegular, rel, confine.Kind(fi.Mode()))
	case fi.Size() > d.cfg.MaxFileBytes:
		return fmt.Errorf("%w: %s is %d bytes, the limit is %d", ErrTooLarge, rel, fi.Size(), d.cfg.MaxFileBytes)
	}
	return nil
}

// exists reports whether rel names an existing regular file; other existing kinds
// are errors.
func (d *dir) exists(rel string) (bool, error) {
	if err := d.confined(rel); err != nil {
		return false, err
	}
	fi, err := d.root.Stat(rel)
	if errors.Is(err, fs.ErrNotExist) {
		// A dangling or escaping symlink also reads as "not exist" to Stat:
		// check the link itself before treating the path as free.
		if lfi, lerr := d.root.Lstat(rel); lerr == nil && lfi.Mode()&fs.ModeSymlink != 0 {
			return false, fmt.Errorf("%w: %q is a symlink that resolves outside the workspace or nowhere", ErrOutside, rel)
		}
		if perr := checkExisting(d.root, rel, rel); perr != nil && !errors.Is(perr, fs.ErrNotExist) {
			return false, perr
		}
		return false, nil
	}
	if err != nil {
		return false, pathErr(rel, err)
	}
	if err := d.checkRegular(rel, fi); err != nil {
		return false, err
	}
	return true, nil
}

// writeFile replaces rel's content atomically (write a temporary file, then
// rename it over the target), keeping an existing file's permission bits. A
// symlink inside the workspace is written through in place.
func (d *dir) writeFile(rel string, data []byte, perm fs.FileMode, handOver bool) error {
	if int64(len(data)) > d.cfg.MaxFileBytes {
		return fmt.Errorf("%w: %d bytes for %s, the limit is %d", ErrTooLarge, len(data), rel, d.cfg.MaxFileBytes)
	}
	if err := d.confined(rel); err != nil {
		return err
	}
	if err := d.mkdirAll(path.Dir(rel), handOver); err != nil {
		return err
	}
	lfi, err := d.root.Lstat(rel)
	switch {
	case err == nil && lfi.Mode()&fs.ModeSymlink != 0:
		fi, err := d.root.Stat(rel)
		if err != nil {
			return pathErr(rel, err)
		}
		if err := d.checkRegular(rel, fi); err != nil && !errors.Is(err, ErrTooLarge) {
			return err
		}
		f, err := d.root.OpenFile(rel, os.O_WRONLY|os.O_TRUNC|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
		if err != nil {
			return pathErr(rel, err)
		}
		if _, err := f.Write(data); err != nil {
			f.Close()
			return fmt.Errorf("write %s: %w", rel, err)
		}
		return f.Close()
	case err == nil && lfi.IsDir():
		return fmt.Errorf("%s is a directory", rel)
	case err == nil && !lfi.Mode().IsRegular():
		return fmt.Errorf("%w: %s is a %s", ErrNotRegular, rel, confine.Kind(lfi.Mode()))
	case err == nil:
		perm = lfi.Mode().Perm()
	case !errors.Is(err, fs.ErrNotExist):
		return pathErr(rel, err)
	}
	tmp := path.Join(path.Dir(rel), "."+path.Base(rel)+".tmp-"+randomHex(6))
	f, err := d.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return pathErr(rel, err)
	}
	ok := false
	defer func() {
		if !ok {
			_ = d.root.Remove(tmp)
		}
	}()
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", rel, err)
	}
	// Through the descriptor: the umask must not narrow the kept permissions, and
	// nothing can redirect a chown on an open file.
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", rel, err)
	}
	if handOver && d.owner != nil {
		if err := f.Chown(d.owner.UID, d.owner.GID); err != nil {
			f.Close()
			return fmt.Errorf("write %s: %w", rel, err)
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", rel, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", rel, err)
	}
	if err := d.root.Rename(tmp, rel); err != nil {
		return pathErr(rel, err)
	}
	ok = true
	return nil
}

// mkdirAll creates rel's missing directories one by one, handing each new one to
// the sandbox owner.
func (d *dir) mkdirAll(rel string, handOver bool) error {
	if rel == "." || rel == "" {
		return nil
	}
	if err := d.mkdirAll(path.Dir(rel), handOver); err != nil {
		return err
	}
	fi, err := d.root.Stat(rel)
	if err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("%s exists and is not a directory", rel)
		}
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return pathErr(rel, err)
	}
	if err := d.root.Mkdir(rel, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return pathErr(rel, err)
	}
	if handOver && d.owner != nil {
		if err := d.root.Lchown(rel, d.owner.UID, d.owner.GID); err != nil {
			return fmt.Errorf("mkdir %s: %w", rel, err)
		}
	}
	return nil
}

func (d *dir) remove(rel string) error {
	if err := d.confined(rel); err != nil {
		return err
	}
	err := d.root.Remove(rel)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return pathErr(rel, err)
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// fileLocks serializes read-modify-write cycles on one file within this process
// (an edit must not interleave with another edit of the same file). Striped, so
// the table never grows.
type fileLocks [64]sync.Mutex

func (l *fileLocks) lock(workspace, rel string) func() {
	h := fnv.New32a()
	_, _ = h.Write([]byte(workspace))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(rel))
	m := &l[h.Sum32()%uint32(len(l))]
	m.Lock()
	return m.Unlock
}
