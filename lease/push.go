package lease

import (
	"math"
	"time"

	"github.com/sluice-rl/sluice/algorithm"
)

// MinGrowth is the least growth of a lease worth pushing, as a fraction of
// the holder's share: smaller growth waits for the holder's next request.
// A watched requester waits for capacity while it is granted more than
// MinGrowth less than it wants.
const MinGrowth = 0.01

// OfferBudget bounds the requesters one Offer looks at: it costs
// O(OfferBudget × log n) at most, whatever the number of requesters
// waiting; those it did not reach are looked at first by the next.
const OfferBudget = 64

// wait puts requester e at the end of the queue of watched requesters
// granted less than they want (on), or takes it out (not on). A requester
// already in the queue keeps its place.
func (r *Resource) wait(ei int32, on bool) {
	e := r.ents.at(ei)
	if !on {
		e.waiting = 0
		return
	}
	if e.waiting != 0 {
		return
	}
	r.waitMark++
	if r.waitMark == 0 { // wrapped: 0 means not waiting
		r.waitMark = 1
	}
	e.waiting = r.waitMark
	r.waiting = append(r.waiting, waiter{e: ei, mark: e.waiting})
}

// short reports whether requester ei is granted more than MinGrowth less
// than it wants.
func (r *Resource) short(ei int32) bool {
	w := r.parts.total(ei).Wants
	return w-r.ents.at(ei).gets > MinGrowth*w
}

// Waiting returns the number of watched requesters waiting for capacity
// (see Offer). O(queue).
func (r *Resource) Waiting() int {
	n := 0
	for _, w := range r.waiting {
		if r.ents.at(w.e).waiting == w.mark {
			n++
		}
	}
	return n
}

// Offer hands what is free to the watched requesters (Request.Watched)
// granted less than they want, without waiting for their next request:
// capacity given back by one requester (a lower request, a release, an
// expiry, a cut), added to the resource, or freed for a requester by a
// change of the others' demand reaches those that want it at once, instead
// of staying idle until they ask again. Each gets min(its share, what is
// free), computed as a decision on its recorded demand; a lease that grows
// it by no more than MinGrowth of its share is not pushed. The queue is
// served in turn: a requester looked at goes to its end while it still
// wants more, and at most OfferBudget are looked at per call.
//
// send delivers a new lease to its holder (the caller holds the resource's
// lock, so leases are delivered in decision order) and reports whether it
// could: a lease it could not deliver is not recorded, and its requester
// leaves the queue until its next request. Pushed leases never take more
// than is free, so Σ has never exceeds the capacity; they are not requests
// (Params.MinRequestInterval counts from the requester's own).
//
// Nothing is offered in learning mode or under an algorithm that does not
// share (STATIC, NO_ALGORITHM). It returns the number of leases pushed.
// O(OfferBudget × log n) at most; it returns at once when nobody waits.
//
// Source: Sluice's; doorman-design.md's first goal, "no capacity is left
// unused" (see docs/departures.md, "Leases pushed to their holders").
func (r *Resource) Offer(now time.Time, send func(client string, g Grant) bool) (pushed int) {
	if len(r.waiting) == 0 {
		return 0
	}
	r.Cleanup(now)
	if r.Learning(now) || !sharing(r.params.Kind) {
		return 0
	}
	for looked := 0; looked < OfferBudget && len(r.waiting) > 0; {
		sumHas := r.bands.sumHas()
		if r.params.Capacity-sumHas <= 0 {
			break
		}
		w := r.waiting[0]
		r.waiting = r.waiting[1:]
		ei, e := w.e, r.ents.at(w.e)
		if e.waiting != w.mark {
			continue // left the queue since
		}
		looked++
		if !r.short(ei) || e.expired {
			e.waiting = 0
			continue
		}
		target := r.target(ei)
		gets := algorithm.Clamp(target, r.params.Capacity-(sumHas-e.has))
		d := r.withinOwnLease(now, gets)
		if d.gets-e.gets > MinGrowth*target {
			g := Grant{
				Capacity:        d.gets,
				Expiry:          d.expiry,
				RefreshInterval: r.params.RefreshInterval,
				SafeCapacity:    r.SafeCapacity(),
				Sequence:        r.sequence(now),
			}
			if !send(r.client(ei), g) {
				e.waiting = 0
				continue
			}
			r.book(now, ei, d, math.Max(d.gets, e.has))
			pushed++
			if !r.short(ei) {
				e.waiting = 0
				continue
			}
		}
		r.waiting = append(r.waiting, w) // it still wants more
	}
	return pushed
}

// sequence returns the Grant.Sequence of a decision at now: Unix
// nanoseconds, above every sequence given before on the resource.
func (r *Resource) sequence(now time.Time) int64 {
	r.lastSeq = max(now.UnixNano(), r.lastSeq+1)
	return r.lastSeq
}
