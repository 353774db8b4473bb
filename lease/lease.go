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
	"cmp"
	"math"
	"slices"
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
	// its own record, except for a Reserve requester.
	Has *float64
	// HasExpiry is when the claimed lease ends (zero: unknown). In learning
	// mode, a claim the store cannot cover with a lease of its own (its
	// MaxExpiry has passed: an intermediate server that has no lease from
	// its parent yet) is handed back until HasExpiry, never later.
	HasExpiry time.Time
	// Reserve marks a downstream server whose Has is what it has handed
	// out to its own requesters and that still runs (nil: it does not know
	// yet, being in learning mode: its demand then does not shrink either).
	// The store keeps min(Has, what it had booked for it) booked even when
	// it grants less,
	// so that capacity a child must take back from its clients is not
	// handed to others before the child's clients have given it back: the
	// child shrinks before the others grow, and the tree does not overshoot
	// (doorman-design.md, "Shortfall"; the rule is Sluice's).
	Reserve bool
	// Repeat exempts the request from Params.MinRequestInterval: the same
	// request decided again at once (an intermediate server that recorded
	// it, then waited for its first lease from its parent).
	Repeat bool
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
// has one more entry per further band, owned by the first. It is 128
// bytes, two cache lines, with what every decision reads in the first: a
// decision on a resource with many clients is bound by memory latency, not
// arithmetic.
type entry struct {
	wants      float64
	subclients float64
	has        float64 // the requester's whole lease (0 on further bands)
	key        float64 // wants / subclients when inserted in the tree
	leaf       *node   // the tree leaf holding the entry
	expSec     int64   // expiry, Unix seconds
	filed      bool    // filed in the expiry index under expSec
	expired    bool    // the last grant was an expired lease (MaxExpiry had passed)

	priority    int64 // the band
	id          string
	gets        float64  // the capacity of the requester's current lease
	lastRequest int64    // Unix nanoseconds
	owner       *entry   // on further bands: the requester's first entry
	more        []*entry // on the first entry: the further bands' entries
}

// band is the requesters of one priority, in a tree of their own.
type band struct {
	priority int64
	tree     tree
}

// Resource is the lease store of one resource. It is not safe for
// concurrent use: the server serialises access with a lock.
type Resource struct {
	id          string
	params      Params
	masterSince time.Time
	learningEnd time.Time
	entries     map[string]*entry
	bands       []*band // by descending priority; never empty bands
	fanout      int     // tree fanout for new bands (tests); 0: default
	expiries    expiries
}

// NewResource returns an empty store for resource id. masterSince is when
// this server became master: the resource is in learning mode until
// masterSince + learning mode duration (which may already be over).
//
// Source: doorman-design.md, "On learning mode".
func NewResource(id string, p Params, masterSince time.Time) *Resource {
	return &Resource{
		id:          id,
		params:      p,
		masterSince: masterSince,
		learningEnd: masterSince.Add(p.LearningModeDuration),
		entries:     make(map[string]*entry),
	}
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
	r.learningEnd = r.masterSince.Add(p.LearningModeDuration)
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
	r.expiries.popExpired(now.Unix(), r.drop)
}

func (r *Resource) drop(e *entry) {
	r.unplace(e)
	r.expiries.remove(e)
	delete(r.entries, e.id)
}

// band returns the band of priority p, creating it if create is set (nil
// otherwise when it does not exist).
func (r *Resource) band(p int64, create bool) *band {
	i := 0
	for i < len(r.bands) && r.bands[i].priority > p {
		i++
	}
	if i < len(r.bands) && r.bands[i].priority == p {
		return r.bands[i]
	}
	if !create {
		return nil
	}
	b := &band{priority: p, tree: tree{fanout: r.fanout}}
	r.bands = append(r.bands, nil)
	copy(r.bands[i+1:], r.bands[i:])
	r.bands[i] = b
	return b
}

// place puts the requester's entries (e and e.more) into their bands'
// trees.
func (r *Resource) place(e *entry) {
	r.band(e.priority, true).tree.insert(e)
	for _, m := range e.more {
		r.band(m.priority, true).tree.insert(m)
	}
}

