// Package apk checks an Android package before it goes anywhere near the headset: a
// bounded, well-formed zip (zip-bomb guarded on declared and actual sizes), a compiled
// AndroidManifest.xml whose package name follows the Android grammar, and native code
// for arm64-v8a only (or none). It depends on the standard library alone, so the
// headset simulator can use the same reader the driver trusts.
package apk

import (
	"archive/zip"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"regexp"
	"sort"
	"strings"

	"github.com/aetherium-engine/aetherium/internal/defaults"
)

// ErrInvalid wraps every reason an APK is refused.
var ErrInvalid = errors.New("invalid APK")

// ErrPackageName is a package name outside the Android grammar.
var ErrPackageName = errors.New("invalid Android package name")

// Limits bound what Inspect accepts. Zero fields take the documented defaults.
type Limits struct {
	// MaxBytes caps the APK file. Default 512 MiB.
	MaxBytes int64
	// MaxUncompressed caps the sum of the entries' uncompressed sizes, both as the
	// archive declares them and as they really inflate. Default 2 GiB.
	MaxUncompressed int64
	// MaxRatio caps total uncompressed bytes per byte of archive; real APKs sit well
	// under 10, a zip bomb in the thousands. Default 100.
	MaxRatio float64
	// MaxEntries caps the number of entries. Default 65535.
	MaxEntries int
	// APILevel is the Android API level of the device; an APK whose minSdkVersion is
	// higher cannot run there. Default 30 (the Steam Frame's Android container).
	APILevel int
}

func (l Limits) withDefaults() Limits {
	l.MaxBytes = defaults.Positive(l.MaxBytes, 512<<20)
	l.MaxUncompressed = defaults.Positive(l.MaxUncompressed, 2<<30)
	l.MaxRatio = defaults.Positive(l.MaxRatio, 100)
	l.MaxEntries = defaults.Positive(l.MaxEntries, 65535)
	l.APILevel = defaults.Positive(l.APILevel, 30)
	return l
}

// Info is what Inspect learned about an accepted APK.
type Info struct {
	Package     string   `json:"package"`
	VersionName string   `json:"version_name,omitempty"`
	VersionCode int64    `json:"version_code"`
	MinSDK      int      `json:"min_sdk,omitempty"`
	TargetSDK   int      `json:"target_sdk,omitempty"`
	ABIs        []string `json:"abis"`
	NativeLibs  int      `json:"native_libs"`
	Entries     int      `json:"entries"`
	Bytes       int64    `json:"bytes"`
	// Uncompressed is the inflated size of all entries, as measured.
	Uncompressed int64  `json:"uncompressed_bytes"`
	SHA256       string `json:"sha256"`
}

// RequiredABI is the only native code the headset runs.
const RequiredABI = "arm64-v8a"

var packageRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]*(\.[A-Za-z][A-Za-z0-9_]*)+$`)

// ValidatePackage checks the Android package-name grammar: two or more dot-separated
// segments, each a letter followed by letters, digits or underscores, 255 bytes at
// most. Anything else (spaces, quotes, ;, $, /, a leading dash) is refused, so a
// valid name is always safe as a single argv word and inside adb's remote shell.
func ValidatePackage(name string) error {
	if len(name) == 0 {
		return fmt.Errorf("%w: empty", ErrPackageName)
	}
	if len(name) > 255 {
		return fmt.Errorf("%w: %d bytes (at most 255)", ErrPackageName, len(name))
	}
	if !packageRE.MatchString(name) {
		return fmt.Errorf("%w: %q (want segments like com.example.game: letters, digits, _ and dots, each segment starting with a letter)", ErrPackageName, name)
	}
	return nil
}

func invalid(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, a...))
}

// Inspect validates the APK at path (which the caller has already confined) and
// returns what it declares. Every entry is inflated once, so a corrupt entry, a CRC
// mismatch or an entry that inflates past its declared size is caught here rather
// than on the headset.
func Inspect(path string, lim Limits) (Info, error) {
	f, err := os.Open(path)
	if err != nil {
		return Info{}, fmt.Errorf("open APK: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return Info{}, fmt.Errorf("stat APK: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return Info{}, invalid("not a regular file")
	}
	return InspectReader(f, fi.Size(), lim)
}

// InspectReader is Inspect on an open archive of the given size.
func InspectReader(r io.ReaderAt, size int64, lim Limits) (Info, error) {
	lim = lim.withDefaults()
	if size <= 0 {
		return Info{}, invalid("empty file")
	}
	if size > lim.MaxBytes {
		return Info{}, invalid("%d bytes is over the %d byte limit", size, lim.MaxBytes)
	}
	zr, err := zip.NewReader(r, size)
	if err != nil {
		return Info{}, invalid("not a zip archive: %v", err)
	}
	if len(zr.File) == 0 {
		return Info{}, invalid("the archive has no entries")
	}
	if len(zr.File) > lim.MaxEntries {
		return Info{}, invalid("%d entries (at most %d)", len(zr.File), lim.MaxEntries)
	}
	// Declared sizes first: a bomb is refused before a single byte is inflated.
	var declared uint64
	seen := make(map[string]bool, len(zr.File))
	for _, f := range zr.File {
		if err := checkName(f.Name); err != nil {
			return Info{}, err
		}
		if seen[f.Name] {
			// Two entries of one name let the installer and a checker see different
			// files (the Janus/master-key family of tricks).
			return Info{}, invalid("duplicate entry %q", f.Name)
		}
		seen[f.Name] = true
		declared += f.UncompressedSize64
		if declared > uint64(lim.MaxUncompressed) {
			return Info{}, invalid("declared uncompressed size is over the %d byte limit (zip bomb?)", lim.MaxUncompressed)
		}
	}
	if float64(declared)/float64(size) > lim.MaxRatio {
		return Info{}, invalid("declares %d uncompressed bytes in a %d byte archive, a ratio over %.0f (zip bomb?)", declared, size, lim.MaxRatio)
	}

	info := Info{Entries: len(zr.File), Bytes: size}
	abis := map[string]bool{}
	var manifest []byte
	for _, f := range zr.File {
		abi, isLib := nativeLib(f.Name)
		if isLib {
			abis[abi] = true
			info.NativeLibs++
		}
		isManifest := f.Name == "AndroidManifest.xml"
		if isManifest && f.UncompressedSize64 > 4<<20 {
			return Info{}, invalid("AndroidManifest.xml declares %d bytes (at most 4 MiB)", f.UncompressedSize64)
		}
		isArm := isLib && abi == RequiredABI
		n, content, err := inflate(f, isManifest, isArm, lim.MaxUncompressed-info.Uncompressed)
		if err != nil {
			return Info{}, err
		}
		info.Uncompressed += n
		switch {
		case isManifest:
			manifest = content
		case isArm:
			if err := checkELF(f.Name, content); err != nil {
				return Info{}, err
			}
		}
	}
	for a := range abis {
		info.ABIs = append(info.ABIs, a)
	}
	sort.Strings(info.ABIs)
	if len(abis) > 0 && !abis[RequiredABI] {
		return Info{}, invalid("native code for %s only; the headset runs %s", strings.Join(info.ABIs, ", "), RequiredABI)
	}
	if manifest == nil {
		return Info{}, invalid("no AndroidManifest.xml at the archive root")
	}
	m, err := DecodeManifest(manifest)
	if err != nil {
		return Info{}, invalid("AndroidManifest.xml: %v", err)
	}
	if err := ValidatePackage(m.Package); err != nil {
		return Info{}, invalid("manifest package: %v", err)
	}
	if m.MinSDK > lim.APILevel {
		return Info{}, invalid("minSdkVersion %d is above the headset's Android API %d", m.MinSDK, lim.APILevel)
	}
	info.Package, info.VersionName, info.VersionCode = m.Package, m.VersionName, m.VersionCode
	info.MinSDK, info.TargetSDK = m.MinSDK, m.TargetSDK
	sum, err := hashOf(r, size)
	if err != nil {
		return Info{}, err
	}
	info.SHA256 = sum
	return info, nil
}

func checkName(name string) error {
	switch {
	case name == "" || strings.ContainsRune(name, 0):
		return invalid("entry with an empty or NUL-containing name")
	case strings.HasPrefix(name, "/") || strings.Contains(name, "\\"):
		return invalid("entry %q has an absolute or backslash path", name)
	}
	for _, seg := range strings.Split(name, "/") {
		if seg == ".." {
			return invalid("entry %q climbs out of the archive", name)
		}
	}
	return nil
}

// nativeLib reports whether name is lib/<abi>/<file>.so and its ABI.
func nativeLib(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, "lib/")
	if !ok {
		return "", false
	}
	abi, file, ok := strings.Cut(rest, "/")
	if !ok || file == "" || !strings.HasSuffix(file, ".so") {
		return "", false
	}
	// An unknown ABI directory is still native code; it counts against the check
	// below like x86 does.
	return abi, true
}

// inflate reads one entry to the end, counting what it really inflates to. It keeps
// the whole content (manifest) or the first 20 bytes (an ELF header) when asked.
func inflate(f *zip.File, keepAll, keepHead bool, budget int64) (int64, []byte, error) {
	if f.Mode().IsDir() || strings.HasSuffix(f.Name, "/") {
		return 0, nil, nil
	}
	rc, err := f.Open()
	if err != nil {
		return 0, nil, invalid("entry %q: %v", f.Name, err)
	}
	defer rc.Close()
	limit := int64(f.UncompressedSize64)
	if limit > budget {
		limit = budget
	}
	// One byte more than allowed: reading it proves the entry lies about its size.
	lr := io.LimitReader(rc, limit+1)
	var keep []byte
	var n int64
	switch {
	case keepAll:
		keep, err = io.ReadAll(lr)
		n = int64(len(keep))
	case keepHead:
		head := make([]byte, 20)
		k, rerr := io.ReadFull(lr, head)
		keep = head[:k]
		n = int64(k)
		if rerr == nil {
			var m int64
			m, err = io.Copy(io.Discard, lr)
			n += m
		} else if !errors.Is(rerr, io.EOF) && !errors.Is(rerr, io.ErrUnexpectedEOF) {
			err = rerr
		}
	default:
		n, err = io.Copy(io.Discard, lr)
	}
	if n > limit {
		if limit < int64(f.UncompressedSize64) {
			return 0, nil, invalid("entry %q inflates past the %d byte total limit (zip bomb?)", f.Name, budget)
		}
		return 0, nil, invalid("entry %q inflates past its declared %d bytes (zip bomb?)", f.Name, f.UncompressedSize64)
	}
	if err != nil {
		// archive/zip itself stops an entry the moment it inflates past its declared
		// size, with ErrFormat (a CRC mismatch or a short entry is another error).
		if errors.Is(err, zip.ErrFormat) {
			return 0, nil, invalid("entry %q inflates past its declared %d bytes (zip bomb?)", f.Name, f.UncompressedSize64)
		}
		return 0, nil, invalid("entry %q is corrupt: %v", f.Name, err)
	}
	return n, keep, nil
}

const emAArch64 = 183

// checkELF makes sure a library filed under arm64-v8a really is 64-bit ARM code:
// a directory name is a claim, the ELF header is the fact.
func checkELF(name string, head []byte) error {
	if len(head) < 20 || string(head[:4]) != "\x7fELF" {
		return invalid("%s is not an ELF shared library", name)
	}
	var bo binary.ByteOrder = binary.LittleEndian
	if head[5] == 2 {
		bo = binary.BigEndian
	}
	if head[4] != 2 || bo.Uint16(head[18:20]) != emAArch64 {
		return invalid("%s is filed under %s but is not 64-bit ARM code (ELF machine %d)", path.Base(name), RequiredABI, bo.Uint16(head[18:20]))
	}
	return nil
}

func hashOf(r io.ReaderAt, size int64) (string, error) {
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(r, 0, size)); err != nil {
		return "", fmt.Errorf("hash APK: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
