package limits

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestPropertyRetryDelay: whatever the seed, unit and failure count, the
// paper's jitter(2^i) lies in [v − v/4, v + v/4) for v = 2^i units
// (truncated to whole nanoseconds), and saturates instead of overflowing.
//
// Source: charon-paper.md, section 3.2.
func TestPropertyRetryDelay(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		seed := rapid.Uint64().Draw(t, "seed")
		unit := time.Duration(rapid.Int64Range(1, int64(time.Hour)).Draw(t, "unit"))
		i := rapid.IntRange(0, 200).Draw(t, "i")
		ch := &charon{backoffUnit: unit, jitter: rand.NewPCG(seed, ^seed)}
		d := ch.retryDelay(i)
		v := math.Ldexp(float64(unit), i)
		if v*1.25 >= math.MaxInt64 {
			if d <= 0 {
				t.Fatalf("retryDelay(%d) with unit %v = %v: overflowed", i, unit, d)
			}
			return
		}
		if lo, hi := math.Floor(v*0.75), v*1.25; float64(d) < lo || float64(d) >= hi {
			t.Fatalf("retryDelay(%d) with unit %v = %v, want in [%v, %v)", i, unit, d, time.Duration(lo), time.Duration(hi))
		}
	})
}

// TestRetryDelayUniform: over many draws of a seeded source, the jitter
// covers [3/4, 5/4) of 2^i units evenly (mean 2^i, both ends reached).
func TestRetryDelayUniform(t *testing.T) {
	ch := &charon{backoffUnit: time.Second, jitter: rand.NewPCG(1, 2)}
	const n = 20000
	var sum float64
	lo, hi := math.Inf(1), math.Inf(-1)
	for range n {
		d := ch.retryDelay(1).Seconds() / 2
		sum += d
		lo, hi = min(lo, d), max(hi, d)
	}
	if mean := sum / n; math.Abs(mean-1) > 0.01 || lo > 0.751 || hi < 1.249 {
		t.Errorf("jitter(2)/2 over %d draws: mean %.4f, range [%.4f, %.4f]; want mean 1, range [0.75, 1.25)", n, mean, lo, hi)
	}
}
