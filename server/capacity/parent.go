package capacity

import (
	"context"
	"crypto/tls"
	"math"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-rl/sluice/algorithm"
	pb "github.com/sluice-rl/sluice/api/doorman"
	"github.com/sluice-rl/sluice/api/doorman/doormanconnect"
	v1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/internal/discovery"
	"github.com/sluice-rl/sluice/internal/refresh"
	"github.com/sluice-rl/sluice/internal/watch"
	"github.com/sluice-rl/sluice/lease"
)

// Timing of the parent link.
const (
	// firstLeaseWait bounds how long a client's first request for a
	// resource waits for this server's first lease from its parent.
	firstLeaseWait = 2 * time.Second
	// noLeaseRefresh is the refresh interval handed to clients while this
	// server holds no lease from its parent: they come back soon.
	noLeaseRefresh = time.Second
	parentTimeout  = 5 * time.Second
	minBackoff     = 100 * time.Millisecond
	maxBackoff     = 5 * time.Second
	// expiryMargin: the link refreshes at the latest this long before its
	// earliest lease from the parent expires (as client.ExpiryMargin).
	expiryMargin = 500 * time.Millisecond
)

// parentLease is what this server holds from its parent for one resource,
// and what the parent pushed down with it.
type parentLease struct {
	ok         bool // a lease was received
	capacity   float64
	expiry     time.Time
	refresh    time.Duration // when to ask the parent again
	kind       algorithm.Kind
	length     time.Duration // lease length for this server's requesters
	interval   time.Duration // refresh interval for this server's requesters
	learning   time.Duration
	safe       float64
	hasSafe    bool
	algoParams []*pb.NamedParameter // pushed down with the algorithm
	decay      float64              // their decay_factor, resolved
	ready      chan struct{}        // closed when the first answer arrives
	seq        int64                // the sequence of the newest lease applied (0: none known)
	learnBy    time.Time            // the earliest previous_expiry_time the parent sent (zero: none)
}

// params resolves the parent lease into lease parameters: the capacity,
// algorithm and safe capacity the parent pushed down, and no lease beyond
// the parent's. Without a lease the capacity is 0 and every grant expired.
func (pl *parentLease) params() lease.Params {
	if !pl.ok {
		return lease.Params{
			Kind:            algorithm.FairShare,
			LeaseLength:     FallbackLeaseLength,
			RefreshInterval: noLeaseRefresh,
			MaxExpiry:       time.Unix(1, 0),
			// Until the parent pushes its learning mode duration, assume
			// the longest: a new master must not tell its parent that it
			// has handed out only what the first few clients reported.
			LearningModeDuration: FallbackLeaseLength,
		}
	}
	return lease.Params{
		Kind:                 pl.kind,
		Capacity:             pl.capacity,
		SafeCapacity:         pl.safe,
		HasSafeCapacity:      pl.hasSafe,
		LeaseLength:          pl.length,
		RefreshInterval:      pl.interval,
		LearningModeDuration: pl.learning,
		LearningEndsBy:       pl.learnBy,
		MaxExpiry:            pl.expiry,
	}
}

// ParentStatus describes the link of an intermediate server to its parent.
type ParentStatus struct {
	// Addresses are the configured parent addresses.
	Addresses []string
	// Current is the address in use (the parent's master when known).
	Current string
	// LastOK is when the parent last answered; zero if never.
	LastOK time.Time
	// LastError is the last failure, "" after a success.
	LastError string
}

// parentLink asks the parent node for capacity on behalf of this server's
// requesters with GetServerCapacity, one bulk request for every resource,
// on the parent's schedule (the shortest refresh interval among its
// leases), following mastership redirects and failing over between the
// configured addresses.
//
// Source: doorman-design.md, "Getting capacity for the server".
type parentLink struct {
	s     *Service
	addrs []string
	dial  discovery.Dialer
	watch watch.Dialer // nil: no pushed leases from the parent
	wake  refresh.Wake

	// Loop state, used only by step (one caller at a time): the backoff
	// after failures, capped by the last answer's refresh interval.
	retry refresh.Retry

	mu       sync.Mutex
	addr     string
	stub     doormanconnect.CapacityClient
	lastOK   time.Time
	lastErr  string
	releases []string // resources this server no longer needs, to release at the parent
}

// release queues resources this server holds no lease for any more, to be
// released at the parent on the link's next turn (which it triggers).
func (l *parentLink) release(ids []string) {
	l.mu.Lock()
	l.releases = append(l.releases, ids...)
	l.mu.Unlock()
	l.poke()
}

