package parentlink

import (
	"math"
	"time"

	"github.com/sluice-rl/sluice/algorithm"
	pb "github.com/sluice-rl/sluice/api/doorman"
	v1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/lease"
)

// Timing of an intermediate server's leases from its parent.
const (
	// noLeaseRefresh is the refresh interval an intermediate hands its
	// requesters while it holds no lease from its parent for a resource:
	// they come back soon.
	noLeaseRefresh = time.Second
	// expiryMargin: the link refreshes at the latest this long before its
	// earliest lease from the parent expires (as client.ExpiryMargin).
	expiryMargin = 500 * time.Millisecond
)

// Fallback is what an intermediate server assumes of a resource its parent
// has not described yet: the lease length (also the longest learning mode
// it assumes) and refresh interval of a resource that matches no template
// (capacity.FallbackLeaseLength and capacity.FallbackRefreshInterval).
type Fallback struct {
	LeaseLength     time.Duration
	RefreshInterval time.Duration
}

// Lease is what an intermediate server holds from its parent for one
// resource, and what the parent pushed down with it: the capacity, the
// algorithm and its parameters, the safe capacity and when learning mode
// may end. The zero value holds no lease. Not safe for concurrent use: the
// server guards each resource's Lease with that resource's lock.
//
// Source: doorman-design.md, "Getting capacity for the server" and
// "Finding the algorithm to use".
type Lease struct {
	// OK is true once a lease was received.
	OK bool
	// Capacity is the lease's capacity (≥ 0; units of the resource).
	Capacity float64
	// Expiry is when the lease ends (whole seconds, from the wire).
	Expiry time.Time
	// Refresh is when to ask the parent again (≥ 1 s once OK).
	Refresh time.Duration
	// Parameters are the algorithm's parameters as the parent pushed them
	// down (nil: none), passed on as they are to this server's children.
	Parameters []*pb.NamedParameter
	// Decay is their decay_factor, resolved (0 before an algorithm came).
	Decay float64

	kind     algorithm.Kind
	length   time.Duration // lease length for this server's requesters
	interval time.Duration // refresh interval for this server's requesters
	learning time.Duration
	safe     float64
	hasSafe  bool
	seq      int64     // the sequence of the newest lease applied (0: none known)
	learnBy  time.Time // the earliest previous_expiry_time the parent sent (zero: none)
}

// Params resolves the lease into lease parameters for the resource's
// store: the capacity, algorithm and safe capacity the parent pushed down,
// and no lease beyond the parent's. Without a lease the capacity is 0,
// every grant already expired, and learning mode as long as fb's lease
// length: a new master must not tell its parent that it has handed out
// only what the first few clients reported.
func (pl *Lease) Params(fb Fallback) lease.Params {
	if !pl.OK {
		return lease.Params{
			Kind:                 algorithm.FairShare,
			LeaseLength:          fb.LeaseLength,
			RefreshInterval:      noLeaseRefresh,
			MaxExpiry:            time.Unix(1, 0),
			LearningModeDuration: fb.LeaseLength,
		}
	}
	return lease.Params{
		Kind:                 pl.kind,
		Capacity:             pl.Capacity,
		SafeCapacity:         pl.safe,
		HasSafeCapacity:      pl.hasSafe,
		LeaseLength:          pl.length,
		RefreshInterval:      pl.interval,
		LearningModeDuration: pl.learning,
		LearningEndsBy:       pl.learnBy,
		MaxExpiry:            pl.Expiry,
	}
}

// Stale reports whether a lease from the parent with sequence seq was
// decided before the one held (an answer that a pushed lease overtook); 0
// is never stale. It records seq otherwise.
func (pl *Lease) Stale(seq int64) bool {
	if seq != 0 && seq <= pl.seq {
		return true
	}
	pl.seq = max(pl.seq, seq)
	return false
}