// unplace takes the requester's entries out of their trees, dropping bands
// left empty.
func (r *Resource) unplace(e *entry) {
	r.removeFromBand(e)
	for _, m := range e.more {
		r.removeFromBand(m)
	}
}

func (r *Resource) removeFromBand(e *entry) {
	b := r.band(e.priority, false)
	b.tree.remove(e)
	if b.tree.root == nil {
		for i, x := range r.bands {
			if x == b {
				r.bands = append(r.bands[:i], r.bands[i+1:]...)
				break
			}
		}
	}
}

// parts returns the request's demand as bands sorted by descending
// priority, with equal priorities merged and subclients at least 1.
// buf is scratch space the result may use.
func parts(req Request, buf []Band) []Band {
	out := buf[:0]
	if len(req.Bands) == 0 {
		return append(out, Band{Priority: req.Priority, Clients: max(req.Subclients, 1), Wants: req.Wants})
	}
	for _, b := range req.Bands {
		b.Clients = max(b.Clients, 1)
		merged := false
		for i := range out {
			if out[i].Priority == b.Priority {
				out[i].Clients += b.Clients
				out[i].Wants += b.Wants
				merged = true
			}
		}
		if !merged {
			out = append(out, b)
		}
	}
	slices.SortFunc(out, func(a, b Band) int { return cmp.Compare(b.Priority, a.Priority) })
	return out
}

// sameParts reports whether e's entries hold exactly ps.
func sameParts(e *entry, ps []Band) bool {
	if len(ps) != 1+len(e.more) {
		return false
	}
	for i, p := range ps {
		x := e
		if i > 0 {
			x = e.more[i-1]
		}
		if x.priority != p.Priority || x.wants != p.Wants || x.subclients != float64(p.Clients) {
			return false
		}
	}
	return true
}

// fewerClients reports whether ps stands for fewer clients than e does.
func fewerClients(ps []Band, e *entry) bool {
	var n float64
	for _, p := range ps {
		n += float64(p.Clients)
	}
	return n < total(e).Subclients
}

// currentParts returns e's bands, highest priority first.
func currentParts(e *entry, out []Band) []Band {
	out = append(out, Band{Priority: e.priority, Clients: int64(e.subclients), Wants: e.wants})
	for _, m := range e.more {
		out = append(out, Band{Priority: m.priority, Clients: int64(m.subclients), Wants: m.wants})
	}
	return out
}

// setParts makes e's entries hold ps (e takes the first band).
func setParts(e *entry, ps []Band) {
	e.priority, e.wants, e.subclients = ps[0].Priority, ps[0].Wants, float64(ps[0].Clients)
	e.more = e.more[:0]
	for _, p := range ps[1:] {
		e.more = append(e.more, &entry{id: e.id, owner: e, priority: p.Priority, wants: p.Wants, subclients: float64(p.Clients)})
	}
}

// sumHas returns Σ has over every band.
func (r *Resource) sumHas() float64 {
	var h float64
	for _, b := range r.bands {
		h += b.tree.sumHas()
	}
	return h
}

