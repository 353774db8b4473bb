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

// Value returns the average (0 before any measurement).
func (a *Average) Value() float64 { return a.value }
