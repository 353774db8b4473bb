package capacity

import (
	"context"
	"math"
	"net"
	"net/http"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-rl/sluice/algorithm"
	pb "github.com/sluice-rl/sluice/api/doorman"
	"github.com/sluice-rl/sluice/internal/tracing"
	"github.com/sluice-rl/sluice/lease"
)

// wireSafeCapacity returns the safe capacity for the wire, or nil (the
// field is optional) when there is no finite one, as for a resource that
// matches no template.
func wireSafeCapacity(c float64) *float64 {
	if math.IsInf(c, 0) || math.IsNaN(c) {
		return nil
	}
	return proto.Float64(c)
}

// Discovery implements doorman.Capacity/Discovery. It always answers.
func (s *Service) Discovery(ctx context.Context, _ *pb.DiscoveryRequest) (*pb.DiscoveryResponse, error) {
	master, addr := s.IsMaster()
	if master && addr == "" {
		if la, ok := ctx.Value(http.LocalAddrContextKey).(net.Addr); ok {
			addr = la.String()
		}
	}
	m := &pb.Mastership{}
	if addr != "" {
		m.MasterAddress = proto.String(addr)
	}
	return &pb.DiscoveryResponse{Mastership: m, IsMaster: proto.Bool(master)}, nil
}

// GetCapacity implements doorman.Capacity/GetCapacity: a bulk request for
// capacity from one client. (With client identities, the server's
// authorization has checked the client_id and the resources before:
// docs/identity.md.)
//
// Source: doorman-design.md, "Processing the GetCapacity RPC".
func (s *Service) GetCapacity(ctx context.Context, req *pb.GetCapacityRequest) (*pb.GetCapacityResponse, error) {
	return s.getCapacity(ctx, req, false)
}

// GetCapacityPaced is GetCapacity for a service in this process that asks
// on behalf of its own clients and paces its requests itself (package
// rlqs asks for a stream's bucket at most once per report of it, when its
// demand moved or its refresh is due): the same decisions, exempt from
// Doorman's minimum time between two requests (lease.Request.Repeat).
//
// Source: Sluice's (docs/rlqs.md, "What a stream is sent").
func (s *Service) GetCapacityPaced(ctx context.Context, req *pb.GetCapacityRequest) (*pb.GetCapacityResponse, error) {
	return s.getCapacity(ctx, req, true)
}

func (s *Service) getCapacity(ctx context.Context, req *pb.GetCapacityRequest, paced bool) (*pb.GetCapacityResponse, error) {
	if err := ValidateGetCapacity(req); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if m := s.masterNow().redirect(); m != nil {
		return &pb.GetCapacityResponse{Mastership: m}, nil
	}
	client := req.GetClientId()
	out := &pb.GetCapacityResponse{Response: make([]*pb.ResourceResponse, 0, len(req.GetResource()))}
	ids := make([]string, len(req.GetResource()))
	lrs := make([]lease.Request, len(ids))
	for i, rr := range req.GetResource() {
		lr := lease.Request{
			Client:     client,
			Priority:   rr.GetPriority(),
			Wants:      rr.GetWants(),
			Subclients: 1,
			Repeat:     paced,
			Fallback:   !s.hooks.DoormanAllocation,
		}
		claim(&lr, rr.GetHas(), s.hooks.DoormanAllocation)
		ids[i], lrs[i] = rr.GetResourceId(), lr
	}
	grants, ok := s.decideAll(ctx, ids, lrs)
	annotate(ctx, ids, ok)
	if !ok {
		return &pb.GetCapacityResponse{Mastership: s.masterNow().redirectOrUnknown()}, nil
	}
	if err := s.horizon.keep(ctx, grants); err != nil {
		return nil, status.Errorf(codes.Unavailable, "keeping the lease horizon: %v", err)
	}
	for i, g := range grants {
		out.Response = append(out.Response, &pb.ResourceResponse{
			ResourceId:   proto.String(ids[i]),
			Gets:         wireLease(g),
			SafeCapacity: wireSafeCapacity(g.SafeCapacity),
		})
	}
	return out, nil
}

