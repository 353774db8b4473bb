package limits

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"
)

// memShards is the number of lock shards of a MemoryStore (a power of 2).
const memShards = 256

// MemoryStore is a Store in this process's memory. Buckets are spread over
// 256 shards by a hash of their key, each shard with its own mutex and
// hash table: a decision locks one shard for the duration of one Step, and
// decisions on different shards never contend. A lookup hashes the
// request's strings as they are (no concatenation) and does not allocate;
// creating a bucket allocates only when its shard's table grows, or when
// the domain is longer than 22 bytes (a copy of it).
//
// A bucket takes one 104-byte slot (the record, and the domain when it is
// at most 22 bytes long) in a table kept 58 % to 88 % full: 118 to 180
// bytes per bucket, about 140 measured at a million
// (BenchmarkMemoryPerBucket), plus a copy of the domain when it is
// longer. Request counts per bucket saturate at 2³² − 1.
//
// A burst-tier domain's slot points to its TierState (see TierState for
// its bound). A resource with a global limit has one global log, behind
// its own mutex, taken after the domain's shard lock: decisions on its
// domains serialise on it (the limit spans them), decisions on other
// resources do not touch it. Reap drops the global logs with no hit in
// the last second.
//
// No method blocks on I/O, so the contexts matter little: Take, TakeHits
// and Reap check theirs once, at the start (a call whose context is done
// changes nothing and returns an error wrapping ctx.Err()), Walk before
// each of its 256 shards, Reconfigure and EstimateLen not at all (the
// one cannot stop halfway, the other reads a counter).
//
// The zero MemoryStore is not usable: use NewMemoryStore.
type MemoryStore struct {
	seed, seed2 maphash.Seed
	shards      [memShards]memShard
	n           atomic.Int64

	dynMu sync.RWMutex
	dyn   map[string]*atomic.Int64 // dynamic buckets per resource

	gmu     sync.RWMutex
	globals map[string]*globalLog // per resource with a global limit
}

// globalLog is a resource's hits across its domains, for its global limit.
type globalLog struct {
	mu   sync.Mutex
	log  HitLog
	dead bool // dropped by Reap: look it up again
}

// errNotTiers and errTiers answer a Limit of the wrong algorithm.
var (
	errNotTiers = errors.New("limits: TakeHits on a limit without burst tiers")
	errTiers    = errors.New("limits: Take on a limit with burst tiers (use TakeHits)")
)

// memShard is one lock shard: 48 bytes used, padded to 128 so that no two
// shards' fields share a cache line, wherever the array starts.
type memShard struct {
	mu  sync.Mutex
	gen uint64 // the configuration generation last applied to the shard
	t   table
	_   [80]byte
}

// NewMemoryStore returns an empty store.
func NewMemoryStore() *MemoryStore {
	return &MemoryStore{seed: maphash.MakeSeed(), seed2: maphash.MakeSeed(), dyn: map[string]*atomic.Int64{}, globals: map[string]*globalLog{}}
}

