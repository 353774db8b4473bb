package limits

import (
	"math"
)

// The arithmetic of one token bucket: a pure function over a one-word
// state, so that every store (memory now, a Redis Lua script later) runs
// the same rule and gives the same answers.
//
// The bucket is kept as the instant it is (or was, or will be) empty, in
// Unix nanoseconds, the way a GCRA keeps its theoretical arrival time:
//
//	tokens(now) = min(Size, (now − Empty) × Rate / 1e9)
//
// Empty ≤ now − Span is a full bucket (Span is the time an empty bucket
// takes to fill); Empty > now is debt: tokens granted ahead of their
// time, owed until Empty. This is quotaservice-design.md's "Filling
// tokens" (accumulated tokens plus "tokens next available") folded into
// one number, with two changes:
//
//   - The fraction of a token is never lost. The reference adds whole
//     tokens and moves "tokens next available" to now on every refill, so
//     a client calling a 10/s bucket every 99 ms drains it
//     (quotaservice-wire.md, "Known weaknesses"); here the fill is a
//     difference of instants, exact to the nanosecond, and an extra
//     observation in between changes nothing (only grants write).
//   - A request's wait is the time until the last of its own tokens
//     exists. The reference's pseudocode answers the time until the
//     previous request's debt is paid (Guava's "the next caller pays"), so
//     a bucket there serves up to Size + FillRate × MaxDebt tokens at once;
//     here, over any interval T, the tokens granted within it and usable
//     within it (decision time + wait) are at most Size + FillRate × T.
//     The debt a grant leaves is then its wait, so the request's
//     maximum wait and the bucket's MaxDebt bound the same quantity: the
//     engine passes the smaller as Ask.MaxWait.
//
// Every quantity is an int64 of nanoseconds or tokens, except the rate
// (float64 tokens per second). Tokens convert to nanoseconds by Cost,
// rounded up (against the requester); the conversions are written so that
// no multiply-add is fused (the Go spec allows fusing x*y+z; an explicit
// float64() forbids it), so IEEE doubles in Lua compute the same values. A
// Lua mirror keeps Empty as decimal nanoseconds and takes differences of
// instants exactly (for example by splitting seconds and nanoseconds): the
// differences themselves stay far below 2⁵³.

// Params are one token bucket's constants in the units Step uses. Build
// them with Bucket.Params; the zero value is not a valid bucket.
type Params struct {
	// Size is the most tokens the bucket holds (≥ 1).
	Size int64
	// Rate is the fill rate in tokens per second (> 0, ≤ MaxFillRate).
	Rate float64
	// Span is Cost(Size): the nanoseconds an empty bucket takes to fill.
	Span int64
}

// State is the stored state of one token bucket.
//
// The zero value is a full bucket at any instant at least Span after the
// Unix epoch; FullState is full at any instant. A bucket a store has never
// seen, or has reaped, starts as FullState.
type State struct {
	// Empty is the instant, in Unix nanoseconds, at which the bucket is,
	// was or will be empty. tokens(now) = min(Size, (now − Empty) × Rate ÷
	// 1e9); Empty > now means debt until Empty.
	Empty int64
}

// FullState is a bucket that is full at any instant (it was empty at the
// beginning of int64 time): how every bucket starts.
var FullState = State{Empty: math.MinInt64}

// Ask is one request as Step sees it: the engine has validated it and
// applied the bucket's limits (max tokens per request, max wait, max
// debt).
type Ask struct {
	// Tokens is the most tokens wanted (≥ 1).
	Tokens int64
	// Min is the fewest tokens accepted (1 ≤ Min ≤ Tokens): Step grants
	// the most in [Min, Tokens] that fits within MaxWait, or nothing.
	Min int64
	// MaxWait is the longest the caller may wait for its tokens, in
	// nanoseconds (≥ 0): min(the request's max wait, the bucket's wait
	// timeout, the bucket's max debt).
	MaxWait int64
}

// Result is what Step decided.
type Result struct {
	// Granted is the number of tokens granted: 0 when rejected, else in
	// [Ask.Min, Ask.Tokens].
	Granted int64
	// Wait is how long, in nanoseconds, the caller waits before using the
	// tokens (0 when they exist now).
	Wait int64
	// RetryAfter is, when rejected, the nanoseconds after now at which
	// Ask.Min tokens would fit within Ask.MaxWait if nobody else took any
	// meanwhile (> 0), or -1 (RetryNever) when no wait can make them fit:
	// Cost(Ask.Min) > Span + Ask.MaxWait, i.e. more than the bucket holds
	// plus what it may owe. 0 when granted.
	RetryAfter int64
	// Tokens is the number of tokens left in the bucket at now after the
	// decision, in [0, Size] (0 while in debt), fractional.
	Tokens float64
}

// RetryNever is Result.RetryAfter for a request that can never succeed.
const RetryNever = -1

// MaxFillRate bounds a bucket's fill rate in tokens per second: one token
// per nanosecond, the resolution of Step's clock.
const MaxFillRate = 1e9

// Cost returns the nanoseconds a bucket filling at rate tokens per second
// takes to make n tokens, rounded up, or math.MaxInt64 when that does not
// fit in an int64. n ≥ 0, rate > 0.
func Cost(n int64, rate float64) int64 {
	x := math.Ceil(float64(float64(n)*1e9) / rate)
	if x >= math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(x)
}