// Decide records req and returns the requester's new lease. It runs the
// resource's algorithm (or, in learning mode, hands back what the requester
// claims to have) and never grants more than is free for the sharing
// algorithms: capacity minus every other unexpired lease. O(log n).
//
// Source: doorman-design.md, "Processing the GetCapacity RPC", steps 1-4.
func (r *Resource) Decide(now time.Time, req Request) Grant {
	r.Cleanup(now)
	if e, ok := r.entries[req.Client]; ok && !req.Repeat && now.UnixNano()-e.lastRequest < int64(r.params.MinRequestInterval) {
		return r.current(now, e)
	}
	var buf [4]Band
	ps := parts(req, buf[:])
	e, ok := r.entries[req.Client]
	unrecorded := !ok && req.Has != nil && *req.Has > 0 && !r.Learning(now)
	floored := math.Inf(1) // the reported wants, when the demand is floored
	if ok && req.Reserve && req.Has == nil && fewerClients(ps, e) {
		// A downstream server in learning mode has not heard from all its
		// clients yet: until it has, its demand in the shares does not
		// shrink (it is still granted no more than it asks).
		floored = 0
		for _, p := range ps {
			floored += p.Wants
		}
		ps = currentParts(e, buf[:0])
	}
	var prevHas float64 // what was booked for the requester
	if ok {
		prevHas = e.has
	}
	var othersHas float64 // Σ has of every other lease: e's is being replaced
	switch {
	case !ok:
		e = &entry{id: req.Client}
		setParts(e, ps)
		r.entries[req.Client] = e
		r.place(e)
		othersHas = r.sumHas()
	case !sameParts(e, ps):
		// The requester's place in the order changes.
		r.unplace(e)
		e.has = 0
		setParts(e, ps)
		r.place(e)
		othersHas = r.sumHas()
	default:
		// Only e (the first entry) holds has.
		for _, b := range r.bands {
			if b.priority == e.priority {
				othersHas += b.tree.hasExcept(e)
			} else {
				othersHas += b.tree.sumHas()
			}
		}
	}

	p := r.params
	learning := r.Learning(now)
	var gets float64
	switch {
	case learning && sharing(p.Kind):
		// Hand back what the requester claims to hold (a new one gets 0),
		// within what is free as far as the store knows; a claim that does
		// not fit is handed back below, without being extended.
		if req.Has != nil {
			gets = algorithm.Clamp(*req.Has, p.Capacity-othersHas)
		}
	case p.Kind == algorithm.FairShare && len(r.bands) > 1:
		gets = algorithm.Clamp(algorithm.PriorityFairTarget(p.Capacity, r.algoParts(e), r.algoBands()), p.Capacity-othersHas)
	default:
		gets = algorithm.Decide(p.Kind, p.Capacity, total(e), r.pooled(), othersHas)
	}

	gets = math.Min(gets, floored)

	expiry := r.expiryAt(now)
	keep := expiry
	if learning && sharing(p.Kind) && req.Has != nil && gets < *req.Has && req.HasExpiry.After(now) {
		// A claim the store cannot cover (a newly elected intermediate
		// whose lease from its parent does not yet cover what its
		// predecessor handed out) is handed back as it is, not extended:
		// it was granted under a valid chain of leases and ends when it
		// would have anyway; taking it away would not give the capacity
		// back any sooner than the parent's booking (see Reserve) allows.
		gets = *req.Has
		expiry = req.HasExpiry
		if lim := now.Add(p.LeaseLength); expiry.After(lim) {
			expiry = lim
		}
		expiry = expiry.Truncate(time.Second)
		keep = expiry
	} else if !expiry.After(now) {
		// The server's own lease (MaxExpiry) is gone: nothing can be
		// granted, and the requester gets an expired lease so that it falls
		// back to its mode. The store keeps its demand for a lease length
		// (holding nothing), so that the server can still ask its parent
		// for capacity on its behalf.
		gets = 0
		keep = now.Add(p.LeaseLength).Truncate(time.Second)
	}
	booked := gets
	if req.Reserve {
		// What the child still has outstanding stays booked; unknown (a
		// child in learning mode) means all it had.
		claim := math.Inf(1)
		if req.Has != nil {
			claim = *req.Has
		}
		booked = math.Max(gets, math.Min(claim, prevHas))
	}
	r.band(e.priority, false).tree.setHas(e, booked)
	e.gets = gets
	e.expired = !expiry.After(now)
	e.lastRequest = now.UnixNano()
	r.expiries.set(e, keep.Unix())
	return Grant{
		Capacity:        gets,
		Expiry:          expiry,
		RefreshInterval: p.RefreshInterval,
		SafeCapacity:    r.SafeCapacity(),
		Learning:        learning,
		Unrecorded:      unrecorded,
	}
}

