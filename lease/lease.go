// Package lease is Sluice's lease core: the per-resource store of the
// leases a capacity server has handed out, and the decision a server makes
// when a client asks for capacity. It is a deterministic state machine:
// every method takes the current time as an argument, and nothing here reads
// a clock, starts a goroutine or does I/O. The server (package server) adds
// locking and transport; the simulator drives the same code on virtual time.
//
// One decision costs O(log n) in the number of clients on the resource:
// the store keeps its leases in an augmented B+tree ordered by wants per
// subclient with running sums (wants, subclients, has), which is all the
// algorithms of package algorithm need, and expiries in a heap.
//
// Source: doorman-design.md, "Server state", "Processing the GetCapacity
// RPC", "On learning mode".
package lease

import (
	"math"
	"sort"
	"time"

	"github.com/sluice-rl/sluice/algorithm"
)

// Params configures a resource: its template, resolved.
type Params struct {
	// Kind is the algorithm that divides the capacity.
	Kind algorithm.Kind
	// Capacity is the capacity to divide (for Static: the per-client cap),
	// in the resource's unit (e.g. permits per second). ≥ 0.
	Capacity float64
	// SafeCapacity is what a client should use when it cannot refresh its
	// lease. When HasSafeCapacity is false the server computes it: capacity
	// divided by the number of clients (subclients) it knows about.
	SafeCapacity    float64
	HasSafeCapacity bool
	// LeaseLength is how long a lease lasts (whole seconds, > 0).
	LeaseLength time.Duration
	// RefreshInterval is how often the holder should refresh (whole
	// seconds, > 0, ≤ LeaseLength).
	RefreshInterval time.Duration
	// LearningModeDuration is how long after winning mastership the
	// resource stays in learning mode (0: none). The configuration
	// defaults it to the lease length.
	LearningModeDuration time.Duration
	// MaxExpiry, when not zero, caps every lease's expiry: a server never
	// grants a lease that outlives its own lease from its parent. Once it
	// has passed, every grant is 0 with an expired lease, while the
	// requesters' demand is still recorded.
	MaxExpiry time.Time
	// LearningEndsBy, when not zero, ends learning mode then at the latest:
	// an intermediate server's parent reports when the last lease it
	// granted this node's predecessor ends (Grant.PreviousExpiry), and no
	// lease the predecessor granted outlives that.
	//
	// Source: docs/departures.md, "What Sluice changes in the allocation
	// across the tree", rule 4.
	LearningEndsBy time.Time
	// MinRequestInterval is the shortest time between two decisions for
	// one requester (0: none). A request that comes sooner after the
	// requester's last one is not recorded and runs no algorithm: it gets
	// its current lease back (Grant.Early). The server sets Doorman's 5 s
	// (doorman.MinRequestInterval).
	//
	// Source: doorman-design.md, "Step 2: Insertion step".
	MinRequestInterval time.Duration
}

// Request is one requester's ask for capacity on a resource.
type Request struct {
	// Client identifies the requester (a client id or a server id).
	Client string
	// Priority is the requester's priority (carried, stored and reported).
	Priority int64
	// Wants is the capacity asked for; ≥ 0 and finite (the server
	// validates).
	Wants float64
	// Subclients is the number of clients the requester stands for; values
	// below 1 count as 1.
	Subclients int64
	// Bands, when not empty, replaces Priority, Wants and Subclients: a
	// downstream server's demand, one band per priority its clients use
	// (its PriorityBandAggregates). Bands with the same priority are
	// merged; Clients below 1 count as 1.
	Bands []Band
	// Has is the capacity the requester claims to hold from an earlier
	// lease, or nil if it holds none (new client, or its lease expired).
	// Learning mode hands it back; outside learning mode the store trusts
	// its own record, except for what a KeepOutstanding requester still
	// has outstanding.
	Has *float64
	// HasExpiry is when the claimed lease ends (zero: unknown). In learning
	// mode, a claim the store cannot cover with a lease of its own (its
	// MaxExpiry has passed: an intermediate server that has no lease from
	// its parent yet) is handed back until HasExpiry, never later.
	HasExpiry time.Time
	// KeepOutstanding marks a downstream server whose Has is what it has
	// handed out to its own requesters and that still runs (Has nil: it
	// does not know yet, being in learning mode; all it had stays booked,
	// and its demand does not shrink while it stands for fewer clients
	// than before). The store keeps min(Has, what it had booked for it)
	// booked even when it grants less, so that capacity a child must take
	// back from its clients is not handed to others before the child's
	// clients have given it back: the child shrinks before the others
	// grow, and the tree does not overshoot.
	// False (a client, or Doorman's allocation): what the requester is no
	// longer granted is free at once.
	//
	// Source: docs/departures.md, "What Sluice changes in the allocation across
	// the tree", rules 2 and 3 (doorman-design.md, "Shortfall", accepts
	// the overshoot instead).
	KeepOutstanding bool
	// Repeat exempts the request from Params.MinRequestInterval: the same
	// request decided again at once (an intermediate server that recorded
	// it, then waited for its first lease from its parent).
	Repeat bool
	// Fallback leaves a requester that claims nothing (Has nil; not a
	// KeepOutstanding one) in its fallback mode while the store is in
	// learning mode: it gets 0 with an expired lease rather than a lease
	// of 0, so that it goes on using its safe capacity (a client in safe
	// mode, the default) as it did while it could not reach a master, and
	// min(its wants, safe capacity × its subclients) stays booked for it
	// until it asks again, so that what it may use is not granted to
	// others when learning mode ends. False (Doorman's allocation): it gets
	// a lease of 0, and stops using the resource until learning mode ends.
	//
	// Source: doorman-design.md, "Optimistic, pessimistic and safe mode
	// operation" and "On learning mode"; docs/departures.md, "What Sluice
	// changes in the allocation across the tree", rule 5.
	Fallback bool
	// Watched reports that the requester receives pushed leases (it has a
	// sluice.v1.Leases Watch stream open to this server): when the
	// decision grants it less than it wants, the store offers it what
	// becomes free (Offer) without waiting for its next request.
	Watched bool
}

