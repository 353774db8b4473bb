// Package ratelimit holds the local limiters that enforce a lease: a smooth
// rate limiter with Guava's SmoothBursty semantics, and a gauge (a counting
// semaphore) for in-flight limits. Time is an input: every time-dependent
// method has an ...At(now) twin, and the blocking methods use timers only,
// so tests run them on fake time (testing/synctest).
//
// Source: guava-ratelimiter.md; doorman-design.md, "Client library".
package ratelimit

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"
)

// Limiter is a smooth rate limiter: permits are issued at a steady rate
// (permits per second), and up to maxBurstSeconds × rate unused permits are
// stored for later bursts. A request for more permits than are available is
// granted as soon as the previous request's permits are paid for, and makes
// the next request wait ("pays ahead"), exactly like Guava's SmoothBursty.
// The zero rate admits nothing; +Inf admits everything. It is safe for
// concurrent use.
//
// Source: guava-ratelimiter.md, "SmoothBursty".
type Limiter struct {
	mu        sync.Mutex
	rate      float64 // permits per second
	burst     float64 // max stored, in seconds
	stored    float64 // stored permits
	maxStored float64
	nextFree  time.Time // when the next request may be granted
	changed   chan struct{}
	started   bool
	nowFn     func() time.Time
}

// NewLimiter returns a limiter issuing rate permits per second with up to
// maxBurstSeconds of stored permits (Guava's default is 1; 0 stores
// nothing; negative or NaN count as 0). It starts with no stored permits.
func NewLimiter(rate float64, maxBurstSeconds float64) *Limiter {
	if !(maxBurstSeconds > 0) {
		maxBurstSeconds = 0
	}
	l := &Limiter{burst: maxBurstSeconds, changed: make(chan struct{}), nowFn: time.Now}
	l.rate = sanitize(rate)
	l.maxStored = l.maxPermits()
	return l
}

func sanitize(rate float64) float64 {
	if !(rate > 0) { // negative, zero or NaN
		return 0
	}
	return rate
}

func (l *Limiter) maxPermits() float64 {
	if math.IsInf(l.rate, 1) {
		return math.Inf(1)
	}
	return l.burst * l.rate
}

// Rate returns the rate in permits per second.
func (l *Limiter) Rate() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rate
}

// SetRate sets the rate (permits per second) from now on.
func (l *Limiter) SetRate(rate float64) { l.SetRateAt(l.nowFn(), rate) }

// SetRateAt sets the rate from now on: permits accrued until now are
// counted at the old rate, the stored permits are scaled to the new
// maximum, and blocked waiters re-evaluate. Setting the same rate is a
// no-op.
//
// Source: guava-ratelimiter.md, "setRate" (SmoothBursty.doSetRate).
func (l *Limiter) SetRateAt(now time.Time, rate float64) {
	rate = sanitize(rate)
	l.mu.Lock()
	defer l.mu.Unlock()
	if rate == l.rate {
		return
	}
	l.resync(now)
	old := l.maxStored
	l.rate = rate
	l.maxStored = l.maxPermits()
	switch {
	case math.IsInf(old, 1):
		l.stored = l.maxStored
	case old == 0:
		l.stored = 0
	default:
		l.stored = l.stored * l.maxStored / old
	}
	if math.IsNaN(l.stored) || math.IsInf(l.stored, 0) {
		l.stored = 0
	}
	close(l.changed)
	l.changed = make(chan struct{})
}

// resync adds the permits accrued since nextFree. Time going backwards
// counts as no time passing.
func (l *Limiter) resync(now time.Time) {
	if !l.started {
		l.started = true
		l.nextFree = now
		return
	}
	if now.After(l.nextFree) {
		if l.rate > 0 && !math.IsInf(l.rate, 1) {
			l.stored = math.Min(l.maxStored, l.stored+now.Sub(l.nextFree).Seconds()*l.rate)
		}
		l.nextFree = now
	}
}

