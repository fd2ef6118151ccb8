package wsquota

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// A new image is a copy of a template: the Manager runs mkfs.ext4 once, keeps the
// few blocks it wrote (about 660 KiB of a 1 GiB image) in memory, and writes each
// image from them with a filesystem UUID and directory hash seed of its own. A
// mkfs.ext4 process costs 12–28 ms of CPU (exec, libraries, block groups); in the
// bench's I/O-bound sections, where every run gets a workspace, the workers'
// mkfs.ext4 children were the largest CPU user after PostgreSQL. A copy is a few
// writes.
//
// The template is made with metadata_csum_seed, so every metadata checksum is
// seeded by s_checksum_seed instead of the UUID: changing the UUID touches the
// superblocks only (the primary and its backups), each patched and its own crc32c
// recomputed. A template this code does not understand (an e2fsprogs without the
// feature, group descriptors checksummed by the UUID, an unexpected layout) is not
// used: every image then comes from its own mkfs.ext4, as before.

// Superblock fields (struct ext4_super_block in the kernel's fs/ext4/ext4.h).
const (
	sbPrimary          = 1024
	sbSize             = 1024
	sbFirstDataBlock   = 0x14
	sbLogBlockSize     = 0x18
	sbBlocksPerGroup   = 0x20
	sbMagic            = 0x38
	sbBlockGroupNr     = 0x5A
	sbFeatureIncompat  = 0x60
	sbFeatureROCompat  = 0x64
	sbUUID             = 0x68
	sbHashSeed         = 0xEC
	sbChecksumType     = 0x175
	sbChecksum         = 0x3FC
	ext4Magic          = 0xEF53
	incompatCsumSeed   = 0x2000
	roCompatGdtCsum    = 0x10
	roCompatMetaCsum   = 0x400
	checksumTypeCrc32c = 1
	// maxTemplateData bounds what a template may hold in memory: an e2fsprogs
	// that writes its inode tables or journal (no lazy init) makes a template
	// not worth keeping.
	maxTemplateData = 32 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrTemplate: the template made by mkfs.ext4 is not one this package can copy.
var ErrTemplate = errors.New("workspace image template unusable")

type extent struct {
	off  int64
	data []byte
}

// superCopy is a superblock (primary or backup) of the template, as mkfs wrote it.
type superCopy struct {
	off int64
	sb  []byte
}

// imageTemplate is a fresh filesystem image's data, ready to be written again.
type imageTemplate struct {
	size    int64
	extents []extent
	supers  []superCopy
}

// makeTemplate runs mkfs.ext4 on a sparse file of size under dir and reads it
// back (the file is removed).
func makeTemplate(ctx context.Context, mkfsBin, dir string, size int64) (*imageTemplate, error) {
	f, err := os.CreateTemp(dir, "template-*.tmp")
	if err != nil {
		return nil, err
	}
	path := f.Name()
	defer os.Remove(path)
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	if err := mkfs(ctx, mkfsBin, path, "-O", "metadata_csum_seed"); err != nil {
		return nil, err
	}
	return readTemplate(path)
}

// readTemplate reads image's data extents and checks its superblocks.
func readTemplate(image string) (*imageTemplate, error) {
	f, err := os.Open(image)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	t := &imageTemplate{size: fi.Size()}
	total := 0
	for off := int64(0); off < t.size; {
		start, err := unix.Seek(int(f.Fd()), off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole is left
		}
		if err != nil {
			return nil, fmt.Errorf("%w: seek data in %s: %v", ErrTemplate, image, err)
		}
		end, err := unix.Seek(int(f.Fd()), start, unix.SEEK_HOLE)
		if err != nil {
			return nil, fmt.Errorf("%w: seek hole in %s: %v", ErrTemplate, image, err)
		}
		if total += int(end - start); total > maxTemplateData {
			return nil, fmt.Errorf("%w: mkfs.ext4 wrote more than %d bytes", ErrTemplate, maxTemplateData)
		}
		data := make([]byte, end-start)
		if _, err := f.ReadAt(data, start); err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: read %s: %v", ErrTemplate, image, err)
		}
		t.extents = append(t.extents, extent{off: start, data: data})
		off = end
	}
	if err := t.findSupers(); err != nil {
		return nil, err
	}
	return t, nil
}