// Grant is the outcome of a decision.
type Grant struct {
	// Capacity is what the requester may use until Expiry.
	Capacity float64
	// Expiry is when the lease ends (whole seconds).
	Expiry time.Time
	// RefreshInterval is when the requester should ask again.
	RefreshInterval time.Duration
	// SafeCapacity is what the requester should use if it cannot refresh.
	SafeCapacity float64
	// Learning reports whether the decision was made in learning mode.
	Learning bool
	// Early reports that the request came within Params.MinRequestInterval
	// of the requester's previous one: nothing was recorded or decided,
	// and Capacity and Expiry are the requester's current lease.
	Early bool
	// Unrecorded reports that the request claimed a lease (Has > 0) that
	// the store has no record of, outside learning mode: an error of the
	// requester's that the server logs; the request is decided as usual.
	//
	// Source: doorman-design.md, "Step 2: Insertion step", the note.
	Unrecorded bool
	// Sequence identifies the decision that made the lease: Unix
	// nanoseconds of the decision, made strictly increasing per resource
	// (doorman.proto's Lease.sequence, Sluice's extension); 0 on an Early
	// grant, which repeats the requester's last decision. A holder of
	// pushed leases applies one only if its sequence is higher than that of
	// the lease it holds.
	Sequence int64
	// PreviousExpiry is when the last lease of more than 0 granted to the
	// requester before this decision ends, or the decision's time if none
	// runs; zero in learning mode, when the store does not know. A
	// downstream server hands out only what it holds, never beyond its own
	// lease, so what its predecessor handed out ends by then: leases of 0
	// back nothing. (The record of a requester only ever extends, and is
	// dropped only once every lease it was granted has ended.)
	PreviousExpiry time.Time
}

// Lease describes one outstanding lease, for status pages and tests.
type Lease struct {
	Client          string
	Priority        int64 // the highest band the requester asks in
	Wants           float64
	Has             float64
	Subclients      int64
	Expiry          time.Time
	RefreshInterval time.Duration
	LastRequest     time.Time
}

// entry is one requester's state and its part in its (highest) priority
// band's tree; a requester asking in several bands (a downstream server)
// has one more entry per further band, owned by the first (see
// requesterParts). Entries live in the resource's arena (store.go) and hold
// no pointers. What every decision reads is in its first 64 bytes (one or
// two cache lines: entries are 88 bytes, packed): a decision on a
// resource with many clients is bound by memory latency, not arithmetic.
type entry struct {
	wants      float64
	subclients float64
	has        float64 // the requester's whole lease (0 on further bands)
	expSec     int64   // expiry, Unix seconds
	leaf       int32   // the tree leaf holding the entry (a node index; 0: none)
	waiting    uint32  // > 0: in Resource.waiting, with this mark (see wait)
	gen        uint32  // changes when the entry is dropped (see expiries)
	filed      bool    // filed in the expiry index under expSec
	expired    bool    // the last grant was an expired lease (MaxExpiry had passed)
	hasMore    bool    // on the first entry: it has further bands' entries (requesterParts)

	priority    int64   // the band
	gets        float64 // the capacity of the requester's current lease
	lastRequest int64   // Unix nanoseconds
	// posExpSec (Unix seconds; 0: none) is the latest expiry of a lease
	// of more than 0 granted to the requester: what a downstream server
	// hands out ends by then (Grant.PreviousExpiry).
	posExpSec int64
	idOff     int64 // on the first entry: where its id is in Resource.ids
}

