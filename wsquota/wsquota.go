// Package wsquota decides, once for every place a workspace lives, how big it may
// grow and whether the disk under the workspaces can take more.
//
// With a quota, a workspace is the root of an ext4 filesystem of its own: a sparse
// image <root>/.images/<id>.ext4 of exactly the quota's size, attached to a loop
// device and mounted (nosuid, nodev) at <root>/<id>. The kernel enforces the limit
// on every writer alike — the worker's tools and every process in the sandbox, which
// bind-mounts <root>/<id> — so nothing can outrun it, and a bind mount of a
// filesystem's root shows "/" and /dev/loopN in the sandbox's mountinfo, never the
// host path. A write past the limit fails with ENOSPC; Explain turns that into
// "workspace quota exceeded: 1.0 GiB of 1.0 GiB".
//
// Open creates and mounts a workspace on first use and remounts it on demand; it is
// idempotent and safe for concurrent callers in any number of processes on one host
// (an flock per workspace). Sweep unmounts workspaces nobody needs any more; the
// image stays, so the next Open mounts it again with its files. UnmountAll is for
// harnesses that must leave no mount behind.
//
// The free-disk guard (CheckFree) refuses new work while the filesystem that holds
// the images has less than MinFree available: images are sparse, so the quotas of
// all workspaces together may exceed the disk, and a full disk under a loop image
// turns into I/O errors inside it.
//
// With quota 0 a workspace is a plain directory (no limit, the host path visible in
// the sandbox's mountinfo); the guard still applies. docs/quota.md has the design.
package wsquota

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Defaults of Config (config.Default uses them).
const (
	// DefaultQuota is a workspace's size limit.
	DefaultQuota Size = 1 << 30
	// DefaultUnmountAfter is how long after its run ended a workspace stays mounted
	// (readable at <root>/<id> on the host) before the maintenance sweep unmounts it.
	DefaultUnmountAfter = 15 * time.Minute
	// DefaultMkfs is the mkfs binary (e2fsprogs), looked up on PATH, then in
	// /usr/sbin and /sbin.
	DefaultMkfs = "mkfs.ext4"
	// MinQuota is the smallest quota: below it ext4's own metadata leaves little room.
	MinQuota Size = 8 << 20
	// ImagesDir is the directory under the root that holds the images and locks. Its
	// name starts with a dot, so it is never a workspace id.
	ImagesDir = ".images"
)

// DefaultMinFree keeps 5% of the workspaces' filesystem free.
var DefaultMinFree = MinFree{Percent: 5}

// Config is the workspace limits. Its YAML keys sit at the top level of the fleet's
// configuration, next to `workspaces` (the root). The zero Config means no quota and
// no free-disk guard; Defaults returns the documented defaults.
type Config struct {
	// Quota is a workspace's size limit; 0 turns quotas off (plain directories).
	// Env AETHERIUM_WORKSPACE_QUOTA. Default DefaultQuota (1 GiB). An existing
	// workspace keeps the size it was created with.
	Quota Size `yaml:"workspace_quota"`
	// MinFree is what the workspaces' filesystem must keep available: a new
	// workspace, and a new run at the API (507), are refused below it. A size
	// (2GiB) or a percentage of the filesystem (5%); 0 turns the guard off.
	// Env AETHERIUM_WORKSPACE_MIN_FREE. Default DefaultMinFree (5%).
	MinFree MinFree `yaml:"workspace_min_free"`
	// UnmountAfter is how long a workspace stays mounted after its run ended. The
	// maintenance sweep unmounts it then; Open mounts it again when needed.
	// Default DefaultUnmountAfter (15m).
	UnmountAfter time.Duration `yaml:"workspace_unmount_after"`
	// Spares is how many fresh images (sparse, ext4 made, never mounted) the
	// Manager keeps ready under <root>/.images/spare, so a new workspace is a rename
	// and a mount instead of writing and syncing an image (a copy of the template,
	// or a mkfs.ext4 process where there is none) on the run's first step. 0 keeps
	// none.
	// Default (Defaults) DefaultSpares.
	Spares int `yaml:"workspace_spares"`
	// Mkfs is the mkfs.ext4 binary. Default DefaultMkfs.
	Mkfs string `yaml:"-"`
	// Tiers is each storage tier's quota, retention and location
	// (`workspace_tiers`; docs/tiers.md). The zero value puts every tier at the
	// root with Quota and keeps every workspace. Default DefaultTiers.
	Tiers TiersConfig `yaml:"workspace_tiers"`
}

