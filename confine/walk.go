package confine

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"sort"

	"golang.org/x/sys/unix"
)

// WalkDir walks the directory tree at rel (resolved inside the root like Open;
// "." is the root) in lexical order, calling fn like fs.WalkDir does: for the
// directory itself first, then each entry, with paths relative to the root,
// slash-separated. It never follows a symlink (fn sees it as one and nothing
// beneath it), so a symlink loop or a link out of the root costs nothing; each
// directory is opened relative to its parent's descriptor with O_NOFOLLOW and
// O_DIRECTORY, so a directory swapped for a symlink or a FIFO is an error for that
// directory, never a walk elsewhere or a blocking open. InternalDir at the root
// is left out. fn's d.Info() is the entry's lstat, taken when its directory was
// read.
func (r *Root) WalkDir(rel string, fn fs.WalkDirFunc) error {
	res, err := r.resolve(rel, true)
	if err != nil {
		res.closeIf()
		return fn(rel, nil, err)
	}
	defer res.close()
	start := res.path
	if !res.st.IsDir() {
		err := fn(start, fs.FileInfoToDirEntry(res.st), nil)
		if errors.Is(err, fs.SkipDir) || errors.Is(err, fs.SkipAll) {
			return nil
		}
		return err
	}
	fd, err := openDir(res.dirfd, res.name)
	if err != nil {
		err = fn(start, fs.FileInfoToDirEntry(res.st), pathErr("open", start, err))
	} else {
		err = r.walk(fd, start, fs.FileInfoToDirEntry(res.st), fn)
	}
	if errors.Is(err, fs.SkipDir) || errors.Is(err, fs.SkipAll) {
		return nil
	}
	return err
}

func openDir(dirfd int, name string) (int, error) {
	return unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
}

// walk reports the directory open on fd (which it closes) and everything
// beneath it.
func (r *Root) walk(fd int, p string, d fs.DirEntry, fn fs.WalkDirFunc) error {
	entries, rerr := readDir(fd, p)
	defer unix.Close(fd)
	if err := fn(p, d, nil); err != nil || rerr != nil {
		if err == nil {
			// Second call, as fs.WalkDir: the directory could not be read.
			err = fn(p, d, rerr)
		}
		return err
	}
	for _, e := range entries {
		if p == "." && e.name == InternalDir {
			continue
		}
		child := path.Join(p, e.name)
		if !e.info.IsDir() {
			if err := fn(child, e, nil); err != nil {
				if errors.Is(err, fs.SkipDir) {
					return nil
				}
				return err
			}
			continue
		}
		cfd, err := openDir(fd, e.name)
		if err != nil {
			err = fn(child, e, pathErr("open", child, err))
		} else {
			err = r.walk(cfd, child, e, fn)
		}
		if err != nil {
			if errors.Is(err, fs.SkipDir) {
				continue
			}
			return err
		}
	}
	return nil
}

// dirEntry is one entry with the lstat taken relative to its directory's
// descriptor.
type dirEntry struct {
	name string
	info *info
}

func (e dirEntry) Name() string               { return e.name }
func (e dirEntry) IsDir() bool                { return e.info.IsDir() }
func (e dirEntry) Type() fs.FileMode          { return e.info.Mode().Type() }
func (e dirEntry) Info() (fs.FileInfo, error) { return e.info, nil }
func (e dirEntry) String() string             { return fs.FormatDirEntry(e) }

// readDir lists the directory open on fd, sorted by name, with each entry's
// lstat. An entry that vanished meanwhile is left out.
func readDir(fd int, p string) ([]dirEntry, error) {
	// A fresh open file description: a dup would share (and move) fd's
	// directory offset.
	dup, err := openDir(fd, ".")
	if err != nil {
		return nil, pathErr("readdir", p, err)
	}
	f := os.NewFile(uintptr(dup), p)
	names, err := f.Readdirnames(-1)
	_ = f.Close()
	if err != nil {
		return nil, fmt.Errorf("read directory %s: %w", p, err)
	}
	sort.Strings(names)
	out := make([]dirEntry, 0, len(names))
	for _, n := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			continue
		}
		out = append(out, dirEntry{name: n, info: newInfo(n, &st)})
	}
	return out, nil
}

// ReadDir lists the directory rel resolves to (inside the root; InternalDir left
// out at the root), sorted by name, each entry with its lstat.
func (r *Root) ReadDir(rel string) ([]fs.DirEntry, error) {
	res, err := r.resolve(rel, true)
	if err != nil {
		res.closeIf()
		return nil, err
	}
	defer res.close()
	if !res.st.IsDir() {
		return nil, &KindError{Path: res.path, Kind: Kind(res.st.Mode()), Want: "directory"}
	}
	fd, err := openDir(res.dirfd, res.name)
	if err != nil {
		return nil, pathErr("open", res.path, err)
	}
	defer unix.Close(fd)
	entries, err := readDir(fd, res.path)
	out := make([]fs.DirEntry, 0, len(entries))
	for _, e := range entries {
		if res.path == "." && e.name == InternalDir {
			continue
		}
		out = append(out, e)
	}
	return out, err
}
