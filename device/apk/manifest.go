package apk

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf16"
)

// Manifest is the part of AndroidManifest.xml the headset tools need.
type Manifest struct {
	Package     string
	VersionName string
	VersionCode int64
	MinSDK      int
	TargetSDK   int
}

// Chunk types of Android's compiled ("binary") XML, from
// frameworks/base/libs/androidfw/include/androidfw/ResourceTypes.h.
const (
	chunkStringPool  = 0x0001
	chunkXML         = 0x0003
	chunkStartElem   = 0x0102
	chunkResourceMap = 0x0180

	typeString = 0x03
	typeIntDec = 0x10
	typeIntHex = 0x11

	utf8Flag = 0x100
)

// Resource ids of the android: attributes, for manifests whose attribute-name
// strings were stripped and only the resource map names them.
const (
	attrVersionCode = 0x0101021b
	attrVersionName = 0x0101021c
	attrMinSDK      = 0x0101020c
	attrTargetSDK   = 0x01010270
)

var errShort = errors.New("truncated binary XML")

// DecodeManifest reads a compiled AndroidManifest.xml (the only form an APK carries;
// a text manifest means the archive was not built by aapt2). Every offset is bounds
// checked: the input is hostile until proven otherwise.
func DecodeManifest(b []byte) (Manifest, error) {
	var m Manifest
	if len(b) > 0 && b[0] == '<' {
		return m, errors.New("text XML; an APK carries the compiled (binary) manifest that aapt2 produces")
	}
	if len(b) < 8 || le16(b, 0) != chunkXML || le16(b, 2) != 8 {
		return m, errors.New("not Android binary XML")
	}
	end := int(le32(b, 4))
	if end > len(b) || end < 8 {
		return m, errShort
	}
	var pool *stringPool
	var resMap []uint32
	sawManifest := false
	for off := 8; off+8 <= end; {
		typ, hsize, size := le16(b, off), int(le16(b, off+2)), int(le32(b, off+4))
		if hsize < 8 || size < hsize || off+size > end {
			return m, fmt.Errorf("chunk at %d has a bad size", off)
		}
		chunk := b[off : off+size]
		switch typ {
		case chunkStringPool:
			p, err := parsePool(chunk, hsize)
			if err != nil {
				return m, err
			}
			pool = p
		case chunkResourceMap:
			for i := hsize; i+4 <= size; i += 4 {
				resMap = append(resMap, le32(chunk, i))
			}
		case chunkStartElem:
			if pool == nil {
				return m, errors.New("element before the string pool")
			}
			name, attrs, err := parseElement(chunk, pool, resMap)
			if err != nil {
				return m, err
			}
			switch name {
			case "manifest":
				if !sawManifest {
					sawManifest = true
					m.Package = attrs.str("package", 0)
					m.VersionName = attrs.str("versionName", attrVersionName)
					m.VersionCode = attrs.num("versionCode", attrVersionCode)
				}
			case "uses-sdk":
				m.MinSDK = int(attrs.num("minSdkVersion", attrMinSDK))
				m.TargetSDK = int(attrs.num("targetSdkVersion", attrTargetSDK))
			}
		}
		off += size
	}
	if !sawManifest {
		return m, errors.New("no <manifest> element")
	}
	if m.Package == "" {
		return m, errors.New("<manifest> has no package attribute")
	}
	return m, nil
}

type attr struct {
	name   string
	resID  uint32
	raw    string
	typ    byte
	data   uint32
	hasRaw bool
}

type attrs []attr

func (as attrs) find(name string, resID uint32) (attr, bool) {
	for _, a := range as {
		if a.name == name || (resID != 0 && a.resID == resID) {
			return a, true
		}
	}
	return attr{}, false
}

func (as attrs) str(name string, resID uint32) string {
	a, ok := as.find(name, resID)
	if !ok {
		return ""
	}
	if a.hasRaw {
		return a.raw
	}
	if a.typ == typeIntDec || a.typ == typeIntHex {
		return strconv.FormatInt(int64(int32(a.data)), 10)
	}
	return ""
}

