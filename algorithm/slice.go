package algorithm

import (
	"math"
	"sort"
)

// Slice is a Demand over a plain slice of requesters: each query costs O(n)
// (O(n log n) for WaterLevel). It is the reference implementation the tests
// and small tools use; package lease keeps the same summary in a balanced
// tree. The zero value is an empty demand.
type Slice []Requester

// Totals implements Demand.
func (s Slice) Totals() (wants, subclients float64) {
	for _, r := range s {
		wants += r.Wants
		subclients += math.Max(r.Subclients, 1)
	}
	return wants, subclients
}

// Below implements Demand.
func (s Slice) Below(level float64) (wants, subclients float64) {
	for _, r := range s {
		sub := math.Max(r.Subclients, 1)
		if r.Wants/sub <= level {
			wants += r.Wants
			subclients += sub
		}
	}
	return wants, subclients
}

// WaterLevel implements Demand.
func (s Slice) WaterLevel(capacity float64) float64 {
	totalWants, totalSub := s.Totals()
	if totalWants <= capacity {
		return math.Inf(1)
	}
	sorted := append(Slice(nil), s...)
	sort.Slice(sorted, func(i, j int) bool {
		return sorted[i].Wants/math.Max(sorted[i].Subclients, 1) < sorted[j].Wants/math.Max(sorted[j].Subclients, 1)
	})
	var prefixWants, prefixSub float64
	for _, r := range sorted {
		sub := math.Max(r.Subclients, 1)
		k := r.Wants / sub
		// Capacity used if the level were k: everyone up to here satisfied,
		// everyone else capped at k per subclient.
		if prefixWants+r.Wants+k*(totalSub-prefixSub-sub) >= capacity {
			break
		}
		prefixWants += r.Wants
		prefixSub += sub
	}
	return levelFrom(capacity, prefixWants, totalSub-prefixSub)
}

// levelFrom returns the water level once the requesters summing to
// satisfiedWants are fully satisfied and restSub subclients share the rest.
func levelFrom(capacity, satisfiedWants, restSub float64) float64 {
	if restSub <= 0 {
		return math.Inf(1)
	}
	return math.Max((capacity-satisfiedWants)/restSub, 0)
}

// WaterLevelFrom is exported for Demand implementations outside this
// package: the water level when requesters wanting satisfiedWants in total
// are fully satisfied and restSubclients subclients share the rest of
// capacity equally. +Inf when restSubclients is 0.
func WaterLevelFrom(capacity, satisfiedWants, restSubclients float64) float64 {
	return levelFrom(capacity, satisfiedWants, restSubclients)
}

// Allocate returns what every requester in rs would get from an empty start
// (nobody holding a lease) under kind: the steady state the algorithm
// converges to. It is the whole-table form used by the tests, the demo's
// report and the simulator; O(n log n).
func Allocate(kind Kind, capacity float64, rs []Requester) []float64 {
	var d Demand = Slice(rs)
	if kind == FairShare {
		d = fixedLevel{d, capacity, Slice(rs).WaterLevel(capacity)}
	}
	out := make([]float64, len(rs))
	for i, r := range rs {
		switch kind {
		case Static:
			out[i] = StaticShare(capacity, r)
		case ProportionalShare:
			out[i] = ProportionalTarget(capacity, r, d)
		case FairShare:
			out[i] = FairTarget(capacity, r, d)
		default:
			out[i] = nonNegative(r.Wants)
		}
	}
	return out
}

// fixedLevel caches the water level of one capacity so Allocate computes it
// once, not once per requester.
type fixedLevel struct {
	Demand
	capacity, level float64
}

func (f fixedLevel) WaterLevel(capacity float64) float64 {
	if capacity == f.capacity {
		return f.level
	}
	return f.Demand.WaterLevel(capacity)
}
