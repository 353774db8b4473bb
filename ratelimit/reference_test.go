package ratelimit

// The SmoothBursty and SmoothWarmingUp limiter as it was before the
// lock-free SmoothBursty path (commit 8f36409): one mutex around Guava's
// storedPermits and nextFreeTicket. The property tests compare Limiter
// with it. Only the names are changed, WithClock, which the tests do not
// use, is left out, and two of its refunds are fixed: a reservation that
// took nothing gives nothing back (took), and one cancelled by its time
// puts back the SmoothBursty schedule it found (found; see refundAt).

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"
)

// refLimiter is a smooth rate limiter: permits are issued at a steady rate
// (permits per second) and unused permits are stored for later. A request
// for more permits than are available is granted as soon as the previous
// request's permits are paid for, and makes the next request wait ("pays
// ahead"), exactly like Guava's RateLimiter. Two behaviours:
//
//   - SmoothBursty (newRefLimiter): up to maxBurstSeconds × rate stored
//     permits, handed out at once.
//   - SmoothWarmingUp (newRefWarmingUp): after a period of disuse stored
//     permits are handed out slowly — at coldFactor × the stable interval
//     at first, speeding up linearly to the stable rate over the warm-up
//     period (Guava's trapezoid) — and a new limiter starts cold.
//
// The zero rate admits nothing; +Inf admits everything. It is safe for
// concurrent use.
//
// The zero value is usable: a SmoothBursty limiter at rate 0 with no stored
// permits (maxBurstSeconds 0) reading time.Now, as newRefLimiter(0, 0) returns.
// Like golang.org/x/time/rate's zero refLimiter it admits nothing — Allow is
// false, Reserve is not OK, Wait blocks until the rate changes or its
// context ends, Tokens is 0 — until SetRate gives it a rate; it then
// spaces permits at that rate and stores none. A refLimiter must not be copied
// after first use.
//
// Source: guava-ratelimiter.md, "SmoothRateLimiter", "SmoothBursty",
// "SmoothWarmingUp".
type refLimiter struct {
	mu    sync.Mutex
	rate  float64 // permits per second
	burst float64 // SmoothBursty: max stored, in seconds of rate

	warmup     float64 // SmoothWarmingUp: warm-up period in seconds (0: bursty)
	coldFactor float64
	threshold  float64 // permits above which the slope applies
	slope      float64 // seconds per permit per permit above threshold

	stored    float64 // stored permits
	maxStored float64
	interval  float64   // seconds per permit at the stable rate (1/rate)
	cool      float64   // seconds to store one permit while unused
	nextFree  time.Time // when the next request may be granted
	started   bool
	changed   *refRateChange // the next rate change; its ch closes when it happens
	nowFn     func() time.Time
}

// refOption configures a refLimiter.
type refOption func(*refLimiter)

// newRefLimiter returns a SmoothBursty limiter issuing rate permits per second
// with up to maxBurstSeconds of stored permits (Guava's default is 1; 0
// stores nothing; negative or NaN count as 0). It starts with none stored.
func newRefLimiter(rate float64, maxBurstSeconds float64, opts ...refOption) *refLimiter {
	if !(maxBurstSeconds > 0) {
		maxBurstSeconds = 0
	}
	l := &refLimiter{burst: maxBurstSeconds, changed: newRefRateChange(), nowFn: time.Now}
	for _, o := range opts {
		o(l)
	}
	l.setRate(refSanitize(rate))
	return l
}

// newRefWarmingUp returns a SmoothWarmingUp limiter at rate permits per second
// with the given warm-up period and cold factor (Guava fixes it at 3; values
// below 1 count as 3). It starts cold: the first permits after creation, or
// after a long disuse, come coldFactor times slower than the stable rate,
// reaching the stable rate after warmup. warmup ≤ 0 makes it SmoothBursty
// with no burst.
func newRefWarmingUp(rate float64, warmup time.Duration, coldFactor float64, opts ...refOption) *refLimiter {
	if warmup <= 0 {
		return newRefLimiter(rate, 0, opts...)
	}
	if !(coldFactor >= 1) || math.IsInf(coldFactor, 0) {
		coldFactor = 3
	}
	l := &refLimiter{warmup: warmup.Seconds(), coldFactor: coldFactor, changed: newRefRateChange(), nowFn: time.Now}
	for _, o := range opts {
		o(l)
	}
	l.setRate(refSanitize(rate))
	return l
}

