package limits

import "unsafe"

// table is an open-addressing hash table of bucket records (linear
// probing, backward-shift deletion, no tombstones), used by one shard of a
// MemoryStore under the shard's lock. Its slots hold the record itself and,
// for domains of up to inlineDomain bytes, the domain's bytes, so that a
// lookup in a large table touches one slot (one or two cache lines) and no
// other memory: with a million buckets every lookup misses the cache, and
// each further dependent miss (a Go map's group, then the key's bytes, then
// the record) costs about as much as the whole decision.
//
// The zero table is empty.
type table struct {
	slots []slot
	n     int // occupied slots
}

// inlineDomain is the longest domain kept inside a slot.
const inlineDomain = 22

// slot is one bucket: 104 bytes.
type slot struct {
	hash uint64 // 0: empty; else the key's hash with the low bit set
	res  string // the resource (the Limit's copy of the name)
	long string // the domain, when longer than inlineDomain
	dom  [inlineDomain]byte
	dlen uint8 // the domain's length when inline
	big  bool  // the domain is in long
	rec  memBucket
}

// memBucket is one bucket's record.
type memBucket struct {
	state      State      // TokenBucket
	tiers      *TierState // BurstTiers (nil otherwise)
	last       int64      // Unix ns of the last request
	limit      *Limit
	grants     uint32 // saturating
	rejections uint32 // saturating
}

// home returns the first slot to probe for hash h in a table of n slots.
func home(h uint64, n int) int { return int((h >> 32) * uint64(n) >> 32) }

// domain returns the slot's domain (allocating a copy when inline).
func (s *slot) domain() string {
	if s.big {
		return s.long
	}
	return string(s.dom[:s.dlen])
}

// matches reports whether the slot holds key (resource, domain) with hash
// h.
func (s *slot) matches(h uint64, resource, domain string) bool {
	if s.hash != h || s.res != resource {
		return false
	}
	if s.big {
		return s.long == domain
	}
	return int(s.dlen) == len(domain) && string(s.dom[:s.dlen]) == domain
}

// find returns the record of the key, or nil.
func (t *table) find(h uint64, resource, domain string) *memBucket {
	n := len(t.slots)
	if n == 0 {
		return nil
	}
	for i := home(h, n); ; {
		s := &t.slots[i]
		if s.hash == 0 {
			return nil
		}
		if s.matches(h, resource, domain) {
			return &s.rec
		}
		if i++; i == n {
			i = 0
		}
	}
}

// insert adds a key that is not in the table and returns its record. The
// domain is copied; resource is kept as given.
func (t *table) insert(h uint64, resource, domain string) *memBucket {
	if (t.n+1)*8 > len(t.slots)*7 {
		t.grow()
	}
	n := len(t.slots)
	i := home(h, n)
	for t.slots[i].hash != 0 {
		if i++; i == n {
			i = 0
		}
	}
	s := &t.slots[i]
	s.hash, s.res = h, resource
	if len(domain) <= inlineDomain {
		s.dlen = uint8(copy(s.dom[:], domain))
	} else {
		s.big, s.long = true, string(append([]byte(nil), domain...))
	}
	t.n++
	return &s.rec
}

// grow enlarges the table by half (at least to 8 slots) and re-inserts
// every slot. Growing by half rather than doubling keeps a large table
// between 58 % and 88 % full.
func (t *table) grow() {
	old := t.slots
	n := max(8, len(old)+len(old)/2)
	t.slots = make([]slot, n)
	for i := range old {
		if old[i].hash == 0 {
			continue
		}
		j := home(old[i].hash, n)
		for t.slots[j].hash != 0 {
			if j++; j == n {
				j = 0
			}
		}
		t.slots[j] = old[i]
	}
}

// removeAt empties slot i and shifts back the slots after it that belong
// at or before it, so that no probe sequence is broken. A walk over the
// slots in increasing order that removes at i must look at i again: a
// later slot may have moved there.
func (t *table) removeAt(i int) {
	n := len(t.slots)
	for j := i; ; {
		if j++; j == n {
			j = 0
		}
		s := &t.slots[j]
		if s.hash == 0 {
			break
		}
		// s may move to the hole at i when i lies on its probe path,
		// cyclically in [home(s), j).
		h := home(s.hash, n)
		var onPath bool
		if h <= j {
			onPath = h <= i && i < j
		} else {
			onPath = i >= h || i < j
		}
		if onPath {
			t.slots[i] = *s
			i = j
		}
	}
	t.slots[i] = slot{}
	t.n--
}

// sizeofSlot is the size of one slot, for the documentation's arithmetic.
const sizeofSlot = unsafe.Sizeof(slot{})
