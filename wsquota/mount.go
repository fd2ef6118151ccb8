package wsquota

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

const loopControl = "/dev/loop-control"

// mountFlags and mountData are every workspace mount's options: no set-uid
// binaries or device files take effect; a filesystem error (the host disk under the
// sparse image ran full) makes it read-only instead of corrupting it further;
// noinit_itable because the image is sparse, so its inode tables already read as
// zeroes.
const (
	mountFlags = unix.MS_NOSUID | unix.MS_NODEV
	mountData  = "errors=remount-ro,noinit_itable"
)

// isMountPoint reports whether dir is the root of a filesystem other than its
// parent's (the classic st_dev test; a workspace is only ever a loop-mounted ext4).
func isMountPoint(dir string) (bool, error) {
	var st, parent unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		return false, fmt.Errorf("workspace %s: %w", dir, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return false, fmt.Errorf("workspace %s exists and is not a directory", dir)
	}
	if err := unix.Lstat(filepath.Dir(dir), &parent); err != nil {
		return false, fmt.Errorf("workspace %s: %w", dir, err)
	}
	return st.Dev != parent.Dev, nil
}

// mountPointsUnder lists the mount points at or under dir in this process's mount
// namespace, sorted (a parent before its children).
func mountPointsUnder(dir string) ([]string, error) {
	raw, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 {
			continue
		}
		p := unescapeMountinfo(f[4])
		if p == dir || strings.HasPrefix(p, dir+"/") {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out, sc.Err()
}

// unescapeMountinfo undoes the kernel's octal escapes (\040 for a space, …).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// mountImage attaches image to a loop device and mounts it at dir. fresh: the
// image was made just now, so no device can be backed by it yet.
func mountImage(image, dir string, fresh bool) error {
	var last error
	for range 3 {
		dev, hold, err := attach(image, fresh)
		if err != nil {
			return err
		}
		err = unix.Mount(dev, dir, "ext4", mountFlags, mountData)
		// The mount holds the device now; without one, closing the last descriptor
		// detaches it (autoclear).
		_ = hold.Close()
		if err == nil {
			return nil
		}
		last = fmt.Errorf("mount %s (%s) at %s: %w", image, dev, dir, err)
		// A reused device may have been detaching just then: attach afresh.
		if !errors.Is(err, unix.ENXIO) && !errors.Is(err, unix.ENODEV) && !errors.Is(err, unix.ENOENT) {
			break
		}
	}
	return last
}

// attach returns a loop device backed by image, held open by the returned file.
// A device already backed by it is reused — its filesystem may still be mounted in
// another mount namespace (a sandbox container's), and a second device on the same
// file would be a second ext4 instance on the same blocks. New devices detach by
// themselves when the last user (mount) goes (LO_FLAGS_AUTOCLEAR). The search
// for a device already backed by the image reads every loop device's backing file
// (tens of milliseconds on a host with a thousand devices), so a fresh image skips it.
func attach(image string, fresh bool) (string, *os.File, error) {
	var ist unix.Stat_t
	if err := unix.Stat(image, &ist); err != nil {
		return "", nil, fmt.Errorf("workspace image %s: %w", image, err)
	}
	if !fresh {
		if dev, f := findAttached(image, ist.Ino); f != nil {
			return dev, f, nil
		}
	}
	ctl, err := os.OpenFile(loopControl, os.O_RDWR, 0)
	if err != nil {
		return "", nil, fmt.Errorf("%w: loop devices: %v", ErrUnavailable, err)
	}
	defer ctl.Close()
	img, err := os.OpenFile(image, os.O_RDWR, 0)
	if err != nil {
		return "", nil, fmt.Errorf("workspace image %s: %w", image, err)
	}
	defer img.Close()
	for range 50 {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return "", nil, fmt.Errorf("no free loop device: %w", err)
		}
		dev := "/dev/loop" + strconv.Itoa(n)
		if err := ensureNode(dev); err != nil {
			return "", nil, err
		}
		f, err := os.OpenFile(dev, os.O_RDWR, 0)
		if err != nil {
			return "", nil, fmt.Errorf("open %s: %w", dev, err)
		}
		cfg := unix.LoopConfig{Fd: uint32(img.Fd())}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
		copy(cfg.Info.File_name[:len(cfg.Info.File_name)-1], image)
		err = unix.IoctlLoopConfigure(int(f.Fd()), &cfg)
		if errors.Is(err, unix.ENOTTY) || errors.Is(err, unix.EINVAL) {
			// Kernels before 5.8 have no LOOP_CONFIGURE.
			if err = unix.IoctlSetInt(int(f.Fd()), unix.LOOP_SET_FD, int(img.Fd())); err == nil {
				if err = unix.IoctlLoopSetStatus64(int(f.Fd()), &cfg.Info); err != nil {
					_ = unix.IoctlSetInt(int(f.Fd()), unix.LOOP_CLR_FD, 0)
				}
			}
		}
		if err == nil {
			return dev, f, nil
		}
		_ = f.Close()
		if !errors.Is(err, unix.EBUSY) {
			return "", nil, fmt.Errorf("attach %s to %s: %w", image, dev, err)
		}
		// Another process took that device first: ask for the next free one.
	}
	return "", nil, fmt.Errorf("attach %s: every free loop device was taken by someone else first", image)
}

