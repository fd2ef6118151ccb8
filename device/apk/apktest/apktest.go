// Package apktest builds APKs for tests: a real compiled (binary XML) manifest and
// ELF-headed native libraries per ABI, so the validator and the simulator's package
// manager see what an aapt2/gradle build would produce.
package apktest

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"unicode/utf16"
)

// APKSpec describes a test APK.
type APKSpec struct {
	Package     string
	VersionName string
	VersionCode int64
	MinSDK      int
	// ABIs get one lib/<abi>/libgame.so each, with an ELF header of that ABI.
	ABIs []string
	// NoManifest leaves AndroidManifest.xml out; TextManifest stores it as text XML.
	NoManifest   bool
	TextManifest bool
	// Extra entries (name → content).
	Extra map[string][]byte
}

// GameAPK is a well-formed arm64 APK for com.aetherium.testgame 1.0 (code 1).
func GameAPK() APKSpec {
	return APKSpec{Package: "com.aetherium.testgame", VersionName: "1.0", VersionCode: 1, MinSDK: 29, ABIs: []string{"arm64-v8a"}}
}

// APK returns the archive bytes for s.
func APK(s APKSpec) []byte {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	add := func(name string, b []byte) {
		w, err := zw.Create(name)
		if err != nil {
			panic(err)
		}
		if _, err := w.Write(b); err != nil {
			panic(err)
		}
	}
	switch {
	case s.NoManifest:
	case s.TextManifest:
		add("AndroidManifest.xml", []byte(`<?xml version="1.0" encoding="utf-8"?><manifest package="`+s.Package+`"/>`))
	default:
		add("AndroidManifest.xml", Manifest(s.Package, s.VersionName, s.VersionCode, s.MinSDK))
	}
	add("classes.dex", append([]byte("dex\n035\x00"), make([]byte, 512)...))
	add("resources.arsc", bytes.Repeat([]byte{2, 0, 12, 0}, 64))
	add("assets/level1.dat", bytes.Repeat([]byte("terrain "), 256))
	for _, abi := range s.ABIs {
		add("lib/"+abi+"/libgame.so", ELF(abi))
	}
	for name, b := range s.Extra {
		add(name, b)
	}
	if err := zw.Close(); err != nil {
		panic(err)
	}
	return buf.Bytes()
}

// ELF returns a shared-library header for abi, padded to 4 KiB.
func ELF(abi string) []byte {
	class, machine := byte(2), uint16(183) // arm64-v8a: ELFCLASS64, EM_AARCH64
	switch abi {
	case "x86":
		class, machine = 1, 3
	case "x86_64":
		class, machine = 2, 62
	case "armeabi-v7a", "armeabi":
		class, machine = 1, 40
	}
	b := make([]byte, 4096)
	copy(b, "\x7fELF")
	b[4], b[5], b[6] = class, 1, 1
	binary.LittleEndian.PutUint16(b[16:], 3) // ET_DYN
	binary.LittleEndian.PutUint16(b[18:], machine)
	return b
}

// Manifest encodes a compiled (binary XML) AndroidManifest.xml the way aapt2 lays
// it out: string pool (UTF-16), resource map, namespace, <manifest> with package,
// versionCode and versionName, and <uses-sdk> with min and target SDK.
func Manifest(pkg, versionName string, versionCode int64, minSDK int) []byte {
	strs := []string{"versionCode", "versionName", "minSdkVersion", "targetSdkVersion",
		"manifest", "package", "uses-sdk", pkg, versionName, "android", "http://schemas.android.com/apk/res/android"}
	const (
		sVersionCode = iota
		sVersionName
		sMinSDK
		sTargetSDK
		sManifest
		sPackage
		sUsesSDK
		sPkg
		sVName
		sPrefix
		sURI
	)
	le := binary.LittleEndian
	u16 := func(b []byte, v uint16) []byte { return le.AppendUint16(b, v) }
	u32 := func(b []byte, v uint32) []byte { return le.AppendUint32(b, v) }
	none := uint32(0xffffffff)

	// String pool.
	var data []byte
	var offs []uint32
	for _, s := range strs {
		offs = append(offs, uint32(len(data)))
		units := utf16.Encode([]rune(s))
		data = u16(data, uint16(len(units)))
		for _, u := range units {
			data = u16(data, u)
		}
		data = u16(data, 0)
	}
	for len(data)%4 != 0 {
		data = append(data, 0)
	}
	hdr := 28
	start := hdr + 4*len(strs)
	pool := u16(nil, 0x0001)
	pool = u16(pool, uint16(hdr))
	pool = u32(pool, uint32(start+len(data)))
	pool = u32(pool, uint32(len(strs)))
	pool = u32(pool, 0)
	pool = u32(pool, 0) // flags: UTF-16
	pool = u32(pool, uint32(start))
	pool = u32(pool, 0)
	for _, o := range offs {
		pool = u32(pool, o)
	}
	pool = append(pool, data...)

	// Resource map: the android: attribute names' ids, by string index.
	ids := []uint32{0x0101021b, 0x0101021c, 0x0101020c, 0x01010270}
	rmap := u16(nil, 0x0180)
	rmap = u16(rmap, 8)
	rmap = u32(rmap, uint32(8+4*len(ids)))
	for _, id := range ids {
		rmap = u32(rmap, id)
	}

	node := func(typ uint16, size int) []byte {
		b := u16(nil, typ)
		b = u16(b, 16)
		b = u32(b, uint32(size))
		b = u32(b, 1)       // line
		return u32(b, none) // comment
	}
	ns := func(typ uint16) []byte {
		b := node(typ, 24)
		b = u32(b, sPrefix)
		return u32(b, sURI)
	}
	type attr struct {
		ns, name, raw uint32
		typ           byte
		data          uint32
	}
	elem := func(name uint32, as []attr) []byte {
		b := node(0x0102, 16+20+20*len(as))
		b = u32(b, none)
		b = u32(b, name)
		b = u16(b, 20)
		b = u16(b, 20)
		b = u16(b, uint16(len(as)))
		b = u16(b, 0)
		b = u16(b, 0)
		b = u16(b, 0)
		for _, a := range as {
			b = u32(b, a.ns)
			b = u32(b, a.name)
			b = u32(b, a.raw)
			b = u16(b, 8)
			b = append(b, 0, a.typ)
			b = u32(b, a.data)
		}
		return b
	}
	end := func(name uint32) []byte {
		b := node(0x0103, 24)
		b = u32(b, none)
		return u32(b, name)
	}
	const tString, tInt = 0x03, 0x10
	body := append([]byte{}, pool...)
	body = append(body, rmap...)
	body = append(body, ns(0x0100)...)
	body = append(body, elem(sManifest, []attr{
		{ns: sURI, name: sVersionCode, raw: none, typ: tInt, data: uint32(versionCode)},
		{ns: sURI, name: sVersionName, raw: sVName, typ: tString, data: sVName},
		{ns: none, name: sPackage, raw: sPkg, typ: tString, data: sPkg},
	})...)
	body = append(body, elem(sUsesSDK, []attr{
		{ns: sURI, name: sMinSDK, raw: none, typ: tInt, data: uint32(minSDK)},
		{ns: sURI, name: sTargetSDK, raw: none, typ: tInt, data: 30},
	})...)
	body = append(body, end(sUsesSDK)...)
	body = append(body, end(sManifest)...)
	body = append(body, ns(0x0101)...)

	out := u16(nil, 0x0003)
	out = u16(out, 8)
	out = u32(out, uint32(8+len(body)))
	return append(out, body...)
}
