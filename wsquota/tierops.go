package wsquota

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ErrNoWorkspace is a workspace that was never made (no image, no directory).
var ErrNoWorkspace = errors.New("no such workspace")

// Entry is one workspace of a tier, mounted or not.
type Entry struct {
	ID string
	// Modified is the later of the image's and the directory's modification
	// times: when its files last changed, as far as the host can tell.
	Modified time.Time
}

// List lists tier t's workspaces: every id of the tier's shape (IsTierID) that
// has an image or a directory in the tier's location. Anything else there (an
// operator's file, another tier's location under it) is left out.
func (m *Manager) List(t Tier) ([]Entry, error) {
	c := m.Tier(t)
	found := map[string]time.Time{}
	note := func(id string, info fs.FileInfo) {
		if IsTierID(t, id) && info.ModTime().After(found[id]) {
			found[id] = info.ModTime()
		}
	}
	entries, err := os.ReadDir(c.root)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("workspaces of tier %s: %w", t, err)
	}
	for _, e := range entries {
		if info, err := e.Info(); err == nil && e.IsDir() {
			note(e.Name(), info)
		}
	}
	images, err := os.ReadDir(filepath.Join(c.root, ImagesDir))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("workspace images of tier %s: %w", t, err)
	}
	for _, e := range images {
		if id, ok := strings.CutSuffix(e.Name(), ".ext4"); ok && e.Type().IsRegular() {
			if info, err := e.Info(); err == nil {
				note(id, info)
			}
		}
	}
	out := make([]Entry, 0, len(found))
	for id, at := range found {
		out = append(out, Entry{ID: id, Modified: at})
	}
	return out, nil
}

// Remove deletes workspace id — unmounted, its directory, image and lock
// removed — unless keep (asked under the workspace's lock, so an Open waits
// for the answer) reports true. A workspace in use (a process has its cwd or a
// file there) is kept with an error; a later sweep tries again. removed is
// false when keep kept it or there was nothing to remove.
func (m *Manager) Remove(ctx context.Context, id string, keep func(ctx context.Context, id string) bool) (removed bool, err error) {
	if err := checkID(id); err != nil {
		return false, err
	}
	c := m.forID(id)
	unlock, err := c.lock(ctx, id)
	if err != nil {
		return false, err
	}
	defer unlock()
	if keep != nil && keep(ctx, id) {
		return false, nil
	}
	dir, image := c.Dir(id), c.Image(id)
	mounted, err := isMountPoint(dir)
	if err != nil {
		return false, err
	}
	if mounted {
		if err := unix.Unmount(dir, 0); err != nil {
			if errors.Is(err, unix.EBUSY) {
				return false, fmt.Errorf("remove workspace %s: in use (a process has a file or its working directory there)", dir)
			}
			return false, fmt.Errorf("remove workspace %s: unmount: %w", dir, err)
		}
	}
	// Nothing may be mounted at or under it any more: RemoveAll would walk into
	// a mount and delete what it holds.
	if points, err := mountPointsUnder(dir); err != nil || len(points) > 0 {
		return false, fmt.Errorf("remove workspace %s: still mounted there: %v %v", dir, points, err)
	}
	_, derr := os.Lstat(dir)
	_, ierr := os.Stat(image)
	if errors.Is(derr, fs.ErrNotExist) && errors.Is(ierr, fs.ErrNotExist) {
		return false, nil
	}
	if err := os.RemoveAll(dir); err != nil {
		return false, fmt.Errorf("remove workspace %s: %w", dir, err)
	}
	if err := os.Remove(image); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("remove workspace image %s: %w", image, err)
	}
	_ = os.Remove(filepath.Join(c.root, ImagesDir, id+".lock"))
	return true, nil
}

