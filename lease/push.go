package lease

import (
	"math"
	"time"

	"github.com/sluice-rl/sluice/algorithm"
)

// MinGrowth is the least growth of a lease worth pushing, as a fraction of
// the holder's share: a watched requester waits for capacity while what it
// was granted is more than MinGrowth below its share, and Offer pushes it a
// new lease only when that grows it by more than MinGrowth of its share.
// Smaller differences wait for the holder's next request.
const MinGrowth = 0.01

// wait puts requester e at the end of the queue of watched requesters
// granted less than their share (on), or takes it out (not on). A
// requester already in the queue keeps its place.
func (r *Resource) wait(e *entry, on bool) {
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
	r.waiting = append(r.waiting, waiter{e: e, mark: e.waiting})
}

// short reports whether requester e's lease is more than MinGrowth below
// its share. O(log n).
func (r *Resource) short(e *entry) bool {
	t := r.target(e)
	return t-e.gets > MinGrowth*t
}

// Waiting returns the number of watched requesters waiting for capacity
// (see Offer).
func (r *Resource) Waiting() int {
	n := 0
	for _, w := range r.waiting {
		if w.e.waiting == w.mark {
			n++
		}
	}
	return n
}

// Offer hands what is free to the watched requesters (Request.Watched)
// that were granted less than their share because the rest was not free
// yet, first come first served, without waiting for their next request:
// capacity given back by one requester (a lower request, a release, an
// expiry, a cut) or added to the resource reaches those that want it at
// once, instead of staying idle until they ask again. Each gets
// min(its share, what is free), computed as a decision on its recorded
// demand; a lease that grows it by no more than MinGrowth of its share is
// not pushed. send delivers a new lease to its holder (the caller holds
// the resource's lock, so leases are delivered in decision order) and
// reports whether it could: a lease it could not deliver is not recorded,
// and its requester leaves the queue until its next request. Pushed
// leases never take more than is free, so Σ has never exceeds the
// capacity; they do not count as requests (Params.MinRequestInterval).
//
// Nothing is offered in learning mode or under an algorithm that does not
// share (STATIC, NO_ALGORITHM). It returns the number of leases pushed.
// O((k+1) log n) for the k requesters served or taken out of the queue.
//
// Source: Sluice's; doorman-design.md's first goal, "no capacity is left
// unused" (see docs/departures.md, "Leases pushed to their holders").
func (r *Resource) Offer(now time.Time, send func(client string, g Grant) bool) (pushed int) {
	r.Cleanup(now)
	if len(r.waiting) == 0 || r.Learning(now) || !sharing(r.params.Kind) {
		return 0
	}
	for len(r.waiting) > 0 {
		w := r.waiting[0]
		e := w.e
		if e.waiting != w.mark {
			r.waiting = r.waiting[1:]
			continue
		}
		sumHas := r.sumHas()
		if r.params.Capacity-sumHas <= 0 {
			break
		}
		target := r.target(e)
		gets := algorithm.Clamp(target, r.params.Capacity-(sumHas-e.has))
		if gets-e.gets <= MinGrowth*target {
			if target-e.gets <= MinGrowth*target {
				r.dequeue(e) // it has its share (which fell)
				continue
			}
			break // not enough is free yet for the first in the queue
		}
		d := r.withinOwnLease(now, gets)
		if d.gets <= e.gets {
			r.dequeue(e) // nothing can be granted now
			continue
		}
		g := Grant{
			Capacity:        d.gets,
			Expiry:          d.expiry,
			RefreshInterval: r.params.RefreshInterval,
			SafeCapacity:    r.SafeCapacity(),
			Sequence:        r.sequence(now),
		}
		if !send(e.id, g) {
			r.dequeue(e)
			continue
		}
		r.band(e.priority, false).tree.setHas(e, math.Max(d.gets, e.has))
		e.gets, e.expired = d.gets, false
		r.expiries.set(e, d.keep.Unix())
		pushed++
		if target-d.gets <= MinGrowth*target {
			r.dequeue(e)
			continue
		}
		break // what was free is used up
	}
	return pushed
}

// sequence returns the Grant.Sequence of a decision at now: Unix
// nanoseconds, above every sequence given before on the resource.
func (r *Resource) sequence(now time.Time) int64 {
	r.lastSeq = max(now.UnixNano(), r.lastSeq+1)
	return r.lastSeq
}

// dequeue takes e, the first live item, out of the waiting queue.
func (r *Resource) dequeue(e *entry) {
	e.waiting = 0
	r.waiting = r.waiting[1:]
}
