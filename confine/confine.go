// Package confine is the one way the host reads and writes a workspace's data: a
// workspace is written by agents (run_shell can create any name, symlink, FIFO,
// socket or sparse file there), so every host-side reader and writer — the tools,
// the device captures, the API's file download, required_output, knowledge
// folders — goes through a Root.
//
// A Root resolves each path one component at a time beneath the workspace
// directory, holding a descriptor of every directory it passes and opening each
// next component relative to it with O_NOFOLLOW (the work openat2's
// RESOLVE_BENEATH does in the kernel): a symlink is followed only by reading it
// and resolving its target the same way, so it can never lead outside, and a
// component swapped for a symlink between the check and the open fails the open
// instead of redirecting it. Engine state (InternalDir) is refused after
// resolution, so a symlink "meta -> .aetherium" reaches it neither for a read nor
// for a write. Only regular files are opened: a FIFO, socket or device is refused
// from its lstat, before any open, and every open carries O_NONBLOCK and is
// checked again with fstat on the descriptor, so no open can block on a FIFO
// swapped in between. Sizes are capped per Root (Config.MaxBytes).
//
// The package imports no package of the module (the lowest floor, beside egress).
package confine

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// InternalDir is the workspace directory the engine keeps its own state in (edit
// snapshots, the knowledge index). No path that resolves into it is served or
// written, and walks skip it.
const InternalDir = ".aetherium"

// DefaultMaxBytes is Config.MaxBytes when a caller sets none: the largest file a
// Root opens or reads.
const DefaultMaxBytes int64 = 64 << 20

// maxSymlinks bounds the symlinks one resolution follows (Linux's own limit is
// 40): a loop ends in ErrLoop instead of running forever.
const maxSymlinks = 40

// Sentinel errors; every error of the package that is about the path wraps one
// of them (or fs.ErrNotExist).
var (
	// ErrOutside is a path, or a symlink on its way, that leads out of the root.
	ErrOutside = errors.New("path escapes the workspace")
	// ErrReserved is a path that resolves into the engine's InternalDir.
	ErrReserved = errors.New("path is reserved for the engine")
	// ErrNotRegular is a FIFO, socket, device, directory or other file that is
	// not a regular file where one is expected (see KindError for which).
	ErrNotRegular = errors.New("not a regular file")
	// ErrTooLarge is a file over the Root's MaxBytes.
	ErrTooLarge = errors.New("file is over the size limit")
	// ErrLoop is a path whose resolution follows more than 40 symlinks.
	ErrLoop = errors.New("too many symlinks (a symlink loop)")
)

// KindError is a path that names something other than what the caller needs: a
// FIFO, socket, device or directory where a regular file is expected, or a file
// where a directory is. It wraps ErrNotRegular.
type KindError struct {
	Path string
	// Kind is "named pipe", "socket", "device", "directory", "symlink",
	// "regular file" or "special file".
	Kind string
	// Want is what was expected: "regular file" or "directory".
	Want string
}

func (e *KindError) Error() string {
	return fmt.Sprintf("%s is a %s, not a %s", e.Path, e.Kind, e.Want)
}

// Unwrap makes errors.Is(err, ErrNotRegular) hold.
func (e *KindError) Unwrap() error { return ErrNotRegular }

// Config is a Root's limits.
type Config struct {
	// MaxBytes is the largest file Open and ReadFile accept and WriteFile writes
	// (DefaultMaxBytes when zero).
	MaxBytes int64
}

// WithDefaults fills the zero fields.
func (c Config) WithDefaults() Config {
	c.MaxBytes = cmp.Or(c.MaxBytes, DefaultMaxBytes)
	return c
}

// Validate reports a Config that cannot work.
func (c Config) Validate() error {
	if c.MaxBytes < 0 {
		return fmt.Errorf("confine: MaxBytes is %d, must be positive", c.MaxBytes)
	}
	return nil
}

// Root is one workspace directory opened for confined access. It is safe for
// concurrent use; Close it when done.
type Root struct {
	dir string
	fd  int
	cfg Config
}

