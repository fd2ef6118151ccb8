package fingerprint

import "math/bits"

// hashBase is the rolling hash's multiplier (odd, so that the hash of a gram
// mod 2^64 keeps every byte's contribution); mix spreads the result over all bits.
const hashBase = 0x100000001b3

// mix is splitmix64's finalizer: the polynomial hash's low bits depend only on
// the low bits of the bytes, and winnowing and the table need all bits mixed.
func mix(h uint64) uint64 {
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}

// pow returns hashBase^k mod 2^64, what the byte leaving a k-gram window weighs.
func pow(k int) uint64 {
	p := uint64(1)
	for range k {
		p *= hashBase
	}
	return p
}

// table holds the fingerprints: an open-addressing hash table of 8-byte slots,
// each the gram's tag (its mixed hash's low 32 bits: winnowing keeps the
// minimum hash of each window, so the high bits of what it keeps lean to 0) and its position+1 in the
// Set's normalized text (0: empty) with commonBit, and a blocked Bloom filter over the tags
// that the outbound side asks first, so that most of an outbound text's grams
// never touch the (large, cache-missing) table. Only the tag is kept: a hit is
// verified against the text anyway, and the table and filter are rebuilt from
// the tags when they grow.
type table struct {
	slots  []uint64
	shift  uint // 32 - log2(len(slots)): the slot of a tag is tag >> shift
	n      int
	filter []uint64
	fshift uint
}

const minSlots = 1 << 10

func (t *table) init() {
	t.slots = make([]uint64, minSlots)
	t.shift = 32 - uint(bits.TrailingZeros(minSlots))
	t.filter = make([]uint64, minSlots/4)
	t.fshift = 32 - uint(bits.TrailingZeros(minSlots/4))
}

// filterBits are the filter's word and two bits for tag. The word comes from
// the tag multiplied by an odd constant (a bijection), so that it is not the
// table's slot bits again.
func (t *table) filterBits(tag uint32) (int, uint64) {
	w := (tag * 0x9e3779b1) >> t.fshift
	return int(w), 1<<(tag&63) | 1<<((tag>>6)&63)
}

// mayHold reports whether a gram with this tag may be in the table.
func (t *table) mayHold(tag uint32) bool {
	w, m := t.filterBits(tag)
	return t.filter[w]&m == m
}

// insert adds (tag, pos) unless same reports an entry with the tag to be the
// same gram (a gram is kept at its first position only).
func (t *table) insert(tag uint32, pos int, same func(pos int) bool) {
	mask := len(t.slots) - 1
	for i := int(tag >> t.shift); ; i = (i + 1) & mask {
		s := t.slots[i]
		if s == 0 {
			t.slots[i] = uint64(tag)<<32 | uint64(pos+1)
			break
		}
		if uint32(s>>32) == tag && same(slotPos(s)) {
			t.slots[i] |= commonBit
			return
		}
	}
	w, m := t.filterBits(tag)
	t.filter[w] |= m
	t.n++
	if t.n*4 > len(t.slots)*3 {
		t.grow()
	}
}

// grow doubles the table (load ≤ 3/4) and keeps the filter at 16 bits a slot
// (about 21 to 43 bits per fingerprint: a false hit rate near 1 %).
func (t *table) grow() {
	old := t.slots
	t.slots = make([]uint64, 2*len(old))
	t.shift--
	t.filter = make([]uint64, len(t.slots)/4)
	t.fshift = 32 - uint(bits.TrailingZeros(uint(len(t.filter))))
	mask := len(t.slots) - 1
	for _, s := range old {
		if s == 0 {
			continue
		}
		tag := uint32(s >> 32)
		i := int(tag >> t.shift)
		for t.slots[i] != 0 {
			i = (i + 1) & mask
		}
		t.slots[i] = s
		w, m := t.filterBits(tag)
		t.filter[w] |= m
	}
}

// commonBit marks a slot whose gram the private text holds more than once
// (boilerplate: an import block, a license header, a template).
const commonBit = 1 << 31

func slotPos(s uint64) int { return int(uint32(s)&^commonBit) - 1 }

// lookup calls f with the position of each entry tagged tag and whether its
// gram is common, until f returns false.
func (t *table) lookup(tag uint32, f func(pos int, common bool) bool) {
	mask := len(t.slots) - 1
	for i := int(tag >> t.shift); ; i = (i + 1) & mask {
		s := t.slots[i]
		if s == 0 {
			return
		}
		if uint32(s>>32) == tag && !f(slotPos(s), uint32(s)&commonBit != 0) {
			return
		}
	}
}

// bytes is the table's heap.
func (t *table) bytes() int { return 8*len(t.slots) + 8*len(t.filter) }