func (as attrs) num(name string, resID uint32) int64 {
	a, ok := as.find(name, resID)
	if !ok {
		return 0
	}
	switch a.typ {
	case typeIntDec, typeIntHex:
		return int64(int32(a.data))
	}
	// Codenames ("S", "Tiramisu") and odd string values: numeric or nothing.
	n, _ := strconv.ParseInt(a.raw, 10, 64)
	return n
}

func parseElement(c []byte, pool *stringPool, resMap []uint32) (string, attrs, error) {
	// header(8) line(4) comment(4) | ns(4) name(4) attrStart(2) attrSize(2) count(2) ...
	if len(c) < 36 {
		return "", nil, errShort
	}
	name := pool.get(le32(c, 20))
	start, asize, count := int(le16(c, 24)), int(le16(c, 26)), int(le16(c, 28))
	if asize < 20 {
		return "", nil, fmt.Errorf("element %q: attribute size %d", name, asize)
	}
	base := 16 + start
	if base+count*asize > len(c) {
		return "", nil, fmt.Errorf("element %q: attributes overrun the chunk", name)
	}
	out := make(attrs, 0, count)
	for i := 0; i < count; i++ {
		o := base + i*asize
		idx := le32(c, o+4)
		a := attr{name: pool.get(idx), typ: c[o+15], data: le32(c, o+16)}
		if int(idx) < len(resMap) {
			a.resID = resMap[idx]
		}
		if raw := le32(c, o+8); raw != 0xffffffff {
			a.raw, a.hasRaw = pool.get(raw), true
		} else if a.typ == typeString {
			a.raw, a.hasRaw = pool.get(a.data), true
		}
		out = append(out, a)
	}
	return name, out, nil
}

type stringPool struct {
	data    []byte // string data area
	offsets []uint32
	utf8    bool
}

func parsePool(c []byte, hsize int) (*stringPool, error) {
	if hsize < 28 || len(c) < 28 {
		return nil, errShort
	}
	count, flags, strStart := int(le32(c, 8)), le32(c, 16), int(le32(c, 20))
	if count < 0 || count > (len(c)-hsize)/4 {
		return nil, fmt.Errorf("string pool claims %d strings", count)
	}
	if strStart < hsize+count*4 || strStart > len(c) {
		return nil, errors.New("string pool data offset out of range")
	}
	p := &stringPool{data: c[strStart:], utf8: flags&utf8Flag != 0, offsets: make([]uint32, count)}
	for i := range count {
		p.offsets[i] = le32(c, hsize+4*i)
	}
	return p, nil
}

// get returns string i, or "" for anything out of range or malformed.
func (p *stringPool) get(i uint32) string {
	if int64(i) >= int64(len(p.offsets)) {
		return ""
	}
	o := int(p.offsets[i])
	d := p.data
	if o >= len(d) {
		return ""
	}
	if p.utf8 {
		_, o = utf8Len(d, o) // UTF-16 length, unused
		n, o2 := utf8Len(d, o)
		if o2 < 0 || o2+n > len(d) {
			return ""
		}
		return string(d[o2 : o2+n])
	}
	if o+2 > len(d) {
		return ""
	}
	n := int(le16(d, o))
	o += 2
	if n&0x8000 != 0 {
		if o+2 > len(d) {
			return ""
		}
		n = (n&0x7fff)<<16 | int(le16(d, o))
		o += 2
	}
	if n > (len(d)-o)/2 {
		return ""
	}
	u := make([]uint16, n)
	for k := range n {
		u[k] = le16(d, o+2*k)
	}
	return string(utf16.Decode(u))
}

func utf8Len(d []byte, o int) (int, int) {
	if o < 0 || o >= len(d) {
		return 0, -1
	}
	n := int(d[o])
	o++
	if n&0x80 != 0 {
		if o >= len(d) {
			return 0, -1
		}
		n = (n&0x7f)<<8 | int(d[o])
		o++
	}
	return n, o
}

func le16(b []byte, o int) uint16 { return binary.LittleEndian.Uint16(b[o:]) }
func le32(b []byte, o int) uint32 { return binary.LittleEndian.Uint32(b[o:]) }
