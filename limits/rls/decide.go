package rls

import (
	"context"
	"fmt"
	"math"
	"strings"
)

// Algorithm is how a limit counts its requests.
type Algorithm uint8

// The algorithms.
const (
	// AlgorithmDefault inherits: a rule's from its domain, a domain's
	// from the server (TokenBucket unless told otherwise).
	AlgorithmDefault Algorithm = iota
	// TokenBucket holds RequestsPerUnit tokens and refills them at
	// RequestsPerUnit per Unit, continuously: over any interval T it
	// grants at most RequestsPerUnit + RequestsPerUnit × T ÷ Unit, so no
	// double burst across a window's edge.
	TokenBucket
	// FixedWindow counts requests in windows of one Unit aligned to the
	// Unix epoch, as envoyproxy/ratelimit counts them
	// (src/limiter/base_limiter.go): up to 2 × RequestsPerUnit can pass
	// around a window's edge.
	FixedWindow
)

var algorithmNames = [...]string{"", "token_bucket", "fixed_window"}

// String returns the algorithm's name in the configuration
// ("token_bucket", "fixed_window"; "" for AlgorithmDefault).
func (a Algorithm) String() string {
	if int(a) < len(algorithmNames) {
		return algorithmNames[a]
	}
	return fmt.Sprintf("Algorithm(%d)", a)
}

// ParseAlgorithm reads an algorithm's name, token_bucket or fixed_window
// (any case); anything else is an error.
func ParseAlgorithm(s string) (Algorithm, error) {
	for a, name := range algorithmNames {
		if a != int(AlgorithmDefault) && strings.EqualFold(s, name) {
			return Algorithm(a), nil
		}
	}
	return AlgorithmDefault, fmt.Errorf("%q is not an algorithm (want token_bucket or fixed_window)", s)
}

// Policy is one counter's limit as a Store applies it.
type Policy struct {
	// Algorithm is TokenBucket or FixedWindow.
	Algorithm Algorithm
	// Limit is the requests allowed per Period (≥ 1: a limit of 0 never
	// reaches a store; every request is over it).
	Limit uint32
	// Period is the limit's unit in microseconds (≥ 1): a token bucket
	// refills Limit tokens per Period; a fixed window is Period long,
	// aligned to the Unix epoch, unless Calendar is set.
	Period int64
	// Burst is a token bucket's depth in tokens (0: Limit): it refills at
	// Limit per Period up to Burst, and a hit of more than Burst never
	// fits. Ignored by a fixed window.
	Burst uint32
	// Calendar, when set, makes a fixed window the calendar's (Period
	// then only names the unit): the window holding now, as
	// Calendar.Window gives it. Ignored by a token bucket.
	Calendar Calendar
}

// depth returns the most a counter under p holds: a token bucket's Burst
// (else Limit), a fixed window's Limit.
func (p *Policy) depth() uint32 {
	if p.Algorithm == TokenBucket && p.Burst != 0 {
		return p.Burst
	}
	return p.Limit
}

// Hit is one request descriptor's part of a decision.
type Hit struct {
	// Bucket identifies the counter (Match.Bucket, or an override's own).
	Bucket string
	// Policy is the counter's limit.
	Policy Policy
	// Hits is what the descriptor adds (0: check only, charge nothing).
	// Hits above Policy.Limit (a token bucket's Burst, when set) never
	// fit.
	Hits uint64
	// Refund gives Hits back instead of taking them (never over limit).
	Refund bool
	// Soft (shadow mode) decides and counts as usual, but a soft hit over
	// its limit does not refuse the request's other hits.
	Soft bool
}

// State is a counter's stored state. The zero value is a counter the
// store does not hold: a full bucket, an empty window.
type State struct {
	// Set is false for a counter the store does not hold.
	Set bool
	// A is, for a token bucket, the instant (Unix µs) of its Level; for
	// a fixed window, the window's index (now ÷ Period), or, for a
	// calendar's, the window's start (Unix µs).
	A int64
	// Level is, for a token bucket, the tokens it held at A (it holds
	// min(depth, Level + (now − A) × Limit ÷ Period) at now, its depth
	// Burst, else Limit).
	Level float64
	// N is, for a fixed window, the hits counted in window A.
	N int64
	// Until is the instant (Unix µs) from which the state is the same as
	// no state (the bucket is full, the window over): a store may drop it
	// then.
	Until int64
}