// Resource is the lease store of one resource. It is not safe for
// concurrent use: the server serialises access with a lock.
type Resource struct {
	// The lock that serialises the Resource's methods guards every part
	// below (bandSet, requesterParts, the expiry index included). parts
	// and bands point to ents: a Resource is used through the pointer
	// NewResource returns, never copied.
	id          string
	params      Params
	masterSince time.Time
	learningEnd time.Time
	ents        entries        // every requester's entries (store.go)
	ids         ids            // the requesters' first entries, by id
	parts       requesterParts // the requesters' further entries (parts.go)
	bands       bandSet        // the entries by priority band (bands.go)
	expiries    expiries

	// The watched requesters granted less than they want, served in turn
	// (see Offer): each item is live while its entry's waiting mark equals
	// the item's.
	waiting  []waiter
	waitMark uint32
	lastSeq  int64 // the last Grant.Sequence given
}

// waiter is an item of Resource.waiting.
type waiter struct {
	e    int32 // the requester's first entry
	mark uint32
}

// NewResource returns an empty store for resource id. masterSince is when
// this server became master: the resource is in learning mode until
// masterSince + learning mode duration (which may already be over).
//
// Source: doorman-design.md, "On learning mode".
func NewResource(id string, p Params, masterSince time.Time) *Resource {
	r := &Resource{
		id:          id,
		params:      p,
		masterSince: masterSince,
		learningEnd: learningEnd(masterSince, p),
		ents:        newEntries(),
	}
	r.parts = requesterParts{ents: &r.ents}
	r.bands = bandSet{ents: &r.ents}
	return r
}

// learningEnd returns when learning mode ends for a master since
// masterSince: LearningModeDuration later, or by LearningEndsBy if that is
// sooner.
func learningEnd(masterSince time.Time, p Params) time.Time {
	end := masterSince.Add(p.LearningModeDuration)
	if by := p.LearningEndsBy; !by.IsZero() && by.Before(end) {
		end = by
	}
	return end
}

// ID returns the resource id.
func (r *Resource) ID() string { return r.id }

// Params returns the resource's current parameters.
func (r *Resource) Params() Params { return r.params }

// SetParams replaces the parameters (a configuration reload, or a new lease
// from the parent). Outstanding leases are kept; they converge to the new
// capacity as clients refresh, and the "never more than is free" rule keeps
// new grants within the new capacity.
// Learning mode still ends LearningModeDuration after mastership began.
func (r *Resource) SetParams(p Params) {
	r.params = p
	r.learningEnd = learningEnd(r.masterSince, p)
}

// Learning reports whether the resource is in learning mode at now.
func (r *Resource) Learning(now time.Time) bool { return now.Before(r.learningEnd) }

// LearningEnd returns when learning mode ends.
func (r *Resource) LearningEnd() time.Time { return r.learningEnd }

// Cleanup drops the leases that expired at or before now. It costs
// O(k log n) for k expired leases.
//
// Source: doorman-design.md, "Step 1: Cleanup step".
func (r *Resource) Cleanup(now time.Time) {
	r.expiries.popExpired(&r.ents, now.Unix(), r.drop)
}

// drop forgets requester ei: its entries leave their trees, the expiry
// index and the waiting queue, and return to the arena.
func (r *Resource) drop(ei int32) {
	e := r.ents.at(ei)
	e.waiting = 0
	r.bands.unplace(ei, r.parts.further(ei))
	r.expiries.remove(e)
	r.ids.remove(&r.ents, ei)
	r.parts.release(ei)
	r.ents.release(ei)
}

