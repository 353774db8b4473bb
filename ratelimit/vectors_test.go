package ratelimit_test

import (
	"math"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/clients/vectors"
	"github.com/sluice-rl/sluice/ratelimit"
)

// TestVectors runs clients/vectors/limiter.json — the SmoothBursty
// behaviour every client's limiter shares — on NewLimiter, each step at
// its own time through the …At twins.
//
// Source: guava-ratelimiter.md, "SmoothBursty", "setRate".
func TestVectors(t *testing.T) {
	var v vectors.Limiter
	if err := vectors.Read(vectors.LimiterFile, &v); err != nil {
		t.Fatal(err)
	}
	near := func(got, want float64) bool {
		return got == want || math.Abs(got-want) <= v.Tolerance
	}
	start := time.Unix(1_800_000_000, 0)
	for _, c := range v.Cases {
		t.Run(c.Name, func(t *testing.T) {
			l := ratelimit.NewLimiter(float64(c.Rate), c.MaxBurstSeconds, ratelimit.WithClock(func() time.Time {
				t.Fatal("the limiter read its clock: every step passes its time")
				return start
			}))
			for i, s := range c.Steps {
				now := start.Add(vectors.Duration(s.At))
				switch s.Op {
				case "acquire":
					r := l.ReserveN(now, s.N())
					got := math.Inf(1)
					if r.OK() {
						got = r.DelayFrom(now).Seconds()
					}
					if want := float64(*s.Wait); !near(got, want) {
						t.Errorf("step %d: acquire %d at %v s: wait %v s, want %v s", i, s.N(), s.At, got, want)
					}
				case "try_acquire":
					if got := l.AllowN(now, s.N()); got != *s.OK {
						t.Errorf("step %d: try_acquire %d at %v s = %v, want %v", i, s.N(), s.At, got, *s.OK)
					}
				case "set_rate":
					l.SetRateAt(now, float64(*s.Rate))
				case "tokens":
					if got, want := l.TokensAt(now), float64(*s.Tokens); !near(got, want) {
						t.Errorf("step %d: tokens at %v s = %v, want %v", i, s.At, got, want)
					}
				default:
					t.Fatalf("step %d: unknown op %q", i, s.Op)
				}
			}
		})
	}
}