// hash returns the key's hash (never 0) and its shard.
func (s *MemoryStore) hash(k Key) (uint64, *memShard) {
	h := maphash.String(s.seed, k.Domain)
	if k.Resource != "" {
		h ^= maphash.String(s.seed2, k.Resource)
	}
	h |= 1
	return h, &s.shards[(h>>1)&(memShards-1)]
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

// ctxError is the error of a call whose context ended (err, ctx.Err()).
func ctxError(op string, err error) error { return fmt.Errorf("limits: %s: %w", op, err) }

// Take implements Store.
func (s *MemoryStore) Take(ctx context.Context, now int64, k Key, l *Limit, a Ask) (Outcome, error) {
	if err := ctx.Err(); err != nil {
		return Outcome{}, ctxError("take", err)
	}
	if l.Tiers != nil {
		return Outcome{}, errTiers
	}
	h, sh := s.hash(k)
	sh.mu.Lock()
	if l.Gen < sh.gen {
		sh.mu.Unlock()
		return Outcome{}, ErrStaleConfig
	}
	b := sh.t.find(h, k.Resource, k.Domain)
	if b == nil {
		dynamic := l.Dynamic(k.Domain)
		if dynamic && !s.reserve(l.Resource, l.MaxDynamic) {
			sh.mu.Unlock()
			return Outcome{TooManyBuckets: true}, nil
		}
		st, r := l.Step(FullState, now, a)
		if r.Granted == 0 {
			if dynamic {
				s.counter(l.Resource).Add(-1)
			}
			sh.mu.Unlock()
			return Outcome{Result: r}, nil
		}
		// The slot keeps the configuration's copy of the resource name and
		// a copy of the domain: never the caller's memory.
		b = sh.t.insert(h, l.Resource, k.Domain)
		*b = memBucket{state: st, last: now, grants: 1, limit: l}
		sh.mu.Unlock()
		s.n.Add(1)
		return Outcome{Result: r, Created: true}, nil
	}
	if b.limit != l {
		if b.limit.Gen > l.Gen {
			sh.mu.Unlock()
			return Outcome{}, ErrStaleConfig
		}
		s.relimit(l.Resource, k.Domain, b, l, now)
	}
	st, r := l.Step(b.state, now, a)
	if r.Granted > 0 {
		b.state = st
	}
	b.count(now, r.Granted > 0)
	sh.mu.Unlock()
	return Outcome{Result: r}, nil
}

// TakeHits implements Store.
func (s *MemoryStore) TakeHits(ctx context.Context, now int64, k Key, l *Limit, a Ask) (HitOutcome, error) {
	if err := ctx.Err(); err != nil {
		return HitOutcome{}, ctxError("take hits", err)
	}
	p := l.Tiers
	if p == nil {
		return HitOutcome{}, errNotTiers
	}
	h, sh := s.hash(k)
	sh.mu.Lock()
	if l.Gen < sh.gen {
		sh.mu.Unlock()
		return HitOutcome{}, ErrStaleConfig
	}
	b := sh.t.find(h, k.Resource, k.Domain)
	if b != nil && b.limit != l {
		if b.limit.Gen > l.Gen {
			sh.mu.Unlock()
			return HitOutcome{}, ErrStaleConfig
		}
		s.relimit(k.Resource, k.Domain, b, l, now)
	}
	var (
		g  *globalLog
		gl *HitLog
	)
	if p.GlobalLimit > 0 {
		g = s.lockGlobal(l.Resource)
		gl = &g.log
	}
	unlock := func() {
		if g != nil {
			g.mu.Unlock()
		}
		sh.mu.Unlock()
	}
	if b == nil {
		dynamic := l.Dynamic(k.Domain)
		if dynamic && !s.reserve(l.Resource, l.MaxDynamic) {
			unlock()
			return HitOutcome{TooManyBuckets: true}, nil
		}
		var st TierState
		r := StepTiers(p, &st, gl, now, a)
		if r.Granted == 0 {
			if dynamic {
				s.counter(l.Resource).Add(-1)
			}
			unlock()
			return HitOutcome{TierResult: r}, nil
		}
		res := l.storeResource(k)
		if l.Kind == KindNamespace {
			res = strings.Clone(res)
		}
		ts := packTierState(&st)
		b = sh.t.insert(h, res, k.Domain)
		*b = memBucket{last: now, grants: 1, limit: l, tiers: ts}
		unlock()
		s.n.Add(1)
		return HitOutcome{TierResult: r, Created: true}, nil
	}
	r := StepTiers(p, b.tiers, gl, now, a)
	b.count(now, r.Granted > 0)
	unlock()
	return HitOutcome{TierResult: r}, nil
}

// count records a request on b at now, granted or rejected (the counts
// saturate).
func (b *memBucket) count(now int64, granted bool) {
	b.last = now
	if granted {
		if b.grants != math.MaxUint32 {
			b.grants++
		}
	} else if b.rejections != math.MaxUint32 {
		b.rejections++
	}
}

// packTierState returns a copy of a new domain's first state in one
// allocation, for up to 4 tiers: the state, its runs and room for two
// entries per log side by side, so that a decision on a domain that is
// not in the cache misses on adjacent lines rather than on five scattered
// objects. A log that outgrows its room moves out (append).
func packTierState(st *TierState) *TierState {
	const per = 2
	var (
		ts   *TierState
		runs []TierRun
		ents []hitEntry
	)
	switch n := len(st.Tiers); {
	case n <= 2:
		b := new(struct {
			s TierState
			r [2]TierRun
			e [3 * per]hitEntry
		})
		ts, runs, ents = &b.s, b.r[:n], b.e[:]
	case n <= 4:
		b := new(struct {
			s TierState
			r [4]TierRun
			e [5 * per]hitEntry
		})
		ts, runs, ents = &b.s, b.r[:n], b.e[:]
	default:
		ts, runs = new(TierState), make([]TierRun, n)
	}
	pack := func(l *HitLog) HitLog {
		if len(ents) < per || l.Len() > per {
			return l.Clone()
		}
		out := HitLog{e: append(ents[:0:per], l.e[l.head:]...), base: l.base}
		ents = ents[per:]
		return out
	}
	for i := range st.Tiers {
		r := &st.Tiers[i]
		runs[i] = TierRun{Entered: r.Entered, InUse: r.InUse, Window: pack(&r.Window)}
	}
	ts.Tiers, ts.Second = runs, pack(&st.Second)
	return ts
}

// lockGlobal returns the global log of resource, created if need be,
// locked.
func (s *MemoryStore) lockGlobal(resource string) *globalLog {
	for {
		s.gmu.RLock()
		g := s.globals[resource]
		s.gmu.RUnlock()
		if g == nil {
			s.gmu.Lock()
			if g = s.globals[resource]; g == nil {
				g = &globalLog{}
				s.globals[resource] = g
			}
			s.gmu.Unlock()
		}
		g.mu.Lock()
		if !g.dead {
			return g
		}
		g.mu.Unlock()
	}
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

// relimit moves bucket b (of resource and domain) to Limit l at now:
// rescales a token bucket's state (a burst-tier domain keeps its state,
// which StepTiers fits to the new tiers; a bucket changing algorithm
// starts afresh) and moves its dynamic count. The caller holds the shard's
// lock.
func (s *MemoryStore) relimit(resource, domain string, b *memBucket, l *Limit, now int64) {
	switch was, is := b.limit.Algorithm == BurstTiers, l.Algorithm == BurstTiers; {
	case was && is:
	case is:
		b.state, b.tiers = State{}, new(TierState)
	case was:
		b.state, b.tiers = FullState, nil
	default:
		b.state = Rescale(b.state, b.limit.Params, l.Params, now)
	}
	was, is := b.limit.Dynamic(domain), l.Dynamic(domain)
	switch {
	case was && !is:
		s.counter(resource).Add(-1)
	case !was && is:
		s.counter(resource).Add(1)
	}
	b.limit = l
}

// sweep visits every bucket of sh, whose lock the caller holds, and
// removes those for which visit returns a reason, appending them to gone.
// A bucket may be visited twice (removal shifts slots back), so visit must
// answer the same for it.
func (s *MemoryStore) sweep(sh *memShard, gone []Removed, visit func(sl *slot, domain string) RemoveReason) []Removed {
	for i := 0; i < len(sh.t.slots); {
		sl := &sh.t.slots[i]
		if sl.hash == 0 {
			i++
			continue
		}
		domain := sl.long
		if !sl.big {
			domain = unsafe.String(&sl.dom[0], int(sl.dlen))
		}
		why := visit(sl, domain)
		if why == 0 {
			i++
			continue
		}
		k := Key{Resource: sl.res, Domain: sl.domain()}
		gone = append(gone, Removed{Key: k, Limit: sl.rec.limit, Reason: why})
		if sl.rec.limit.Dynamic(k.Domain) {
			s.counter(k.Resource).Add(-1)
		}
		s.n.Add(-1)
		sh.t.removeAt(i) // look at i again
	}
	return gone
}

// Reap implements Store.
func (s *MemoryStore) Reap(ctx context.Context, now int64, removed func(Removed)) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, ctxError("reap", err)
	}
	total := 0
	var gone []Removed
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		gone = s.sweep(sh, gone[:0], func(sl *slot, _ string) RemoveReason {
			b := &sl.rec
			if b.tiers != nil {
				if b.tiers.Fresh(b.limit.Tiers, now) {
					return RemovedIdle
				}
				return 0
			}
			if idle := b.limit.Bucket.MaxIdle; idle > 0 && now-b.last >= int64(idle) && Full(b.state, b.limit.Params, now) {
				return RemovedIdle
			}
			return 0
		})
		sh.mu.Unlock()
		total += len(gone)
		if removed != nil {
			for _, r := range gone {
				removed(r)
			}
		}
	}
	s.gmu.Lock()
	for name, g := range s.globals {
		g.mu.Lock()
		if g.log.Since(subSat(now, second)) == 0 {
			g.dead = true
			delete(s.globals, name)
		}
		g.mu.Unlock()
	}
	s.gmu.Unlock()
	return total, nil
}

