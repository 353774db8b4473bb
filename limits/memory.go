package limits

import (
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
)

// memShards is the number of lock shards of a MemoryStore (a power of 2).
const memShards = 256

// MemoryStore is a Store in this process's memory. Buckets are spread over
// 256 shards by a hash of the domain (of the resource for default
// buckets), each with its own mutex and map: a decision locks one shard
// for the duration of one Step, and two decisions on different shards
// never contend. A lookup hashes the request's strings as they are (the
// map key is the pair of strings, not a concatenation) and does not
// allocate; creating a bucket allocates its record and a copy of the
// domain.
//
// Memory: about 150 bytes per bucket plus the domain's length
// (BenchmarkMemoryPerBucket).
//
// The zero MemoryStore is not usable: use NewMemoryStore.
type MemoryStore struct {
	seed   maphash.Seed
	shards [memShards]memShard
	n      atomic.Int64

	dynMu sync.RWMutex
	dyn   map[string]*atomic.Int64 // dynamic buckets per resource
}

type memShard struct {
	mu  sync.Mutex
	gen uint64 // the configuration generation last applied to the shard
	m   map[Key]*memBucket
	_   [40]byte // a cache line per shard
}

// memBucket is one bucket's record: 40 bytes.
type memBucket struct {
	state      State
	last       int64 // Unix ns of the last request
	grants     uint64
	rejections uint64
	limit      *Limit
}

// NewMemoryStore returns an empty store.
func NewMemoryStore() *MemoryStore {
	s := &MemoryStore{seed: maphash.MakeSeed(), dyn: map[string]*atomic.Int64{}}
	for i := range s.shards {
		s.shards[i].m = map[Key]*memBucket{}
	}
	return s
}

func (s *MemoryStore) shard(k Key) *memShard {
	h := k.Domain
	if h == "" {
		h = k.Resource
	}
	return &s.shards[maphash.String(s.seed, h)&(memShards-1)]
}

// counter returns the dynamic-bucket counter of resource, creating it.
func (s *MemoryStore) counter(resource string) *atomic.Int64 {
	s.dynMu.RLock()
	c := s.dyn[resource]
	s.dynMu.RUnlock()
	if c != nil {
		return c
	}
	s.dynMu.Lock()
	defer s.dynMu.Unlock()
	if c = s.dyn[resource]; c == nil {
		c = new(atomic.Int64)
		s.dyn[resource] = c
	}
	return c
}

// Take implements Store.
func (s *MemoryStore) Take(now int64, k Key, l *Limit, a Ask) (Outcome, error) {
	sh := s.shard(k)
	sh.mu.Lock()
	if l.Gen < sh.gen {
		sh.mu.Unlock()
		return Outcome{}, ErrStaleConfig
	}
	b := sh.m[k]
	if b == nil {
		st, r := Step(State{}, l.Params, now, a)
		if r.Granted == 0 {
			sh.mu.Unlock()
			return Outcome{Result: r}, nil
		}
		if l.Dynamic(k.Domain) {
			if !s.reserve(l.Resource, l.MaxDynamic) {
				sh.mu.Unlock()
				return Outcome{TooManyBuckets: true}, nil
			}
		}
		// The key keeps the configuration's copy of the resource name and
		// a copy of the domain: never the caller's memory.
		nk := Key{Resource: l.Resource, Domain: strings.Clone(k.Domain)}
		sh.m[nk] = &memBucket{state: st, last: now, grants: 1, limit: l}
		sh.mu.Unlock()
		s.n.Add(1)
		return Outcome{Result: r, Created: true}, nil
	}
	if b.limit != l {
		if b.limit.Gen > l.Gen {
			sh.mu.Unlock()
			return Outcome{}, ErrStaleConfig
		}
		s.relimit(k, b, l, now)
	}
	st, r := Step(b.state, l.Params, now, a)
	b.last = now
	if r.Granted > 0 {
		b.state = st
		b.grants++
	} else {
		b.rejections++
	}
	sh.mu.Unlock()
	return Outcome{Result: r}, nil
}