// Promote replaces workspace to's files with a copy of workspace from's (a
// staging run's workspace promoted into its project's Production one). With a
// quota the copy is written into a new image of to's tier's quota, mounted
// aside under the images directory, and renamed over to's image once complete:
// a failure (from's files over to's quota: ExceededError) or a crash leaves to
// as it was. to must not be in use: it is unmounted first (EBUSY: an error, to
// unchanged). Symbolic links are copied as links (never followed, and from is
// read through an os.Root, so nothing outside it is read); regular files and
// directories keep their modes (set-id bits dropped), owners and modification
// times; other files (devices, pipes, sockets) are left out.
func (m *Manager) Promote(ctx context.Context, from, to string) error {
	if err := checkID(from); err != nil {
		return err
	}
	if err := checkID(to); err != nil {
		return err
	}
	if from == to {
		return fmt.Errorf("promote workspace %s: into itself", from)
	}
	src := m.forID(from)
	if _, err := os.Stat(src.Image(from)); errors.Is(err, fs.ErrNotExist) {
		if _, err := os.Stat(src.Dir(from)); errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("promote workspace %s: %w", from, ErrNoWorkspace)
		}
	}
	srcDir, err := src.Open(ctx, from)
	if err != nil {
		return fmt.Errorf("promote workspace %s: %w", from, err)
	}
	dst := m.forID(to)
	if dst.cfg.Quota != 0 {
		if err := dst.Check(); err != nil {
			return err
		}
	} else if err := os.MkdirAll(dst.root, 0o755); err != nil {
		return fmt.Errorf("promote into %s: %w", to, err)
	}
	unlock, err := dst.lock(ctx, to)
	if err != nil {
		return err
	}
	defer unlock()
	if dst.cfg.Quota == 0 {
		return dst.promotePlain(srcDir, to)
	}
	if err := dst.CheckFree(); err != nil {
		return err
	}
	image := dst.Image(to)
	next := image + ".promote"
	aside := filepath.Join(dst.root, ImagesDir, to+".promote.d")
	_ = unix.Unmount(aside, unix.MNT_DETACH) // a crash's leftovers
	_ = os.Remove(next)
	if err := dst.makeImage(ctx, next); err != nil {
		return fmt.Errorf("promote into %s: image: %w", to, err)
	}
	ok := false
	defer func() {
		if !ok {
			_ = os.Remove(next)
		}
	}()
	if err := os.MkdirAll(aside, 0o700); err != nil {
		return fmt.Errorf("promote into %s: %w", to, err)
	}
	if err := mountImage(next, aside, true); err != nil {
		return fmt.Errorf("promote into %s: %w", to, err)
	}
	_ = os.Remove(filepath.Join(aside, "lost+found"))
	cerr := copyTree(srcDir, aside, int64(dst.cfg.Quota))
	if cerr == nil {
		cerr = syncFS(aside) // the copy is on the image before it is renamed in
	}
	if err := unix.Unmount(aside, 0); err != nil {
		_ = unix.Unmount(aside, unix.MNT_DETACH)
		cerr = errors.Join(cerr, fmt.Errorf("unmount %s: %w", aside, err))
	}
	_ = os.Remove(aside)
	if cerr != nil {
		return fmt.Errorf("promote %s into %s: %w", from, to, cerr)
	}
	dir := dst.Dir(to)
	if mounted, err := isMountPoint(dir); err != nil {
		return err
	} else if mounted {
		if err := unix.Unmount(dir, 0); err != nil {
			return fmt.Errorf("promote into %s: unmount the workspace: %w (in use: a run or a process has it open)", to, err)
		}
	}
	if err := checkEmpty(dir); err != nil {
		return err
	}
	if err := os.Rename(next, image); err != nil {
		return fmt.Errorf("promote into %s: %w", to, err)
	}
	ok = true
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("promote into %s: %w", to, err)
	}
	return syncDir(filepath.Dir(image))
}

