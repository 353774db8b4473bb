package rls

import (
	"context"
	"math/big"
	"testing"

	"pgregory.net/rapid"
)

// refBucket is the reference token bucket: exact rational tokens, filled
// continuously at Limit per Period, capped at Limit.
type refBucket struct {
	tokens *big.Rat
	at     int64
}

func (b *refBucket) level(p Policy, now int64) *big.Rat {
	if b.tokens == nil {
		return big.NewRat(int64(p.Limit), 1)
	}
	fill := new(big.Rat).SetFrac64((now-b.at)*int64(p.Limit), p.Period)
	t := new(big.Rat).Add(b.tokens, fill)
	if t.Cmp(big.NewRat(int64(p.Limit), 1)) > 0 {
		t.SetInt64(int64(p.Limit))
	}
	return t
}

// refWindow is the reference fixed window: a count per window index.
type refWindow map[int64]int64

// TestDecideMatchesReference runs random requests of one to three hits on
// a few buckets against the reference models: the same answers (grant,
// over, remaining), nothing charged by a refused request. Token buckets
// move the clock by whole tokens of fill, where the reference's exact
// rationals and the store's float64 levels agree exactly.
func TestDecideMatchesReference(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		alg := rapid.SampledFrom([]Algorithm{TokenBucket, FixedWindow}).Draw(t, "alg")
		lim := rapid.Uint32Range(1, 20).Draw(t, "limit")
		period := int64(lim) * rapid.Int64Range(1, 1000).Draw(t, "perToken")
		policy := Policy{Algorithm: alg, Limit: lim, Period: period}
		buckets := []string{"a", "b", "c"}
		store := NewMemoryStore()
		ref := map[string]*refBucket{}
		win := map[string]refWindow{}
		now := rapid.Int64Range(0, 1e15).Draw(t, "start")
		for step := range rapid.IntRange(1, 60).Draw(t, "steps") {
			// Whole tokens of fill (period ÷ limit µs each), so that the
			// store's float64 levels are exact integers, as the reference's.
			now += rapid.Int64Range(0, int64(lim)).Draw(t, "dt") * (period / int64(lim))
			n := rapid.IntRange(1, 3).Draw(t, "hits")
			hits := make([]Hit, n)
			for i := range hits {
				hits[i] = Hit{Bucket: rapid.SampledFrom(buckets).Draw(t, "bucket"), Policy: policy,
					Hits: rapid.Uint64Range(0, uint64(lim)+1).Draw(t, "n")}
			}
			results := make([]Result, n)
			got, err := store.Decide(context.Background(), now, "d", hits, results)
			if err != nil {
				t.Fatal(err)
			}
			// The reference: tentatively take each hit in order; grant when all fit.
			want := true
			levels := map[string]*big.Rat{}
			counts := map[string]int64{}
			left, untouched := make([]int64, n), make([]int64, n)
			for i, h := range hits {
				if alg == TokenBucket {
					if ref[h.Bucket] == nil {
						ref[h.Bucket] = &refBucket{}
					}
					l0 := ref[h.Bucket].level(policy, now)
					untouched[i] = new(big.Int).Quo(l0.Num(), l0.Denom()).Int64()
					l, ok := levels[h.Bucket]
					if !ok {
						l = l0
					}
					need := big.NewRat(int64(h.Hits), 1)
					if l.Cmp(need) < 0 {
						want = false
						if !results[i].Over {
							t.Fatalf("step %d: hit %d (%v) not over with %v tokens", step, i, h, l)
						}
						continue
					}
					levels[h.Bucket] = new(big.Rat).Sub(l, need)
					left[i] = new(big.Int).Quo(levels[h.Bucket].Num(), levels[h.Bucket].Denom()).Int64()
				} else {
					c0 := win[h.Bucket][floorDiv(now, period)]
					untouched[i] = int64(lim) - c0
					c, ok := counts[h.Bucket]
					if !ok {
						c = c0
					}
					if c+int64(h.Hits) > int64(lim) {
						want = false
						if !results[i].Over {
							t.Fatalf("step %d: hit %d (%v) not over with count %d", step, i, h, c)
						}
						continue
					}
					counts[h.Bucket] = c + int64(h.Hits)
					left[i] = int64(lim) - counts[h.Bucket]
				}
				if results[i].Over {
					t.Fatalf("step %d: hit %d (%v) over, the reference has room", step, i, h)
				}
			}
			if got != want {
				t.Fatalf("step %d: granted %v, want %v", step, got, want)
			}
			if !want {
				left = untouched // a refused request's others answer what they have
			}
			for i, r := range results {
				if !r.Over && int64(r.Remaining) != left[i] {
					t.Fatalf("step %d: hit %d remaining %d, want %d", step, i, r.Remaining, left[i])
				}
			}
			if !want {
				continue // nothing charged: the reference keeps its state
			}
			for b, l := range levels {
				ref[b] = &refBucket{tokens: l, at: now}
			}
			for b, c := range counts {
				if win[b] == nil {
					win[b] = refWindow{}
				}
				win[b][floorDiv(now, period)] = c
			}
		}
	})
}

