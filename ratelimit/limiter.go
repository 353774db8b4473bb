// Package ratelimit holds the local limiters that enforce a lease: a smooth
// rate limiter with Guava's semantics (SmoothBursty and SmoothWarmingUp),
// and a gauge (a counting semaphore) for in-flight limits. Time is an
// input: every time-dependent method has a twin taking now, the clock is
// injectable (WithClock), and the blocking methods use timers only, so tests
// run them on fake time (testing/synctest).
//
// Source: guava-ratelimiter.md; doorman-design.md, "Client library".
package ratelimit

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Limiter is a smooth rate limiter: permits are issued at a steady rate
// (permits per second) and unused permits are stored for later. A request
// for more permits than are available is granted as soon as the previous
// request's permits are paid for, and makes the next request wait ("pays
// ahead"), exactly like Guava's RateLimiter. Two behaviours:
//
//   - SmoothBursty (NewLimiter): up to maxBurstSeconds × rate stored
//     permits, handed out at once.
//   - SmoothWarmingUp (NewWarmingUp): after a period of disuse stored
//     permits are handed out slowly — at coldFactor × the stable interval
//     at first, speeding up linearly to the stable rate over the warm-up
//     period (Guava's trapezoid) — and a new limiter starts cold.
//
// The zero rate admits nothing; +Inf admits everything.
//
// The zero value is usable: a SmoothBursty limiter at rate 0 with no stored
// permits (maxBurstSeconds 0) reading time.Now, as NewLimiter(0, 0) returns.
// Like golang.org/x/time/rate's zero Limiter it admits nothing — Allow is
// false, Reserve is not OK, Wait blocks until the rate changes or its
// context ends, Tokens is 0 — until SetRate gives it a rate; it then
// spaces permits at that rate and stores none. A Limiter must not be copied
// after first use.
//
// # Concurrency
//
// A Limiter is safe for concurrent use. SmoothWarmingUp does everything
// under a mutex. SmoothBursty takes permits without a lock: Guava's stored
// permits and next free time are one number, the theoretical arrival time
// of a GCRA (tat): the schedule stands tat − now ahead of now when permits
// are paid ahead, and stores (now − tat) × rate permits, at most
// maxBurstSeconds' worth, when it lags. Allow, Reserve and Wait read tat
// and an immutable schedule (rate, burst, the time tat counts from), and
// take permits with one compare-and-swap on tat; a refused Allow only
// reads. SetRate, a refund (Cancel, or a Wait whose context ends) and the
// very first call change the schedule under a mutex: they set tat to a
// marker that makes other callers wait for the mutex, install a new
// schedule, and store the new tat. The stored tat always grows — a change
// that moves the schedule back counts tat from a new origin instead — so
// tat never takes a value twice, and a compare-and-swap succeeds only on
// the state, schedule included, that its caller read (no ABA): every
// operation takes effect at one instant, in one order, as under a lock.
//
// Calls need not arrive in time order (concurrent callers read the clock
// before they reach the limiter): each is judged at its own now against
// the schedule as it stands. A SmoothBursty call earlier than the schedule
// has reached is admitted only if a permit was free by then, and finds the
// permits stored up to its own now; SmoothWarmingUp counts time going
// backwards as no time passing.
//
// Source: guava-ratelimiter.md, "SmoothRateLimiter", "SmoothBursty",
// "SmoothWarmingUp".
type Limiter struct {
	// SmoothBursty: tat, in ns since sched.Load().base (or busy), and its
	// schedule; the zero value's nil schedule is rate 0.
	tat   atomic.Int64
	sched atomic.Pointer[schedule]

	mu    sync.Mutex // serializes schedule changes; guards warm
	warm  *warmingUp // SmoothWarmingUp's state; nil for SmoothBursty
	nowFn func() time.Time
}

// Option configures a Limiter.
type Option func(*Limiter)

// WithClock makes the limiter read time from now instead of time.Now (for
// the methods without a now argument, and Wait's deadline checks); nil
// means time.Now.
func WithClock(now func() time.Time) Option { return func(l *Limiter) { l.nowFn = now } }

