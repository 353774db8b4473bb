package rls

import (
	"context"
	"fmt"
	"hash/maphash"
	"slices"
	"sync"
)

// memShards is the number of a MemoryStore's shards (a power of two).
const memShards = 64

// MemoryStore is a Store in this process's memory: counters in 64
// shards, each a map under its own lock. A decision locks the shards of
// its buckets in index order (so two decisions never wait on each other
// in a cycle), reads, decides and writes, then unlocks: atomic for every
// reader. Its zero value is not usable: NewMemoryStore.
type MemoryStore struct {
	seed   maphash.Seed
	shards [memShards]memShard
}

type memShard struct {
	mu sync.Mutex
	m  map[memKey]State
}

// memKey is a counter: a bucket under one algorithm.
type memKey struct {
	bucket string
	alg    Algorithm
}

// NewMemoryStore returns an empty store.
func NewMemoryStore() *MemoryStore {
	s := &MemoryStore{seed: maphash.MakeSeed()}
	for i := range s.shards {
		s.shards[i].m = map[memKey]State{}
	}
	return s
}

// MaxHits bounds the hits of one decision (a request's descriptors):
// Decide refuses more with an error. The service's own bound (the
// descriptors of a request) is lower.
const MaxHits = 256

// Decide implements Store: one decision at now (the caller's clock, Unix
// µs), under the locks of the buckets' shards. It checks ctx once, at the
// start, and never blocks on I/O. It errs only when ctx has ended or
// there are more than MaxHits hits.
func (s *MemoryStore) Decide(ctx context.Context, now int64, _ string, hits []Hit, results []Result) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("rls: decide: %w", err)
	}
	if len(hits) > MaxHits {
		return false, fmt.Errorf("rls: decide: %d hits, at most %d", len(hits), MaxHits)
	}
	var sbuf, obuf [8]uint8
	var stbuf [8]State
	idx := sbuf[:0]
	states := stbuf[:0]
	for _, h := range hits {
		idx = append(idx, uint8(maphash.String(s.seed, h.Bucket)%memShards))
	}
	order := s.lock(idx, obuf[:0])
	for i, h := range hits {
		states = append(states, s.shards[idx[i]].m[memKey{h.Bucket, h.Policy.Algorithm}])
	}
	granted := Decide(now, hits, states, results)
	if granted {
		for i, h := range hits {
			if first(hits, i) == i && states[i].Set {
				s.shards[idx[i]].m[memKey{h.Bucket, h.Policy.Algorithm}] = states[i]
			}
		}
	}
	s.unlock(order)
	return granted, nil
}

// lock locks the shards idx names, each once, in index order (so that two
// decisions never wait on each other in a cycle), and returns that order
// (appended to buf) for unlock.
func (s *MemoryStore) lock(idx, buf []uint8) []uint8 {
	order := append(buf, idx...)
	slices.Sort(order)
	order = slices.Compact(order)
	for _, i := range order {
		s.shards[i].mu.Lock()
	}
	return order
}

// unlock unlocks the shards lock locked.
func (s *MemoryStore) unlock(order []uint8) {
	for _, i := range order {
		s.shards[i].mu.Unlock()
	}
}

// Reap removes the counters whose state is, at now (Unix µs), the same as
// none (full buckets, windows over), and returns how many it removed. It
// costs O(counters), one shard at a time: background work, never a
// request's.
func (s *MemoryStore) Reap(now int64) int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, st := range sh.m {
			if st.Until <= now {
				delete(sh.m, k)
				n++
			}
		}
		sh.mu.Unlock()
	}
	return n
}

// Walk implements Store: one shard at a time, copied under its lock, fn
// called after. ctx is checked between shards.
func (s *MemoryStore) Walk(ctx context.Context, fn func(Counter) bool) error {
	var buf []Counter
	for i := range s.shards {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("rls: walk: %w", err)
		}
		sh := &s.shards[i]
		sh.mu.Lock()
		buf = buf[:0]
		for k, st := range sh.m {
			buf = append(buf, Counter{Bucket: k.bucket, Algorithm: k.alg, State: st})
		}
		sh.mu.Unlock()
		for _, c := range buf {
			if !fn(c) {
				return nil
			}
		}
	}
	return nil
}

// Len returns the number of counters held (an O(shards) sum).
func (s *MemoryStore) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}