// Result is one hit's answer.
type Result struct {
	// Over reports that the hit did not fit: its counter has fewer than
	// Hits left.
	Over bool
	// Remaining is what the counter has left after the decision: whole
	// tokens in a bucket, requests left in a window.
	Remaining uint32
	// Reset is the microseconds until the bucket is full again (token
	// bucket) or the window ends (fixed window), after the decision.
	Reset int64
	// RetryAfter is, for a hit over its limit, the microseconds until it
	// would fit if nobody else took any (> 0), or -1 when it never can
	// (Hits > Limit); 0 otherwise.
	RetryAfter int64
}

// Decide decides a request's hits together at now (Unix µs), the rule
// every Store runs: hits on one bucket are counted in order, each
// against the state the ones before it left; when a hit that is not Soft
// is over its limit, the request is refused and nothing is charged (the
// others' results then say what their counters have, untouched).
// states[i] is, on entry, the stored state of hits[i].Bucket (the same
// for every hit on one bucket); when Decide returns true, the request is
// granted and, for each bucket, the state at the first of its hits is the
// one to store (a state with Set false needs no write). results[i] is
// hits[i]'s answer. It does no I/O and never fails.
func Decide(now int64, hits []Hit, states []State, results []Result) bool {
	var buf [8]State
	work := append(buf[:0], states...)
	granted := true
	for i, h := range hits {
		j := first(hits, i)
		st, r := step(h, work[j], now)
		results[i] = r
		if r.Over {
			granted = granted && h.Soft
			continue
		}
		work[j] = st
	}
	if granted {
		copy(states, work)
		return true
	}
	for i, h := range hits {
		if !results[i].Over {
			_, results[i] = step(Hit{Policy: h.Policy}, states[first(hits, i)], now)
		}
	}
	return false
}

// first returns the index of the first hit on hits[i]'s bucket and
// algorithm.
func first(hits []Hit, i int) int {
	for j := range i {
		if hits[j].Bucket == hits[i].Bucket && hits[j].Policy.Algorithm == hits[i].Policy.Algorithm {
			return j
		}
	}
	return i
}

// step is one hit on a counter in state s at now: the new state (s when
// over) and the answer.
func step(h Hit, s State, now int64) (State, Result) {
	if h.Policy.Algorithm == FixedWindow {
		return windowStep(h, s, now)
	}
	return bucketStep(h, s, now)
}

// bucketStep is a token bucket's step. The bucket is kept as its level
// (tokens, fractional) at an instant (A, Unix µs); it fills at Limit per
// Period, continuously, up to its depth (Burst, else Limit). A hit of n
// fits when the level is at least n. The arithmetic is float64 in an
// order a Lua mirror on doubles repeats exactly (no fused multiply-add:
// every product is converted before it is added).
func bucketStep(h Hit, s State, now int64) (State, Result) {
	lim, period, top := float64(h.Policy.Limit), float64(h.Policy.Period), float64(h.Policy.depth())
	level := top // a bucket the store does not hold is full
	if s.Set {
		level = min(top, s.Level+float64(float64(max(0, now-s.A))*lim)/period)
	}
	n := float64(min(h.Hits, uint64(h.Policy.depth())+1))
	switch {
	case h.Refund:
		level = min(top, level+n)
	case n > top:
		return s, Result{Over: true, Remaining: uint32(level), Reset: untilFull(level, top, lim, period), RetryAfter: -1}
	case n > level:
		return s, Result{Over: true, Remaining: uint32(level), Reset: untilFull(level, top, lim, period),
			RetryAfter: int64(math.Ceil(float64((n-level)*period) / lim))}
	case n == 0:
		return s, Result{Remaining: uint32(level), Reset: untilFull(level, top, lim, period)}
	default:
		level -= n
	}
	reset := untilFull(level, top, lim, period)
	return State{Set: true, A: now, Level: level, Until: now + reset}, Result{Remaining: uint32(level), Reset: reset}
}

// untilFull returns the microseconds a bucket of depth top at level takes
// to fill at lim per period, rounded up.
func untilFull(level, top, lim, period float64) int64 {
	return int64(math.Ceil(float64((top-level)*period) / lim))
}

