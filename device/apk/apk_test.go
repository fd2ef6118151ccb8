package apk_test

import (
	"archive/zip"
	"bytes"
	"compress/flate"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/device/apk"
	"github.com/aetherium-engine/aetherium/device/apk/apktest"
)

func setup(t *testing.T, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "game.apk")
	require.NoError(t, os.WriteFile(p, b, 0o644))
	return p
}

func TestInspectAcceptsAGoodAPK(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		abis []string
	}{
		{"arm64 only", []string{"arm64-v8a"}},
		{"no native code", nil},
		{"arm64 beside x86_64", []string{"arm64-v8a", "x86_64"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			spec := apktest.GameAPK()
			spec.ABIs = tc.abis
			info, err := apk.Inspect(setup(t, apktest.APK(spec)), apk.Limits{})
			require.NoError(t, err)
			require.Equal(t, "com.aetherium.testgame", info.Package)
			require.Equal(t, "1.0", info.VersionName)
			require.EqualValues(t, 1, info.VersionCode)
			require.Equal(t, 29, info.MinSDK)
			require.Equal(t, 30, info.TargetSDK)
			require.Len(t, info.ABIs, len(tc.abis))
			require.Len(t, info.SHA256, 64)
			require.Positive(t, info.Uncompressed)
		})
	}
}

