package redisstore

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/limits"
)

// TestTakeMatchesMemory drives Take directly with extreme parameters
// (rates from 10⁻³ to 10⁹ tokens per second, sizes up to the span bound,
// waits up to MaxSpan) and compares every Outcome with the memory store's.
func TestTakeMatchesMemory(t *testing.T) {
	st := New(client(t), Options{Prefix: prefix(t), callerTime: true})
	mem := limits.NewMemoryStore()
	r := rand.New(rand.NewPCG(3, 4))
	rates := []float64{1e-3, 0.3, 1, 7, 1e3 / 3, 1e6 + 0.5, 1e9}
	now := t0.UnixNano()
	for i := range 2000 {
		rate := rates[r.IntN(len(rates))]
		size := 1 + r.Int64N(1000)
		if r.IntN(4) == 0 {
			size = 1 + r.Int64N(1<<40)
		}
		p := limits.Bucket{Size: size, FillRate: rate}.Params()
		if p.Span > MaxSpan {
			continue
		}
		l := &limits.Limit{Resource: "r", Kind: limits.KindDefault, Algorithm: limits.TokenBucket, Bucket: limits.Bucket{Size: size, FillRate: rate}, Params: p, Gen: 1}
		k := limits.Key{Resource: "r", Domain: string(rune('a' + i%5))}
		tok := 1 + r.Int64N(size+size/2)
		a := limits.Ask{Tokens: tok, Min: 1 + r.Int64N(tok), MaxWait: []int64{0, 1, int64(time.Second), int64(time.Hour), MaxSpan}[r.IntN(5)]}
		if r.IntN(2) == 0 {
			a.Min = a.Tokens
		}
		now += r.Int64N(int64(time.Second))
		// One parameter set per key, as a configuration has: the memory
		// store would rescale otherwise (as would Redis, at another instant).
		k.Domain += "-" + time.Duration(p.Span).String()
		om, err := mem.Take(t.Context(), now, k, l, a)
		if err != nil {
			t.Fatal(err)
		}
		or, err := st.Take(t.Context(), now, k, l, a)
		if err != nil {
			t.Fatal(err)
		}
		if om != or {
			t.Fatalf("%d: params %+v ask %+v:\nmemory %+v\nredis  %+v", i, p, a, om, or)
		}
	}
}
