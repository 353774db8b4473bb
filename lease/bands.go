package lease

import (
	"math"

	"github.com/sluice-rl/sluice/algorithm"
)

// band is the requesters of one priority, in a tree of their own.
type band struct {
	priority int64
	tree     tree
}

// bandSet is a resource's priority bands: one tree per priority in use,
// highest priority first, never an empty one. It owns the bands and their
// trees, and the running sums the algorithms read through them (wants,
// subclients, has); the entries the trees order are the resource's own
// (ents, shared with Resource and requesterParts), and which entries a
// requester has is requesterParts's. It is not safe for concurrent use:
// like the rest of the Resource holding it, the server's lock on the
// resource guards it.
//
// Source: doorman-design.md, "Server state" (the PriorityBandAggregates),
// "Algorithms".
type bandSet struct {
	ents   *entries // the resource's entries, which the trees index
	list   []*band  // by descending priority; never empty bands
	fanout int      // tree fanout for new bands (tests); 0: default
}

// get returns the band of priority p, creating it if create is set (nil
// otherwise when it does not exist).
func (s *bandSet) get(p int64, create bool) *band {
	i := 0
	for i < len(s.list) && s.list[i].priority > p {
		i++
	}
	if i < len(s.list) && s.list[i].priority == p {
		return s.list[i]
	}
	if !create {
		return nil
	}
	b := &band{priority: p, tree: newTree(s.ents, s.fanout)}
	s.list = append(s.list, nil)
	copy(s.list[i+1:], s.list[i:])
	s.list[i] = b
	return b
}

// place puts a requester's entries, its first ei and its further ones
// (more), into their bands' trees.
func (s *bandSet) place(ei int32, more []int32) {
	s.get(s.ents.at(ei).priority, true).tree.insert(ei)
	for _, m := range more {
		s.get(s.ents.at(m).priority, true).tree.insert(m)
	}
}

// unplace takes a requester's entries, its first ei and its further ones
// (more), out of their trees, dropping bands left empty.
func (s *bandSet) unplace(ei int32, more []int32) {
	s.remove(ei)
	for _, m := range more {
		s.remove(m)
	}
}

// remove takes entry ei out of its band's tree, dropping the band if it is
// left empty.
func (s *bandSet) remove(ei int32) {
	b := s.get(s.ents.at(ei).priority, false)
	b.tree.remove(ei)
	if b.tree.root == 0 {
		for i, x := range s.list {
			if x == b {
				s.list = append(s.list[:i], s.list[i+1:]...)
				break
			}
		}
	}
}

// setHas sets what is booked for requester ei (its first entry, placed).
func (s *bandSet) setHas(ei int32, has float64) {
	s.get(s.ents.at(ei).priority, false).tree.setHas(ei, has)
}

// sumHas returns Σ has over every band.
func (s *bandSet) sumHas() float64 {
	var h float64
	for _, b := range s.list {
		h += b.tree.sumHas()
	}
	return h
}

// othersHas returns Σ has of every lease but requester ei's (its first
// entry, placed; only the first entry holds has).
func (s *bandSet) othersHas(ei int32) float64 {
	var h float64
	p := s.ents.at(ei).priority
	for _, b := range s.list {
		if b.priority == p {
			h += b.tree.hasExcept(ei)
		} else {
			h += b.tree.sumHas()
		}
	}
	return h
}

// summary returns the demand per band, highest first, each with its
// demand curve when it takes more than one group (Resource.Bands).
func (s *bandSet) summary() []Band {
	out := make([]Band, 0, len(s.list))
	for _, b := range s.list {
		w, sub := b.tree.Totals()
		band := Band{Priority: b.priority, Clients: int64(math.Round(sub)), Wants: w}
		if gs := b.tree.groups(MaxGroups, nil); len(gs) > 1 {
			band.Groups = gs
		}
		out = append(out, band)
	}
	return out
}

// algo returns the bands for the algorithms, highest first.
func (s *bandSet) algo() []algorithm.PriorityBand {
	out := make([]algorithm.PriorityBand, len(s.list))
	for i, b := range s.list {
		out[i] = algorithm.PriorityBand{Priority: b.priority, Demand: &b.tree}
	}
	return out
}

// pooled is the demand of every band together (for the algorithms that
// ignore priority).
func (s *bandSet) pooled() algorithm.Demand {
	if len(s.list) == 1 {
		return &s.list[0].tree
	}
	return pooledDemand(s.list)
}

// pooledDemand is the union of several bands' trees.
type pooledDemand []*band

func (d pooledDemand) Totals() (wants, subclients float64) {
	for _, b := range d {
		w, s := b.tree.Totals()
		wants += w
		subclients += s
	}
	return wants, subclients
}

func (d pooledDemand) Below(level float64) (wants, subclients float64) {
	for _, b := range d {
		w, s := b.tree.Below(level)
		wants += w
		subclients += s
	}
	return wants, subclients
}

// WaterLevel finds the level by bisection over the bands' Below sums: the
// capacity used at level L, Σ min(wants_i, subclients_i × L), grows with L.
// O(bands × log n × 100); no algorithm in use needs it on pooled bands.
func (d pooledDemand) WaterLevel(capacity float64) float64 {
	totalWants, totalSub := d.Totals()
	if totalWants <= capacity {
		return math.Inf(1)
	}
	used := func(level float64) float64 {
		w, s := d.Below(level)
		return w + level*(totalSub-s)
	}
	lo, hi := 0.0, 1.0
	for used(hi) < capacity {
		hi *= 2
	}
	for range 100 {
		mid := (lo + hi) / 2
		if used(mid) < capacity {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}