func refSanitize(rate float64) float64 {
	if !(rate > 0) { // negative, zero or NaN
		return 0
	}
	return rate
}

// setRate installs a rate and rescales the stored permits (Guava's
// doSetRate). The caller holds l.mu (or owns l).
func (l *refLimiter) setRate(rate float64) {
	old := l.maxStored
	l.rate = rate
	switch {
	case math.IsInf(rate, 1):
		l.maxStored = math.Inf(1)
	case rate == 0:
		l.maxStored = 0
	case l.warmup > 0:
		stable := 1 / rate
		cold := stable * l.coldFactor
		l.threshold = 0.5 * l.warmup / stable
		l.maxStored = l.threshold + 2*l.warmup/(stable+cold)
		l.slope = (cold - stable) / (l.maxStored - l.threshold)
	default:
		l.maxStored = l.burst * rate
	}
	switch {
	case l.warmup > 0 && math.IsInf(old, 1):
		l.stored = 0
	case l.warmup > 0 && old == 0:
		l.stored = l.maxStored // starts cold
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
	l.interval, l.cool = 0, 0
	if rate > 0 && !math.IsInf(rate, 1) {
		l.interval = 1 / rate
		l.cool = l.interval
		if l.warmup > 0 {
			l.cool = l.warmup / l.maxStored
		}
	}
}

// storedToWait is the time, in seconds, that taking take of the stored
// permits costs: nothing for SmoothBursty, the area under Guava's
// trapezoid for SmoothWarmingUp.
func (l *refLimiter) storedToWait(stored, take float64) float64 {
	if l.warmup == 0 {
		return 0
	}
	stable := l.interval
	above := stored - l.threshold
	secs := 0.0
	if above > 0 {
		takeAbove := min(above, take)
		length := l.permitsToTime(above) + l.permitsToTime(above-takeAbove)
		secs = takeAbove * length / 2
		take -= takeAbove
	}
	return secs + stable*take
}

func (l *refLimiter) permitsToTime(permits float64) float64 { return l.interval + permits*l.slope }

// Rate returns the rate in permits per second.
func (l *refLimiter) Rate() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rate
}

// SetRate sets the rate (permits per second) from now on.
func (l *refLimiter) SetRate(rate float64) { l.SetRateAt(l.now(), rate) }

// SetRateAt sets the rate from now on: permits accrued until now are
// counted at the old rate, the stored permits are scaled to the new
// maximum, permits already paid ahead (the time until the next permit is
// free, and every waiter's turn) are re-timed at the new rate, and blocked
// waiters re-evaluate. Setting the same rate is a no-op.
//
// Source: guava-ratelimiter.md, "setRate" (doSetRate).
func (l *refLimiter) SetRateAt(now time.Time, rate float64) {
	rate = refSanitize(rate)
	l.mu.Lock()
	defer l.mu.Unlock()
	if rate == l.rate {
		return
	}
	l.resync(now)
	old := l.rate
	l.setRate(rate)
	c := l.changeLocked()
	c.at = now
	switch {
	case rate == 0 || old == 0:
		c.factor = math.Inf(1) // waiters wait for the next change
		if old == 0 {
			c.factor = 0
		}
	case math.IsInf(rate, 1) || math.IsInf(old, 1):
		c.factor = 0
	default:
		c.factor = old / rate
	}
	if rate > 0 {
		l.nextFree = c.retime(l.nextFree)
	}
	l.changed = newRefRateChange()
	c.next = l.changed
	close(c.ch)
}

// refRateChange is one change of rate, in a chain: waiters hold the change
// they wait for, and on it re-time their turn and move on to the next.
type refRateChange struct {
	ch     chan struct{} // closed when the change has happened
	at     time.Time     // when
	factor float64       // old rate ÷ new rate: how time still to wait stretches
	next   *refRateChange
}

func newRefRateChange() *refRateChange { return &refRateChange{ch: make(chan struct{})} }

// changeLocked returns the next rate change, making it if the limiter is a
// zero value. The caller holds l.mu.
func (l *refLimiter) changeLocked() *refRateChange {
	if l.changed == nil {
		l.changed = newRefRateChange()
	}
	return l.changed
}

// now reads the limiter's clock: time.Now unless refWithClock set one.
func (l *refLimiter) now() time.Time {
	if l.nowFn == nil {
		return time.Now()
	}
	return l.nowFn()
}