// Decide records req and returns the requester's new lease. It runs the
// resource's algorithm (or, in learning mode, hands back what the requester
// claims to have) and never grants more than is free for the sharing
// algorithms: capacity minus every other unexpired lease. O(log n).
//
// A decision is a sequence of policies, each a function of its own:
//
//   - early: a request within MinRequestInterval of the last one gets the
//     current lease back, undecided (Step 2);
//   - floorLearningChild: a downstream server in learning mode does not
//     shrink its demand (Sluice's rule 2);
//   - insert: the requester's place in its priority bands, and what every
//     other lease holds (Step 2);
//   - allot: the resource's algorithm, or in learning mode
//     learningHandBack, as if it were one more algorithm (Step 3);
//   - handBackUnextended: in learning mode, a claim the store cannot
//     cover is handed back as it is (Sluice's rule 1);
//   - withinOwnLease: no lease outlives the server's own, and none is
//     granted once that has passed;
//   - booked: what stays booked for a downstream server that keeps its
//     outstanding leases (Sluice's rule 3);
//   - record: the store's record of the decision (Step 4).
//
// Sluice's rules are those under "What Sluice changes in the allocation
// across the tree" in docs/departures.md.
//
// Source: doorman-design.md, "Processing the GetCapacity RPC", steps 1-4.
func (r *Resource) Decide(now time.Time, req Request) Grant {
	r.Cleanup(now)
	ei := r.ids.find(&r.ents, req.Client) // 0: a requester the store has no record of
	learning := r.Learning(now)
	var previous time.Time
	if !learning {
		previous = now.Truncate(time.Second)
		if ei != 0 {
			previous = time.Unix(max(r.ents.at(ei).posExpSec, previous.Unix()), 0)
		}
	}
	if ei != 0 && r.early(now, r.ents.at(ei), req.Repeat) {
		g := r.current(now, ei)
		g.PreviousExpiry = previous
		return g
	}
	unrecorded := ei == 0 && req.Has != nil && *req.Has > 0 && !learning
	var buf [4]Band
	ps, ceiling := r.floorLearningChild(ei, req.KeepOutstanding, req.Has, parts(req, buf[:]))
	var wasBooked float64 // what was booked for the requester
	if ei != 0 {
		wasBooked = r.ents.at(ei).has
	}
	ei, othersHas := r.insert(ei, req.Client, ps)
	gets := math.Min(r.allot(learning, ei, req.Has, othersHas), ceiling)
	d, ok := r.handBackUnextended(now, learning, req.Has, req.HasExpiry, gets)
	var book float64
	switch {
	case !ok && learning && sharing(r.params.Kind) && req.Fallback && req.Has == nil && !req.KeepOutstanding:
		d, book = r.leftInFallback(now, ei, othersHas)
	case !ok:
		d = r.withinOwnLease(now, gets)
		fallthrough
	default:
		book = booked(d.gets, req.KeepOutstanding, req.Has, wasBooked)
	}
	r.record(now, ei, d, book)
	r.wait(ei, req.Watched && sharing(r.params.Kind) && !learning && !ok && d.expiry.After(now) && ceiling > d.gets && r.short(ei))
	return Grant{
		Capacity:        d.gets,
		Expiry:          d.expiry,
		RefreshInterval: r.params.RefreshInterval,
		SafeCapacity:    r.safeToSend(learning, req.Fallback),
		Learning:        learning,
		Unrecorded:      unrecorded,
		Sequence:        r.sequence(now),
		PreviousExpiry:  previous,
	}
}

// decision is a decided lease; file derives how long the store keeps its
// record.
type decision struct {
	gets   float64   // the capacity granted
	expiry time.Time // when the lease ends (whole seconds)
}

// early reports whether a request from requester e comes within
// Params.MinRequestInterval of its last one while the lease it was last
// given still runs: it is then not recorded and runs no algorithm, and
// gets that lease back (current). A Repeat is never early, nor is a
// request whose last lease has ended (or was an expired one): its
// requester holds nothing, and an answer of the same ended lease would
// keep it holding nothing until the interval is over.
//
// Source: doorman-design.md, "Step 2: Insertion step" (which leaves the
// resource out of the response instead; see docs/departures.md, "Where Sluice
// departs from Doorman").
func (r *Resource) early(now time.Time, e *entry, repeat bool) bool {
	return !repeat && now.UnixNano()-e.lastRequest < int64(r.params.MinRequestInterval) && e.runs(now)
}

