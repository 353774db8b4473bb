package retry

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	const lo, hi = 100 * time.Millisecond, 5 * time.Second
	r := rand.New(rand.NewPCG(1, 2))
	for n, want := range map[int]time.Duration{0: lo, 1: lo, 2: 2 * lo, 3: 4 * lo, 6: 3200 * time.Millisecond, 7: hi, 1000: hi} {
		for range 100 {
			for _, src := range []*rand.Rand{r, nil} {
				if d := Backoff(n, lo, hi, src); d < want/2 || d > want {
					t.Fatalf("Backoff(%d) = %v, want in [%v, %v]", n, d, want/2, want)
				}
			}
		}
	}
	// The same seed gives the same delays.
	a, b := rand.New(rand.NewPCG(7, 7)), rand.New(rand.NewPCG(7, 7))
	for n := 1; n < 10; n++ {
		if x, y := Backoff(n, lo, hi, a), Backoff(n, lo, hi, b); x != y {
			t.Fatalf("seeded delays differ: %v, %v", x, y)
		}
	}
}