// TestTokenBucketBound: whatever the period and limit, a token bucket
// never grants more than Limit + Limit × T ÷ Period over any interval T.
func TestTokenBucketBound(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		lim := rapid.Uint32Range(1, 1000).Draw(t, "limit")
		period := rapid.Int64Range(1, 1e9).Draw(t, "period")
		p := Policy{Algorithm: TokenBucket, Limit: lim, Period: period}
		store := NewMemoryStore()
		type grant struct{ at, n int64 }
		var grants []grant
		now := int64(1e12)
		for range rapid.IntRange(1, 100).Draw(t, "steps") {
			now += rapid.Int64Range(0, period/4+1).Draw(t, "dt")
			h := Hit{Bucket: "x", Policy: p, Hits: rapid.Uint64Range(1, uint64(lim)).Draw(t, "n")}
			var r [1]Result
			ok, _ := store.Decide(context.Background(), now, "d", []Hit{h}, r[:])
			if ok {
				grants = append(grants, grant{now, int64(h.Hits)})
			}
		}
		for i := range grants {
			var sum int64
			for j := i; j < len(grants); j++ {
				sum += grants[j].n
				T := grants[j].at - grants[i].at
				bound := float64(lim) + float64(lim)*float64(T)/float64(period)
				if float64(sum) > bound+1e-9 {
					t.Fatalf("granted %d over %d µs, bound %.3f", sum, T, bound)
				}
			}
		}
	})
}

// TestDecideAtomic: a request with one hit over its limit charges none of
// its others, and they answer what they have.
func TestDecideAtomic(t *testing.T) {
	s := NewMemoryStore()
	ctx := context.Background()
	p := Policy{Algorithm: TokenBucket, Limit: 2, Period: 1e6}
	var r [2]Result
	if ok, _ := s.Decide(ctx, 1e12, "d", []Hit{{Bucket: "full", Policy: p, Hits: 2}}, r[:]); !ok {
		t.Fatal("first take refused")
	}
	hits := []Hit{{Bucket: "other", Policy: p, Hits: 1}, {Bucket: "full", Policy: p, Hits: 1}}
	ok, _ := s.Decide(ctx, 1e12, "d", hits, r[:])
	if ok || r[0].Over || !r[1].Over || r[0].Remaining != 2 {
		t.Fatalf("granted %v, results %+v: want refused, other untouched with 2 left", ok, r)
	}
	if s.Len() != 1 {
		t.Fatalf("%d counters, want 1 (a refused request creates none)", s.Len())
	}
	// A soft (shadow mode) hit over its limit does not refuse the others.
	hits[1].Soft = true
	if ok, _ := s.Decide(ctx, 1e12, "d", hits, r[:]); !ok || r[0].Remaining != 1 || !r[1].Over {
		t.Fatalf("soft: granted %v, %+v", ok, r)
	}
	// Reset: the time until full.
	if r[0].Reset != 5e5 {
		t.Fatalf("reset %d µs, want 500000", r[0].Reset)
	}
	// Refund gives tokens back; Reap drops full buckets.
	if ok, _ := s.Decide(ctx, 1e12, "d", []Hit{{Bucket: "full", Policy: p, Hits: 2, Refund: true}}, r[:]); !ok || r[0].Remaining != 2 {
		t.Fatalf("refund: %v %+v", ok, r[0])
	}
	if n := s.Reap(1e12 + 1e6); n != 2 || s.Len() != 0 {
		t.Fatalf("reaped %d, %d left", n, s.Len())
	}
}

// TestFixedWindowEdges: windows are aligned to the epoch, so a burst at a
// window's end and another at the next one's start both pass (the
// reference's double burst), and Reset is the time to the window's end.
func TestFixedWindowEdges(t *testing.T) {
	s := NewMemoryStore()
	p := Policy{Algorithm: FixedWindow, Limit: 3, Period: 60e6}
	var r [1]Result
	h := []Hit{{Bucket: "k", Policy: p, Hits: 3}}
	if ok, _ := s.Decide(context.Background(), 60e6*100-1, "d", h, r[:]); !ok || r[0].Reset != 1 || r[0].Remaining != 0 {
		t.Fatalf("end of window: %v %+v", ok, r[0])
	}
	if ok, _ := s.Decide(context.Background(), 60e6*100, "d", h, r[:]); !ok || r[0].Reset != 60e6 {
		t.Fatalf("next window: %v %+v", ok, r[0])
	}
	// A check-only hit (0) on a counter at its limit is not over.
	h[0].Hits = 0
	if ok, _ := s.Decide(context.Background(), 60e6*100+5, "d", h, r[:]); !ok || r[0].Over || r[0].Remaining != 0 {
		t.Fatalf("check only: %v %+v", ok, r[0])
	}
}