// sendReleases gives the queued resources back to the parent (best effort:
// on failure their leases lapse at expiry).
func (l *parentLink) sendReleases(ctx context.Context) {
	l.mu.Lock()
	ids := l.releases
	l.releases = nil
	l.mu.Unlock()
	for start := 0; start < len(ids); start += MaxResourcesPerRequest {
		part := ids[start:min(start+MaxResourcesPerRequest, len(ids))]
		addr, stub := l.current()
		rctx, cancel := context.WithTimeout(ctx, parentTimeout)
		_, err := stub.ReleaseCapacity(rctx, connect.NewRequest(&pb.ReleaseCapacityRequest{
			ClientId: proto.String(l.s.opts.ID), ResourceId: part,
		}))
		cancel()
		if err != nil {
			l.s.log.Warn("releasing resources at the parent failed; their leases lapse at expiry", "parent", addr, "resources", len(part), "err", err)
		}
	}
}

func newParentLink(s *Service, addrs []string, hc *http.Client, dial discovery.Dialer, tlsCfg *tls.Config) *parentLink {
	var wd watch.Dialer
	if dial == nil {
		if hc == nil {
			hc = &http.Client{Transport: discovery.Transport(tlsCfg, false)}
		}
		dial = discovery.NewDialer(hc, discovery.Scheme(tlsCfg), false)
		wd = watch.NewDialer(hc, discovery.Scheme(tlsCfg), false)
	}
	l := &parentLink{s: s, addrs: addrs, dial: dial, watch: wd, wake: refresh.NewWake(),
		retry: refresh.Retry{Min: minBackoff, Max: maxBackoff, Rand: s.hooks.Rand}}
	l.use(addrs[0])
	return l
}

// use makes addr the parent address the link talks to and returns its stub.
func (l *parentLink) use(addr string) doormanconnect.CapacityClient {
	l.mu.Lock()
	defer l.mu.Unlock()
	if addr != l.addr || l.stub == nil {
		l.addr = addr
		l.stub = l.dial(addr)
	}
	return l.stub
}

func (l *parentLink) current() (string, doormanconnect.CapacityClient) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.addr, l.stub
}

// poke asks the loop to refresh now.
func (l *parentLink) poke() { l.wake.Poke() }

func (l *parentLink) status() ParentStatus {
	l.mu.Lock()
	defer l.mu.Unlock()
	return ParentStatus{Addresses: append([]string(nil), l.addrs...), Current: l.addr, LastOK: l.lastOK, LastError: l.lastErr}
}

// run refreshes until ctx is done.
func (l *parentLink) run(ctx context.Context) { refresh.Run(ctx, l.wake, l.step) }

// step is one turn of the link: one refresh, and on failure a backoff
// (never longer than the last refresh interval, so that a parent's failover
// is found while the leases it gave still run) and a failover. It returns
// when the next turn is due. Not for concurrent use.
func (l *parentLink) step(ctx context.Context) time.Duration {
	l.sendReleases(ctx)
	next, err := l.refresh(ctx)
	if ctx.Err() != nil {
		return 0
	}
	if err != nil {
		next = l.retry.Failed()
		l.mu.Lock()
		l.lastErr = err.Error()
		l.mu.Unlock()
		l.s.log.Warn("parent refresh failed", "parent", l.addrs, "err", err, "retry_in", next)
		l.failover(ctx)
	} else {
		l.retry.Succeeded(next)
	}
	return next
}

// stepParent is one turn of an intermediate server's link to its parent,
// for a caller that drives it (hooks.Server.ManualParent; the simulator):
// it sends one GetServerCapacity for every resource held, applies the
// answer (or, on failure, backs off and fails over to the parent's
// master), and returns how long until the next turn is due. It returns 0
// at the root. Not for concurrent use with itself.
func (s *Service) stepParent(ctx context.Context) time.Duration {
	if s.parent == nil {
		return 0
	}
	return s.parent.step(ctx)
}

// failover moves to the parent's master, found with Discovery, or else
// to the next address.
func (l *parentLink) failover(ctx context.Context) {
	cur, _ := l.current()
	l.use(discovery.Next(ctx, l.dial, l.addrs, cur))
}

// refresh sends one GetServerCapacity for every resource this server holds
// state for and returns when to refresh next.
func (l *parentLink) refresh(ctx context.Context) (time.Duration, error) {
	req, rs := l.s.serverRequest()
	if len(req.Resource) == 0 {
		return time.Second, nil
	}
	// At most MaxResourcesPerRequest resources per request: the parent
	// rejects more.
	next := time.Duration(math.MaxInt64)
	for start := 0; start < len(rs); start += MaxResourcesPerRequest {
		end := min(start+MaxResourcesPerRequest, len(rs))
		part := &pb.GetServerCapacityRequest{ServerId: req.ServerId, Resource: req.Resource[start:end]}
		d, err := l.send(ctx, part, rs[start:end])
		if err != nil {
			return 0, err
		}
		next = min(next, d)
	}
	return next, nil
}

