package capacity

import (
	"context"
	"math"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/sluice-rl/sluice/api/doorman"
	v1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/server/capacity/parentlink"
)

// firstLeaseWait bounds how long a client's first request for a resource
// waits for an intermediate server's first lease from its parent.
const firstLeaseWait = 2 * time.Second

// fallback is what an intermediate assumes of a resource its parent has
// not described yet: the lease length and refresh interval of a resource
// that matches no template.
var fallback = parentlink.Fallback{LeaseLength: FallbackLeaseLength, RefreshInterval: FallbackRefreshInterval}

// intermediate is an intermediate server's side of its link to its parent
// (package parentlink): it condenses the resources into the link's
// requests, applies the parent's answers and pushed leases to them, and
// lets a client's first request for a resource wait for its first lease.
// It implements parentlink.Server.
type intermediate struct {
	s    *Service
	link *parentlink.Link[*resource]
}

func newIntermediate(s *Service) *intermediate {
	in := &intermediate{s: s}
	in.link = parentlink.New[*resource](in, parentlink.Options{
		ID: s.opts.ID, Addresses: s.opts.Parent, HTTP: s.opts.ParentHTTP, TLS: s.opts.ParentTLS,
		Dial: s.hooks.ParentDial, Watch: !s.opts.NoPush, MaxResources: MaxResourcesPerRequest,
		Rand: s.hooks.Rand, Now: s.now, Logger: s.log,
	})
	return in
}

// Request implements parentlink.Server: per resource, its demand per
// priority band and the lease it holds from the parent.
func (in *intermediate) Request() (*pb.GetServerCapacityRequest, []*resource) {
	s := in.s
	now := s.now()
	ids, rs := s.resourceList()
	req := &pb.GetServerCapacityRequest{ServerId: proto.String(s.opts.ID)}
	for i, r := range rs {
		r.mu.Lock()
		r.store.Cleanup(now)
		rr := &pb.ServerCapacityResourceRequest{ResourceId: proto.String(ids[i])}
		for _, b := range r.store.Bands() {
			agg := &pb.PriorityBandAggregate{
				Priority: proto.Int64(b.Priority), NumClients: proto.Int64(b.Clients), Wants: proto.Float64(b.Wants),
			}
			if !s.hooks.DoormanAllocation {
				// The demand curve: the parent's water level runs across
				// this server's clients (lease.Band.Groups).
				for _, g := range b.Groups {
					agg.Groups = append(agg.Groups, &pb.ClientGroup{Wants: proto.Float64(g.Wants), NumClients: proto.Float64(g.Subclients)})
				}
			}
			rr.Wants = append(rr.Wants, agg)
		}
		// has is what this server has handed out and that still runs: its
		// parent keeps that booked until it is given back (see
		// lease.Request.KeepOutstanding). In learning mode it is not known yet
		// (the predecessor's clients have not all reported), so it is left
		// out and the parent keeps what it had booked.
		if s.hooks.DoormanAllocation {
			// Doorman: the lease held from the parent.
			if pl := r.parent; pl.OK && pl.Expiry.After(now) {
				rr.Has = &pb.Lease{
					ExpiryTime:      proto.Int64(pl.Expiry.Unix()),
					RefreshInterval: proto.Int64(int64(pl.Refresh / time.Second)),
					Capacity:        proto.Float64(pl.Capacity),
				}
			}
		} else if !r.store.Learning(now) {
			_, outstanding, _, _ := r.store.Totals()
			exp := now
			if pl := r.parent; pl.OK && pl.Expiry.After(now) {
				exp = pl.Expiry
			}
			rr.Has = &pb.Lease{
				ExpiryTime:      proto.Int64(exp.Unix()),
				RefreshInterval: proto.Int64(int64(max(r.parent.Refresh, time.Second) / time.Second)),
				Capacity:        proto.Float64(outstanding),
			}
		}
		r.mu.Unlock()
		req.Resource = append(req.Resource, rr)
	}
	return req, rs
}

