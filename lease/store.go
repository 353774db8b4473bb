package lease

import (
	"encoding/binary"
	"hash/maphash"
	"math/bits"
)

// A resource with a million leases is mostly its leases: how they are laid
// out decides its memory and much of the garbage collector's work. The
// store keeps them without pointers, so that the collector never scans
// them: entries and tree nodes live in chunked arenas and refer to each
// other by index (int32, 1-based: 0 is none), the requesters' ids are
// bytes in one arena, and the index from id to entry is an open-addressing
// table of integers. (docs/performance.md, "A million lease holders":
// 690 B of RSS per lease at 1 000 000 clients, half of it the collector's
// headroom over pointer-rich objects.)

// arena is a growable array of T whose elements never move: it grows by
// chunks (the first small, each next twice as long up to 2^last elements),
// so that a pointer to an element stays valid and a small resource stays
// small. Element 0 exists and is never handed out (index 0 means none).
// The zero value, given first and last, is empty.
type arena[T any] struct {
	chunks      [][]T
	n           int32 // elements in use, element 0 included
	first, last uint8 // log2 of the first and the longest chunk's length
}

// locate returns the chunk and offset of element i of an arena whose
// chunks are 2^first, 2^first, 2^(first+1), ... 2^last elements long. A
// plain function, so that the accessors of each arena (entries.at,
// tree.node, tree.inn) inline it: generic methods are not inlined into
// their callers.
func locate(first, last uint8, i int32) (c, off uint) {
	u := uint(i)
	doubling := uint(1)<<last - uint(1)<<first // elements in the chunks shorter than the longest
	if u < doubling {
		c = uint(bits.Len(u>>first+1)) - 1
		return c, u - (uint(1)<<c-1)<<first
	}
	q := u - doubling
	return uint(last-first) + q>>last, q & (uint(1)<<last - 1)
}

// at returns element i (1 ≤ i < a.n).
func (a *arena[T]) at(i int32) *T {
	c, off := locate(a.first, a.last, i)
	return &a.chunks[c][off]
}

// add returns the index of a new zero element.
func (a *arena[T]) add() int32 {
	if a.n == 0 {
		a.n = 1 // element 0: none
		a.chunks = append(a.chunks, make([]T, 1<<a.first))
	}
	i := a.n
	if c, _ := locate(a.first, a.last, i); c == uint(len(a.chunks)) {
		size := 1 << min(uint(a.first)+c, uint(a.last))
		a.chunks = append(a.chunks, make([]T, size))
	}
	a.n++
	return i
}

// entries is a resource's entries: an arena and the slots freed in it.
type entries struct {
	a    arena[entry]
	free []int32
}

func newEntries() entries { return entries{a: arena[entry]{first: 4, last: 10}} }

// at returns entry i.
func (s *entries) at(i int32) *entry {
	c, off := locate(s.a.first, s.a.last, i)
	return &s.a.chunks[c][off]
}

// add returns the index of a new, zero entry (but for its gen).
func (s *entries) add() int32 {
	if n := len(s.free); n > 0 {
		i := s.free[n-1]
		s.free = s.free[:n-1]
		return i
	}
	return s.a.add()
}

// release frees entry i; its gen changes, so references to it held
// elsewhere (the expiry index) can tell it is gone.
func (s *entries) release(i int32) {
	e := s.at(i)
	*e = entry{gen: e.gen + 1}
	s.free = append(s.free, i)
}

// ids maps requester ids to their first entries: an open-addressing table
// (linear probing, at most 3/4 full) of (hash, entry) pairs, with the ids
// themselves in one byte arena, each a uvarint length and its bytes at the
// entry's idOff. Ids of dropped requesters stay in the arena until the
// dead bytes outnumber the live ones; the arena is then compacted (O(n),
// amortised O(1) per drop). The zero value is empty.
type ids struct {
	seed  maphash.Seed
	slots []uint64 // hash<<32 | entry index; 0: empty
	count int      // requesters with a record
	bytes []byte
	dead  int // bytes of dropped ids in bytes
}

// idOf returns the id stored at off.
func (t *ids) idOf(off int64) []byte {
	n, k := binary.Uvarint(t.bytes[off:])
	return t.bytes[off+int64(k) : off+int64(k)+int64(n)]
}

// hash returns id's hash (the table's seed is set by its first grow).
func (t *ids) hash(id string) uint32 { return uint32(maphash.String(t.seed, id)) }

// find returns the entry of requester id, or 0.
func (t *ids) find(s *entries, id string) int32 {
	if t.count == 0 {
		return 0
	}
	h := t.hash(id)
	mask := uint32(len(t.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		v := t.slots[i]
		if v == 0 {
			return 0
		}
		if uint32(v>>32) == h {
			ei := int32(uint32(v))
			if string(t.idOf(s.at(ei).idOff)) == id {
				return ei
			}
		}
	}
}

// add records id for entry ei (which has no id yet) and sets its idOff.
func (t *ids) add(s *entries, id string, ei int32) {
	if (t.count+1)*4 > len(t.slots)*3 {
		t.grow()
	}
	h := t.hash(id)
	mask := uint32(len(t.slots) - 1)
	i := h & mask
	for t.slots[i] != 0 {
		i = (i + 1) & mask
	}
	t.slots[i] = uint64(h)<<32 | uint64(uint32(ei))
	t.count++
	s.at(ei).idOff = int64(len(t.bytes))
	t.bytes = binary.AppendUvarint(t.bytes, uint64(len(id)))
	t.bytes = append(t.bytes, id...)
}

// grow doubles the table (16 slots at first).
func (t *ids) grow() {
	old := t.slots
	t.slots = make([]uint64, max(16, 2*len(old)))
	if old == nil {
		t.seed = maphash.MakeSeed()
	}
	mask := uint32(len(t.slots) - 1)
	for _, v := range old {
		if v == 0 {
			continue
		}
		i := uint32(v>>32) & mask
		for t.slots[i] != 0 {
			i = (i + 1) & mask
		}
		t.slots[i] = v
	}
}

// remove forgets entry ei's id (backward-shift deletion: no tombstones),
// compacting the byte arena when it is mostly dead.
func (t *ids) remove(s *entries, ei int32) {
	off := s.at(ei).idOff
	n, k := binary.Uvarint(t.bytes[off:])
	id := t.bytes[off+int64(k) : off+int64(k)+int64(n)]
	h := uint32(maphash.Bytes(t.seed, id))
	mask := uint32(len(t.slots) - 1)
	i := h & mask
	for t.slots[i] != uint64(h)<<32|uint64(uint32(ei)) {
		i = (i + 1) & mask
	}
	for j := i; ; {
		j = (j + 1) & mask
		v := t.slots[j]
		if v == 0 {
			break
		}
		// Move v into the hole at i unless its home lies cyclically in (i, j].
		home := uint32(v>>32) & mask
		if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			t.slots[i] = v
			i = j
		}
	}
	t.slots[i] = 0
	t.count--
	t.dead += k + int(n)
	if t.dead > 4096 && 2*t.dead > len(t.bytes) {
		t.compact(s)
	}
}

// compact copies the live ids to a new arena.
func (t *ids) compact(s *entries) {
	live := make([]byte, 0, len(t.bytes)-t.dead)
	for _, v := range t.slots {
		if v == 0 {
			continue
		}
		e := s.at(int32(uint32(v)))
		id := t.idOf(e.idOff)
		e.idOff = int64(len(live))
		live = binary.AppendUvarint(live, uint64(len(id)))
		live = append(live, id...)
	}
	t.bytes, t.dead = live, 0
}
