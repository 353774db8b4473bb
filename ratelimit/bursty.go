package ratelimit

import (
	"math"
	"time"
)

// SmoothBursty without a lock: a GCRA whose theoretical arrival time (tat)
// is one atomic word, beside an immutable schedule. See Limiter's doc
// comment for the design.
//
// Source: guava-ratelimiter.md, "SmoothRateLimiter" (storedPermits and
// nextFreeTicketMicros are tat − now when paying ahead, and (now − tat) ×
// rate stored, at most maxPermits, when not), "SmoothBursty".

const (
	// busy is tat while a schedule change is under way (under l.mu):
	// callers that read it wait for the mutex and read again.
	busy = math.MinInt64
	// maxWord caps tat (about 146 years after base): permits paid further
	// ahead than that never come.
	maxWord = math.MaxInt64 >> 1
)

// schedule is a SmoothBursty limiter's rate and what its tat means. It is
// immutable: SetRate, a refund and the first call install a new one.
type schedule struct {
	rate      float64 // permits per second: 0 admits nothing, +Inf everything
	burst     float64 // maxBurstSeconds
	maxStored float64 // burst × rate: the most permits stored
	interval  float64 // seconds per permit (1 / rate)
	perPermit int64   // ns per permit: the interval in ns, truncated
	burstNs   int64   // the furthest tat lags behind now: burst in ns

	// started is set by the first call at a finite rate, which finds
	// nothing stored and nothing paid ahead (Guava's first acquire); until
	// then tat means nothing.
	started bool
	base    time.Time // tat counts ns since base

	gen    uint64      // rate changes so far
	change *rateChange // the rate change that replaces this schedule
}

// newSchedule returns a schedule at rate with maxBurstSeconds burst, not
// started.
func newSchedule(rate, burst float64) *schedule {
	if !(burst > 0) { // negative or NaN
		burst = 0
	}
	s := &schedule{burst: burst, change: newRateChange()}
	s.setRate(rate)
	return s
}

// setRate sets the rate of a schedule not yet installed.
func (s *schedule) setRate(rate float64) {
	s.rate = rate
	s.maxStored, s.interval, s.perPermit, s.burstNs = 0, 0, 0, 0
	switch {
	case math.IsInf(rate, 1):
		s.maxStored = math.Inf(1)
	case rate > 0:
		s.maxStored = s.burst * rate
		s.interval = 1 / rate
		s.perPermit = toNs(s.interval)
		s.burstNs = toNs(s.burst)
	}
}

// charge is how far n permits move tat, in ns: n × the interval,
// truncated (as Guava's reserveEarliestAvailable, in nanoseconds).
func (s *schedule) charge(n int) int64 {
	if n == 1 {
		return s.perPermit
	}
	return toNs(float64(n) * s.interval)
}

// toNs converts seconds ≥ 0 to ns, truncating, at most maxWord.
func toNs(seconds float64) int64 {
	ns := seconds * float64(time.Second)
	if !(ns < maxWord) {
		return maxWord
	}
	return int64(ns)
}

// addSat is a + b for b ≥ 0, at most maxWord (or a, if a is more).
func addSat(a, b int64) int64 {
	if a > maxWord-b {
		return max(a, maxWord)
	}
	return a + b
}

// subSat is a − b for b ≥ 0, at least math.MinInt64.
func subSat(a, b int64) int64 {
	if a < math.MinInt64+b {
		return math.MinInt64
	}
	return a - b
}

// allow is AllowN for SmoothBursty: take's fast path, for a caller that
// will not wait. With clock set it reads the limiter's default clock
// itself, as time.Since(base): the monotonic clock alone, which is all
// now.Sub(base) would use of time.Now(), and half the cost.
func (l *Limiter) allow(now time.Time, n int, clock bool) bool {
	var (
		t  int64     // now, in ns since ts.base
		ts *schedule // the schedule t was read for; a retry on it keeps t
	)
	for {
		x := l.tat.Load() // before the schedule: see take
		s := l.sched.Load()
		switch {
		case s == nil || s.rate == 0:
			return false
		case math.IsInf(s.rate, 1):
			return true
		case x == busy || !s.started:
			if clock {
				now = time.Now()
			}
			l.settle(now)
			continue
		}
		if s != ts { // a lost compare-and-swap retries at the same instant
			if clock {
				t = int64(time.Since(s.base))
			} else {
				t = int64(now.Sub(s.base))
			}
			ts = s
		}
		if x > t { // the next permit is not free yet
			if l.tat.Load() == x { // x and s belong together
				return false
			}
			continue
		}
		if l.tat.CompareAndSwap(x, addSat(max(x, subSat(t, s.burstNs)), s.charge(n))) {
			return true
		}
	}
}

