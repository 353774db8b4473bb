package limits

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/clients/vectors"
)

// vectorSource is a jitter source that always draws u = x / 2^64.
type vectorSource uint64

func (s vectorSource) Uint64() uint64 { return uint64(s) }

// drawing returns the source whose every draw is u (retryDelay uses the
// top 53 bits).
func drawing(u float64) vectorSource { return vectorSource(uint64(u*(1<<53)) << 11) }

// TestRetryDelayVectors runs the delays and bounds of Charon's retry
// policy in clients/vectors/retry.json on retryDelay: each draw's delay
// exactly, both ends of the bounds, and every draw of a seeded source
// within them.
//
// Source: charon-paper.md, section 3.2.
func TestRetryDelayVectors(t *testing.T) {
	var v vectors.Retry
	if err := vectors.Read(vectors.RetryFile, &v); err != nil {
		t.Fatal(err)
	}
	ch := v.Charon
	if DefaultBackoffUnit != vectors.Duration(ch.Unit) {
		t.Errorf("DefaultBackoffUnit %v, retry.json's unit %v s", DefaultBackoffUnit, ch.Unit)
	}
	for _, d := range ch.Delays {
		c := &charon{backoffUnit: vectors.Duration(ch.Unit), jitter: drawing(d.U)}
		if got := c.retryDelay(d.Attempt); got != vectors.Duration(d.Delay) {
			t.Errorf("retryDelay(%d) drawing %v = %v, want %v s", d.Attempt, d.U, got, d.Delay)
		}
	}
	for _, b := range ch.Bounds {
		lo, hi := vectors.Duration(b.Min), vectors.Duration(b.Max)
		c := &charon{backoffUnit: time.Second, jitter: vectorSource(0)}
		if got := c.retryDelay(b.Attempt); got != lo {
			t.Errorf("retryDelay(%d) drawing 0 = %v, want the bound %v", b.Attempt, got, lo)
		}
		c.jitter = vectorSource(math.MaxUint64)
		if got := c.retryDelay(b.Attempt); got > hi || hi-got > time.Microsecond {
			t.Errorf("retryDelay(%d) drawing nearly 1 = %v, want the bound %v (or just under it)", b.Attempt, got, hi)
		}
		c.jitter = rand.NewPCG(uint64(b.Attempt), 7)
		for range 1000 {
			if got := c.retryDelay(b.Attempt); got < lo || got > hi {
				t.Fatalf("retryDelay(%d) = %v, want in [%v, %v]", b.Attempt, got, lo, hi)
			}
		}
	}
}