// OpenRoot opens dir (a host path the engine chose, so it may itself be a
// symlink) as a Root. A dir that does not exist is an error wrapping
// fs.ErrNotExist.
func OpenRoot(dir string, cfg Config) (*Root, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open workspace", Path: dir, Err: err}
	}
	return &Root{dir: dir, fd: fd, cfg: cfg}, nil
}

// Dir is the host path the Root was opened on.
func (r *Root) Dir() string { return r.dir }

// MaxBytes is the Root's size cap.
func (r *Root) MaxBytes() int64 { return r.cfg.MaxBytes }

// Close releases the root's descriptor.
func (r *Root) Close() error { return unix.Close(r.fd) }

// File is a regular file opened beneath a Root, with the fstat of its
// descriptor.
type File struct {
	*os.File
	// Info is the open descriptor's fstat.
	Info fs.FileInfo
}

// Open opens rel read-only. It must resolve, inside the root and outside
// InternalDir, to a regular file of at most MaxBytes.
func (r *Root) Open(rel string) (*File, error) {
	return r.openRegular(rel, unix.O_RDONLY)
}

// OpenWrite opens an existing regular file rel for writing, truncating it (a
// symlink inside the root is written through). It does not create rel; use
// WriteFile or CreateExcl for that.
func (r *Root) OpenWrite(rel string) (*File, error) {
	return r.openRegular(rel, unix.O_WRONLY|unix.O_TRUNC)
}

func (r *Root) openRegular(rel string, flags int) (*File, error) {
	res, err := r.resolve(rel, true)
	if err != nil {
		res.closeIf()
		return nil, err
	}
	defer res.close()
	if err := r.checkRegular(res.path, res.st); err != nil {
		return nil, err
	}
	// O_NOFOLLOW: the name was checked not to be a symlink, so a symlink now is a
	// swap and fails (ELOOP). O_NONBLOCK: a FIFO swapped in opens at once instead
	// of waiting for a writer; the fstat below refuses it. O_NOCTTY: a terminal
	// never becomes the process's.
	fd, err := unix.Openat(res.dirfd, res.name, flags|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, pathErr("open", res.path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		_ = unix.Close(fd)
		return nil, pathErr("fstat", res.path, err)
	}
	info := newInfo(path.Base(res.path), &st)
	if err := r.checkRegular(res.path, info); err != nil {
		_ = unix.Close(fd)
		return nil, err
	}
	// A regular file ignores O_NONBLOCK; clear it anyway so nothing downstream
	// sees EAGAIN semantics.
	_ = unix.SetNonblock(fd, false)
	return &File{File: os.NewFile(uintptr(fd), res.path), Info: info}, nil
}

// ReadFile reads the regular file rel whole; it refuses one over MaxBytes, and
// one that grows past it while read.
func (r *Root) ReadFile(rel string) ([]byte, error) {
	f, err := r.Open(rel)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, r.cfg.MaxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", f.Name(), err)
	}
	if int64(len(b)) > r.cfg.MaxBytes {
		return nil, fmt.Errorf("%w: %s grew past %d bytes while read", ErrTooLarge, f.Name(), r.cfg.MaxBytes)
	}
	return b, nil
}

// Stat describes what rel resolves to (symlinks followed inside the root),
// without opening it: any kind is reported, so a caller can tell a directory from
// a file. It fails like Open on a path that leaves the root or reaches
// InternalDir.
func (r *Root) Stat(rel string) (fs.FileInfo, error) {
	res, err := r.resolve(rel, true)
	if err != nil {
		res.closeIf()
		return nil, err
	}
	res.close()
	return res.st, nil
}

// Lstat describes rel itself (a final symlink is not followed); its parent
// directories resolve as for Stat.
func (r *Root) Lstat(rel string) (fs.FileInfo, error) {
	res, err := r.resolve(rel, false)
	if err != nil {
		res.closeIf()
		return nil, err
	}
	res.close()
	return res.st, nil
}

// Resolve returns the slash-separated path, relative to the root, that rel
// resolves to: every symlink followed inside the root. A missing final component
// is kept as written ("a/new.txt" where a -> b gives "b/new.txt"). Use it for
// display or a check only; do the I/O through the Root.
func (r *Root) Resolve(rel string) (string, error) {
	res, err := r.resolve(rel, true)
	if errors.Is(err, fs.ErrNotExist) && res != nil {
		defer res.close()
		return path.Join(path.Dir(res.path), res.name), nil
	}
	if err != nil {
		return "", err
	}
	res.close()
	return res.path, nil
}