// floorLearningChild keeps the demand of a downstream server in learning
// mode from shrinking. A requester that keeps its outstanding leases
// booked (Request.KeepOutstanding) but does not know them yet (has nil: it
// is in learning mode) and stands for fewer clients than its record e has
// not heard from all its clients yet: until it has, it keeps its recorded
// demand in the shares (returned in place of ps, in ps's storage), and the
// ceiling on its grant is the Σ wants it reports, so that it is still
// granted no more than it asks. Otherwise ps is returned as it is and the
// ceiling is +Inf. ei is 0 for a requester the store has no record of.
//
// Source: docs/departures.md, "What Sluice changes in the allocation across the
// tree", rule 2; doorman-design.md, "On learning mode".
func (r *Resource) floorLearningChild(ei int32, keepOutstanding bool, has *float64, ps []Band) (_ []Band, ceiling float64) {
	if ei == 0 || !keepOutstanding || has != nil || !r.parts.fewerClients(ps, ei) {
		return ps, math.Inf(1)
	}
	for _, p := range ps {
		ceiling += p.Wants
	}
	return r.parts.current(ei, ps[:0]), ceiling
}

// insert records the requester's demand ps (highest priority first) in its
// priority bands' trees: a requester the store has no record of (ei 0)
// gets an entry, one whose demand changed moves to its new place in the
// order, and one whose demand did not change stays where it is. It returns
// the requester's first entry and othersHas, Σ has of every other lease
// (the requester's own is being replaced). O(bands × log n).
//
// Source: doorman-design.md, "Step 2: Insertion step", "Server state"
// (the PriorityBandAggregates of a downstream server).
func (r *Resource) insert(ei int32, client string, ps []Band) (_ int32, othersHas float64) {
	switch {
	case ei == 0:
		ei = r.ents.add()
		r.ids.add(&r.ents, client, ei)
		r.parts.set(ei, ps)
		r.bands.place(ei, r.parts.further(ei))
		othersHas = r.bands.sumHas()
	case !r.parts.same(ei, ps):
		// The requester's place in the order changes.
		r.bands.unplace(ei, r.parts.further(ei))
		r.ents.at(ei).has = 0
		r.parts.set(ei, ps)
		r.bands.place(ei, r.parts.further(ei))
		othersHas = r.bands.sumHas()
	default:
		othersHas = r.bands.othersHas(ei)
	}
	return ei, othersHas
}

// allot returns what requester ei gets by the resource's algorithm, given
// that every other lease holds othersHas. In learning mode the sharing
// algorithms give way to learningHandBack; FAIR_SHARE over several
// priority bands serves the higher bands first.
//
// Source: doorman-design.md, "Step 3: Determining the new capacity",
// "Algorithms".
func (r *Resource) allot(learning bool, ei int32, has *float64, othersHas float64) float64 {
	p := r.params
	switch {
	case learning && sharing(p.Kind):
		return learningHandBack(has, p.Capacity-othersHas)
	case sharing(p.Kind):
		return algorithm.Clamp(r.target(ei), p.Capacity-othersHas)
	default:
		return algorithm.Decide(p.Kind, p.Capacity, r.parts.total(ei), r.bands.pooled(), othersHas)
	}
}

// target returns requester ei's share by a sharing algorithm, before it is
// limited to what is free: FAIR_SHARE over several priority bands serves
// the higher bands first. O(log n).
//
// Source: doorman-design.md, "Algorithms".
//
// A requester of several entries (a downstream server: one per band, or
// per group of a band's demand curve) gets the sum of its entries' shares,
// each entry a requester of its own at the same water level: so the level
// runs across the clients beneath it (Band.Groups).
func (r *Resource) target(ei int32) float64 {
	p := r.params
	several := r.ents.at(ei).hasMore
	switch {
	case p.Kind == algorithm.FairShare && (several || len(r.bands.list) > 1):
		return algorithm.PriorityFairTarget(p.Capacity, r.parts.algo(ei), r.bands.algo())
	case p.Kind == algorithm.FairShare:
		return algorithm.FairTarget(p.Capacity, r.parts.total(ei), r.bands.pooled())
	case several:
		var t float64
		pooled := r.bands.pooled()
		for _, part := range r.parts.algo(ei) {
			t += algorithm.ProportionalTarget(p.Capacity, part.Requester, pooled)
		}
		return t
	default:
		return algorithm.ProportionalTarget(p.Capacity, r.parts.total(ei), r.bands.pooled())
	}
}

// learningHandBack is learning mode's algorithm: the requester gets back
// what it claims to hold (has; nil, a new requester or one whose lease
// expired: 0), within free, what is free as far as the store knows. A
// claim that does not fit is then handed back by handBackUnextended.
//
// Source: doorman-design.md, "On learning mode", "Step 3: Determining the
// new capacity".
func learningHandBack(has *float64, free float64) float64 {
	if has == nil {
		return 0
	}
	return algorithm.Clamp(*has, free)
}