// NewLimiter returns a SmoothBursty limiter issuing rate permits per second
// with up to maxBurstSeconds of stored permits (Guava's default is 1; 0
// stores nothing; negative or NaN count as 0). It starts with none stored.
func NewLimiter(rate float64, maxBurstSeconds float64, opts ...Option) *Limiter {
	l := &Limiter{}
	for _, o := range opts {
		o(l)
	}
	l.sched.Store(newSchedule(sanitize(rate), maxBurstSeconds))
	return l
}

// NewWarmingUp returns a SmoothWarmingUp limiter at rate permits per second
// with the given warm-up period and cold factor (Guava fixes it at 3; values
// below 1 count as 3). It starts cold: the first permits after creation, or
// after a long disuse, come coldFactor times slower than the stable rate,
// reaching the stable rate after warmup. warmup ≤ 0 makes it SmoothBursty
// with no burst.
func NewWarmingUp(rate float64, warmup time.Duration, coldFactor float64, opts ...Option) *Limiter {
	if warmup <= 0 {
		return NewLimiter(rate, 0, opts...)
	}
	if !(coldFactor >= 1) || math.IsInf(coldFactor, 0) {
		coldFactor = 3
	}
	l := &Limiter{warm: &warmingUp{warmup: warmup.Seconds(), coldFactor: coldFactor, changed: newRateChange()}}
	for _, o := range opts {
		o(l)
	}
	l.warm.setRate(sanitize(rate))
	return l
}

func sanitize(rate float64) float64 {
	if !(rate > 0) { // negative, zero or NaN
		return 0
	}
	return rate
}

// now reads the limiter's clock: time.Now unless WithClock set one.
func (l *Limiter) now() time.Time {
	if l.nowFn == nil {
		return time.Now()
	}
	return l.nowFn()
}

// Rate returns the rate in permits per second.
func (l *Limiter) Rate() float64 {
	if l.warm != nil {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.warm.rate
	}
	if s := l.sched.Load(); s != nil {
		return s.rate
	}
	return 0
}

// SetRate sets the rate (permits per second) from now on.
func (l *Limiter) SetRate(rate float64) { l.SetRateAt(l.now(), rate) }

// SetRateAt sets the rate from now on: permits accrued until now are
// counted at the old rate, the stored permits are scaled to the new
// maximum, permits already paid ahead (the time until the next permit is
// free, and every waiter's turn) are re-timed at the new rate, and blocked
// waiters re-evaluate. Setting the same rate is a no-op.
//
// Source: guava-ratelimiter.md, "setRate" (doSetRate).
func (l *Limiter) SetRateAt(now time.Time, rate float64) {
	rate = sanitize(rate)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.warm != nil {
		l.warm.setRateAt(now, rate)
		return
	}
	l.setRateLocked(now, rate)
}

// rateChange is one change of rate, in a chain: waiters hold the change
// they wait for, and on it re-time their turn and move on to the next.
type rateChange struct {
	ch     chan struct{} // closed when the change has happened
	at     time.Time     // when
	factor float64       // old rate ÷ new rate: how time still to wait stretches
	next   *rateChange
}

func newRateChange() *rateChange { return &rateChange{ch: make(chan struct{})} }

// retimeFactor is how time still to wait stretches when the rate goes from
// old to rate: old ÷ rate; +Inf (wait for the next change) when it becomes
// 0, and 0 (at once) when it leaves 0 or +Inf or becomes +Inf.
func retimeFactor(old, rate float64) float64 {
	switch {
	case old == 0:
		return 0
	case rate == 0:
		return math.Inf(1)
	case math.IsInf(rate, 1) || math.IsInf(old, 1):
		return 0
	}
	return old / rate
}

// retime returns when a turn due at t comes after the change: the time
// still to wait after the change, scaled by old rate ÷ new rate.
func (c *rateChange) retime(t time.Time) time.Time {
	if !t.After(c.at) {
		return t
	}
	if math.IsInf(c.factor, 1) {
		return c.at.Add(time.Duration(math.MaxInt64 / 2))
	}
	return c.at.Add(time.Duration(float64(t.Sub(c.at)) * c.factor))
}