// at returns n bytes of the template at off, or nil where it has no data there.
func (t *imageTemplate) at(off int64, n int) []byte {
	for _, e := range t.extents {
		if off >= e.off && off+int64(n) <= e.off+int64(len(e.data)) {
			return e.data[off-e.off : off-e.off+int64(n)]
		}
	}
	return nil
}

// findSupers locates the primary superblock and every backup, checking each is a
// copy this package can give a new UUID: metadata checksums seeded by
// s_checksum_seed, crc32c, and its own checksum as computed here.
func (t *imageTemplate) findSupers() error {
	primary := t.at(sbPrimary, sbSize)
	if primary == nil || binary.LittleEndian.Uint16(primary[sbMagic:]) != ext4Magic {
		return fmt.Errorf("%w: no ext4 superblock", ErrTemplate)
	}
	incompat := binary.LittleEndian.Uint32(primary[sbFeatureIncompat:])
	roCompat := binary.LittleEndian.Uint32(primary[sbFeatureROCompat:])
	switch {
	case roCompat&roCompatMetaCsum == 0:
		return fmt.Errorf("%w: no metadata_csum", ErrTemplate)
	case incompat&incompatCsumSeed == 0:
		return fmt.Errorf("%w: no metadata_csum_seed (checksums would depend on the UUID)", ErrTemplate)
	case roCompat&roCompatGdtCsum != 0:
		return fmt.Errorf("%w: uninit_bg group checksums depend on the UUID", ErrTemplate)
	case primary[sbChecksumType] != checksumTypeCrc32c:
		return fmt.Errorf("%w: checksum type %d", ErrTemplate, primary[sbChecksumType])
	}
	blockSize := int64(1024) << binary.LittleEndian.Uint32(primary[sbLogBlockSize:])
	perGroup := int64(binary.LittleEndian.Uint32(primary[sbBlocksPerGroup:]))
	first := int64(binary.LittleEndian.Uint32(primary[sbFirstDataBlock:]))
	if blockSize > 64<<10 || perGroup == 0 {
		return fmt.Errorf("%w: block size %d, %d blocks per group", ErrTemplate, blockSize, perGroup)
	}
	uuid := primary[sbUUID : sbUUID+16]
	for g := int64(0); ; g++ {
		off := int64(sbPrimary)
		if g > 0 {
			off = (first + g*perGroup) * blockSize
		}
		if off >= t.size {
			break
		}
		sb := t.at(off, sbSize)
		if sb == nil || binary.LittleEndian.Uint16(sb[sbMagic:]) != ext4Magic ||
			!bytes.Equal(sb[sbUUID:sbUUID+16], uuid) || int64(binary.LittleEndian.Uint16(sb[sbBlockGroupNr:])) != g {
			continue // this group has no backup (sparse_super)
		}
		if got, want := binary.LittleEndian.Uint32(sb[sbChecksum:]), superChecksum(sb); got != want {
			return fmt.Errorf("%w: superblock of group %d has checksum %#x, computed %#x", ErrTemplate, g, got, want)
		}
		t.supers = append(t.supers, superCopy{off: off, sb: bytes.Clone(sb)})
	}
	return nil
}

// superChecksum is ext4_superblock_csum: crc32c seeded with ~0 over the bytes
// before s_checksum, not inverted at the end (Go's crc32 inverts both ends).
func superChecksum(sb []byte) uint32 {
	return ^crc32.Checksum(sb[:sbChecksum], castagnoli)
}

// newUUID is a random (version 4) UUID, also the shape of a hash seed.
func newUUID() [16]byte {
	var u [16]byte
	_, _ = rand.Read(u[:]) // crypto/rand.Read never fails (Go 1.24+)
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return u
}

// writeTo makes f an image: the template's data with uuid and hash seed in every
// superblock, synced (a spare must survive a host crash whole, as mkfs's did).
func (t *imageTemplate) writeTo(f *os.File, uuid, seed [16]byte) error {
	if err := f.Truncate(t.size); err != nil {
		return err
	}
	for _, e := range t.extents {
		if _, err := f.WriteAt(e.data, e.off); err != nil {
			return err
		}
	}
	sb := make([]byte, sbSize)
	for _, c := range t.supers {
		copy(sb, c.sb)
		copy(sb[sbUUID:], uuid[:])
		copy(sb[sbHashSeed:], seed[:])
		binary.LittleEndian.PutUint32(sb[sbChecksum:], superChecksum(sb))
		if _, err := f.WriteAt(sb, c.off); err != nil {
			return err
		}
	}
	return f.Sync()
}