// DefaultSpares is how many fresh images a worker keeps ready (each a sparse file
// of well under a megabyte on disk until used).
const DefaultSpares = 4

// Defaults returns the documented defaults.
func Defaults() Config {
	return Config{Quota: DefaultQuota, MinFree: DefaultMinFree, Spares: DefaultSpares, Tiers: DefaultTiers()}.WithDefaults()
}

// WithDefaults returns c with every zero field whose zero means nothing filled in
// (Quota 0 and MinFree 0 mean "off" and are kept).
func (c Config) WithDefaults() Config {
	c.UnmountAfter = cmp.Or(c.UnmountAfter, DefaultUnmountAfter)
	c.Mkfs = cmp.Or(c.Mkfs, DefaultMkfs)
	return c
}

// Validate reports bad values, naming the configuration key.
func (c Config) Validate() error {
	var errs []error
	if c.Quota != 0 && c.Quota < MinQuota {
		errs = append(errs, fmt.Errorf("workspace_quota (AETHERIUM_WORKSPACE_QUOTA): %s is below the minimum %s (0 turns quotas off)", c.Quota, MinQuota))
	}
	if c.MinFree.Bytes < 0 || c.MinFree.Percent < 0 || c.MinFree.Percent >= 100 {
		errs = append(errs, fmt.Errorf("workspace_min_free (AETHERIUM_WORKSPACE_MIN_FREE): want a size or a percentage from 0 to below 100, got %s", c.MinFree))
	}
	if c.Spares < 0 {
		errs = append(errs, fmt.Errorf("workspace_spares: %d is negative (0 keeps no spare images)", c.Spares))
	}
	if c.UnmountAfter < 0 {
		errs = append(errs, fmt.Errorf("workspace_unmount_after: must not be negative, got %s", c.UnmountAfter))
	}
	if err := c.Tiers.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Errors callers branch on.
var (
	// ErrExceeded is a write past the workspace's quota (see ExceededError).
	ErrExceeded = errors.New("workspace quota exceeded")
	// ErrDiskFull is the free-disk guard refusing new work (see DiskFullError).
	ErrDiskFull = errors.New("workspaces disk nearly full")
	// ErrUnavailable means quota workspaces cannot be made on this host (no root
	// privilege, no loop devices, no mkfs.ext4): a deployment problem, not a
	// transient one. The message names what is missing.
	ErrUnavailable = errors.New("workspace quotas unavailable")
	// ErrNotEmpty is a plain directory with files where a quota workspace would be
	// mounted (made while quotas were off): mounting over it would hide the files.
	ErrNotEmpty = errors.New("workspace exists as a plain directory")
)

// ExceededError is a write that did not fit the workspace's quota.
type ExceededError struct {
	// Used and Limit are bytes of the workspace's filesystem.
	Used, Limit int64
	// Files is set when the filesystem ran out of inodes (files) rather than bytes;
	// UsedFiles and LimitFiles count them then.
	Files                 bool
	UsedFiles, LimitFiles uint64
	// Err is the failure as the writer saw it (ENOSPC).
	Err error
}

func (e *ExceededError) Error() string {
	var s string
	if e.Files {
		s = fmt.Sprintf("workspace quota exceeded: %d of %d files", e.UsedFiles, e.LimitFiles)
	} else {
		s = fmt.Sprintf("workspace quota exceeded: %s of %s", inUnitOf(e.Used, e.Limit), HumanBytes(e.Limit))
	}
	if e.Err != nil {
		s += " (" + e.Err.Error() + ")"
	}
	return s
}

// Is makes errors.Is(err, ErrExceeded) true.
func (e *ExceededError) Is(target error) bool { return target == ErrExceeded }

// Unwrap returns the writer's error.
func (e *ExceededError) Unwrap() error { return e.Err }

// DiskFullError is the free-disk guard's refusal.
type DiskFullError struct {
	// Path is where the filesystem was measured.
	Path string
	// Free and Total are bytes available to the fleet and the filesystem's size;
	// Min is the configured minimum, in bytes, as Setting says it.
	Free, Total, Min int64
	Setting          MinFree
}

func (e *DiskFullError) Error() string {
	return fmt.Sprintf("workspaces disk nearly full: %s free of %s at %s, below workspace_min_free %s (%s); no new work until space is freed",
		HumanBytes(e.Free), HumanBytes(e.Total), e.Path, e.Setting, HumanBytes(e.Min))
}

// Is makes errors.Is(err, ErrDiskFull) true.
func (e *DiskFullError) Is(target error) bool { return target == ErrDiskFull }

// Manager makes and mounts the workspaces under one root.
type Manager struct {
	root string
	cfg  Config

	checkOnce sync.Once
	checkErr  error
	mkfs      string

	// The image template (template.go), made on the first new image; nil when
	// mkfs.ext4 makes every image.
	templateOnce sync.Once
	template     *imageTemplate

	// The spare images' refill: at most one goroutine per Manager at a time,
	// stopped and waited for by Close.
	spareMu   sync.Mutex
	refilling bool
	closed    bool
	stop      context.CancelFunc
	stopCtx   context.Context
	refills   sync.WaitGroup

	// spares is the spare images' directory under ImagesDir: SparesDir, or
	// SparesDir-<tier> for a tier's Manager (its root may be the same, its quota
	// not).
	spares string
	// children are the Managers of the tiers whose root or quota differ from
	// this one's (tiers.go); a tier absent here is served by this Manager.
	children map[Tier]*Manager
}

// New returns a Manager for the workspaces under root (made absolute).
func New(root string, cfg Config) (*Manager, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if root == "" {
		return nil, errors.New("workspaces: the root must not be empty")
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("workspaces %s: %w", root, err)
	}
	m := newManager(abs, cfg, SparesDir)
	for _, t := range Tiers {
		tc := cfg.Tiers.Of(t)
		quota := cfg.Quota
		if quota != 0 && tc.Quota != 0 {
			quota = tc.Quota
		}
		root := tierRoot(abs, tc.Location)
		if quota == cfg.Quota && root == abs {
			continue
		}
		cc := cfg
		cc.Quota, cc.Tiers = quota, TiersConfig{}
		if m.children == nil {
			m.children = map[Tier]*Manager{}
		}
		m.children[t] = newManager(root, cc, SparesDir+"-"+string(t))
	}
	return m, nil
}

func newManager(root string, cfg Config, spares string) *Manager {
	m := &Manager{root: root, cfg: cfg, spares: spares}
	m.stopCtx, m.stop = context.WithCancel(context.Background())
	return m
}

// forID is the Manager of workspace id's tier: a child, or m itself.
func (m *Manager) forID(id string) *Manager {
	if c := m.children[TierOf(id)]; c != nil {
		return c
	}
	return m
}

// Tier is the Manager of tier t's workspaces (m itself when the tier has
// m's root and quota). Its Config's Quota is the tier's.
func (m *Manager) Tier(t Tier) *Manager {
	if c := m.children[t]; c != nil {
		return c
	}
	return m
}

// roots are m and the tiers' Managers whose roots differ from every earlier
// one's: each directory that holds workspaces, once.
func (m *Manager) roots() []*Manager {
	out := []*Manager{m}
	seen := map[string]bool{m.root: true}
	for _, t := range Tiers {
		if c := m.children[t]; c != nil && !seen[c.root] {
			seen[c.root] = true
			out = append(out, c)
		}
	}
	return out
}

// Root is the absolute workspaces root.
func (m *Manager) Root() string { return m.root }

// Config is the Manager's configuration, defaults filled in.
func (m *Manager) Config() Config { return m.cfg }

// Dir is the path of workspace id (mounted or not), in its tier's location.
func (m *Manager) Dir(id string) string { return filepath.Join(m.forID(id).root, id) }

// Image is the path of workspace id's filesystem image.
func (m *Manager) Image(id string) string { return imagePath(m.Dir(id)) }

func imagePath(dir string) string {
	return filepath.Join(filepath.Dir(dir), ImagesDir, filepath.Base(dir)+".ext4")
}

func checkID(id string) error {
	if id == "" || strings.HasPrefix(id, ".") || strings.ContainsAny(id, "/\x00\\") || len(id) > 200 {
		return fmt.Errorf("workspace id %q: want a plain name (no slash, not starting with a dot)", id)
	}
	return nil
}

// Check reports whether this host can make quota workspaces (root privilege, loop
// devices, mkfs.ext4), naming what is missing. Always nil with quota 0. The worker
// role calls it at start; Open calls it before its first mount.
func (m *Manager) Check() error {
	if m.cfg.Quota == 0 {
		return nil
	}
	m.checkOnce.Do(func() { m.mkfs, m.checkErr = m.check() })
	if m.checkErr != nil {
		return m.checkErr
	}
	for _, t := range Tiers {
		if c := m.children[t]; c != nil {
			if err := c.Check(); err != nil {
				return fmt.Errorf("workspace_tiers.%s: %w", t, err)
			}
		}
	}
	return nil
}

func (m *Manager) check() (string, error) {
	fail := func(format string, a ...any) error {
		return fmt.Errorf("%w: workspace_quota %s needs %s; set workspace_quota: 0 (AETHERIUM_WORKSPACE_QUOTA=0) to run without workspace quotas",
			ErrUnavailable, m.cfg.Quota, fmt.Sprintf(format, a...))
	}
	if !hasSysAdmin() {
		return "", fail("root privilege (CAP_SYS_ADMIN) to attach loop devices and mount; this process has euid %d without it", os.Geteuid())
	}
	ctl, err := os.OpenFile(loopControl, os.O_RDWR, 0)
	if err != nil {
		return "", fail("loop devices: %v (load the loop module; a worker in a container must be privileged)", err)
	}
	_ = ctl.Close()
	mkfs, err := lookMkfs(m.cfg.Mkfs)
	if err != nil {
		return "", fail("%s: %v (install e2fsprogs)", m.cfg.Mkfs, err)
	}
	if err := m.mkdirImages(); err != nil {
		return "", fail("a writable workspaces root: %v", err)
	}
	return mkfs, nil
}

// Open returns workspace id's directory, ready for use: with a quota, its
// filesystem created (first use) and mounted; without, a plain directory. A new
// workspace is refused with a DiskFullError while the disk is below MinFree.
func (m *Manager) Open(ctx context.Context, id string) (string, error) {
	if err := checkID(id); err != nil {
		return "", err
	}
	if c := m.forID(id); c != m {
		return c.Open(ctx, id)
	}
	dir := m.Dir(id)
	if m.cfg.Quota == 0 {
		if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
			if err := m.CheckFree(); err != nil {
				return "", err
			}
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", fmt.Errorf("workspace %s: %w", dir, err)
		}
		return dir, nil
	}
	if mounted, err := isMountPoint(dir); err != nil {
		return "", err
	} else if mounted {
		return dir, nil
	}
	if err := m.Check(); err != nil {
		return "", err
	}
	unlock, err := m.lock(ctx, id)
	if err != nil {
		return "", err
	}
	defer unlock()
	// Another caller may have mounted it while this one waited for the lock.
	if mounted, err := isMountPoint(dir); err != nil || mounted {
		return dir, err
	}
	image := m.Image(id)
	created := false
	if _, err := os.Stat(image); errors.Is(err, fs.ErrNotExist) {
		if err := m.CheckFree(); err != nil {
			return "", err
		}
		if err := m.create(ctx, dir, image); err != nil {
			return "", err
		}
		created = true
	} else if err != nil {
		return "", fmt.Errorf("workspace image %s: %w", image, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("workspace %s: %w", dir, err)
	}
	if err := checkEmpty(dir); err != nil {
		return "", err
	}
	if err := mountImage(image, dir, created); err != nil {
		return "", fmt.Errorf("workspace %s: %w", dir, err)
	}
	if created {
		// mkfs leaves lost+found; the workspace starts empty (fsck makes it again
		// should it ever need one).
		_ = os.Remove(filepath.Join(dir, "lost+found"))
	}
	return dir, nil
}

// create makes a workspace's image: a sparse file of the quota's size with an ext4
// filesystem, written under a temporary name and renamed, so a crash never leaves a
// half-made image under the real name.
func (m *Manager) create(ctx context.Context, dir, image string) error {
	if err := checkEmpty(dir); err != nil {
		return err
	}
	defer m.refill()
	if m.takeSpare(image) {
		return nil
	}
	if err := m.makeImage(ctx, image); err != nil {
		return fmt.Errorf("workspace image %s: %w", image, err)
	}
	return nil
}

// makeImage writes a fresh image at path: a sparse file of the quota's size with
// an ext4 filesystem, made under a temporary name and renamed.
func (m *Manager) makeImage(ctx context.Context, path string) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if t := m.imageTemplate(); t != nil {
		err = t.writeTo(f, newUUID(), newUUID())
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	} else {
		err = f.Truncate(int64(m.cfg.Quota))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = mkfs(ctx, m.mkfs, tmp)
		}
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

// imageTemplate makes the template on first use (under the Manager's lifetime,
// not a caller's context: it serves every later image). A template that cannot be
// made or used is logged once; mkfs.ext4 then makes each image.
func (m *Manager) imageTemplate() *imageTemplate {
	m.templateOnce.Do(func() {
		t, err := makeTemplate(m.stopCtx, m.mkfs, filepath.Join(m.root, ImagesDir), int64(m.cfg.Quota))
		if err != nil {
			slog.Warn("workspace images: no template, mkfs.ext4 makes each image", "root", m.root, "err", err)
			return
		}
		m.template = t
	})
	return m.template
}

// mkdirImages makes the root (0755, as without quotas) and its private images
// directory (0700: the images are the workspaces' raw blocks).
func (m *Manager) mkdirImages() error {
	if err := os.MkdirAll(m.root, 0o755); err != nil {
		return err
	}
	if err := os.Mkdir(filepath.Join(m.root, ImagesDir), 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return nil
}

// checkEmpty refuses to mount over a directory with files: they would be hidden.
func checkEmpty(dir string) error {
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return fmt.Errorf("%w: %s holds files outside any quota filesystem (made while workspace_quota was 0?): move them away, or set workspace_quota: 0", ErrNotEmpty, dir)
	}
	return nil
}

// lock takes workspace id's lock: an flock on <root>/.images/<id>.lock, which
// serializes mounting and unmounting across every process on the host.
func (m *Manager) lock(ctx context.Context, id string) (func(), error) {
	path := filepath.Join(m.root, ImagesDir, id+".lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if errors.Is(err, fs.ErrNotExist) {
		if err = m.mkdirImages(); err == nil {
			f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("workspace lock %s: %w", path, err)
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { _ = f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			_ = f.Close()
			return nil, fmt.Errorf("workspace lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Unmount unmounts workspace id (a no-op when it is not mounted); its image stays.
// A workspace in use (a process has its cwd or a file open there) is not unmounted:
// the error says so and a later sweep tries again.
func (m *Manager) Unmount(ctx context.Context, id string) error {
	_, err := m.unmountIf(ctx, id, nil)
	return err
}

func (m *Manager) unmountIf(ctx context.Context, id string, idle func(context.Context, string) bool) (bool, error) {
	if err := checkID(id); err != nil {
		return false, err
	}
	if c := m.forID(id); c != m {
		return c.unmountIf(ctx, id, idle)
	}
	unlock, err := m.lock(ctx, id)
	if err != nil {
		return false, err
	}
	defer unlock()
	dir := m.Dir(id)
	if mounted, err := isMountPoint(dir); err != nil || !mounted {
		return false, err
	}
	// Asked under the lock: an Open waiting for it mounts again afterwards.
	if idle != nil && !idle(ctx, id) {
		return false, nil
	}
	if err := unix.Unmount(dir, 0); err != nil {
		if errors.Is(err, unix.EBUSY) {
			return false, fmt.Errorf("unmount workspace %s: in use (a process has a file or its working directory there)", dir)
		}
		return false, fmt.Errorf("unmount workspace %s: %w", dir, err)
	}
	return true, nil
}

// Mounted lists the ids of the workspaces mounted under the root and the
// tiers' locations.
func (m *Manager) Mounted() ([]string, error) {
	var ids []string
	for _, r := range m.roots() {
		points, err := mountPointsUnder(r.root)
		if err != nil {
			return nil, err
		}
		for _, p := range points {
			if filepath.Dir(p) == r.root && checkID(filepath.Base(p)) == nil {
				ids = append(ids, filepath.Base(p))
			}
		}
	}
	return ids, nil
}

// Sweep unmounts every mounted workspace for which idle reports true (asked under
// the workspace's lock, so a concurrent Open simply mounts it again afterwards). It
// returns the ids it unmounted; a workspace in use is skipped with an error.
func (m *Manager) Sweep(ctx context.Context, idle func(ctx context.Context, id string) bool) ([]string, error) {
	if m.cfg.Quota == 0 {
		// Workspaces made while quotas were on may still be mounted: sweep them too.
		if _, err := os.Stat(filepath.Join(m.root, ImagesDir)); err != nil {
			return nil, nil
		}
	}
	ids, err := m.Mounted()
	if err != nil {
		return nil, err
	}
	var done []string
	var errs []error
	for _, id := range ids {
		if ctx.Err() != nil {
			break
		}
		ok, err := m.unmountIf(ctx, id, idle)
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			done = append(done, id)
		}
	}
	return done, errors.Join(errs...)
}

// UnmountAll unmounts every filesystem mounted at or under dir, deepest first,
// lazily (MNT_DETACH) when one is busy. For harnesses that must not leave mounts
// (and through them loop devices) behind: tests, drills, benchmarks.
func UnmountAll(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	points, err := mountPointsUnder(abs)
	if err != nil {
		return err
	}
	var errs []error
	for i := len(points) - 1; i >= 0; i-- {
		p := points[i]
		if err := unix.Unmount(p, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
				errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
			}
		}
	}
	return errors.Join(errs...)
}

// Usage is a quota workspace's filesystem as its users see it.
type Usage struct {
	// Limit is the quota (the image's size); Used is everything not available to
	// the workspace's users, ext4's own metadata included, so Used reaches Limit
	// when the workspace is full.
	Limit, Used int64
	// Files and FreeFiles count inodes.
	Files, FreeFiles uint64
}

// Full reports whether the workspace is as full as ext4 lets it get: less than 2%
// of the quota (at least 2 MiB) or no inode is left. ext4 refuses a write with
// ENOSPC while statfs still shows a little room (blocks it keeps back for metadata
// and for the accuracy of its per-CPU counters): about 1 MiB, 6% of a 16 MiB
// workspace, 0.1% of 1 GiB.
func (u Usage) Full() bool {
	return u.Limit-u.Used < max(u.Limit/50, 2<<20) || (u.Files > 0 && u.FreeFiles == 0)
}

// UsageOf measures the quota workspace at dir; ok is false when dir is not one
// (quota 0, not mounted).
func UsageOf(dir string) (Usage, bool) {
	fi, err := os.Stat(imagePath(filepath.Clean(dir)))
	if err != nil || !fi.Mode().IsRegular() {
		return Usage{}, false
	}
	if mounted, err := isMountPoint(dir); err != nil || !mounted {
		return Usage{}, false
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return Usage{}, false
	}
	limit := fi.Size()
	avail := int64(st.Bavail) * st.Bsize
	return Usage{Limit: limit, Used: max(0, limit-avail), Files: st.Files, FreeFiles: st.Ffree}, true
}

// Explain turns a failed write in the quota workspace at dir into an
// ExceededError; any other error is returned as it is.
func Explain(dir string, err error) error {
	if err == nil || errors.Is(err, ErrExceeded) || !isNoSpace(err) {
		return err
	}
	u, ok := UsageOf(dir)
	if !ok {
		return err
	}
	return exceeded(u, err)
}

func exceeded(u Usage, err error) *ExceededError {
	e := &ExceededError{Used: u.Used, Limit: u.Limit, Err: err}
	if u.Files > 0 && u.FreeFiles == 0 {
		e.Files, e.UsedFiles, e.LimitFiles = true, u.Files, u.Files
	}
	return e
}

// ExplainCommand reports a shell command that ran into the quota of the workspace
// at dir: the workspace is full and the command failed (non-zero exit) or said
// "No space left on device" / "Disk quota exceeded". The exit status counts
// because not every program names the error: busybox reports a failed write to
// its standard output as "I/O error".
func ExplainCommand(dir, output string, exitCode int) (*ExceededError, bool) {
	if exitCode == 0 && !strings.Contains(output, "No space left on device") && !strings.Contains(output, "Disk quota exceeded") {
		return nil, false
	}
	u, ok := UsageOf(dir)
	if !ok || !u.Full() {
		return nil, false
	}
	return exceeded(u, nil), true
}

func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// CheckFree is the free-disk guard: a DiskFullError when the filesystem that holds
// the workspaces has less than MinFree available. Always nil with MinFree 0.
func (m *Manager) CheckFree() error {
	if m.cfg.MinFree.Off() {
		return nil
	}
	// The root may not exist yet (the API's first check): measure where it will be.
	path := m.root
	var st unix.Statfs_t
	for {
		err := unix.Statfs(path, &st)
		if err == nil {
			break
		}
		parent := filepath.Dir(path)
		if !errors.Is(err, unix.ENOENT) || parent == path {
			return fmt.Errorf("free-disk guard: statfs %s: %w", path, err)
		}
		path = parent
	}
	total := int64(st.Blocks) * st.Bsize
	free := int64(st.Bavail) * st.Bsize
	if limit := m.cfg.MinFree.Of(total); free < limit {
		return &DiskFullError{Path: m.root, Free: free, Total: total, Min: limit, Setting: m.cfg.MinFree}
	}
	return nil
}
