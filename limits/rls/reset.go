package rls

import (
	"context"
	"fmt"
	"hash/maphash"
)

// resetAlgorithms are the algorithms a counter may be held under (a
// Policy's: AlgorithmDefault counts as a token bucket, but a store keeps
// what it was given), each forgotten by Reset.
var resetAlgorithms = [...]Algorithm{AlgorithmDefault, TokenBucket, FixedWindow}

// Reset implements Store: it removes the counters of buckets under every
// algorithm, under the locks of their shards taken in index order, as
// Decide takes them (so a decision on the same buckets comes wholly
// before or wholly after it). domain is unused: a bucket names its
// domain. It checks ctx once, at the start, and never blocks on I/O. It
// errs only when ctx has ended or there are more than MaxHits buckets.
// It costs O(len(buckets)).
//
// Source: envoyproxy/ratelimit issue #191 (reset one key); gubernator's
// Behavior RESET_REMAINING.
func (s *MemoryStore) Reset(ctx context.Context, _ string, buckets []string) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("rls: reset: %w", err)
	}
	if len(buckets) > MaxHits {
		return 0, fmt.Errorf("rls: reset: %d buckets, at most %d", len(buckets), MaxHits)
	}
	var ibuf, obuf [8]uint8
	idx := ibuf[:0]
	for _, b := range buckets {
		idx = append(idx, uint8(maphash.String(s.seed, b)%memShards))
	}
	order := s.lock(idx, obuf[:0])
	n := 0
	for i, b := range buckets {
		m := s.shards[idx[i]].m
		for _, alg := range resetAlgorithms {
			k := memKey{b, alg}
			if _, ok := m[k]; ok {
				delete(m, k)
				n++
			}
		}
	}
	s.unlock(order)
	return n, nil
}