// promotePlain is Promote without quotas: a copy beside the directory, then two
// renames (the old one aside, the copy in) and the old one removed.
func (m *Manager) promotePlain(srcDir, to string) error {
	dir := m.Dir(to)
	next := filepath.Join(m.root, "."+to+".promote")
	old := filepath.Join(m.root, "."+to+".old")
	_ = os.RemoveAll(next)
	_ = os.RemoveAll(old)
	if err := os.Mkdir(next, 0o755); err != nil {
		return fmt.Errorf("promote into %s: %w", to, err)
	}
	if err := copyTree(srcDir, next, 0); err != nil {
		_ = os.RemoveAll(next)
		return fmt.Errorf("promote into %s: %w", to, err)
	}
	if err := os.Rename(dir, old); err != nil && !errors.Is(err, fs.ErrNotExist) {
		_ = os.RemoveAll(next)
		return fmt.Errorf("promote into %s: %w", to, err)
	}
	if err := os.Rename(next, dir); err != nil {
		return fmt.Errorf("promote into %s: %w", to, err)
	}
	return os.RemoveAll(old)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer func() { _ = d.Close() }()
	return d.Sync()
}

// copyTree copies the tree at src into the empty directory dst, both through
// os.Root: no path of src's (a link, a "..") reaches outside either. A write
// that does not fit dst's quota is an ExceededError.
func copyTree(src, dst string, limit int64) error {
	explain := func(err error) error { return explainAt(dst, limit, err) }
	from, err := os.OpenRoot(src)
	if err != nil {
		return err
	}
	defer func() { _ = from.Close() }()
	into, err := os.OpenRoot(dst)
	if err != nil {
		return err
	}
	defer func() { _ = into.Close() }()
	type dirTimes struct {
		name string
		at   time.Time
	}
	var dirs []dirTimes
	err = fs.WalkDir(from.FS(), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := from.Lstat(name)
		if err != nil {
			return err
		}
		st, _ := info.Sys().(*syscall.Stat_t)
		perm := info.Mode().Perm() | info.Mode()&fs.ModeSticky
		switch {
		case info.IsDir():
			if name != "." {
				if err := into.Mkdir(name, 0o700); err != nil {
					return explain(err)
				}
			}
			dirs = append(dirs, dirTimes{name, info.ModTime()})
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := from.Readlink(name)
			if err != nil {
				return err
			}
			if err := into.Symlink(target, name); err != nil {
				return explain(err)
			}
			if st != nil {
				_ = into.Lchown(name, int(st.Uid), int(st.Gid))
			}
			return nil
		case info.Mode().IsRegular():
			if err := copyFile(from, into, name, explain); err != nil {
				return err
			}
		default:
			return nil // a device, pipe or socket: not workspace content
		}
		if st != nil {
			if err := into.Lchown(name, int(st.Uid), int(st.Gid)); err != nil {
				return err
			}
		}
		if err := into.Chmod(name, perm); err != nil {
			return err
		}
		if !info.IsDir() {
			return into.Chtimes(name, info.ModTime(), info.ModTime())
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i := len(dirs) - 1; i >= 0; i-- { // after their contents changed them
		_ = into.Chtimes(dirs[i].name, dirs[i].at, dirs[i].at)
	}
	return nil
}

func copyFile(from, into *os.Root, name string, explain func(error) error) error {
	in, err := from.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	out, err := into.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return explain(err)
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return explain(fmt.Errorf("copy %s: %w", name, err))
	}
	return nil
}

// explainAt is Explain for a quota filesystem mounted at dir whose image is not
// at the usual place (a promotion's, aside): limit is its size; 0 (no quota)
// leaves err as it is.
func explainAt(dir string, limit int64, err error) error {
	if err == nil || limit == 0 || !isNoSpace(err) {
		return err
	}
	var st unix.Statfs_t
	if unix.Statfs(dir, &st) != nil {
		return err
	}
	return exceeded(Usage{Limit: limit, Used: max(0, limit-int64(st.Bavail)*st.Bsize), Files: st.Files, FreeFiles: st.Ffree}, err)
}

func syncFS(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer func() { _ = d.Close() }()
	return unix.Syncfs(int(d.Fd()))
}