// current returns requester e's current lease, for a request that came
// within MinRequestInterval of its last one.
func (r *Resource) current(now time.Time, e *entry) Grant {
	g := Grant{
		Capacity:        e.gets,
		Expiry:          time.Unix(e.expSec, 0),
		RefreshInterval: r.params.RefreshInterval,
		SafeCapacity:    r.SafeCapacity(),
		Learning:        r.Learning(now),
		Early:           true,
	}
	if e.expired {
		// The store kept the demand longer than the (expired) lease.
		g.Expiry = time.Unix(0, e.lastRequest).Truncate(time.Second)
	}
	return g
}

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
	if e, ok := r.entries[client]; ok {
		r.drop(e)
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
	_, sub := r.pooled().Totals()
	if sub < 1 {
		return r.params.Capacity
	}
	return r.params.Capacity / sub
}

// Totals returns Σ wants, Σ has, Σ subclients and the number of leases.
func (r *Resource) Totals() (wants, has, subclients float64, leases int) {
	for _, b := range r.bands {
		w, s := b.tree.Totals()
		wants += w
		subclients += s
	}
	return wants, r.sumHas(), subclients, len(r.entries)
}

// Has returns client's current lease, if it holds one.
func (r *Resource) Has(client string) (Lease, bool) {
	e, ok := r.entries[client]
	if !ok {
		return Lease{}, false
	}
	return e.lease(r.params.RefreshInterval), true
}

// Leases returns every outstanding lease, ordered by client. O(n).
func (r *Resource) Leases() []Lease {
	out := make([]Lease, 0, len(r.entries))
	for _, e := range r.entries {
		out = append(out, e.lease(r.params.RefreshInterval))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Client < out[j].Client })
	return out
}

// Bands returns the store's demand summarised per priority band, highest
// first: the shape a server sends its parent in GetServerCapacity. O(bands).
func (r *Resource) Bands() []Band {
	out := make([]Band, 0, len(r.bands))
	for _, b := range r.bands {
		w, s := b.tree.Totals()
		out = append(out, Band{Priority: b.priority, Clients: int64(math.Round(s)), Wants: w})
	}
	return out
}

// Band is the demand of one priority band: Clients requesters (subclients)
// wanting Wants in all.
type Band struct {
	Priority int64
	Clients  int64
	Wants    float64
}

// algoParts returns requester e's parts for the algorithms.
func (r *Resource) algoParts(e *entry) []algorithm.Part {
	out := make([]algorithm.Part, 0, 1+len(e.more))
	out = append(out, algorithm.Part{Priority: e.priority, Requester: algorithm.Requester{Wants: e.wants, Subclients: e.subclients}})
	for _, m := range e.more {
		out = append(out, algorithm.Part{Priority: m.priority, Requester: algorithm.Requester{Wants: m.wants, Subclients: m.subclients}})
	}
	return out
}

// algoBands returns the bands for the algorithms, highest first.
func (r *Resource) algoBands() []algorithm.PriorityBand {
	out := make([]algorithm.PriorityBand, len(r.bands))
	for i, b := range r.bands {
		out[i] = algorithm.PriorityBand{Priority: b.priority, Demand: &b.tree}
	}
	return out
}

// total returns requester e's demand over all its bands.
func total(e *entry) algorithm.Requester {
	t := algorithm.Requester{Wants: e.wants, Subclients: e.subclients}
	for _, m := range e.more {
		t.Wants += m.wants
		t.Subclients += m.subclients
	}
	return t
}

// pooled is the demand of every band together (for the algorithms that
// ignore priority).
func (r *Resource) pooled() algorithm.Demand {
	if len(r.bands) == 1 {
		return &r.bands[0].tree
	}
	return pooledDemand(r.bands)
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

func (e *entry) lease(refresh time.Duration) Lease {
	t := total(e)
	return Lease{
		Client: e.id, Priority: e.priority, Wants: t.Wants, Has: e.has,
		Subclients: int64(t.Subclients), Expiry: time.Unix(e.expSec, 0), RefreshInterval: refresh,
		LastRequest: time.Unix(0, e.lastRequest),
	}
}