// retime returns when a turn due at t comes after the change: the time
// still to wait after the change, scaled by old rate ÷ new rate.
func (c *refRateChange) retime(t time.Time) time.Time {
	if !t.After(c.at) {
		return t
	}
	if math.IsInf(c.factor, 1) {
		return c.at.Add(time.Duration(math.MaxInt64 / 2))
	}
	return c.at.Add(time.Duration(float64(t.Sub(c.at)) * c.factor))
}

// resync adds the permits stored since nextFree. Time going backwards
// counts as no time passing.
func (l *refLimiter) resync(now time.Time) {
	if !l.started {
		l.started = true
		l.nextFree = now
		return
	}
	if now.After(l.nextFree) {
		if l.rate > 0 && !math.IsInf(l.rate, 1) {
			l.stored = min(l.maxStored, l.stored+now.Sub(l.nextFree).Seconds()/l.cool)
		}
		l.nextFree = now
	}
}

// reserve takes n permits at now and returns when the caller may proceed
// and what to give back if the caller cancels. The caller holds l.mu and
// has checked 0 < rate < +Inf.
func (l *refLimiter) reserve(now time.Time, n float64) (at time.Time, spent float64, end time.Time) {
	l.resync(now)
	return l.reserveSynced(n)
}

// reserveSynced is reserve after resync.
func (l *refLimiter) reserveSynced(n float64) (at time.Time, spent float64, end time.Time) {
	at = l.nextFree
	spent = min(n, l.stored)
	fresh := n - spent
	wait := fresh * l.interval
	if l.warmup > 0 {
		wait += l.storedToWait(l.stored, spent)
	}
	l.nextFree = l.nextFree.Add(time.Duration(wait * float64(time.Second)))
	l.stored -= spent
	return at, spent, l.nextFree
}

// Allow reports whether one permit is available now, and takes it if so.
func (l *refLimiter) Allow() bool { return l.AllowN(l.now(), 1) }

// AllowAt is Allow at time now.
func (l *refLimiter) AllowAt(now time.Time) bool { return l.AllowN(now, 1) }

// AllowN reports whether n permits can be taken at now without waiting,
// and takes them if so. n ≤ 0 is always allowed.
func (l *refLimiter) AllowN(now time.Time, n int) bool {
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
	l.reserveSynced(float64(n))
	return true
}

// Tokens returns the permits available now: stored permits, minus the
// permits already paid ahead (negative when callers are queued).
func (l *refLimiter) Tokens() float64 { return l.TokensAt(l.now()) }

// TokensAt is Tokens at time now. It does not change the limiter.
func (l *refLimiter) TokensAt(now time.Time) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if math.IsInf(l.rate, 1) {
		return math.Inf(1)
	}
	if !l.started || l.rate == 0 {
		return l.stored
	}
	if now.After(l.nextFree) {
		return min(l.maxStored, l.stored+now.Sub(l.nextFree).Seconds()/l.cool)
	}
	return l.stored - l.nextFree.Sub(now).Seconds()*l.rate
}

// refReservation is permits taken in advance by Reserve: the caller may act
// after Delay, or Cancel to give them back. Its time is fixed when it is
// made: unlike a waiting Wait, it is not re-timed by a later SetRate.
type refReservation struct {
	l        *refLimiter
	ok       bool
	at, end  time.Time
	spent    float64
	took     bool      // false when nothing was taken (n ≤ 0, rate +Inf): nothing to give back
	found    *refFound // SmoothBursty: the schedule as the reservation found it
	mu       sync.Mutex
	canceled bool
}

// OK reports whether the permits will ever be available: false at rate 0
// (nothing was taken).
func (r *refReservation) OK() bool { return r.ok }

// Delay is DelayFrom(now), with the limiter's clock.
func (r *refReservation) Delay() time.Duration { return r.DelayFrom(r.l.now()) }

// DelayFrom returns how long after now the caller must wait before acting:
// 0 if at once, math.MaxInt64 if the reservation is not OK.
func (r *refReservation) DelayFrom(now time.Time) time.Duration {
	if !r.ok {
		return time.Duration(math.MaxInt64)
	}
	return max(r.at.Sub(now), 0)
}

// Cancel is CancelAt(now), with the limiter's clock.
func (r *refReservation) Cancel() { r.CancelAt(r.l.now()) }