// handBackUnextended hands back, in learning mode, a claim the store
// cannot cover as it is, not extended: when a sharing algorithm grants
// the requester less (gets) than it claims to hold (has) and the claimed
// lease still runs (hasExpiry after now), the requester gets its claim
// until hasExpiry, no later than a lease length from now, in whole seconds
// rounded down; ok is false otherwise. Such a claim comes to a newly
// elected intermediate whose lease from its parent does not yet cover what
// its predecessor handed out: it was granted under a valid chain of leases
// and ends when it would have anyway; taking it away would not give the
// capacity back any sooner than the parent's booking (booked) allows.
//
// Source: docs/departures.md, "What Sluice changes in the allocation across the
// tree", rule 1 (doorman-design.md, "On learning mode", hands back the
// claim, and Doorman cuts it to what is free).
func (r *Resource) handBackUnextended(now time.Time, learning bool, has *float64, hasExpiry time.Time, gets float64) (_ decision, ok bool) {
	if learning && sharing(r.params.Kind) && has != nil && gets < *has && hasExpiry.After(now) {
		expiry := hasExpiry
		if lim := now.Add(r.params.LeaseLength); expiry.After(lim) {
			expiry = lim
		}
		expiry = expiry.Truncate(time.Second)
		return decision{gets: *has, expiry: expiry}, true
	}
	return decision{}, false
}

// leftInFallback is the decision for a requester that claims nothing
// while the store is in learning mode (Request.Fallback): 0 with an expired
// lease, the record kept for a lease length, and what it may use in safe
// mode to book for it: min(wants, safe capacity × subclients), within what
// is free (capacity − othersHas: the store books no more than it has). The
// dynamic safe capacity counts only the clients heard from so far, so
// while learning it books at least the safe capacity the requester was
// last sent, whose master knew every client.
func (r *Resource) leftInFallback(now time.Time, ei int32, othersHas float64) (decision, float64) {
	t := r.parts.total(ei)
	book := algorithm.Clamp(math.Min(t.Wants, r.SafeCapacity()*math.Max(t.Subclients, 1)), r.params.Capacity-othersHas)
	return decision{gets: 0, expiry: now.Truncate(time.Second)}, book
}

// safeToSend returns the safe capacity to send with a decision: the
// template's, or the dynamic one (SafeCapacity) once learning mode has
// ended. While learning, the store has heard from only some clients and
// the dynamic one would overstate each one's share: +Inf (left off the
// wire), so that the requester keeps the one it was last sent (fallback:
// Request.Fallback; false keeps Doorman's behaviour of always sending it).
func (r *Resource) safeToSend(learning, fallback bool) float64 {
	if learning && fallback && !r.params.HasSafeCapacity {
		return math.Inf(1)
	}
	return r.SafeCapacity()
}

// withinOwnLease returns the lease of gets granted at now: it ends a lease
// length later, but never after the server's own lease from its parent
// (Params.MaxExpiry; see expiryAt). Once that has passed, nothing can be
// granted: the requester gets 0 with an expired lease, so that it falls
// back to its mode, and the store keeps its demand for a lease length
// (holding nothing), so that the server can still ask its parent for
// capacity on its behalf.
//
// Source: doorman-design.md, "Step 1: Cleanup step" (no lease outlives
// the server's own) and "Step 3: Determining the new capacity" (no
// capacity behaves as a capacity of zero).
func (r *Resource) withinOwnLease(now time.Time, gets float64) decision {
	expiry := r.expiryAt(now)
	if !expiry.After(now) {
		return decision{gets: 0, expiry: expiry}
	}
	return decision{gets: gets, expiry: expiry}
}

// ExpiryAllowance is how long a lease's capacity stays booked after its
// expiry: the store hands out again what a lease held only once its
// expiry has passed by this much on the server's clock, so that a server
// whose clock steps forward by up to this much (or runs that much ahead
// of its clients') never grants what clients still hold by theirs.
// Doorman frees it at the expiry (doorman-design.md, "Step 1: Cleanup
// step"); see docs/departures.md, "What Sluice changes in the allocation
// across the tree", rule 7, and docs/accuracy.md's clock-skew rows.
const ExpiryAllowance = 5 * time.Second

// booked returns what the store books for a requester granted gets: gets,
// or for one that keeps its outstanding leases booked
// (Request.KeepOutstanding) at least what it still has outstanding (has)
// but no more than was booked for it before (wasBooked); unknown (has nil:
// a child in learning mode) means all that was booked. The capacity a
// child must take back from its clients thus goes to others only once they
// gave it back: children shrink before others grow.
//
// Source: docs/departures.md, "What Sluice changes in the allocation across the
// tree", rule 3; doorman-design.md, "Shortfall".
func booked(gets float64, keepOutstanding bool, has *float64, wasBooked float64) float64 {
	if !keepOutstanding {
		return gets
	}
	claim := math.Inf(1)
	if has != nil {
		claim = *has
	}
	return math.Max(gets, math.Min(claim, wasBooked))
}