// GetServerCapacity implements doorman.Capacity/GetServerCapacity: a
// downstream server asks on behalf of its clients, summarised per priority
// band. Each band counts as num_clients subclients at its priority (see
// algorithm.PriorityFairTarget); the response pushes the resource's
// algorithm and safe capacity down. With identities, the server_id is
// checked as GetCapacity checks a client_id.
func (s *Service) GetServerCapacity(ctx context.Context, req *pb.GetServerCapacityRequest) (*pb.GetServerCapacityResponse, error) {
	if err := ValidateGetServerCapacity(req); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if m := s.masterNow().redirect(); m != nil {
		return &pb.GetServerCapacityResponse{Mastership: m}, nil
	}
	server := req.GetServerId()
	out := &pb.GetServerCapacityResponse{}
	ids := make([]string, len(req.GetResource()))
	lrs := make([]lease.Request, len(ids))
	for i, rr := range req.GetResource() {
		// Each band counts as that many subclients at its priority, in
		// groups when it sends its demand curve (lease.Band.Groups).
		lr := lease.Request{Client: server, Subclients: 1}
		for _, b := range rr.GetWants() {
			lb := lease.Band{Priority: b.GetPriority(), Clients: b.GetNumClients(), Wants: b.GetWants()}
			for _, g := range b.GetGroups() {
				lb.Groups = append(lb.Groups, algorithm.Requester{Wants: g.GetWants(), Subclients: g.GetNumClients()})
			}
			lr.Bands = append(lr.Bands, lb)
		}
		// A downstream server's has is what it has handed out and that
		// still runs: it stays booked until its clients give it back.
		lr.KeepOutstanding = !s.hooks.DoormanAllocation
		claim(&lr, rr.GetHas(), s.hooks.DoormanAllocation)
		ids[i], lrs[i] = rr.GetResourceId(), lr
	}
	grants, ok := s.decideAll(ctx, ids, lrs)
	annotate(ctx, ids, ok)
	if !ok {
		return &pb.GetServerCapacityResponse{Mastership: s.masterNow().redirectOrUnknown()}, nil
	}
	if err := s.horizon.keep(ctx, grants); err != nil {
		return nil, status.Errorf(codes.Unavailable, "keeping the lease horizon: %v", err)
	}
	for i, g := range grants {
		p, params, decay := s.paramsOf(ids[i])
		out.Response = append(out.Response, &pb.ServerCapacityResourceResponse{
			ResourceId: proto.String(ids[i]),
			Gets:       wireLease(g),
			Algorithm: &pb.Algorithm{
				Kind:        pb.Algorithm_Kind(p.Kind).Enum(),
				LeaseLength: proto.Int64(int64(p.LeaseLength / time.Second)),
				// The child refreshes with this server every
				// p.RefreshInterval (Gets); its own requesters, one level
				// further from the root, refresh 1/decay_factor as slowly.
				RefreshInterval:      proto.Int64(int64(childInterval(p.RefreshInterval, p.LeaseLength, decay, s.hooks.DesignRefreshDecay) / time.Second)),
				LearningModeDuration: proto.Int64(int64(p.LearningModeDuration / time.Second)),
				Parameters:           params,
			},
			SafeCapacity:       wireSafeCapacity(g.SafeCapacity),
			PreviousExpiryTime: previousExpiry(g, s.hooks.DoormanAllocation),
		})
	}
	return out, nil
}

// annotate sets Sluice's attributes on a traced request's span: the
// resources asked for and the decision, "granted" (the leases decided,
// in the response unless keeping the lease horizon fails) or
// "redirected" (this task is not the master).
func annotate(ctx context.Context, ids []string, granted bool) {
	span := tracing.Span(ctx)
	if span == nil {
		return
	}
	decision := "granted"
	if !granted {
		decision = "redirected"
	}
	span.SetAttributes(tracing.ResourceKey.StringSlice(ids), tracing.DecisionKey.String(decision), tracing.DegradedKey.Bool(false))
}

// previousExpiry returns g.PreviousExpiry for the wire, or nil when it is
// not known (learning mode) or under Doorman's allocation.
func previousExpiry(g lease.Grant, doorman bool) *int64 {
	if g.PreviousExpiry.IsZero() || doorman {
		return nil
	}
	return proto.Int64(g.PreviousExpiry.Unix())
}

// ReleaseCapacity implements doorman.Capacity/ReleaseCapacity: it drops
// the client's leases on the listed resources.
func (s *Service) ReleaseCapacity(ctx context.Context, req *pb.ReleaseCapacityRequest) (*pb.ReleaseCapacityResponse, error) {
	if err := ValidateReleaseCapacity(req); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if m := s.masterNow().redirect(); m != nil {
		return &pb.ReleaseCapacityResponse{Mastership: m}, nil
	}
	for _, id := range req.GetResourceId() {
		if id == "" {
			s.metrics.emptyReleaseIDs.Inc()
			continue
		}
		s.mu.RLock()
		r := s.resources[id]
		s.mu.RUnlock()
		if r == nil {
			continue
		}
		r.mu.Lock()
		r.store.Release(req.GetClientId())
		s.push.offer(r)
		r.mu.Unlock()
	}
	return &pb.ReleaseCapacityResponse{}, nil
}

