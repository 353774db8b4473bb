// Package demand is the one rule by which Sluice turns measurements of
// use into a requester's demand: an exponentially weighted moving average
// of the demand measured each interval. The Go client's adaptive limiters
// (client.DemandEstimator) and the RLQS service's buckets (server/rlqs,
// whose Envoy proxies report what they allowed and denied) both use it.
// It is deterministic, allocation-free and small (16 bytes), so that a
// server can keep one per (stream, bucket).
//
// Source: Sluice's (docs/clients.md, adaptive demand).
package demand

import "math"

// DefaultSmoothing is the weight of the newest measurement when none is
// configured: a step change is 94 % learned after four intervals.
const DefaultSmoothing = 0.5

// Average is an exponentially weighted moving average of demand (the
// measurement's unit: permits per second for a rate). Its zero value has
// seen no measurement. Not safe for concurrent use.
type Average struct {
	value   float64
	started bool
}

// Observe folds in one interval's measurement x (a negative, NaN or
// infinite x counts as 0) with weight, the newest measurement's weight in
// (0, 1] (anything else is DefaultSmoothing), and returns the new
// average: x itself for the first measurement, else weight × x + (1 −
// weight) × the previous average.
func (a *Average) Observe(x, weight float64) float64 {
	if !(x >= 0) || math.IsInf(x, 0) {
		x = 0
	}
	if !(weight > 0 && weight <= 1) {
		weight = DefaultSmoothing
	}
	if !a.started {
		a.value, a.started = x, true
	} else {
		a.value = weight*x + (1-weight)*a.value
	}
	return a.value
}

// StepSigmas is how far an interval's count of requests must be from
// what the average expects of that interval, in standard deviations of a
// Poisson count (the square root of the expected count, at least 1), to
// be a step of demand rather than noise: 3 (a Poisson count at its
// expectation falls outside about 0.3 % of the time).
const StepSigmas = 3

// ObserveCount folds in one interval's count of requests over seconds
// (both ≥ 0 and finite, else the interval counts as no request over one
// second): a step — a count more than StepSigmas standard deviations from
// average × seconds — replaces the average with the interval's rate
// count ÷ seconds at once, since the demand moved and smoothing would only
// lag behind it; a count within is noise, smoothed with weight as by
// Observe. The first interval is taken as is.
//
// Source: Sluice's (docs/rlqs.md, demand): a report of Envoy's covers
// seconds of requests, so its noise is known, and only noise needs
// smoothing.
func (a *Average) ObserveCount(count, seconds, weight float64) float64 {
	if !(count >= 0) || math.IsInf(count, 0) || !(seconds > 0) || math.IsInf(seconds, 0) {
		count, seconds = 0, 1
	}
	x := count / seconds
	if a.started {
		expected := a.value * seconds
		if math.Abs(count-expected) > StepSigmas*math.Sqrt(math.Max(expected, 1)) {
			a.value = x
			return x
		}
	}
	return a.Observe(x, weight)
}

// Value returns the average (0 before any measurement).
func (a *Average) Value() float64 { return a.value }
