package lease

// expiries indexes a resource's leases by expiry second. Lease expiries
// are whole seconds (see Resource.expiryAt) and a resource's leases share
// few distinct ones (about one per second of lease length), so filing a
// lease under a new expiry appends to a short list and touches no other
// lease; cleanup drops whole seconds at once.
//
// A lease that moves to a later second, or is released, is not taken out
// of its old list: the list is checked against each lease's current expiry
// when its second passes. The stale references are bounded by the
// requests in one lease length.
//
// Each filing is a reference to the entry (its index and gen, which
// changes when the entry is dropped, so that a stale reference to a slot
// since reused is told apart).
//
// The zero value is empty.
type expiries struct {
	buckets map[int64]*[]uint64 // entry references (see ref), by second
	seconds secondHeap          // the keys of buckets, earliest first
	free    []*[]uint64         // emptied lists, reused
}

// ref returns the reference to entry ei, whose gen is gen.
func ref(ei int32, gen uint32) uint64 { return uint64(gen)<<32 | uint64(uint32(ei)) }

// set files entry ei (e) under expiry second sec.
func (x *expiries) set(ei int32, e *entry, sec int64) {
	if e.filed && e.expSec == sec {
		return
	}
	e.expSec, e.filed = sec, true
	if x.buckets == nil {
		x.buckets = make(map[int64]*[]uint64)
	}
	b := x.buckets[sec]
	if b == nil {
		if n := len(x.free); n > 0 {
			b, x.free = x.free[n-1], x.free[:n-1]
		} else {
			b = new([]uint64)
		}
		x.buckets[sec] = b
		x.seconds.push(sec)
	}
	*b = append(*b, ref(ei, e.gen))
}

// remove unfiles e.
func (x *expiries) remove(e *entry) { e.filed = false }

// popExpired calls drop for every lease filed at a second ≤ now (Unix
// seconds). drop must call remove (directly or not) for the entry.
func (x *expiries) popExpired(ents *entries, now int64, drop func(int32)) {
	for len(x.seconds) > 0 && x.seconds[0] <= now {
		sec := x.seconds.pop()
		b := x.buckets[sec]
		delete(x.buckets, sec)
		for _, r := range *b {
			ei := int32(uint32(r))
			if e := ents.at(ei); e.gen == uint32(r>>32) && e.filed && e.expSec == sec {
				drop(ei)
			}
		}
		*b = (*b)[:0]
		x.free = append(x.free, b)
	}
}

// secondHeap is a min-heap of Unix seconds (not container/heap, which
// would box every second in an interface and allocate).
type secondHeap []int64

func (h *secondHeap) push(sec int64) {
	*h = append(*h, sec)
	s := *h
	for i := len(s) - 1; i > 0; {
		parent := (i - 1) / 2
		if s[parent] <= s[i] {
			break
		}
		s[parent], s[i] = s[i], s[parent]
		i = parent
	}
}

func (h *secondHeap) pop() int64 {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s = s[:last]
	for i := 0; ; {
		small, l, r := i, 2*i+1, 2*i+2
		if l < len(s) && s[l] < s[small] {
			small = l
		}
		if r < len(s) && s[r] < s[small] {
			small = r
		}
		if small == i {
			break
		}
		s[i], s[small] = s[small], s[i]
		i = small
	}
	*h = s
	return top
}