// send sends one GetServerCapacity, following mastership redirects, and
// applies the answer.
func (l *parentLink) send(ctx context.Context, req *pb.GetServerCapacityRequest, rs []*resource) (time.Duration, error) {
	cur, _ := l.current()
	creq := connect.NewRequest(req)
	resp, _, err := refresh.Follow(ctx, "GetServerCapacity", cur, func(ctx context.Context, addr string) (*pb.GetServerCapacityResponse, *pb.Mastership, error) {
		ctx, cancel := context.WithTimeout(ctx, parentTimeout)
		defer cancel()
		resp, err := l.use(addr).GetServerCapacity(ctx, creq)
		if err != nil {
			return nil, nil, err
		}
		return resp.Msg, resp.Msg.Mastership, nil
	})
	if err != nil {
		// First requests keep waiting (up to firstLeaseWait): the retry,
		// soon and on another address, may reach the master.
		return 0, err
	}
	l.mu.Lock()
	l.lastOK, l.lastErr = l.s.now(), ""
	l.mu.Unlock()
	return l.s.parentAnswered(rs, resp), nil
}

// serverRequest condenses this server's state into a GetServerCapacity
// request: per resource, its demand per priority band and the lease it
// holds from the parent.
func (s *Service) serverRequest() (*pb.GetServerCapacityRequest, []*resource) {
	now := s.now()
	ids, rs := s.resourceList()
	req := &pb.GetServerCapacityRequest{ServerId: proto.String(s.opts.ID)}
	for i, r := range rs {
		r.mu.Lock()
		r.store.Cleanup(now)
		rr := &pb.ServerCapacityResourceRequest{ResourceId: proto.String(ids[i])}
		for _, b := range r.store.Bands() {
			rr.Wants = append(rr.Wants, &pb.PriorityBandAggregate{
				Priority: proto.Int64(b.Priority), NumClients: proto.Int64(b.Clients), Wants: proto.Float64(b.Wants),
			})
		}
		// has is what this server has handed out and that still runs: its
		// parent keeps that booked until it is given back (see
		// lease.Request.KeepOutstanding). In learning mode it is not known yet
		// (the predecessor's clients have not all reported), so it is left
		// out and the parent keeps what it had booked.
		if s.hooks.DoormanAllocation {
			// Doorman: the lease held from the parent.
			if pl := r.parent; pl.ok && pl.expiry.After(now) {
				rr.Has = &pb.Lease{
					ExpiryTime:      proto.Int64(pl.expiry.Unix()),
					RefreshInterval: proto.Int64(int64(pl.refresh / time.Second)),
					Capacity:        proto.Float64(pl.capacity),
				}
			}
		} else if !r.store.Learning(now) {
			_, outstanding, _, _ := r.store.Totals()
			exp := now
			if pl := r.parent; pl.ok && pl.expiry.After(now) {
				exp = pl.expiry
			}
			rr.Has = &pb.Lease{
				ExpiryTime:      proto.Int64(exp.Unix()),
				RefreshInterval: proto.Int64(int64(max(r.parent.refresh, time.Second) / time.Second)),
				Capacity:        proto.Float64(outstanding),
			}
		}
		r.mu.Unlock()
		req.Resource = append(req.Resource, rr)
	}
	return req, rs
}

// parentAnswered applies the parent's answer (nil: the request failed) and
// returns when to refresh next: the shortest refresh interval the parent
// asked for, and no later than the earliest expiry.
func (s *Service) parentAnswered(rs []*resource, resp *pb.GetServerCapacityResponse) time.Duration {
	now := s.now()
	byID := map[string]*pb.ServerCapacityResourceResponse{}
	for _, rr := range resp.GetResponse() {
		byID[rr.GetResourceId()] = rr
	}
	next := time.Duration(math.MaxInt64)
	for _, r := range rs {
		r.mu.Lock()
		if rr := byID[r.store.ID()]; rr != nil && !r.parent.stale(rr.GetGets().GetSequence()) {
			if r.parent.adopt(rr) {
				s.metrics.algoFallbacks.Inc()
				if s.once("algorithm", r.store.ID()) {
					s.log.Error("the parent pushed down an algorithm this server cannot build; running NO_ALGORITHM (every requester gets what it asks)",
						"resource", r.store.ID(), "kind", rr.GetAlgorithm().GetKind(), "see", "sluice_server_algorithm_fallbacks_total")
				}
			}
			r.store.SetParams(s.params(r.parent.params()))
			s.offer(r)
		}
		if r.parent.ok {
			// Never more often than Doorman's 5 s per resource: the parent
			// would answer an earlier request with the same lease.
			next = min(next, max(r.parent.refresh, s.minRequest))
			if until := r.parent.expiry.Sub(now); until > 0 {
				if until > expiryMargin {
					until -= expiryMargin
				}
				next = min(next, until)
			}
		}
		if r.parent.ready != nil {
			close(r.parent.ready)
			r.parent.ready = nil
		}
		r.mu.Unlock()
	}
	if next == time.Duration(math.MaxInt64) || next <= 0 {
		next = time.Second
	}
	return next
}