// Adopt records a lease from the parent and what it pushed down with it;
// without an algorithm (none came yet), FAIR_SHARE with fb's lease length
// and refresh interval. It reports whether the pushed algorithm could not
// be built (an unknown kind) and NO_ALGORITHM stands in for it, as the
// design says. The caller checks Stale first.
func (pl *Lease) Adopt(rr *pb.ServerCapacityResourceResponse, fb Fallback) (fellBack bool) {
	g := rr.GetGets()
	pl.OK = true
	pl.Capacity = math.Max(g.GetCapacity(), 0)
	pl.Expiry = time.Unix(g.GetExpiryTime(), 0)
	pl.Refresh = time.Duration(max(g.GetRefreshInterval(), 1)) * time.Second
	if a := rr.GetAlgorithm(); a != nil {
		// doorman-design.md, "Finding the algorithm to use": an
		// algorithm that cannot be instantiated runs as None.
		inst, _ := algorithm.Build(algorithm.Kind(a.GetKind()), paramsFromWire(a.GetParameters()))
		pl.kind, fellBack = inst.Kind, inst.FellBack
		pl.Decay = inst.Params.DecayFactor
		pl.length = time.Duration(max(a.GetLeaseLength(), 1)) * time.Second
		pl.interval = time.Duration(max(a.GetRefreshInterval(), 1)) * time.Second
		pl.learning = time.Duration(max(a.GetLearningModeDuration(), 0)) * time.Second
		pl.Parameters = a.GetParameters()
	} else if pl.length == 0 {
		pl.kind = algorithm.FairShare
		pl.length, pl.interval = fb.LeaseLength, fb.RefreshInterval
	}
	pl.safe, pl.hasSafe = rr.GetSafeCapacity(), rr.SafeCapacity != nil
	if rr.PreviousExpiryTime != nil {
		// No lease this node's predecessor granted outlives its lease from
		// the parent: learning mode need not last beyond it.
		if by := time.Unix(rr.GetPreviousExpiryTime(), 0); pl.learnBy.IsZero() || by.Before(pl.learnBy) {
			pl.learnBy = by
		}
	}
	return fellBack
}

// Push applies a lease the parent pushed (sluice.v1.Leases/Watch): its
// capacity and expiry replace the held lease's when one is held and the
// pushed one is newer (Stale). It reports whether it applied.
func (pl *Lease) Push(l *v1.PushedLease) bool {
	if !pl.OK || pl.Stale(l.GetSequence()) {
		return false
	}
	pl.Capacity = math.Max(l.GetCapacity(), 0)
	pl.Expiry = time.Unix(l.GetExpiryTime(), 0)
	return true
}

// Due returns, for a held lease, how long from now until the link should
// ask the parent again for it: its refresh interval, never less than
// minRequest (Doorman's 5 s per resource: the parent would answer an
// earlier request with the same lease), and, while the lease runs, no
// later than 500 ms before it ends (as client.ExpiryMargin). Once the
// lease has ended, the refresh interval alone: a Sluice parent decides at
// once a request whose last lease has ended (lease.Resource.Decide), so
// waiting minRequest would leave the resource without a lease that much
// longer. ok is false without a lease.
func (pl *Lease) Due(now time.Time, minRequest time.Duration) (d time.Duration, ok bool) {
	if !pl.OK {
		return 0, false
	}
	until := pl.Expiry.Sub(now)
	if until <= 0 {
		return pl.Refresh, true
	}
	d = max(pl.Refresh, minRequest)
	if until > expiryMargin {
		until -= expiryMargin
	}
	return min(d, until), true
}

// paramsFromWire converts the wire's named parameters; a nil entry becomes
// a parameter with an empty name (which algorithm.ParseParameters reports).
func paramsFromWire(ps []*pb.NamedParameter) []algorithm.Parameter {
	out := make([]algorithm.Parameter, 0, len(ps))
	for _, p := range ps {
		out = append(out, algorithm.Parameter{Name: p.GetName(), Value: p.GetValue()})
	}
	return out
}
