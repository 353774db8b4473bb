package client

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice/ratelimit"
)

// RateLimiter enforces a rate resource's lease: a smooth rate limiter whose
// rate, in permits per second, follows the resource's capacity from the
// moment it changes. Its methods are those of ratelimit.Limiter (Allow,
// AllowN, Wait, WaitN, Reserve, ReserveN, Tokens, TokensAt); in adaptive
// mode (Adapt) it also counts what the process asks of it. It is safe for
// concurrent use.
//
// Source: doorman-design.md, "Client library" (RateResource.Wait);
// guava-ratelimiter.md.
type RateLimiter struct {
	*ratelimit.Limiter
	res   *Resource
	mu    sync.Mutex
	adapt *adapter
}

// NewRateLimiter returns a SmoothBursty limiter bound to r's capacity.
// maxBurstSeconds (0 to 1) is how many seconds of unused permits it may
// store: 1 is Guava's default; smaller values keep every one-second window
// closer to the lease.
func NewRateLimiter(r *Resource, maxBurstSeconds float64) *RateLimiter {
	return bind(r, ratelimit.NewLimiter(0, maxBurstSeconds, ratelimit.WithClock(r.c.now)))
}

// NewWarmingUpRateLimiter returns a SmoothWarmingUp limiter bound to r's
// capacity: after disuse it warms up over warmup, starting coldFactor times
// slower (Guava's default cold factor is 3).
func NewWarmingUpRateLimiter(r *Resource, warmup time.Duration, coldFactor float64) *RateLimiter {
	return bind(r, ratelimit.NewWarmingUp(0, warmup, coldFactor, ratelimit.WithClock(r.c.now)))
}

func bind(r *Resource, l *ratelimit.Limiter) *RateLimiter {
	rl := &RateLimiter{Limiter: l, res: r}
	r.OnChange(func(capacity float64) { rl.Limiter.SetRate(capacity) })
	return rl
}

// Resource returns the resource the limiter enforces.
func (l *RateLimiter) Resource() *Resource { return l.res }

// Allow reports whether a permit is available now and takes it if so.
func (l *RateLimiter) Allow() bool { l.count(1); return l.Limiter.Allow() }

// AllowN is ratelimit.Limiter.AllowN, counted in adaptive mode.
func (l *RateLimiter) AllowN(now time.Time, n int) bool { l.count(n); return l.Limiter.AllowN(now, n) }

// Wait blocks until a permit is available (see ratelimit.Limiter.WaitN).
func (l *RateLimiter) Wait(ctx context.Context) error { l.count(1); return l.Limiter.Wait(ctx) }

// WaitN is ratelimit.Limiter.WaitN, counted in adaptive mode.
func (l *RateLimiter) WaitN(ctx context.Context, n int) error {
	l.count(n)
	return l.Limiter.WaitN(ctx, n)
}

// Reserve is ratelimit.Limiter.Reserve, counted in adaptive mode.
func (l *RateLimiter) Reserve() *ratelimit.Reservation { l.count(1); return l.Limiter.Reserve() }

// ReserveN is ratelimit.Limiter.ReserveN, counted in adaptive mode.
func (l *RateLimiter) ReserveN(now time.Time, n int) *ratelimit.Reservation {
	l.count(n)
	return l.Limiter.ReserveN(now, n)
}

// Gauge enforces a gauge resource's lease: at most floor(capacity)
// operations in flight at once (a counting semaphore whose size follows the
// resource's capacity; lowering it never revokes a held slot, it only stops
// new acquisitions until enough are released). It is safe for concurrent
// use.
//
// Source: doorman-design.md, "Client library" (GaugeResource).
type Gauge struct {
	*ratelimit.Gauge
	res    *Resource
	mu     sync.Mutex
	adapt  *adapter
	asking atomic.Int64 // slots held + callers waiting
	peak   atomic.Int64 // the most asking since the last measurement
}

// NewGauge returns a gauge bound to r's capacity.
func NewGauge(r *Resource) *Gauge {
	g := &Gauge{Gauge: ratelimit.NewGauge(0), res: r}
	r.OnChange(func(capacity float64) { g.Gauge.SetCapacity(capacity) })
	return g
}

func (g *Gauge) enter() {
	n := g.asking.Add(1)
	for {
		p := g.peak.Load()
		if n <= p || g.peak.CompareAndSwap(p, n) {
			return
		}
	}
}

// Acquire blocks until a slot is free and takes it (see
// ratelimit.Gauge.Acquire); release it with Release.
func (g *Gauge) Acquire(ctx context.Context) error {
	g.enter()
	err := g.Gauge.Acquire(ctx)
	if err != nil {
		g.asking.Add(-1)
	}
	return err
}

// TryAcquire takes a slot if one is free now.
func (g *Gauge) TryAcquire() bool {
	g.enter()
	ok := g.Gauge.TryAcquire()
	if !ok {
		g.asking.Add(-1)
	}
	return ok
}

// Release gives back a slot taken with Acquire or TryAcquire.
func (g *Gauge) Release() {
	g.asking.Add(-1)
	g.Gauge.Release()
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
