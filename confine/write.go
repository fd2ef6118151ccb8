package confine

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"

	"golang.org/x/sys/unix"
)

// Owner is a uid:gid new files and directories are handed to (the sandbox's user
// when the host runs as root).
type Owner struct{ UID, GID int }

// WriteOptions are WriteFile's and MkdirAll's choices.
type WriteOptions struct {
	// Perm is a new file's or directory's permission bits; an existing file
	// keeps its own.
	Perm fs.FileMode
	// Owner, when set, receives what is created (through the descriptor, so
	// nothing can redirect the chown).
	Owner *Owner
}

// WriteFile replaces rel's content atomically: a temporary file is written in
// the directory rel resolves to, then renamed over the name. A final symlink is
// resolved inside the root and its target replaced; an existing target that is
// not a regular file is refused, and so is any path that resolves out of the
// root or into InternalDir. rel's parent directory must exist (see MkdirAll).
func (r *Root) WriteFile(rel string, data []byte, opts WriteOptions) error {
	if int64(len(data)) > r.cfg.MaxBytes {
		return fmt.Errorf("%w: %d bytes for %s, the limit is %d", ErrTooLarge, len(data), rel, r.cfg.MaxBytes)
	}
	res, err := r.resolve(rel, true)
	if res == nil {
		return err
	}
	defer res.close()
	perm := opts.Perm
	switch {
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return err
	case err == nil && !res.st.Mode().IsRegular():
		return &KindError{Path: res.path, Kind: Kind(res.st.Mode()), Want: "regular file"}
	case err == nil:
		perm = res.st.Mode().Perm()
	}
	if res.name == "." {
		return &KindError{Path: rel, Kind: "directory", Want: "regular file"}
	}
	tmp := "." + res.name + ".tmp-" + randomHex(6)
	if len(tmp) > 255 {
		tmp = ".aeth-tmp-" + randomHex(8)
	}
	fd, err := unix.Openat(res.dirfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(perm.Perm()))
	if err != nil {
		return pathErr("create", path.Join(path.Dir(res.path), tmp), err)
	}
	f := os.NewFile(uintptr(fd), res.path)
	ok := false
	defer func() {
		if !ok {
			_ = unix.Unlinkat(res.dirfd, tmp, 0)
		}
	}()
	if err := writeAll(f, data, perm, opts.Owner); err != nil {
		_ = f.Close()
		return fmt.Errorf("write %s: %w", res.path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", res.path, err)
	}
	if err := unix.Renameat(res.dirfd, tmp, res.dirfd, res.name); err != nil {
		return pathErr("rename", res.path, err)
	}
	ok = true
	return nil
}

func writeAll(f *os.File, data []byte, perm fs.FileMode, owner *Owner) error {
	if _, err := f.Write(data); err != nil {
		return err
	}
	// Through the descriptor: the umask must not narrow the kept permissions.
	if err := f.Chmod(perm.Perm()); err != nil {
		return err
	}
	if owner != nil {
		if err := f.Chown(owner.UID, owner.GID); err != nil {
			return err
		}
	}
	return f.Sync()
}

// CreateExcl creates rel, which must not exist, for writing (O_EXCL, no symlink
// followed at the name itself). Its directory resolves as for Open.
func (r *Root) CreateExcl(rel string, perm fs.FileMode) (*os.File, error) {
	res, err := r.resolve(rel, false)
	if err == nil {
		res.close()
		return nil, &fs.PathError{Op: "create", Path: res.path, Err: fs.ErrExist}
	}
	if res == nil {
		return nil, err
	}
	defer res.close()
	fd, err := unix.Openat(res.dirfd, res.name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(perm.Perm()))
	if err != nil {
		return nil, pathErr("create", res.path, err)
	}
	return os.NewFile(uintptr(fd), res.path), nil
}

// MkdirAll creates rel and its missing parents (each resolved inside the root,
// never into InternalDir), handing each new one to opts.Owner.
func (r *Root) MkdirAll(rel string, opts WriteOptions) error {
	perm := opts.Perm
	if perm == 0 {
		perm = 0o755
	}
	st, err := r.Stat(rel)
	if err == nil {
		if !st.IsDir() {
			return &KindError{Path: rel, Kind: Kind(st.Mode()), Want: "directory"}
		}
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	parent := path.Dir(path.Clean(rel))
	if parent != "." && parent != "/" {
		if err := r.MkdirAll(parent, opts); err != nil {
			return err
		}
	}
	res, err := r.resolve(rel, true)
	if err == nil {
		res.close()
		if !res.st.IsDir() {
			return &KindError{Path: res.path, Kind: Kind(res.st.Mode()), Want: "directory"}
		}
		return nil
	}
	if res == nil {
		return err
	}
	defer res.close()
	if err := unix.Mkdirat(res.dirfd, res.name, uint32(perm.Perm())); err != nil && !errors.Is(err, unix.EEXIST) {
		return pathErr("mkdir", res.path, err)
	}
	if opts.Owner != nil {
		if err := unix.Fchownat(res.dirfd, res.name, opts.Owner.UID, opts.Owner.GID, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return pathErr("chown", res.path, err)
		}
	}
	return nil
}

// Remove removes the file or empty directory rel (a final symlink itself, not
// its target).
func (r *Root) Remove(rel string) error {
	res, err := r.resolve(rel, false)
	if err != nil {
		if res != nil {
			res.close()
		}
		return err
	}
	defer res.close()
	if res.name == "." {
		return fmt.Errorf("%s: the workspace root cannot be removed", rel)
	}
	flags := 0
	if res.st.IsDir() {
		flags = unix.AT_REMOVEDIR
	}
	if err := unix.Unlinkat(res.dirfd, res.name, flags); err != nil {
		return pathErr("remove", res.path, err)
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
