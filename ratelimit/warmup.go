package ratelimit

import (
	"math"
	"time"
)

// warmingUp is a SmoothWarmingUp limiter's state: Guava's stored permits
// and next free time, kept under the Limiter's mutex. (SmoothBursty keeps
// its state in one word instead; see Limiter.)
//
// Source: guava-ratelimiter.md, "SmoothRateLimiter", "SmoothWarmingUp".
type warmingUp struct {
	rate       float64 // permits per second
	warmup     float64 // warm-up period in seconds (> 0)
	coldFactor float64
	threshold  float64 // permits above which the slope applies
	slope      float64 // seconds per permit per permit above threshold

	stored    float64 // stored permits
	maxStored float64
	interval  float64     // seconds per permit at the stable rate (1/rate)
	cool      float64     // seconds to store one permit while unused
	nextFree  time.Time   // when the next request may be granted
	started   bool        // nextFree means something (set by the first call)
	changed   *rateChange // the next rate change; its ch closes when it happens
}

// setRate installs a rate and rescales the stored permits (Guava's
// doSetRate). A new limiter starts cold: all permits stored.
func (w *warmingUp) setRate(rate float64) {
	old := w.maxStored
	w.rate = rate
	switch {
	case math.IsInf(rate, 1):
		w.maxStored = math.Inf(1)
	case rate == 0:
		w.maxStored = 0
	default:
		stable := 1 / rate
		cold := stable * w.coldFactor
		w.threshold = 0.5 * w.warmup / stable
		w.maxStored = w.threshold + 2*w.warmup/(stable+cold)
		w.slope = (cold - stable) / (w.maxStored - w.threshold)
	}
	switch {
	case math.IsInf(old, 1):
		w.stored = 0
	case old == 0:
		w.stored = w.maxStored // starts cold
	default:
		w.stored = w.stored * w.maxStored / old
	}
	if math.IsNaN(w.stored) || math.IsInf(w.stored, 0) {
		w.stored = 0
	}
	w.interval, w.cool = 0, 0
	if rate > 0 && !math.IsInf(rate, 1) {
		w.interval = 1 / rate
		w.cool = w.warmup / w.maxStored
	}
}

// storedToWait is the time, in seconds, that taking take of the stored
// permits costs: the area under Guava's trapezoid.
func (w *warmingUp) storedToWait(stored, take float64) float64 {
	above := stored - w.threshold
	secs := 0.0
	if above > 0 {
		takeAbove := min(above, take)
		length := w.permitsToTime(above) + w.permitsToTime(above-takeAbove)
		secs = takeAbove * length / 2
		take -= takeAbove
	}
	return secs + w.interval*take
}

func (w *warmingUp) permitsToTime(permits float64) float64 { return w.interval + permits*w.slope }

// setRateAt is Limiter.SetRateAt; see there.
func (w *warmingUp) setRateAt(now time.Time, rate float64) {
	if rate == w.rate {
		return
	}
	w.resync(now)
	old := w.rate
	w.setRate(rate)
	c := w.changed
	c.at, c.factor = now, retimeFactor(old, rate)
	if rate > 0 {
		w.nextFree = c.retime(w.nextFree)
	}
	w.changed = newRateChange()
	c.next = w.changed
	close(c.ch)
}

// resync adds the permits stored since nextFree. Time going backwards
// counts as no time passing.
func (w *warmingUp) resync(now time.Time) {
	if !w.started {
		w.started = true
		w.nextFree = now
		return
	}
	if now.After(w.nextFree) {
		if w.rate > 0 && !math.IsInf(w.rate, 1) {
			w.stored = min(w.maxStored, w.stored+now.Sub(w.nextFree).Seconds()/w.cool)
		}
		w.nextFree = now
	}
}

// reserve takes n ≥ 1 permits at now unless the caller could act only
// after limit, paying ahead like Guava's reserveEarliestAvailable.
func (w *warmingUp) reserve(now, limit time.Time, n int) (outcome, claim, *rateChange) {
	switch {
	case w.rate == 0:
		return never, claim{}, w.changed
	case math.IsInf(w.rate, 1):
		return free, claim{at: now}, w.changed
	}
	w.resync(now)
	if w.nextFree.After(limit) {
		return late, claim{at: w.nextFree}, w.changed
	}
	c := claim{at: w.nextFree, spent: min(float64(n), w.stored), refundable: true}
	fresh := float64(n) - c.spent
	wait := fresh*w.interval + w.storedToWait(w.stored, c.spent)
	w.nextFree = w.nextFree.Add(time.Duration(wait * float64(time.Second)))
	w.stored -= c.spent
	c.end = w.nextFree
	return taken, c, w.changed
}

// tokensAt is Limiter.TokensAt; see there.
func (w *warmingUp) tokensAt(now time.Time) float64 {
	if math.IsInf(w.rate, 1) {
		return math.Inf(1)
	}
	if !w.started || w.rate == 0 {
		return w.stored
	}
	if now.After(w.nextFree) {
		return min(w.maxStored, w.stored+now.Sub(w.nextFree).Seconds()/w.cool)
	}
	return w.stored - w.nextFree.Sub(now).Seconds()*w.rate
}

// refund gives back a cancelled claim if nobody queued behind it.
func (w *warmingUp) refund(now time.Time, c claim) {
	if !w.nextFree.Equal(c.end) {
		return // later callers are queued behind it; their times stand
	}
	w.nextFree = c.at
	if c.at.Before(now) {
		w.nextFree = now
	}
	w.stored = min(w.maxStored, w.stored+c.spent)
}