// outcome is what a request for permits came to.
type outcome int

const (
	never outcome = iota // rate 0: not until the rate changes; nothing taken
	late                 // the permits come after the caller's limit; nothing taken
	free                 // rate +Inf: at once; nothing taken
	taken                // taken: the claim says when the caller may act
)

// claim is what a request took, as its limiter needs it to give it back.
type claim struct {
	at, end time.Time // when the caller may act; where it left the schedule
	// SmoothBursty: the schedule's rate changes so far, and the stored
	// permits the claim found, as time at rate: how far tat lagged behind
	// the claim's now, not capped at the burst, so that a refund puts tat
	// back exactly.
	gen    uint64
	stored time.Duration
	rate   float64
	spent  float64 // SmoothWarmingUp: the stored permits it used
	// refundable is false once a rate change came after end: the schedule
	// has moved past the claim (Guava's resync), and nothing is refunded.
	refundable bool
}

// follow moves the claim's times as the rate change c moved the schedule.
func (cl *claim) follow(c *rateChange) {
	if cl.end.Before(c.at) {
		cl.refundable = false
	}
	cl.at, cl.end = c.retime(cl.at), c.retime(cl.end)
	cl.gen++
}

// forever is a limit no permit comes after.
var forever = time.Unix(1<<62, 0)

// reserve takes n ≥ 1 permits at now unless the caller could act only after
// limit, and returns what happened, the claim, and the next rate change
// (the claim's times move with it).
func (l *Limiter) reserve(now, limit time.Time, n int) (outcome, claim, *rateChange) {
	if l.warm != nil {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.warm.reserve(now, limit, n)
	}
	return l.take(now, limit, n)
}