func TestInspectRefusesHostileArchives(t *testing.T) {
	t.Parallel()
	withSpec := func(f func(*apktest.APKSpec)) []byte {
		s := apktest.GameAPK()
		f(&s)
		return apktest.APK(s)
	}
	for _, tc := range []struct {
		name string
		data []byte
		lim  apk.Limits
		want string
	}{
		{"not a zip", []byte("#!/bin/sh\nreboot\n"), apk.Limits{}, "not a zip archive"},
		{"empty", nil, apk.Limits{}, "empty file"},
		{"png renamed to apk", append([]byte("\x89PNG\r\n\x1a\n"), make([]byte, 64)...), apk.Limits{}, "not a zip archive"},
		{"x86 only", withSpec(func(s *apktest.APKSpec) { s.ABIs = []string{"x86"} }), apk.Limits{}, "native code for x86 only"},
		{"x86 and x86_64", withSpec(func(s *apktest.APKSpec) { s.ABIs = []string{"x86", "x86_64"} }), apk.Limits{}, "x86, x86_64 only"},
		{"armv7 only", withSpec(func(s *apktest.APKSpec) { s.ABIs = []string{"armeabi-v7a"} }), apk.Limits{}, "armeabi-v7a only"},
		{"x86 code filed as arm64", withSpec(func(s *apktest.APKSpec) {
			s.ABIs = nil
			s.Extra = map[string][]byte{"lib/arm64-v8a/libgame.so": apktest.ELF("x86_64")}
		}), apk.Limits{}, "not 64-bit ARM code"},
		{"arm64 lib that is not ELF", withSpec(func(s *apktest.APKSpec) {
			s.ABIs = nil
			s.Extra = map[string][]byte{"lib/arm64-v8a/libgame.so": []byte("#!/bin/sh\n")}
		}), apk.Limits{}, "not an ELF"},
		{"no manifest", withSpec(func(s *apktest.APKSpec) { s.NoManifest = true }), apk.Limits{}, "no AndroidManifest.xml"},
		{"text manifest", withSpec(func(s *apktest.APKSpec) { s.TextManifest = true }), apk.Limits{}, "text XML"},
		{"garbage manifest", withSpec(func(s *apktest.APKSpec) {
			s.NoManifest = true
			s.Extra = map[string][]byte{"AndroidManifest.xml": {3, 0, 8, 0, 0xff, 0xff, 0, 0, 1, 2}}
		}), apk.Limits{}, "AndroidManifest.xml"},
		{"shell metacharacters in the manifest package", withSpec(func(s *apktest.APKSpec) { s.Package = "com.x;reboot" }), apk.Limits{}, "invalid Android package name"},
		{"command substitution in the manifest package", withSpec(func(s *apktest.APKSpec) { s.Package = "com.$(id).x" }), apk.Limits{}, "invalid Android package name"},
		{"needs a newer Android", withSpec(func(s *apktest.APKSpec) { s.MinSDK = 34 }), apk.Limits{}, "minSdkVersion 34 is above the headset's Android API 30"},
		{"entry climbs out", withSpec(func(s *apktest.APKSpec) { s.Extra = map[string][]byte{"assets/../../../etc/cron.d/x": []byte("x")} }), apk.Limits{}, "climbs out"},
		{"absolute entry", withSpec(func(s *apktest.APKSpec) { s.Extra = map[string][]byte{"/etc/passwd": []byte("x")} }), apk.Limits{}, "absolute"},
		{"over the size limit", apktest.APK(apktest.GameAPK()), apk.Limits{MaxBytes: 1000}, "over the 1000 byte limit"},
		{"duplicate manifest", duplicateManifest(t), apk.Limits{}, "duplicate entry"},
		{"zip bomb by ratio", bombByRatio(t), apk.Limits{}, "zip bomb"},
		{"zip bomb over the inflated limit", bombByRatio(t), apk.Limits{MaxUncompressed: 1 << 20, MaxRatio: 1e9}, "declared uncompressed size is over"},
		{"zip bomb lying about its size", bombByLie(t), apk.Limits{}, "inflates past its declared"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := apk.Inspect(setup(t, tc.data), tc.lim)
			require.ErrorIs(t, err, apk.ErrInvalid)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestInspectRefusesDirectoriesAndDevices(t *testing.T) {
	t.Parallel()
	_, err := apk.Inspect(t.TempDir(), apk.Limits{})
	require.ErrorIs(t, err, apk.ErrInvalid)
}

// duplicateManifest has two AndroidManifest.xml entries naming different packages.
func duplicateManifest(t *testing.T) []byte {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, pkg := range []string{"com.good.app", "com.evil.app"} {
		w, err := zw.Create("AndroidManifest.xml")
		require.NoError(t, err)
		_, err = w.Write(apktest.Manifest(pkg, "1", 1, 29))
		require.NoError(t, err)
	}
	require.NoError(t, zw.Close())
	return buf.Bytes()
}

// bombByRatio is an honest archive that inflates 16 MiB of zeros from a few KiB.
func bombByRatio(t *testing.T) []byte {
	s := apktest.GameAPK()
	s.Extra = map[string][]byte{"assets/zeros.bin": make([]byte, 16<<20)}
	return apktest.APK(s)
}

// bombByLie declares 1 KiB for an entry that inflates to 8 MiB.
func bombByLie(t *testing.T) []byte {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, err := zw.Create("AndroidManifest.xml")
	require.NoError(t, err)
	_, err = w.Write(apktest.Manifest("com.aetherium.bomb", "1", 1, 29))
	require.NoError(t, err)
	payload := make([]byte, 8<<20)
	var comp bytes.Buffer
	fw, err := flate.NewWriter(&comp, flate.BestCompression)
	require.NoError(t, err)
	_, err = fw.Write(payload)
	require.NoError(t, err)
	require.NoError(t, fw.Close())
	raw, err := zw.CreateRaw(&zip.FileHeader{
		Name: "assets/small.bin", Method: zip.Deflate,
		CRC32:              crc32.ChecksumIEEE(payload[:1024]),
		CompressedSize64:   uint64(comp.Len()),
		UncompressedSize64: 1024,
	})
	require.NoError(t, err)
	_, err = raw.Write(comp.Bytes())
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	return buf.Bytes()
}

func TestValidatePackage(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"com.example.game", "com.Example.Game_2", "a.b", "org.aetherium.vr.test_app"} {
		require.NoError(t, apk.ValidatePackage(ok), ok)
	}
	for _, bad := range []string{
		"", "com", "com.", ".com.x", "com..x", "1com.x", "com.1x", "com.x-y", "com.x y", "com.x;reboot",
		"com.x && reboot", "com.x|sh", "$(reboot).x", "com.`id`.x", "com.x\nreboot", "-p.com.x", "com/x.y",
		"com.x'y", `com.x"y`, "com.exämple.x", "com.x\x00y", "../../etc.x", "com.x*", strings.Repeat("a.", 128) + "b",
	} {
		require.ErrorIs(t, apk.ValidatePackage(bad), apk.ErrPackageName, "%q", bad)
	}
}

func TestDecodeManifestNeverPanicsOnGarbage(t *testing.T) {
	t.Parallel()
	good := apktest.Manifest("com.aetherium.fuzz", "2.1", 21, 30)
	m, err := apk.DecodeManifest(good)
	require.NoError(t, err)
	require.Equal(t, apk.Manifest{Package: "com.aetherium.fuzz", VersionName: "2.1", VersionCode: 21, MinSDK: 30, TargetSDK: 30}, m)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 5000; i++ {
		b := bytes.Clone(good)
		for k := 0; k < 1+rng.IntN(8); k++ {
			b[rng.IntN(len(b))] = byte(rng.UintN(256))
		}
		if rng.IntN(4) == 0 {
			b = b[:rng.IntN(len(b))]
		}
		_, _ = apk.DecodeManifest(b) // must return, not panic
	}
}

func FuzzDecodeManifest(f *testing.F) {
	f.Add(apktest.Manifest("com.aetherium.fuzz", "1", 1, 29))
	f.Add([]byte{3, 0, 8, 0, 8, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = apk.DecodeManifest(b)
	})
}