// record stores decision d on requester ei's request at now, with booked
// booked for it (book), and starts its MinRequestInterval.
//
// Source: doorman-design.md, "Step 4: Response step".
func (r *Resource) record(now time.Time, ei int32, d decision, booked float64) {
	r.book(now, ei, d, booked)
	r.ents.at(ei).lastRequest = now.UnixNano()
}

// book stores lease d of requester ei, with booked booked for it, and files
// it under its new expiry: a decision on its request (record), or one
// pushed to it (Offer).
func (r *Resource) book(now time.Time, ei int32, d decision, booked float64) {
	e := r.ents.at(ei)
	r.bands.setHas(ei, booked)
	e.gets = d.gets
	e.expired = !d.expiry.After(now)
	r.file(now, ei, e, d.expiry)
}

// file files requester ei's entry e, whose last lease (e.gets, e.expired)
// ends at expiry, in the expiry index: the store drops the record
// ExpiryAllowance after a lease that ran, and a lease length after an
// expired grant (it keeps the requester's demand, holding nothing, so that
// a downstream server can still ask its parent on its behalf). A lease of
// more than 0 moves the requester's latest such expiry (posExpSec).
func (r *Resource) file(now time.Time, ei int32, e *entry, expiry time.Time) {
	end := expiry.Add(ExpiryAllowance)
	if e.expired {
		end = now.Add(r.params.LeaseLength).Truncate(time.Second)
	}
	if e.gets > 0 {
		e.posExpSec = max(e.posExpSec, expiry.Unix())
	}
	r.expiries.set(ei, e, end.Unix())
}

// current returns requester ei's current lease, which still runs, for a
// request that came within MinRequestInterval of its last one (early).
// A lease cut short by the server's own lease from its parent
// (Params.MaxExpiry) is first renewed as far as the server's own lease
// now allows, to no later than a lease length after the decision that
// granted it: its capacity is unchanged and still counted in what the
// server reports it has handed out (its parent keeps that booked), so
// renewing it grants nothing new; without the renewal, a lease capped at
// a parent's lease that is renewed every 5 s ends before its requester
// may be decided again, and its requester holds nothing meanwhile.
func (r *Resource) current(now time.Time, ei int32) Grant {
	e := r.ents.at(ei)
	if !r.params.MaxExpiry.IsZero() {
		// What the decision would have granted under the server's own
		// lease as it is now.
		if renewed := r.expiryAt(time.Unix(0, e.lastRequest)); renewed.After(e.expiry()) {
			r.file(now, ei, e, renewed)
		}
	}
	return Grant{
		Capacity:        e.gets,
		Expiry:          e.expiry(),
		RefreshInterval: r.params.RefreshInterval,
		SafeCapacity:    r.SafeCapacity(),
		Learning:        r.Learning(now),
		Early:           true,
	}
}

// expiry returns when the last lease granted to the requester of entry e
// ends (whole seconds): ExpiryAllowance before the store drops its record.
// For an expired grant (e.expired) the store keeps the record longer than
// the lease: its end is then the record's.
func (e *entry) expiry() time.Time {
	if e.expired {
		return time.Unix(e.expSec, 0)
	}
	return time.Unix(e.expSec, 0).Add(-ExpiryAllowance)
}

// runs reports whether the last lease granted to the requester of entry e
// still runs at now: it was not an expired grant and its expiry is after
// now.
func (e *entry) runs(now time.Time) bool { return !e.expired && e.expiry().After(now) }

// expiryAt returns the expiry of a lease granted at now: now plus the
// lease length, no later than MaxExpiry, rounded down to a whole second
// (the wire carries whole seconds; rounding down never extends a lease).
func (r *Resource) expiryAt(now time.Time) time.Time {
	exp := now.Add(r.params.LeaseLength)
	if m := r.params.MaxExpiry; !m.IsZero() && exp.After(m) {
		exp = m
	}
	return exp.Truncate(time.Second)
}

func sharing(k algorithm.Kind) bool {
	return k == algorithm.FairShare || k == algorithm.ProportionalShare
}

