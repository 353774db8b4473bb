// Package algorithm holds Sluice's capacity-division algorithms as pure
// functions: no state, no time, no I/O. Each takes the resource's capacity,
// the requester asking now, and a Demand summary of every requester of the
// resource, and returns what the requester gets.
//
// The rules that hold for every sharing algorithm (ProportionalShare,
// FairShare):
//
//   - A requester that stands for many clients (a downstream server with
//     num_clients subclients) is weighted by that count.
//   - Nobody gets more than it wants.
//   - Nobody gets more than is free: capacity minus every other requester's
//     unexpired lease (has). A requester whose fair target is not free yet
//     gets what is free now and the rest on a later refresh, once the others
//     have given theirs back.
//
// Build turns a kind and its named parameters (from a template, or pushed
// down by a parent) into the Instance a resource runs: an unknown kind runs
// as NoAlgorithm and says so (Instance.FellBack); ParseParameters checks
// the parameters of the design's table (decay_factor is honoured;
// lease_duration_secs and refresh_interval duplicate fields of the
// Algorithm message and are refused; any other name is unknown).
//
// Because Demand is an ordered summary (package lease keeps it in a balanced
// tree), one decision costs O(log n) in the number of requesters, not O(n).
//
// Source: doorman-design.md, "Algorithms", "Finding the algorithm to use",
// "Common algorithm parameters" and "Available algorithms"; charon-paper.md
// §5.1.
package algorithm

import "math"

// Requester is the party a decision is made for.
type Requester struct {
	// Wants is the capacity the requester asks for (≥ 0, in the resource's
	// unit, e.g. permits per second).
	Wants float64
	// Subclients is the number of clients the requester stands for (≥ 1):
	// 1 for a client, num_clients summed over bands for a downstream server.
	Subclients float64
}

// Demand summarises all requesters of one resource, the requester being
// decided for included (with its current wants). For requester i let
// k_i = wants_i / subclients_i be its wants per subclient.
//
// Implementations: Slice (O(n) per query, for tests and small sets) and the
// balanced tree of package lease (O(log n) per query).
type Demand interface {
	// Totals returns Σ wants and Σ subclients over all requesters.
	Totals() (wants, subclients float64)
	// Below returns Σ wants and Σ subclients over the requesters with
	// k_i ≤ level.
	Below(level float64) (wants, subclients float64)
	// WaterLevel returns the level L ≥ 0 at which Σ min(wants_i,
	// subclients_i × L) = capacity, or +Inf if Σ wants ≤ capacity.
	WaterLevel(capacity float64) float64
}

// Decide returns what requester r gets under algorithm kind, given the
// resource capacity, the demand summary d (which includes r) and othersHas,
// the sum of every other requester's unexpired lease. The result is ≥ 0 and
// for the sharing algorithms ≤ capacity − othersHas, so Σ outstanding never
// exceeds capacity. An unknown kind behaves as NoAlgorithm (the design's
// fallback, "Finding the algorithm to use"); callers resolve the kind with
// Build first, so that the fallback is seen, logged and counted.
func Decide(kind Kind, capacity float64, r Requester, d Demand, othersHas float64) float64 {
	var target float64
	switch kind {
	case Static:
		return StaticShare(capacity, r)
	case ProportionalShare:
		target = ProportionalTarget(capacity, r, d)
	case FairShare:
		target = FairTarget(capacity, r, d)
	default:
		return nonNegative(r.Wants)
	}
	return Clamp(target, capacity-othersHas)
}

// Clamp returns target limited to free (what is not leased to others) and
// to be non-negative.
func Clamp(target, free float64) float64 {
	return nonNegative(math.Min(target, free))
}

// StaticShare returns min(wants, capacity × subclients): under Static the
// configured capacity is a per-client cap, not a global limit, so it does
// not look at other requesters.
//
// Source: doorman-design.md, "The Static algorithm"; charon-paper.md §5.1.
func StaticShare(capacity float64, r Requester) float64 {
	return nonNegative(math.Min(r.Wants, capacity*math.Max(r.Subclients, 1)))
}

// FairTarget returns requester r's max-min fair share per subclient:
// min(wants, subclients × L) where L is the water level at which the
// capacity is exactly used (everyone gets what it wants when Σ wants ≤
// capacity). Capacity left by requesters that want less than an equal share
// is spread equally over the others, in rounds, until it is used up.
//
// Source: doorman-design.md, "The FairShare algorithm"; charon-paper.md §5.1
// (the table with capacity 160).
func FairTarget(capacity float64, r Requester, d Demand) float64 {
	if capacity <= 0 {
		return 0
	}
	return fairAt(capacity, d.WaterLevel(capacity), r)
}

// fairAt is FairTarget at a known water level.
func fairAt(capacity, level float64, r Requester) float64 {
	if capacity <= 0 {
		return 0
	}
	if math.IsInf(level, 1) {
		return nonNegative(r.Wants)
	}
	return nonNegative(math.Min(r.Wants, math.Max(r.Subclients, 1)*level))
}

// ProportionalTarget returns requester r's proportional share: everyone
// gets what it wants when Σ wants ≤ capacity; otherwise every subclient is
// entitled to an equal share e = capacity / Σ subclients, and the capacity
// left by requesters that want less than their equal share is split among
// the others in proportion to their excess demand (wants − subclients × e).
//
// Source: doorman-design.md, "The ProportionalShare algorithm";
// charon-paper.md §5.1 (the table with capacity 90).
func ProportionalTarget(capacity float64, r Requester, d Demand) float64 {
	if capacity <= 0 {
		return 0
	}
	totalWants, totalSub := d.Totals()
	if totalWants <= capacity {
		return nonNegative(r.Wants)
	}
	if totalSub <= 0 {
		return 0
	}
	equal := capacity / totalSub
	belowWants, belowSub := d.Below(equal)
	base := belowWants + equal*(totalSub-belowSub)
	leftover := math.Max(capacity-base, 0)
	excess := (totalWants - belowWants) - equal*(totalSub-belowSub)
	sub := math.Max(r.Subclients, 1)
	own := math.Min(r.Wants, sub*equal)
	mine := r.Wants - sub*equal
	if mine > 0 && excess > 0 {
		own += leftover * mine / excess
	}
	return nonNegative(math.Min(own, r.Wants))
}

func nonNegative(x float64) float64 {
	if x > 0 {
		return x
	}
	return 0 // also maps NaN to 0
}