// reserve takes n permits at now and returns when the caller may proceed
// and what to give back if the caller cancels. The caller holds l.mu and
// has checked 0 < rate < +Inf.
func (l *Limiter) reserve(now time.Time, n float64) (at time.Time, spent float64, end time.Time) {
	l.resync(now)
	at = l.nextFree
	spent = math.Min(n, l.stored)
	fresh := n - spent
	l.nextFree = l.nextFree.Add(time.Duration(fresh / l.rate * float64(time.Second)))
	l.stored -= spent
	return at, spent, l.nextFree
}

// Allow reports whether one permit is available now, and takes it if so.
func (l *Limiter) Allow() bool { return l.AllowN(l.nowFn(), 1) }

// AllowAt is Allow at time now.
func (l *Limiter) AllowAt(now time.Time) bool { return l.AllowN(now, 1) }

// AllowN reports whether n permits can be taken at now without waiting,
// and takes them if so. n ≤ 0 is always allowed.
func (l *Limiter) AllowN(now time.Time, n int) bool {
	if n <= 0 {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.rate == 0:
		return false
	case math.IsInf(l.rate, 1):
		return true
	}
	l.resync(now)
	if l.nextFree.After(now) {
		return false
	}
	l.reserve(now, float64(n))
	return true
}

// Tokens returns the permits available now: stored permits, minus the
// permits already paid ahead (negative when callers are queued).
func (l *Limiter) Tokens() float64 { return l.TokensAt(l.nowFn()) }

// TokensAt is Tokens at time now. It does not change the limiter.
func (l *Limiter) TokensAt(now time.Time) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if math.IsInf(l.rate, 1) {
		return math.Inf(1)
	}
	if !l.started || l.rate == 0 {
		return l.stored
	}
	if now.After(l.nextFree) {
		return math.Min(l.maxStored, l.stored+now.Sub(l.nextFree).Seconds()*l.rate)
	}
	return l.stored - l.nextFree.Sub(now).Seconds()*l.rate
}

// Wait blocks until one permit is available and takes it.
func (l *Limiter) Wait(ctx context.Context) error { return l.WaitN(ctx, 1) }

// WaitN blocks until n permits are available and takes them. If the wait
// would pass ctx's deadline it returns at once, without waiting or taking
// permits, an error that wraps context.DeadlineExceeded. If ctx is done
// while waiting it returns an error wrapping ctx.Err() and gives back the
// permits if no later caller has queued behind them. At rate 0 it waits
// until the rate changes or ctx is done. n ≤ 0 returns nil at once.
func (l *Limiter) WaitN(ctx context.Context, n int) error {
	if n <= 0 {
		return nil
	}
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("ratelimit: %w", err)
		}
		now := l.nowFn()
		l.mu.Lock()
		if l.rate == 0 {
			ch := l.changed
			l.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return fmt.Errorf("ratelimit: waiting at rate 0: %w", ctx.Err())
			}
		}
		if math.IsInf(l.rate, 1) {
			l.mu.Unlock()
			return nil
		}
		l.resync(now)
		if dl, ok := ctx.Deadline(); ok && l.nextFree.After(dl) {
			wait := l.nextFree.Sub(now)
			l.mu.Unlock()
			return fmt.Errorf("ratelimit: wait of %v would pass the deadline: %w", wait, context.DeadlineExceeded)
		}
		at, spent, end := l.reserve(now, float64(n))
		l.mu.Unlock()
		if !at.After(now) {
			return nil
		}
		t := time.NewTimer(at.Sub(now))
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			t.Stop()
			l.refund(at, spent, end)
			return fmt.Errorf("ratelimit: %w", ctx.Err())
		}
	}
}

// refund gives back a cancelled reservation if nobody queued behind it.
func (l *Limiter) refund(at time.Time, spent float64, end time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.nextFree.Equal(end) {
		return // later callers are queued behind it; their times stand
	}
	now := l.nowFn()
	if at.Before(now) {
		at = now
	}
	l.nextFree = at
	l.stored = math.Min(l.maxStored, l.stored+spent)
}