// Release drops client's lease, if any.
//
// Source: doorman-design.md, "Processing the ReleaseCapacity RPC".
func (r *Resource) Release(client string) {
	if ei := r.ids.find(&r.ents, client); ei != 0 {
		r.drop(ei)
	}
}

// SafeCapacity returns the template's safe capacity, or else the capacity
// divided by the number of clients (subclients) the store knows about;
// +Inf for NO_ALGORITHM (the server then leaves the optional wire field
// out).
//
// Source: doorman-design.md, "Optimistic, pessimistic and safe mode
// operation".
func (r *Resource) SafeCapacity() float64 {
	if r.params.HasSafeCapacity {
		return r.params.SafeCapacity
	}
	if r.params.Kind == algorithm.NoAlgorithm {
		// Nothing is limited, so there is no share to compute.
		return math.Inf(1)
	}
	_, sub := r.bands.pooled().Totals()
	if sub < 1 {
		return r.params.Capacity
	}
	return r.params.Capacity / sub
}

// Totals returns Σ wants, Σ has, Σ subclients and the number of leases.
func (r *Resource) Totals() (wants, has, subclients float64, leases int) {
	wants, subclients = pooledDemand(r.bands.list).Totals()
	return wants, r.bands.sumHas(), subclients, r.ids.count
}

// Has returns client's current lease, if it holds one.
func (r *Resource) Has(client string) (Lease, bool) {
	ei := r.ids.find(&r.ents, client)
	if ei == 0 {
		return Lease{}, false
	}
	return r.lease(ei), true
}

// Leases returns every outstanding lease, ordered by client. O(n).
func (r *Resource) Leases() []Lease {
	out := make([]Lease, 0, r.ids.count)
	for _, v := range r.ids.slots {
		if v != 0 {
			out = append(out, r.lease(int32(uint32(v))))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Client < out[j].Client })
	return out
}

// Bands returns the store's demand summarised per priority band, highest
// first: the shape a server sends its parent in GetServerCapacity, each
// band with its demand curve (Band.Groups, at most MaxGroups groups; nil
// when one group says it all). O(bands × MaxGroups × log n) once
// requesters are grouped, O(n) at most.
func (r *Resource) Bands() []Band { return r.bands.summary() }

// Band is the demand of one priority band: Clients requesters (subclients)
// wanting Wants in all.
type Band struct {
	Priority int64
	Clients  int64
	Wants    float64
	// Groups, when not empty, is the band's demand curve: its clients in
	// groups by ascending wants per subclient, each group's Wants and
	// Subclients (≥ 1) their sums, Σ over the groups being the band's
	// Wants and Clients. A store places one entry per group in the band's
	// order, so that its water level runs across the clients beneath a
	// downstream server rather than stopping at it: the server gets Σ
	// min(wants, subclients × L) over its groups, its clients' max-min
	// fair shares of the whole tree. Empty: one group of the whole band.
	// At most MaxGroups (more are taken as empty).
	//
	// Source: doorman-design.md, "The FairShare algorithm" (max-min
	// fairness, here across the tree); docs/departures.md, "What Sluice
	// changes in the allocation across the tree".
	Groups []algorithm.Requester
}

// groupsOf returns b's groups: b.Groups, or b as one group in one (so
// that the common case allocates nothing) when it has none or they are
// unusable (too many, or a group of less than one subclient or of wants
// that are not finite and ≥ 0).
func groupsOf(b Band, one *[1]algorithm.Requester) []algorithm.Requester {
	if usableGroups(b.Groups) {
		return b.Groups
	}
	one[0] = algorithm.Requester{Wants: b.Wants, Subclients: float64(max(b.Clients, 1))}
	return one[:]
}

func usableGroups(gs []algorithm.Requester) bool {
	if len(gs) == 0 || len(gs) > MaxGroups {
		return false
	}
	for _, g := range gs {
		if !(g.Subclients >= 1) || !(g.Wants >= 0) || math.IsInf(g.Wants+g.Subclients, 0) {
			return false
		}
	}
	return true
}

// lease describes requester ei's lease.
func (r *Resource) lease(ei int32) Lease {
	e, t := r.ents.at(ei), r.parts.total(ei)
	return Lease{
		Client: r.client(ei), Priority: e.priority, Wants: t.Wants, Has: e.has,
		Subclients: int64(t.Subclients), Expiry: e.expiry(), RefreshInterval: r.params.RefreshInterval,
		LastRequest: time.Unix(0, e.lastRequest),
	}
}

// client returns requester ei's id.
func (r *Resource) client(ei int32) string { return string(r.ids.idOf(r.ents.at(ei).idOff)) }