// windowStep is a fixed window's step: windows of Period aligned to the
// epoch, or the Calendar's; a hit is over when the window's count plus it
// exceeds Limit.
func windowStep(h Hit, s State, now int64) (State, Result) {
	if !h.Policy.Calendar.IsZero() {
		start, end := h.Policy.Calendar.Window(now)
		return calendarStep(h, s, now, start, end)
	}
	period := h.Policy.Period
	w := floorDiv(now, period)
	var count int64
	if s.Set && s.A == w {
		count = s.N
	}
	return countStep(h, s, now, w, count, (w+1)*period)
}

// calendarStep is a calendar window's step, the window [start, end) as
// the caller's clock places it (Redis runs it on its own clock, on the
// window the server computed): a window is counted from its start; a
// state of a later window (a server whose clock is ahead has begun it)
// is counted in, so that no clock's lag loses another's count.
func calendarStep(h Hit, s State, now, start, end int64) (State, Result) {
	var count int64
	w := start
	if s.Set && s.A >= start {
		w, count = s.A, s.N
	}
	return countStep(h, s, now, w, count, max(end, now+1))
}

// countStep is a fixed window's step in window w (ending at end, Unix
// µs), which holds count.
func countStep(h Hit, s State, now, w, count, end int64) (State, Result) {
	lim := int64(h.Policy.Limit)
	n := int64(min(h.Hits, uint64(lim)+1))
	switch {
	case h.Refund:
		count = max(0, count-n)
	case n > lim:
		return s, Result{Over: true, Remaining: uint32(lim - count), Reset: end - now, RetryAfter: -1}
	case n > lim-count:
		return s, Result{Over: true, Remaining: uint32(lim - count), Reset: end - now, RetryAfter: end - now}
	case n == 0:
		return s, Result{Remaining: uint32(lim - count), Reset: end - now}
	default:
		count += n
	}
	return State{Set: true, A: w, N: count, Until: end}, Result{Remaining: uint32(lim - count), Reset: end - now}
}

// floorDiv returns ⌊a ÷ b⌋ for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) {
		q--
	}
	return q
}

// Store holds the counters of Envoy's rate limit service. Every method is
// safe for concurrent use.
type Store interface {
	// Decide is one atomic decision on a request's hits in domain at now
	// (Unix µs; a store with a clock of its own, Redis, uses that
	// instead): it reads each bucket's State, runs Decide and, when it
	// grants, stores the new states (a refused request writes nothing),
	// all as one step no other decision interleaves with. results[i] is
	// hits[i]'s answer (len(results) ≥ len(hits)). It returns whether the
	// request was granted. Errors: an error wrapping ctx.Err() when the
	// request's context ended (nothing done, or, in flight, outcome
	// unknown); any other is the store's own (Redis unreachable).
	Decide(ctx context.Context, now int64, domain string, hits []Hit, results []Result) (bool, error)
	// Walk calls fn with every counter the store holds, in no order,
	// until fn returns false, outside the store's locks. It costs
	// O(counters): a status page's work, never a request's. Errors: ctx's
	// when it ends (ctx bounds the walk), the store's own, and
	// limits.ErrWalkBudget when it stopped at its budget (limits/redis:
	// WalkScanCalls SCANs a node).
	Walk(ctx context.Context, fn func(Counter) bool) error
	// Reset forgets the counters of buckets (Match.Bucket, LimitBucket's)
	// in domain, under every algorithm (a token bucket's level, a fixed
	// window's count), so that each is as a counter the store does not
	// hold: a full bucket, an empty window. It returns how many counters
	// it held and removed (0: every one was full already; a bucket
	// counted under both algorithms counts twice). At most MaxHits
	// buckets (more: an error, nothing done); none is no work. It is
	// atomic with the decisions on those buckets: one decided after it
	// sees them full. Errors: an error wrapping ctx.Err() when ctx ended
	// (nothing done, or, in flight, outcome unknown); any other is the
	// store's own (Redis unreachable).
	//
	// Source: envoyproxy/ratelimit issue #191 (reset one key);
	// gubernator's Behavior RESET_REMAINING.
	Reset(ctx context.Context, domain string, buckets []string) (int, error)
}

// Counter is one counter a store holds.
type Counter struct {
	// Bucket is the counter (Match.Bucket; ParseBucket reads it back).
	Bucket string
	// Algorithm counts it.
	Algorithm Algorithm
	// State is its state (Until 0 when the store keeps no such instant:
	// Redis, whose keys expire then).
	State State
}
