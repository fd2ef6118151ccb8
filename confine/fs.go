package confine

import (
	"io"
	"io/fs"
)

// FS returns the root as an fs.FS (also fs.StatFS, fs.ReadFileFS and
// fs.ReadDirFS) for code written against io/fs (fs.WalkDir, fs.ReadFile,
// fs.Stat, fs.Glob): every call goes through the Root, so a symlink never leads
// outside, InternalDir is refused, Open of a file refuses anything but a regular
// file of at most MaxBytes (a FIFO never blocks), and a directory is listed
// with lstat entries (fs.WalkDir does not descend a symlink).
func (r *Root) FS() fs.FS { return rootFS{r} }

type rootFS struct{ r *Root }

func (f rootFS) check(op, name string) error {
	if !fs.ValidPath(name) {
		return &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	return nil
}

// Open opens a regular file, or a directory (for ReadDir).
func (f rootFS) Open(name string) (fs.File, error) {
	if err := f.check("open", name); err != nil {
		return nil, err
	}
	st, err := f.r.Stat(name)
	if err != nil {
		return nil, err
	}
	if st.IsDir() {
		entries, err := f.r.ReadDir(name)
		if err != nil {
			return nil, err
		}
		return &dirFile{info: st, entries: entries}, nil
	}
	file, err := f.r.Open(name)
	if err != nil {
		return nil, err
	}
	return file, nil
}

func (f rootFS) Stat(name string) (fs.FileInfo, error) {
	if err := f.check("stat", name); err != nil {
		return nil, err
	}
	return f.r.Stat(name)
}

func (f rootFS) ReadFile(name string) ([]byte, error) {
	if err := f.check("read", name); err != nil {
		return nil, err
	}
	return f.r.ReadFile(name)
}

func (f rootFS) ReadDir(name string) ([]fs.DirEntry, error) {
	if err := f.check("readdir", name); err != nil {
		return nil, err
	}
	return f.r.ReadDir(name)
}

// dirFile is a directory opened through rootFS: its entries were read at Open.
type dirFile struct {
	info    fs.FileInfo
	entries []fs.DirEntry
	off     int
}

func (d *dirFile) Stat() (fs.FileInfo, error) { return d.info, nil }
func (d *dirFile) Close() error               { return nil }
func (d *dirFile) Read([]byte) (int, error) {
	return 0, &fs.PathError{Op: "read", Path: d.info.Name(), Err: fs.ErrInvalid}
}

func (d *dirFile) ReadDir(n int) ([]fs.DirEntry, error) {
	rest := d.entries[d.off:]
	if n <= 0 {
		d.off = len(d.entries)
		return rest, nil
	}
	if len(rest) == 0 {
		return nil, io.EOF
	}
	if n > len(rest) {
		n = len(rest)
	}
	d.off += n
	return rest[:n], nil
}