// findAttached returns a loop device backed by image (the same inode), opened.
func findAttached(image string, ino uint64) (string, *os.File) {
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, bf := range files {
		raw, err := os.ReadFile(bf)
		if err != nil || strings.TrimSuffix(string(raw), "\n") != image {
			continue
		}
		dev := "/dev/" + filepath.Base(filepath.Dir(filepath.Dir(bf)))
		if ensureNode(dev) != nil {
			continue
		}
		f, err := os.OpenFile(dev, os.O_RDWR, 0)
		if err != nil {
			continue
		}
		if info, err := unix.IoctlLoopGetStatus64(int(f.Fd())); err == nil && info.Inode == ino {
			return dev, f
		}
		_ = f.Close()
	}
	return "", nil
}

// ensureNode makes /dev/loopN when the kernel has the device but this /dev lacks
// the node: a container's /dev holds only the devices that existed when it started.
func ensureNode(dev string) error {
	if _, err := os.Stat(dev); err == nil {
		return nil
	}
	raw, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(dev), "dev"))
	if err != nil {
		return fmt.Errorf("%s: no device node and no /sys entry: %w", dev, err)
	}
	maj, mnr, ok := strings.Cut(strings.TrimSpace(string(raw)), ":")
	ma, err1 := strconv.ParseUint(maj, 10, 32)
	mi, err2 := strconv.ParseUint(mnr, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return fmt.Errorf("%s: unreadable device number %q", dev, raw)
	}
	if err := unix.Mknod(dev, unix.S_IFBLK|0o600, int(unix.Mkdev(uint32(ma), uint32(mi)))); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("%s: make the device node: %w", dev, err)
	}
	return nil
}

// mkfs makes an ext4 filesystem on image: no blocks reserved for root (the worker
// writes as root and must hit the same limit), an inode per 8 KiB (many small
// files, node_modules, run out of inodes before bytes at ext4's default 16 KiB),
// and nothing zeroed that a sparse file already reads as zeroes. extra are more
// options (the template's feature).
func mkfs(ctx context.Context, bin, image string, extra ...string) error {
	args := append([]string{"-q", "-F", "-m", "0", "-i", "8192", "-L", "workspace"}, extra...)
	out, err := exec.CommandContext(ctx, bin, append(args, "-E", "assume_storage_prezeroed=1", image)...).CombinedOutput()
	if err != nil && strings.Contains(string(out), "assume_storage_prezeroed") {
		// e2fsprogs before 1.47: the lazy flags skip the same zeroing (and
		// noinit_itable keeps the kernel from doing it later).
		out, err = exec.CommandContext(ctx, bin, append(args, "-E", "lazy_itable_init=1,lazy_journal_init=1", image)...).CombinedOutput()
	}
	if err != nil {
		return fmt.Errorf("%s: %v: %s", bin, err, strings.TrimSpace(string(out)))
	}
	return nil
}

func lookMkfs(name string) (string, error) {
	if strings.Contains(name, "/") {
		if _, err := os.Stat(name); err != nil {
			return "", err
		}
		return name, nil
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/sbin"} {
		if p := filepath.Join(dir, name); isExecutable(p) {
			return p, nil
		}
	}
	return "", errors.New("not found on PATH, in /usr/sbin or in /sbin")
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// hasSysAdmin reports whether this process holds CAP_SYS_ADMIN (mount, loop setup).
func hasSysAdmin() bool {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return os.Geteuid() == 0
	}
	for line := range strings.Lines(string(raw)) {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && caps&(1<<unix.CAP_SYS_ADMIN) != 0
		}
	}
	return os.Geteuid() == 0
}