// reserve counts one more dynamic bucket of resource unless it already
// has max > 0.
func (s *MemoryStore) reserve(resource string, max int64) bool {
	c := s.counter(resource)
	for {
		n := c.Load()
		if max > 0 && n >= max {
			return false
		}
		if c.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// relimit moves bucket b (key k) to Limit l at now: rescales its state and
// moves its dynamic count. The caller holds the shard's lock.
func (s *MemoryStore) relimit(k Key, b *memBucket, l *Limit, now int64) {
	b.state = Rescale(b.state, b.limit.Params, l.Params, now)
	was, is := b.limit.Dynamic(k.Domain), l.Dynamic(k.Domain)
	switch {
	case was && !is:
		s.counter(k.Resource).Add(-1)
	case !was && is:
		s.counter(k.Resource).Add(1)
	}
	b.limit = l
}

// remove deletes bucket b (key k) from sh, whose lock the caller holds.
func (s *MemoryStore) remove(sh *memShard, k Key, b *memBucket) {
	delete(sh.m, k)
	s.n.Add(-1)
	if b.limit.Dynamic(k.Domain) {
		s.counter(k.Resource).Add(-1)
	}
}

// Reap implements Store.
func (s *MemoryStore) Reap(now int64, removed func(Removed)) (int, error) {
	total := 0
	var gone []Removed
	for i := range s.shards {
		sh := &s.shards[i]
		gone = gone[:0]
		sh.mu.Lock()
		for k, b := range sh.m {
			idle := b.limit.Bucket.MaxIdle
			if idle > 0 && now-b.last >= int64(idle) && Full(b.state, b.limit.Params, now) {
				s.remove(sh, k, b)
				gone = append(gone, Removed{Key: k, Limit: b.limit, Reason: RemovedIdle})
			}
		}
		sh.mu.Unlock()
		total += len(gone)
		if removed != nil {
			for _, r := range gone {
				removed(r)
			}
		}
	}
	return total, nil
}

// Reconfigure implements Store.
func (s *MemoryStore) Reconfigure(now int64, gen uint64, resolve func(Key) *Limit, removed func(Removed)) error {
	var gone []Removed
	for i := range s.shards {
		sh := &s.shards[i]
		gone = gone[:0]
		sh.mu.Lock()
		sh.gen = gen
		for k, b := range sh.m {
			l := resolve(k)
			switch {
			case l == nil:
				s.remove(sh, k, b)
				gone = append(gone, Removed{Key: k, Limit: b.limit, Reason: RemovedReconfigured})
			case l != b.limit && l.Gen >= b.limit.Gen:
				s.relimit(k, b, l, now)
			}
		}
		sh.mu.Unlock()
		if removed != nil {
			for _, r := range gone {
				removed(r)
			}
		}
	}
	return nil
}

// Walk implements Store. It copies one shard at a time under its lock and
// calls fn after releasing it.
func (s *MemoryStore) Walk(fn func(Snapshot) bool) error {
	var buf []Snapshot
	for i := range s.shards {
		sh := &s.shards[i]
		buf = buf[:0]
		sh.mu.Lock()
		for k, b := range sh.m {
			buf = append(buf, Snapshot{Key: k, Limit: b.limit, State: b.state, LastUsed: b.last, Grants: b.grants, Rejections: b.rejections})
		}
		sh.mu.Unlock()
		for _, snap := range buf {
			if !fn(snap) {
				return nil
			}
		}
	}
	return nil
}

// Len implements Store.
func (s *MemoryStore) Len() int { return int(s.n.Load()) }

// Dynamic returns the number of dynamic buckets of resource.
func (s *MemoryStore) Dynamic(resource string) int64 {
	s.dynMu.RLock()
	defer s.dynMu.RUnlock()
	if c := s.dyn[resource]; c != nil {
		return c.Load()
	}
	return 0
}