// decideAll runs one decision per resource, each under its resource's
// lock. ok is false when the server lost mastership meanwhile. On an
// intermediate server, resources it holds no lease for from its parent yet
// are recorded first, so that the parent hears of their demand, and decided
// again once the parent answered: one wait of at most firstLeaseWait for
// the whole request.
func (s *Service) decideAll(ctx context.Context, ids []string, reqs []lease.Request) ([]lease.Grant, bool) {
	grants := make([]lease.Grant, len(ids))
	rs := make([]*resource, len(ids))
	var pending []int
	for i, id := range ids {
		r := s.resource(id)
		if r == nil {
			return nil, false
		}
		rs[i] = r
		r.mu.Lock()
		grants[i] = s.decide(r, id, reqs[i])
		if s.parent != nil && !r.parent.OK {
			pending = append(pending, i)
		}
		r.mu.Unlock()
	}
	if len(pending) == 0 {
		return grants, true
	}
	waiting := make([]*resource, len(pending))
	for j, i := range pending {
		waiting[j] = rs[i]
	}
	s.parent.waitFirstLeases(ctx, waiting)
	for _, i := range pending {
		r := rs[i]
		r.mu.Lock()
		if r.parent.OK {
			rq := reqs[i]
			rq.Repeat = true // the same request, decided again now that there is capacity
			grants[i] = s.decide(r, ids[i], rq)
		}
		r.mu.Unlock()
	}
	return grants, true
}

// decide runs one decision on r (the caller holds r.mu) and counts and logs
// what the store flags: early requests (Doorman's 5-second rule) and
// claimed leases without a record outside learning mode (logged at most
// once every unrecordedLogEvery).
func (s *Service) decide(r *resource, id string, req lease.Request) lease.Grant {
	req.Watched = s.push.watched(req.Client)
	now := s.now()
	g := r.store.Decide(now, req)
	if !g.Early {
		s.push.offer(r)
	}
	if g.Early {
		s.metrics.early.Inc()
	}
	if g.Unrecorded {
		s.metrics.unrecorded.Inc()
		if s.notes.unrecordedDue(now) {
			s.log.Warn("request claims a lease the server has no record of, outside learning mode; deciding it as usual",
				"resource", id, "client", req.Client, "has", *req.Has,
				"see", "sluice_server_unrecorded_has_total")
		}
	}
	return g
}

// claim sets lr's Has and HasExpiry from the lease the requester says it
// holds (has; nil: none). Doorman's allocation (doorman:
// hooks.Server.DoormanAllocation) does not use the claimed expiry.
func claim(lr *lease.Request, has *pb.Lease, doorman bool) {
	if has == nil {
		return
	}
	lr.Has = proto.Float64(has.GetCapacity())
	if !doorman {
		lr.HasExpiry = time.Unix(has.GetExpiryTime(), 0)
	}
}

// paramsOf returns resource id's parameters, its algorithm parameters
// for the wire, and their decay_factor (resolved when the template was
// loaded or the parent's lease adopted; algorithm.DefaultDecayFactor when
// there is none).
func (s *Service) paramsOf(id string) (p lease.Params, params []*pb.NamedParameter, decay float64) {
	s.mu.RLock()
	r := s.resources[id]
	s.mu.RUnlock()
	if r == nil {
		return paramsFor(nil), nil, algorithm.DefaultDecayFactor
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case s.parent != nil:
		params, decay = r.parent.Parameters, r.parent.Decay
	case r.template != nil:
		for _, tp := range r.template.Algorithm.Parameters {
			params = append(params, &pb.NamedParameter{Name: proto.String(tp.Name), Value: proto.String(tp.Value)})
		}
		decay = r.template.Algorithm.Params.DecayFactor
	}
	if decay <= 0 { // no template, or no lease from the parent yet
		decay = algorithm.DefaultDecayFactor
	}
	return r.store.Params(), params, decay
}

func wireLease(g lease.Grant) *pb.Lease {
	return &pb.Lease{
		ExpiryTime:      proto.Int64(g.Expiry.Unix()),
		RefreshInterval: proto.Int64(int64(math.Ceil(g.RefreshInterval.Seconds()))),
		Capacity:        proto.Float64(g.Capacity),
		Sequence:        sequence(g.Sequence),
	}
}

// sequence returns a grant's sequence for the wire: nil (left out) for an
// Early grant, which has none.
func sequence(seq int64) *int64 {
	if seq == 0 {
		return nil
	}
	return proto.Int64(seq)
}