// CancelAt gives the permits back, as far as that can be done: if no later
// reservation queued behind this one, the limiter's schedule goes back to
// what it was (from now, if the reservation's time has passed) and the
// stored permits it used are restored; otherwise the later reservations'
// times stand and nothing is refunded. Cancelling twice, or cancelling a
// reservation that is not OK, does nothing.
func (r *refReservation) CancelAt(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.ok || !r.took || r.canceled {
		return
	}
	r.canceled = true
	r.l.refundAt(now, r.at, r.spent, r.end, r.found)
}

// refFound is a SmoothBursty schedule as a reservation found it, before
// the reservation's resync: its next free time and stored permits.
type refFound struct {
	nextFree time.Time
	stored   float64
}

// Reserve is ReserveN(now, 1), with the limiter's clock.
func (l *refLimiter) Reserve() *refReservation { return l.ReserveN(l.now(), 1) }

// ReserveN takes n permits at now, paying ahead like Wait, and returns the
// reservation: act after its Delay, or Cancel it. At rate 0 the reservation
// is not OK and takes nothing; n ≤ 0 and rate +Inf are OK at once.
func (l *refLimiter) ReserveN(now time.Time, n int) *refReservation {
	r := &refReservation{l: l, ok: true, at: now, end: now}
	if n <= 0 {
		return r
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.rate == 0:
		r.ok = false
		return r
	case math.IsInf(l.rate, 1):
		return r
	}
	found := &refFound{nextFree: l.nextFree, stored: l.stored}
	if !l.started {
		found.nextFree = now // nothing stored, nothing paid ahead
	}
	r.at, r.spent, r.end = l.reserve(now, float64(n))
	r.took = true
	if l.warmup == 0 {
		r.found = found
	}
	return r
}

// Wait blocks until one permit is available and takes it.
func (l *refLimiter) Wait(ctx context.Context) error { return l.WaitN(ctx, 1) }

// WaitN blocks until n permits are available and takes them. If the wait
// would pass ctx's deadline it returns at once, without waiting or taking
// permits, an error that wraps context.DeadlineExceeded. If ctx is done
// while waiting it returns an error wrapping ctx.Err() and gives back the
// permits if no later caller has queued behind them. If the rate changes
// while it waits, it waits again at the new rate. At rate 0 it waits until
// the rate changes or ctx is done. n ≤ 0 returns nil at once.
func (l *refLimiter) WaitN(ctx context.Context, n int) error {
	if n <= 0 {
		return nil
	}
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("ratelimit: %w", err)
		}
		now := l.now()
		l.mu.Lock()
		if l.rate == 0 {
			ch := l.changeLocked().ch
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
		change := l.changeLocked()
		l.mu.Unlock()
		for {
			if !at.After(now) {
				return nil
			}
			t := time.NewTimer(at.Sub(now))
			select {
			case <-t.C:
				return nil
			case <-ctx.Done():
				t.Stop()
				l.refundAt(l.now(), at, spent, end, nil)
				return fmt.Errorf("ratelimit: %w", ctx.Err())
			case <-change.ch:
				// The rate changed while waiting: the turn moves as the
				// limiter's schedule did (SetRateAt re-timed it the same
				// way), so the new rate applies from that moment.
				t.Stop()
				l.mu.Lock()
				at, end = change.retime(at), change.retime(end)
				change = change.next
				l.mu.Unlock()
				now = l.now()
			}
		}
	}
}

// refundAt gives back a cancelled reservation if nobody queued behind it.
// found, if not nil, is the SmoothBursty schedule as the reservation found
// it.
func (l *refLimiter) refundAt(now, at time.Time, spent float64, end time.Time, found *refFound) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.nextFree.Equal(end) {
		return // later callers are queued behind it; their times stand
	}
	if found != nil && !now.After(at) {
		// Fix (not in 8f36409): cancelled by its time, the reservation puts
		// back the schedule exactly as it found it. Setting nextFree to at
		// with the permits stored since restored is the same schedule when
		// the reservation's resync moved nextFree from an earlier
		// reservation's end to now, but that reservation's end no longer
		// equals nextFree, and its refund, in turn, was refused: whether
		// cancelling A after cancelling B (reserved after A) refunded A
		// hung on whether B came at A's end or a ns later. Limiter keeps
		// one tat and refunds A (TestBurstyCancelInTurnAfterStoring).
		// SmoothWarmingUp keeps the old rule (found is nil), as warmup.go
		// does.
		l.nextFree, l.stored = found.nextFree, found.stored
		return
	}
	if at.Before(now) {
		at = now
	}
	l.nextFree = at
	l.stored = min(l.maxStored, l.stored+spent)
}
