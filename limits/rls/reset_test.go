package rls

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// MemoryStore.Reset forgets the buckets' counters under every algorithm
// and no others: a drained token bucket and a full fixed window answer as
// new, at the same instant; the count is the counters it held.
func TestMemoryStoreReset(t *testing.T) {
	ctx := context.Background()
	s := NewMemoryStore()
	const now = int64(1_800_000_000_000_000)
	tb := Policy{Algorithm: TokenBucket, Limit: 2, Period: 3600e6}
	fw := Policy{Algorithm: FixedWindow, Limit: 2, Period: 3600e6}
	drain := func(bucket string, p Policy) {
		t.Helper()
		res := make([]Result, 1)
		if ok, err := s.Decide(ctx, now, "d", []Hit{{Bucket: bucket, Policy: p, Hits: 2}}, res); !ok || err != nil {
			t.Fatalf("drain %s: %v, %v", bucket, ok, err)
		}
	}
	drain("a", tb)
	drain("a", fw) // a under both algorithms: two counters
	drain("b", fw)
	drain("other", tb)
	if s.Len() != 4 {
		t.Fatalf("%d counters, want 4", s.Len())
	}
	n, err := s.Reset(ctx, "d", []string{"a", "b", "never"})
	if err != nil || n != 3 {
		t.Fatalf("Reset: %d, %v; want 3 (a twice, b), nil", n, err)
	}
	res := make([]Result, 4)
	hits := []Hit{{Bucket: "a", Policy: tb, Hits: 1}, {Bucket: "a", Policy: fw, Hits: 1}, {Bucket: "b", Policy: fw, Hits: 1}, {Bucket: "other", Policy: tb, Hits: 0}}
	if ok, err := s.Decide(ctx, now, "d", hits, res); !ok || err != nil {
		t.Fatalf("after the reset: %v, %v, %+v", ok, err, res)
	}
	for i, want := range []uint32{1, 1, 1, 0} {
		if res[i].Remaining != want {
			t.Errorf("%s (%v): %d left, want %d", hits[i].Bucket, hits[i].Policy.Algorithm, res[i].Remaining, want)
		}
	}
	if n, err := s.Reset(ctx, "d", nil); n != 0 || err != nil {
		t.Fatalf("Reset of nothing: %d, %v", n, err)
	}
	// Bounds and a context that ended: errors, nothing done.
	many := make([]string, MaxHits+1)
	for i := range many {
		many[i] = fmt.Sprint("x", i)
	}
	if _, err := s.Reset(ctx, "d", many); err == nil {
		t.Fatalf("%d buckets: no error", len(many))
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Reset(cctx, "d", []string{"a"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled reset: %v", err)
	}
	if s.Len() != 4 {
		t.Fatalf("%d counters after refused resets, want 4", s.Len())
	}
}