// Level returns the tokens in a bucket with parameters p and state s at
// now (Unix nanoseconds): in [0, p.Size], fractional, 0 while in debt.
func Level(s State, p Params, now int64) float64 {
	return level(max(s.Empty, subSat(now, p.Span)), p, now)
}

// Full reports whether the bucket holds Size tokens at now: removing it
// then loses nothing, since a bucket a store does not have starts full.
func Full(s State, p Params, now int64) bool { return s.Empty <= subSat(now, p.Span) }

// Step is one token-bucket decision at now (Unix nanoseconds): it returns
// the new state and the result. It grants the most tokens in [a.Min,
// a.Tokens] whose wait is at most a.MaxWait, and then the new state has
// Empty advanced by their Cost; when not even a.Min fit, it grants nothing
// and returns s unchanged (a rejected request changes nothing).
//
// Tokens come from what the bucket holds first and then from the future:
// the wait is the time until the last granted token exists, so over any
// interval T the tokens granted within it and usable within it (granted
// at t with wait w: usable from t + w) are at most Size + Rate × T (plus
// the rounding of one nanosecond of fill).
//
// Step never fails and never divides by zero for valid Params (Rate > 0);
// now may be any int64 (arithmetic saturates).
//
// Source: quotaservice-design.md, "Filling tokens" (lazy fill, size cap,
// future tokens up to max debt), with the fraction kept and the wait
// counted to the request's own tokens (see the comment at the top of
// this file).
func Step(s State, p Params, now int64, a Ask) (State, Result) {
	e := max(s.Empty, subSat(now, p.Span))
	// budget: the nanoseconds of fill the request may consume, from e up
	// to now + MaxWait.
	budget := subSat(addSat(now, a.MaxWait), e)
	var n, c int64
	if a.Min == a.Tokens { // all or nothing: one conversion
		if c = Cost(a.Tokens, p.Rate); c <= budget {
			n = a.Tokens
		}
	} else {
		n, c = fit(budget, p.Rate, a.Tokens)
	}
	if n < a.Min {
		r := Result{RetryAfter: RetryNever, Tokens: level(e, p, now)}
		if c := Cost(a.Min, p.Rate); c <= addSat(p.Span, a.MaxWait) {
			// Ask.Min fits once now' + MaxWait − e ≥ c (the cap does not
			// bind: c ≤ Span + MaxWait).
			r.RetryAfter = subSat(subSat(addSat(e, c), a.MaxWait), now)
		}
		return s, r
	}
	e = addSat(e, c)
	r := Result{Granted: n, Tokens: level(e, p, now)}
	if e > now {
		r.Wait = e - now
	}
	return State{Empty: e}, r
}

// fit returns the largest n ≤ most with Cost(n, rate) ≤ budget (0 if
// none), and its cost.
func fit(budget int64, rate float64, most int64) (n, cost int64) {
	if budget <= 0 || most <= 0 {
		return 0, 0
	}
	x := float64(float64(budget)*rate) / 1e9
	n = most
	if x < float64(most) {
		n = int64(x)
	}
	// The estimate is off by at most a token or two of rounding.
	cost = Cost(n, rate)
	for n > 0 && cost > budget {
		n--
		cost = Cost(n, rate)
	}
	for n < most {
		c := Cost(n+1, rate)
		if c > budget {
			break
		}
		n, cost = n+1, c
	}
	return n, cost
}

// level is Level with e already clamped to ≥ now − Span.
func level(e int64, p Params, now int64) float64 {
	if e >= now {
		return 0
	}
	return min(float64(p.Size), float64(float64(now-e)*p.Rate)/1e9)
}

// Rescale returns the state of a bucket whose parameters change from old
// to p at now: a bucket holding tokens keeps its fill fraction (tokens ÷
// size), rounded down to the nanosecond of fill; a bucket in debt keeps
// its debt in tokens (callers are waiting for them), converted at the new
// rate and rounded up. Equal parameters return s unchanged.
//
// Source: docs/departures.md, "The quota service" (a configuration
// change keeps each changed bucket's fill fraction); the reference resets
// every bucket on any change (quotaservice-wire.md, "Known weaknesses").
func Rescale(s State, old, p Params, now int64) State {
	if old == p {
		return s
	}
	e := max(s.Empty, subSat(now, old.Span))
	if e > now {
		debt := float64(float64(e-now)*old.Rate) / 1e9
		d := math.Ceil(float64(debt*1e9) / p.Rate)
		if d >= math.MaxInt64/2 {
			d = math.MaxInt64 / 2
		}
		return State{Empty: addSat(now, int64(d))}
	}
	frac := min(1, float64(float64(now-e)*old.Rate)/1e9/float64(old.Size))
	ns := math.Floor(float64(float64(frac*float64(p.Size))*1e9) / p.Rate)
	return State{Empty: max(subSat(now, int64(min(ns, float64(p.Span)))), subSat(now, p.Span))}
}

// addSat returns a + b saturated to the int64 range.
func addSat(a, b int64) int64 {
	c := a + b
	if (c > a) != (b > 0) {
		if b > 0 {
			return math.MaxInt64
		}
		return math.MinInt64
	}
	return c
}

// subSat returns a − b saturated to the int64 range.
func subSat(a, b int64) int64 {
	c := a - b
	if (c < a) != (b > 0) {
		if b > 0 {
			return math.MinInt64
		}
		return math.MaxInt64
	}
	return c
}
