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
	// grants a lease that outlives its own lease from its parent.
	MaxExpiry time.Time
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
	// Has is the capacity the requester claims to hold from an earlier
	// lease, or nil if it holds none (new client, or its lease expired).
	// Only learning mode uses it: otherwise the store trusts its own record.
	Has *float64
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
}

// Lease describes one outstanding lease, for status pages and tests.
type Lease struct {
	Client          string
	Priority        int64
	Wants           float64
	Has             float64
	Subclients      int64
	Expiry          time.Time
	RefreshInterval time.Duration
	LastRequest     time.Time
}

// entry is one requester's state. It is 128 bytes, two cache lines, with
// what every decision reads in the first: a decision on a resource with
// many clients is bound by memory latency, not arithmetic.
type entry struct {
	wants      float64
	subclients float64
	has        float64
	key        float64 // wants / subclients when inserted in the tree
	leaf       *node   // the tree leaf holding the entry
	expSec     int64   // expiry, Unix seconds
	filed      bool    // filed in the expiry index under expSec

	id          string
	priority    int64
	refresh     time.Duration
	lastRequest int64 // Unix nanoseconds
}

// Resource is the lease store of one resource. It is not safe for
// concurrent use: the server serialises access with a lock.
type Resource struct {
	id          string
	params      Params
	learningEnd time.Time
	entries     map[string]*entry
	tree        tree
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
func (r *Resource) SetParams(p Params) { r.params = p }

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
	r.tree.remove(e)
	r.expiries.remove(e)
	delete(r.entries, e.id)
}

// Decide records req and returns the requester's new lease. It runs the
// resource's algorithm (or, in learning mode, hands back what the requester
// claims to have) and never grants more than is free for the sharing
// algorithms: capacity minus every other unexpired lease. O(log n).
//
// Source: doorman-design.md, "Processing the GetCapacity RPC", steps 1-4.
func (r *Resource) Decide(now time.Time, req Request) Grant {
	r.Cleanup(now)
	sub := math.Max(float64(req.Subclients), 1)
	e, ok := r.entries[req.Client]
	var othersHas float64 // Σ has of every other lease: e's is being replaced
	switch {
	case !ok:
		e = &entry{id: req.Client, wants: req.Wants, subclients: sub}
		r.entries[req.Client] = e
		r.tree.insert(e)
		othersHas = r.tree.sumHas()
	case e.wants != req.Wants || e.subclients != sub:
		// The requester's place in the order changes.
		r.tree.remove(e)
		e.wants, e.subclients, e.has = req.Wants, sub, 0
		r.tree.insert(e)
		othersHas = r.tree.sumHas()
	default:
		othersHas = r.tree.hasExcept(e)
	}
	e.priority = req.Priority

	p := r.params
	learning := r.Learning(now)
	var gets float64
	switch {
	case learning && sharing(p.Kind):
		// Hand back what the requester claims to hold (a new one gets 0),
		// within what is free as far as the store knows.
		if req.Has != nil {
			gets = algorithm.Clamp(*req.Has, p.Capacity-othersHas)
		}
	default:
		gets = algorithm.Decide(p.Kind, p.Capacity, algorithm.Requester{Wants: req.Wants, Subclients: sub}, &r.tree, othersHas)
	}

	r.tree.setHas(e, gets)
	expiry := r.expiryAt(now)
	e.refresh = p.RefreshInterval
	e.lastRequest = now.UnixNano()
	r.expiries.set(e, expiry.Unix())
	if !expiry.After(now) {
		// The server's own lease is gone: nothing can be granted.
		r.drop(e)
		gets = 0
	}
	return Grant{
		Capacity:        gets,
		Expiry:          expiry,
		RefreshInterval: p.RefreshInterval,
		SafeCapacity:    r.SafeCapacity(),
		Learning:        learning,
	}
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
	_, sub := r.tree.Totals()
	if sub < 1 {
		return r.params.Capacity
	}
	return r.params.Capacity / sub
}

// Totals returns Σ wants, Σ has, Σ subclients and the number of leases.
func (r *Resource) Totals() (wants, has, subclients float64, leases int) {
	w, s := r.tree.Totals()
	return w, r.tree.sumHas(), s, r.tree.count()
}

// Has returns client's current lease, if it holds one.
func (r *Resource) Has(client string) (Lease, bool) {
	e, ok := r.entries[client]
	if !ok {
		return Lease{}, false
	}
	return e.lease(), true
}

// Leases returns every outstanding lease, ordered by client. O(n).
func (r *Resource) Leases() []Lease {
	out := make([]Lease, 0, len(r.entries))
	for _, e := range r.entries {
		out = append(out, e.lease())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Client < out[j].Client })
	return out
}

// Bands returns the store's demand summarised per priority band, the shape
// a server sends its parent in GetServerCapacity. O(n).
func (r *Resource) Bands() []Band {
	m := map[int64]*Band{}
	for _, e := range r.entries {
		b := m[e.priority]
		if b == nil {
			b = &Band{Priority: e.priority}
			m[e.priority] = b
		}
		b.Clients += int64(e.subclients)
		b.Wants += e.wants
	}
	out := make([]Band, 0, len(m))
	for _, b := range m {
		out = append(out, *b)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Priority > out[j].Priority })
	return out
}

// Band is the demand of one priority band.
type Band struct {
	Priority int64
	Clients  int64
	Wants    float64
}

func (e *entry) lease() Lease {
	return Lease{
		Client: e.id, Priority: e.priority, Wants: e.wants, Has: e.has,
		Subclients: int64(e.subclients), Expiry: time.Unix(e.expSec, 0), RefreshInterval: e.refresh,
		LastRequest: time.Unix(0, e.lastRequest),
	}
}
