package algorithm

import "math"

// Part is one priority band of a requester: a client asks in one band (its
// priority); a downstream server asks in one band per priority its own
// clients use (its PriorityBandAggregates).
type Part struct {
	// Priority is the band; higher is more important.
	Priority int64
	Requester
}

// PriorityBand is the demand of every requester in one priority band.
type PriorityBand struct {
	Priority int64
	Demand   Demand
}

// PriorityFairTarget returns what a requester made of parts gets under
// FAIR_SHARE with priority bands: bands are served from the highest
// priority down; band p may use what the higher bands do not want,
// max(0, capacity − Σ wants of the bands above p), and divides it max-min
// fairly per subclient among its requesters (FairTarget). So a lower band
// gets capacity only once every higher band has all it wants, and a band's
// requesters never starve each other.
//
// bands must be sorted by descending priority and contain every part's
// band (with the part's demand included); a part whose band is missing
// gets 0. The result is the sum over the parts, ≥ 0, and not yet clamped
// to what is free (see Clamp). With a single band this is FairTarget.
//
// Each algorithm's use of priority:
//   - NO_ALGORITHM and STATIC: ignored (nothing is shared).
//   - PROPORTIONAL_SHARE: ignored; all bands are pooled.
//   - FAIR_SHARE: strict priority between bands, max-min fair within one
//     (this function).
//
// Source: doorman-design.md, "The GetServerCapacity RPC" (per-band
// aggregates); the priority rule is Sluice's.
func PriorityFairTarget(capacity float64, parts []Part, bands []PriorityBand) float64 {
	var total float64
	avail := math.Max(capacity, 0)
	for _, b := range bands {
		level := math.NaN() // the band's water level, found once
		for _, p := range parts {
			if p.Priority != b.Priority {
				continue
			}
			if math.IsNaN(level) {
				level = b.Demand.WaterLevel(avail)
			}
			total += fairAt(avail, level, p.Requester)
		}
		w, _ := b.Demand.Totals()
		avail = math.Max(avail-w, 0)
	}
	return nonNegative(total)
}