// Answered implements parentlink.Server: it applies the parent's answer
// and returns when to refresh next: the shortest refresh interval the
// parent asked for, and no later than the earliest expiry (Lease.Due).
// It releases the first requests waiting for the resources' first leases.
func (in *intermediate) Answered(rs []*resource, resp *pb.GetServerCapacityResponse) time.Duration {
	s := in.s
	now := s.now()
	byID := map[string]*pb.ServerCapacityResourceResponse{}
	for _, rr := range resp.GetResponse() {
		byID[rr.GetResourceId()] = rr
	}
	next := time.Duration(math.MaxInt64)
	for _, r := range rs {
		r.mu.Lock()
		if rr := byID[r.store.ID()]; rr != nil && !r.parent.Stale(rr.GetGets().GetSequence()) {
			if r.parent.Adopt(rr, fallback) {
				s.metrics.algoFallbacks.Inc()
				if s.notes.once("algorithm", r.store.ID()) {
					s.log.Error("the parent pushed down an algorithm this server cannot build; running NO_ALGORITHM (every requester gets what it asks)",
						"resource", r.store.ID(), "kind", rr.GetAlgorithm().GetKind(), "see", "sluice_server_algorithm_fallbacks_total")
				}
			}
			r.store.SetParams(s.params(r.parent.Params(fallback)))
			s.push.offer(r)
		}
		if d, ok := r.parent.Due(now, s.minRequest); ok {
			next = min(next, d)
		}
		if r.firstLease != nil {
			close(r.firstLease)
			r.firstLease = nil
		}
		r.mu.Unlock()
	}
	if next == time.Duration(math.MaxInt64) || next <= 0 {
		next = time.Second
	}
	return next
}

// Pushed implements parentlink.Server: it applies leases the parent pushed
// (sluice.v1.Leases/Watch) to the resources this server holds a lease for,
// newer ones only, and pushes in turn what that frees here to this
// server's own watchers.
func (in *intermediate) Pushed(ls []*v1.PushedLease) {
	s := in.s
	for _, l := range ls {
		s.mu.RLock()
		r := s.resources[l.GetResourceId()]
		s.mu.RUnlock()
		if r == nil {
			continue
		}
		r.mu.Lock()
		if r.parent.Push(l) {
			r.store.SetParams(s.params(r.parent.Params(fallback)))
			s.push.offer(r)
		}
		r.mu.Unlock()
	}
}

// waitFirstLeases waits, for resources this intermediate server has no
// lease for from its parent yet, until the parent link has answered for
// all of them, ctx ends, firstLeaseWait passes, or half of ctx's time
// left passes, whichever is first; not at all while the link is failing
// (its last refresh failed: the parent is down or cut off), so that the
// requester gets this server's answer (no capacity yet) rather than its
// own deadline. The chaos harness's leases-tree mode found clients timing
// out while their intermediate's parent was dead: each request for a
// resource the sweep had forgotten waited for a first lease that could
// not come.
func (in *intermediate) waitFirstLeases(ctx context.Context, rs []*resource) {
	readies := make([]chan struct{}, 0, len(rs))
	for _, r := range rs {
		r.mu.Lock()
		if !r.parent.OK {
			if r.firstLease == nil {
				r.firstLease = make(chan struct{})
			}
			readies = append(readies, r.firstLease)
		}
		r.mu.Unlock()
	}
	if len(readies) == 0 {
		return
	}
	if in.s.hooks.ManualParent {
		// The caller drives the link and nothing runs concurrently (the
		// simulator): take the turn the poke would trigger, inline.
		in.link.Step(ctx)
		return
	}
	in.link.Poke()
	if in.link.Failing() {
		return
	}
	wait := firstLeaseWait
	if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(dl)/2)
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	for _, ready := range readies {
		select {
		case <-ready:
		case <-ctx.Done():
			return
		case <-t.C:
			return
		}
	}
}

// childInterval returns the refresh interval a child server should hand
// its own requesters, given this server's: one level further from the root
// the interval grows by 1/decay_factor (so it shrinks by decay_factor per
// level up toward the root), in whole seconds, at most the lease length.
//
// With shrink (hooks.Server.DesignRefreshDecay) it goes the design's way: one
// level further from the root the interval is multiplied by decay_factor,
// so that clients refresh most often.
func childInterval(own, leaseLength time.Duration, decay float64, shrink bool) time.Duration {
	if shrink {
		decay = 1 / decay
	}
	d := time.Duration(math.Ceil(own.Seconds()/decay)) * time.Second
	return min(max(d, time.Second), leaseLength)
}
