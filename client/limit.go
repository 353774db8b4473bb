package client

import (
	"context"

	"github.com/sluice-rl/sluice/ratelimit"
)

// RateLimiter enforces a rate resource's lease: a smooth rate limiter
// (Guava's SmoothBursty) whose rate, in permits per second, follows the
// resource's capacity from the moment it changes. It is safe for concurrent
// use.
//
// Source: doorman-design.md, "Client library" (RateResource.Wait);
// guava-ratelimiter.md, "SmoothBursty".
type RateLimiter struct {
	*ratelimit.Limiter
	res *Resource
}

// NewRateLimiter returns a limiter bound to r's capacity. maxBurstSeconds
// (0 to 1) is how many seconds of unused permits it may store: 1 is
// Guava's default; smaller values keep every one-second window closer to
// the lease.
func NewRateLimiter(r *Resource, maxBurstSeconds float64) *RateLimiter {
	l := &RateLimiter{Limiter: ratelimit.NewLimiter(0, maxBurstSeconds), res: r}
	r.OnChange(func(capacity float64) { l.Limiter.SetRate(capacity) })
	return l
}

// Resource returns the resource the limiter enforces.
func (l *RateLimiter) Resource() *Resource { return l.res }

// Gauge enforces a gauge resource's lease: at most floor(capacity)
// operations in flight at once (a counting semaphore whose size follows the
// resource's capacity; lowering it never revokes a held slot, it only stops
// new acquisitions until enough are released). It is safe for concurrent
// use.
//
// Source: doorman-design.md, "Client library" (GaugeResource).
type Gauge struct {
	*ratelimit.Gauge
	res *Resource
}

// NewGauge returns a gauge bound to r's capacity.
func NewGauge(r *Resource) *Gauge {
	g := &Gauge{Gauge: ratelimit.NewGauge(0), res: r}
	r.OnChange(func(capacity float64) { g.Gauge.SetCapacity(capacity) })
	return g
}

// Do runs f while holding one slot of the gauge; it returns ctx's error
// (wrapped) if no slot was acquired, else f's error.
func (g *Gauge) Do(ctx context.Context, f func() error) error {
	if err := g.Acquire(ctx); err != nil {
		return err
	}
	defer g.Release()
	return f()
}