// Reconfigure implements Store. It does not look at ctx: it always
// completes.
func (s *MemoryStore) Reconfigure(_ context.Context, now int64, gen uint64, resolve func(Key) *Limit, removed func(Removed)) error {
	var gone []Removed
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.gen = gen
		gone = s.sweep(sh, gone[:0], func(sl *slot, domain string) RemoveReason {
			l := resolve(Key{Resource: sl.res, Domain: domain})
			switch {
			case l == nil:
				return RemovedReconfigured
			case l != sl.rec.limit && l.Gen >= sl.rec.limit.Gen:
				s.relimit(sl.res, domain, &sl.rec, l, now)
			}
			return 0
		})
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
// calls fn after releasing it. It stops, returning an error wrapping
// ctx.Err(), when ctx ends (checked before each shard).
func (s *MemoryStore) Walk(ctx context.Context, fn func(Snapshot) bool) error {
	var buf []Snapshot
	for i := range s.shards {
		if err := ctx.Err(); err != nil {
			return ctxError("walk", err)
		}
		sh := &s.shards[i]
		buf = buf[:0]
		sh.mu.Lock()
		for j := range sh.t.slots {
			sl := &sh.t.slots[j]
			if sl.hash == 0 {
				continue
			}
			b := &sl.rec
			buf = append(buf, Snapshot{Key: Key{Resource: sl.res, Domain: sl.domain()}, Limit: b.limit, State: b.state, Tiers: b.tiers.Clone(),
				LastUsed: b.last, Grants: uint64(b.grants), Rejections: uint64(b.rejections)})
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

// Len returns the number of buckets (token buckets and burst-tier
// domains), exactly: a counter kept as buckets are created and removed,
// read with one atomic load.
func (s *MemoryStore) Len() int { return int(s.n.Load()) }

// EstimateLen implements Store: Len, exact, never an error.
func (s *MemoryStore) EstimateLen(context.Context) (int, error) { return s.Len(), nil }

// Dynamic returns the number of dynamic buckets of resource.
func (s *MemoryStore) Dynamic(resource string) int64 {
	s.dynMu.RLock()
	defer s.dynMu.RUnlock()
	if c := s.dyn[resource]; c != nil {
		return c.Load()
	}
	return 0
}