// refund gives back a cancelled claim, as far as that can be done.
func (l *Limiter) refund(now time.Time, c claim) {
	if !c.refundable {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.warm != nil {
		l.warm.refund(now, c)
		return
	}
	l.refundLocked(now, c)
}

// Allow reports whether one permit is available now, and takes it if so.
func (l *Limiter) Allow() bool {
	if l.nowFn == nil && l.warm == nil {
		return l.allow(time.Time{}, 1, true)
	}
	return l.AllowN(l.now(), 1)
}

// AllowAt is Allow at time now.
func (l *Limiter) AllowAt(now time.Time) bool { return l.AllowN(now, 1) }

// AllowN reports whether n permits can be taken at now without waiting,
// and takes them if so. n ≤ 0 is always allowed.
func (l *Limiter) AllowN(now time.Time, n int) bool {
	if n <= 0 {
		return true
	}
	if l.warm == nil {
		return l.allow(now, n, false)
	}
	res, _, _ := l.reserve(now, now, n)
	return res == taken || res == free
}

// Tokens returns the permits available now: stored permits, minus the
// permits already paid ahead (negative when callers are queued).
func (l *Limiter) Tokens() float64 { return l.TokensAt(l.now()) }

// TokensAt is Tokens at time now. It does not change the limiter.
func (l *Limiter) TokensAt(now time.Time) float64 {
	if l.warm == nil {
		return l.tokens(now)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.warm.tokensAt(now)
}

// Reservation is permits taken in advance by Reserve: the caller may act
// after Delay, or Cancel to give them back. Its time is fixed when it is
// made: unlike a waiting Wait, it is not re-timed by a later SetRate.
type Reservation struct {
	l        *Limiter
	ok       bool
	at       time.Time
	claim    claim
	mu       sync.Mutex
	canceled bool
}

// OK reports whether the permits will ever be available: false at rate 0
// (nothing was taken).
func (r *Reservation) OK() bool { return r.ok }

// Delay is DelayFrom(now), with the limiter's clock.
func (r *Reservation) Delay() time.Duration { return r.DelayFrom(r.l.now()) }

// DelayFrom returns how long after now the caller must wait before acting:
// 0 if at once, math.MaxInt64 if the reservation is not OK.
func (r *Reservation) DelayFrom(now time.Time) time.Duration {
	if !r.ok {
		return time.Duration(math.MaxInt64)
	}
	return max(r.at.Sub(now), 0)
}

// Cancel is CancelAt(now), with the limiter's clock.
func (r *Reservation) Cancel() { r.CancelAt(r.l.now()) }

// CancelAt gives the permits back, as far as that can be done: if nothing
// was taken from the limiter since the reservation and its rate has not
// changed, the limiter's schedule goes back to what it was (from now, if
// the reservation's time has passed) and the stored permits it used are
// restored; otherwise the later reservations' times stand and nothing is
// refunded. Cancelling twice, or cancelling a reservation that is not OK,
// does nothing.
func (r *Reservation) CancelAt(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.ok || r.canceled {
		return
	}
	r.canceled = true
	r.l.refund(now, r.claim)
}

// Reserve is ReserveN(now, 1), with the limiter's clock.
func (l *Limiter) Reserve() *Reservation { return l.ReserveN(l.now(), 1) }

// ReserveN takes n permits at now, paying ahead like Wait, and returns the
// reservation: act after its Delay, or Cancel it. At rate 0 the reservation
// is not OK and takes nothing; n ≤ 0 and rate +Inf are OK at once.
func (l *Limiter) ReserveN(now time.Time, n int) *Reservation {
	r := &Reservation{l: l, ok: true, at: now}
	if n <= 0 {
		return r
	}
	res, c, _ := l.reserve(now, forever, n)
	switch res {
	case never:
		r.ok = false
	case taken:
		r.at, r.claim = c.at, c
	}
	return r
}

// Wait blocks until one permit is available and takes it.
func (l *Limiter) Wait(ctx context.Context) error { return l.WaitN(ctx, 1) }

// WaitN blocks until n permits are available and takes them. If the wait
// would pass ctx's deadline it returns at once, without waiting or taking
// permits, an error that wraps context.DeadlineExceeded. If ctx is done
// while waiting it returns an error wrapping ctx.Err() and gives back the
// permits if nothing was taken from the limiter since. If the rate changes
// while it waits, it waits again at the new rate. At rate 0 it waits until
// the rate changes or ctx is done. n ≤ 0 returns nil at once.
func (l *Limiter) WaitN(ctx context.Context, n int) error {
	if n <= 0 {
		return nil
	}
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("ratelimit: %w", err)
		}
		now := l.now()
		limit, ok := ctx.Deadline()
		if !ok {
			limit = forever
		}
		res, c, change := l.reserve(now, limit, n)
		switch res {
		case never:
			if change = l.nextChange(change); change == nil {
				continue
			}
			select {
			case <-change.ch:
				continue
			case <-ctx.Done():
				return fmt.Errorf("ratelimit: waiting at rate 0: %w", ctx.Err())
			}
		case free:
			return nil
		case late:
			return fmt.Errorf("ratelimit: wait of %v would pass the deadline: %w", c.at.Sub(now), context.DeadlineExceeded)
		}
		for {
			if !c.at.After(now) {
				return nil
			}
			t := time.NewTimer(c.at.Sub(now))
			select {
			case <-t.C:
				return nil
			case <-ctx.Done():
				t.Stop()
				l.refund(l.now(), c)
				return fmt.Errorf("ratelimit: %w", ctx.Err())
			case <-change.ch:
				// The rate changed while waiting: the turn moves as the
				// limiter's schedule did (SetRateAt re-timed it the same
				// way), so the new rate applies from that moment.
				t.Stop()
				c.follow(change)
				change = change.next
				now = l.now()
			}
		}
	}
}

// nextChange returns the rate change a caller refused at rate 0 waits
// for: change, or for the zero value's missing schedule a new one's; nil
// if the rate has changed meanwhile (try again).
func (l *Limiter) nextChange(change *rateChange) *rateChange {
	if change != nil {
		return change
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sched.Load() != nil {
		return nil
	}
	s := &schedule{change: newRateChange()}
	l.sched.Store(s)
	return s.change
}