// take takes n ≥ 1 permits at now unless the caller could act only after
// limit, and returns what happened, the claim, and the rate change the
// claim's times move with.
//
// It reads tat before the schedule: a schedule is installed only while tat
// is busy, and tat never comes back to a value, so if tat is still x when
// take swaps it (or reads it again) nothing was installed since x was read,
// and s is x's schedule.
func (l *Limiter) take(now, limit time.Time, n int) (outcome, claim, *rateChange) {
	for {
		x := l.tat.Load()
		s := l.sched.Load()
		switch {
		case s == nil:
			return never, claim{}, nil
		case s.rate == 0:
			return never, claim{}, s.change
		case math.IsInf(s.rate, 1):
			return free, claim{at: now}, s.change
		case x == busy || !s.started:
			l.settle(now)
			continue
		}
		t := int64(now.Sub(s.base))
		tat := max(x, subSat(t, s.burstNs)) // with the permits stored since x
		at := max(tat, t)                   // when the caller may act
		if at > int64(limit.Sub(s.base)) {
			if l.tat.Load() != x {
				continue
			}
			return late, claim{at: s.base.Add(time.Duration(at))}, s.change
		}
		y := addSat(tat, s.charge(n))
		if l.tat.CompareAndSwap(x, y) {
			return taken, claim{
				at:         s.base.Add(time.Duration(at)),
				end:        s.base.Add(time.Duration(y)),
				gen:        s.gen,
				stored:     time.Duration(max(0, t-x)),
				rate:       s.rate,
				refundable: true,
			}, s.change
		}
	}
}

// tokens is TokensAt for SmoothBursty.
func (l *Limiter) tokens(now time.Time) float64 {
	for {
		x := l.tat.Load()
		s := l.sched.Load()
		switch {
		case s != nil && math.IsInf(s.rate, 1):
			return math.Inf(1)
		case s == nil || s.rate == 0 || !s.started:
			return 0
		case x == busy:
			l.mu.Lock()
			l.mu.Unlock() // the change under way is done
			continue
		}
		if l.tat.Load() != x {
			continue
		}
		lag := subSat(int64(now.Sub(s.base)), x) // stored, or paid ahead if negative
		switch {
		case lag >= s.burstNs:
			return s.maxStored
		case lag >= 0:
			return time.Duration(lag).Seconds() / s.interval
		}
		return time.Duration(lag).Seconds() * s.rate
	}
}

// settle waits for a schedule change under way, or starts the schedule at
// now: nothing stored, nothing paid ahead.
func (l *Limiter) settle(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.sched.Load()
	if s.started {
		return
	}
	x := l.tat.Swap(busy)
	started := *s
	started.started = true
	l.install(&started, x, now)
}

// install makes s the schedule, with tat at the time tat. The caller holds
// l.mu and has swapped tat for busy; x is the value it held. The new tat is
// x + 1, counted from a base chosen to make it mean tat: tat grows, even
// when the schedule moves back.
func (l *Limiter) install(s *schedule, x int64, tat time.Time) {
	s.base = tat.Add(-time.Duration(x + 1))
	l.sched.Store(s)
	l.tat.Store(x + 1)
}

// setRateLocked is SetRateAt for SmoothBursty. The caller holds l.mu.
func (l *Limiter) setRateLocked(now time.Time, rate float64) {
	s := l.sched.Load()
	if s == nil {
		s = &schedule{} // the zero value: rate 0, no burst, nobody waiting
	}
	if rate == s.rate {
		return
	}
	x := l.tat.Swap(busy)
	c := s.change
	if c == nil {
		c = newRateChange()
	}
	c.at, c.factor = now, retimeFactor(s.rate, rate)
	next := *s
	next.setRate(rate)
	next.started = true
	next.gen++
	next.change = newRateChange()
	c.next = next.change
	// Where the schedule stands at now (Guava's resync, then doSetRate):
	// the time stored permits stand for is kept (their number scales with
	// the rate), the time paid ahead is re-timed at the new rate.
	var tat time.Time
	switch {
	case math.IsInf(s.rate, 1):
		tat = now.Add(-time.Duration(next.burstNs)) // a full store
	case !s.started || s.rate == 0:
		tat = now // nothing stored, nothing owed
	default:
		tat = s.base.Add(time.Duration(max(x, subSat(int64(now.Sub(s.base)), s.burstNs))))
		if rate > 0 {
			tat = c.retime(tat)
		}
	}
	l.install(&next, x, tat)
	close(c.ch)
}

// refundLocked gives back a cancelled claim if nothing was taken since and
// the rate has not changed (or the claim followed the change): tat goes
// back to where the claim found it, or, if the claim's time has passed, to
// now less the stored permits it found (at most a full store). The caller
// holds l.mu.
//
// Put back exactly where the claim found it, tat is again the end of the
// claim before it, which, cancelled next, is refunded in turn: a tat more
// than the burst behind now (a full store) and one the burst behind stand
// for the same schedule, but only the first is that end
// (TestBurstyCancelInTurnAfterAFullStore).
func (l *Limiter) refundLocked(now time.Time, c claim) {
	s := l.sched.Load()
	if s == nil || s.gen != c.gen || !(s.rate > 0) || math.IsInf(s.rate, 1) {
		return
	}
	end := int64(c.end.Sub(s.base))
	x := l.tat.Load()
	for {
		if x != end {
			return // taken since: later callers' times stand
		}
		if l.tat.CompareAndSwap(x, busy) {
			break
		}
		x = l.tat.Load()
	}
	stored := c.stored
	if c.rate != s.rate { // a Wait that followed rate changes
		stored = time.Duration(min(float64(stored)*c.rate/s.rate, maxWord))
	}
	at := c.at
	if at.Before(now) { // from now, with the stored permits it found
		at, stored = now, min(stored, time.Duration(s.burstNs))
	}
	next := *s
	l.install(&next, x, at.Add(-stored))
}