// stale reports whether a lease from the parent with sequence seq was
// decided before the one held (an answer a pushed lease overtook); 0 is
// never stale. It records seq otherwise.
func (pl *parentLease) stale(seq int64) bool {
	if seq != 0 && seq <= pl.seq {
		return true
	}
	pl.seq = max(pl.seq, seq)
	return false
}

// parentPushed applies leases the parent pushed (sluice.v1.Leases/Watch)
// to the resources this server holds a lease for, newer ones only, and
// pushes in turn what that frees here to this server's own watchers.
func (s *Service) parentPushed(ls []*v1.PushedLease) {
	for _, l := range ls {
		s.mu.RLock()
		r := s.resources[l.GetResourceId()]
		s.mu.RUnlock()
		if r == nil {
			continue
		}
		r.mu.Lock()
		if r.parent.ok && !r.parent.stale(l.GetSequence()) {
			r.parent.capacity = math.Max(l.GetCapacity(), 0)
			r.parent.expiry = time.Unix(l.GetExpiryTime(), 0)
			r.store.SetParams(s.params(r.parent.params()))
			s.offer(r)
		}
		r.mu.Unlock()
	}
}

// watchParent watches the parent for pushed leases until ctx ends (see
// package internal/watch). l.watch is not nil.
func (l *parentLink) watchParent(ctx context.Context) {
	watch.Run(ctx, watch.Options{
		Holder: l.s.opts.ID,
		Server: func() string { addr, _ := l.current(); return addr },
		Dial:   l.watch,
		Apply:  l.s.parentPushed,
		Rand:   l.s.hooks.Rand,
	})
}

// adopt records a lease from the parent and what it pushed down. It
// reports whether the pushed algorithm could not be built (an unknown kind)
// and NO_ALGORITHM stands in for it.
func (pl *parentLease) adopt(rr *pb.ServerCapacityResourceResponse) (fellBack bool) {
	g := rr.GetGets()
	pl.ok = true
	pl.capacity = math.Max(g.GetCapacity(), 0)
	pl.expiry = time.Unix(g.GetExpiryTime(), 0)
	pl.refresh = time.Duration(max(g.GetRefreshInterval(), 1)) * time.Second
	if a := rr.GetAlgorithm(); a != nil {
		// doorman-design.md, "Finding the algorithm to use": an
		// algorithm that cannot be instantiated runs as None.
		inst, _ := algorithm.Build(algorithm.Kind(a.GetKind()), paramsFromWire(a.GetParameters()))
		pl.kind, fellBack = inst.Kind, inst.FellBack
		pl.decay = inst.Params.DecayFactor
		pl.length = time.Duration(max(a.GetLeaseLength(), 1)) * time.Second
		pl.interval = time.Duration(max(a.GetRefreshInterval(), 1)) * time.Second
		pl.learning = time.Duration(max(a.GetLearningModeDuration(), 0)) * time.Second
		pl.algoParams = a.GetParameters()
	} else if pl.length == 0 {
		pl.kind = algorithm.FairShare
		pl.length, pl.interval = FallbackLeaseLength, FallbackRefreshInterval
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
func (s *Service) waitFirstLeases(ctx context.Context, rs []*resource) {
	readies := make([]chan struct{}, 0, len(rs))
	for _, r := range rs {
		r.mu.Lock()
		if !r.parent.ok {
			if r.parent.ready == nil {
				r.parent.ready = make(chan struct{})
			}
			readies = append(readies, r.parent.ready)
		}
		r.mu.Unlock()
	}
	if len(readies) == 0 {
		return
	}
	if s.hooks.ManualParent {
		// The caller drives the link and nothing runs concurrently (the
		// simulator): take the turn the poke would trigger, inline.
		s.parent.step(ctx)
		return
	}
	s.parent.poke()
	if s.parent.status().LastError != "" { // the link is failing
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

// paramsFromWire converts the wire's named parameters; a nil entry becomes
// a parameter with an empty name (which algorithm.ParseParameters reports).
func paramsFromWire(ps []*pb.NamedParameter) []algorithm.Parameter {
	out := make([]algorithm.Parameter, 0, len(ps))
	for _, p := range ps {
		out = append(out, algorithm.Parameter{Name: p.GetName(), Value: p.GetValue()})
	}
	return out
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