func (r *Root) checkRegular(rel string, fi fs.FileInfo) error {
	switch {
	case !fi.Mode().IsRegular():
		return &KindError{Path: rel, Kind: Kind(fi.Mode()), Want: "regular file"}
	case fi.Size() > r.cfg.MaxBytes:
		return fmt.Errorf("%w: %s is %d bytes, the limit is %d", ErrTooLarge, rel, fi.Size(), r.cfg.MaxBytes)
	}
	return nil
}

// Kind names a file mode's type for an error message.
func Kind(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "regular file"
	case m.IsDir():
		return "directory"
	case m&fs.ModeCharDevice != 0, m&fs.ModeDevice != 0:
		return "device"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	}
	return "special file"
}

// resolution is where a path led: the directory holding its last component
// (dirfd, owned by the resolution unless it is the root's), that component's
// name, the resolved path relative to the root and its lstat.
type resolution struct {
	dirfd int
	name  string
	path  string
	st    fs.FileInfo
	fds   []int
}

func (s *resolution) close() {
	for _, fd := range s.fds {
		_ = unix.Close(fd)
	}
	s.fds = nil
}

// closeIf closes a resolution that came back with an error: resolve returns the
// partial resolution (its parent directory open) with fs.ErrNotExist, for the
// callers that create the missing name; every other caller must close it.
func (s *resolution) closeIf() {
	if s != nil {
		s.close()
	}
}

// splitRel validates rel and splits it into components. Absolute paths are
// refused; "/workspace/…" (the sandbox's view of the root) is accepted.
func splitRel(rel string) ([]string, error) {
	if rel == "" {
		return nil, errors.New("path is empty (paths are relative to the workspace)")
	}
	if strings.IndexByte(rel, 0) >= 0 {
		return nil, fmt.Errorf("%w: %q contains a NUL byte", ErrOutside, rel)
	}
	if rel == "/workspace" {
		rel = "."
	}
	rel = strings.TrimPrefix(rel, "/workspace/")
	if strings.HasPrefix(rel, "/") {
		return nil, fmt.Errorf("%w: %q is absolute (paths are relative to the workspace)", ErrOutside, rel)
	}
	return components(rel), nil
}

// components splits p on "/", dropping empty and "." components.
func components(p string) []string {
	var out []string
	for c := range strings.SplitSeq(p, "/") {
		if c != "" && c != "." {
			out = append(out, c)
		}
	}
	return out
}

// resolve walks rel beneath the root. With follow, a final symlink is resolved
// too; without, the final component is described as it is. On fs.ErrNotExist for
// the final component the resolution is returned with the error (st nil), so a
// writer knows the directory to create it in.
func (r *Root) resolve(rel string, follow bool) (*resolution, error) {
	pending, err := splitRel(rel)
	if err != nil {
		return nil, err
	}
	res := &resolution{dirfd: r.fd}
	var stack []string // resolved components of the current directory
	var dirs []int     // their descriptors (stack[i] is dirs[i])
	links := 0
	fail := func(err error) (*resolution, error) {
		res.fds = dirs
		res.close()
		return nil, err
	}
	cur := func() int {
		if len(dirs) == 0 {
			return r.fd
		}
		return dirs[len(dirs)-1]
	}
	if len(pending) == 0 {
		// The root itself.
		var st unix.Stat_t
		if err := unix.Fstat(r.fd, &st); err != nil {
			return nil, pathErr("fstat", ".", err)
		}
		res.name, res.path, res.st = ".", ".", newInfo(".", &st)
		return res, nil
	}
	for len(pending) > 0 {
		c := pending[0]
		pending = pending[1:]
		last := len(pending) == 0
		if c == ".." {
			if len(stack) == 0 {
				return fail(fmt.Errorf("%w: %q climbs out of the workspace", ErrOutside, rel))
			}
			_ = unix.Close(dirs[len(dirs)-1])
			dirs, stack = dirs[:len(dirs)-1], stack[:len(stack)-1]
			continue
		}
		here := path.Join(path.Join(stack...), c)
		if len(stack) == 0 && c == InternalDir {
			return fail(fmt.Errorf("%w: %q resolves to %s", ErrReserved, rel, here))
		}
		var st unix.Stat_t
		if err := unix.Fstatat(cur(), c, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, unix.ENOENT) && last {
				res.dirfd, res.name, res.path, res.fds = cur(), c, here, dirs
				return res, pathErr("stat", here, err)
			}
			return fail(pathErr("stat", here, err))
		}
		mode := st.Mode & unix.S_IFMT
		if mode == unix.S_IFLNK && (!last || follow) {
			links++
			if links > maxSymlinks {
				return fail(fmt.Errorf("%w: %q", ErrLoop, rel))
			}
			target, err := readlinkat(cur(), c)
			if err != nil {
				return fail(pathErr("readlink", here, err))
			}
			if strings.HasPrefix(target, "/") {
				return fail(fmt.Errorf("%w: %q: symlink %s points to the absolute path %s", ErrOutside, rel, here, target))
			}
			pending = append(components(target), pending...)
			continue
		}
		if last {
			res.dirfd, res.name, res.path, res.st, res.fds = cur(), c, here, newInfo(c, &st), dirs
			return res, nil
		}
		if mode != unix.S_IFDIR {
			return fail(pathErr("open", here, unix.ENOTDIR))
		}
		fd, err := unix.Openat(cur(), c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			return fail(pathErr("open", here, err))
		}
		dirs, stack = append(dirs, fd), append(stack, c)
	}
	// The path ended in ".." or in a symlink to "." or "..": it names a
	// directory we hold, reached through real directories only. Describe it from
	// its parent, as any other final component.
	res.fds = dirs
	res.close()
	if len(stack) == 0 {
		return r.resolve(".", follow)
	}
	return r.resolve(strings.Join(stack, "/"), follow)
}

func readlinkat(dirfd int, name string) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
		if size > 1<<16 {
			return "", unix.ENAMETOOLONG
		}
	}
}

// pathErr wraps a syscall error as a *fs.PathError (so errors.Is(err,
// fs.ErrNotExist) and friends hold), mapping ELOOP to ErrLoop: with O_NOFOLLOW
// it means a component became a symlink after it was checked.
func pathErr(op, p string, err error) error {
	if errors.Is(err, unix.ELOOP) {
		return fmt.Errorf("%w: %s changed into a symlink while opened", ErrLoop, p)
	}
	if errors.Is(err, unix.ENXIO) {
		// open(2) of a socket.
		return &KindError{Path: p, Kind: "socket", Want: "regular file"}
	}
	return &fs.PathError{Op: op, Path: p, Err: err}
}

// info is an fs.FileInfo built from a stat.
type info struct {
	name string
	size int64
	mode fs.FileMode
	mod  time.Time
	sys  unix.Stat_t
}

func (i *info) Name() string       { return i.name }
func (i *info) Size() int64        { return i.size }
func (i *info) Mode() fs.FileMode  { return i.mode }
func (i *info) ModTime() time.Time { return i.mod }
func (i *info) IsDir() bool        { return i.mode.IsDir() }
func (i *info) Sys() any           { return &i.sys }

func newInfo(name string, st *unix.Stat_t) *info {
	m := fs.FileMode(st.Mode & 0o777)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFBLK:
		m |= fs.ModeDevice
	case unix.S_IFCHR:
		m |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFDIR:
		m |= fs.ModeDir
	case unix.S_IFIFO:
		m |= fs.ModeNamedPipe
	case unix.S_IFLNK:
		m |= fs.ModeSymlink
	case unix.S_IFSOCK:
		m |= fs.ModeSocket
	}
	if st.Mode&unix.S_ISUID != 0 {
		m |= fs.ModeSetuid
	}
	if st.Mode&unix.S_ISGID != 0 {
		m |= fs.ModeSetgid
	}
	if st.Mode&unix.S_ISVTX != 0 {
		m |= fs.ModeSticky
	}
	return &info{name: name, size: st.Size, mode: m, mod: time.Unix(st.Mtim.Unix()), sys: *st}
}
