package rlqs

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/sluice-rl/sluice/api/doorman"
	"github.com/sluice-rl/sluice/internal/demand"
	"github.com/sluice-rl/sluice/lease"
	"github.com/sluice-rl/sluice/server/capacity"
)

// leaser is what a session needs of the capacity service.
type leaser interface {
	GetCapacity(context.Context, *pb.GetCapacityRequest) (*pb.GetCapacityResponse, error)
	ReleaseCapacity(context.Context, *pb.ReleaseCapacityRequest) (*pb.ReleaseCapacityResponse, error)
	Configured(id string) (configured, learning bool)
}

// errNotMaster ends a stream whose server lost mastership.
var errNotMaster = errors.New("this server is not the master of the lease tree's node (any more): reconnect to another task")

// actionKind is what an action tells the proxy.
type actionKind uint8

const (
	assign       actionKind = iota // a token bucket at rate (DENY_ALL at 0)
	blanketAllow                   // ALLOW_ALL (an unconfigured bucket)
	blanketDeny                    // DENY_ALL (an unconfigured bucket)
	abandon                        // forget the bucket
)

// action is one bucket's action for the stream.
type action struct {
	pairs  map[string]string
	kind   actionKind
	rate   float64       // assign: requests per second
	ttl    time.Duration // assignments: their time to live
	pushed bool          // assign: a lease the server pushed, not an answer to a report
}

// bucket is one (stream, bucket) pair: its demand, its lease and what was
// sent. About 200 bytes with its map entry.
type bucket struct {
	pairs      map[string]string
	resource   string
	priority   int64
	avg        demand.Average
	wants      float64   // the smoothed demand (requests per second)
	asked      float64   // the wants of the last request (-1: none yet)
	lastActive time.Time // the last report that counted a request (or the first report)
	due        time.Time // when to ask for the lease again (renewal)
	idle       time.Duration

	unconfigured bool
	has          float64   // the lease's capacity (requests per second)
	expiry       time.Time // the lease's end (zero: none)
	seq          int64     // the lease's Grant.Sequence

	sent     bool
	sentRate float64
}

// Hysteresis keeps a bucket's wants from following every wobble of its
// measured demand down: wants rise with the smoothed demand at once, and
// fall to it only once it is more than this fraction below them. A
// stream asking for what it got before gets the same lease, sent as the
// same token bucket, which the proxy extends keeping its tokens, where a
// new one would start full (a burst of max_tokens). The cost: a stream
// may hold up to this fraction more than its demand while its demand
// drifts down.
const Hysteresis = 0.05

// session is the state of one stream: its client id in the lease tree,
// its domain and its buckets by resource. Everything but deliver and the
// status snapshot runs on the stream's goroutine; time is passed in.
type session struct {
	client string
	peer   string
	domain string
	c      leaser
	opts   *Options
	m      *domainMetrics // nil until the domain is known

	mu      sync.Mutex // guards buckets for the status page's reads
	buckets map[string]*bucket

	pmu    sync.Mutex
	leased map[string]bool        // resources a lease may be pushed for
	pushed map[string]lease.Grant // pushed leases not applied yet, by resource
	signal chan struct{}          // a lease was pushed (capacity 1)
	ended  chan struct{}          // closed by stop
	once   sync.Once
}

func newSession(client, peer string, c leaser, opts *Options) *session {
	return &session{
		client: client, peer: peer, c: c, opts: opts,
		buckets: make(map[string]*bucket),
		leased:  make(map[string]bool),
		pushed:  make(map[string]lease.Grant),
		signal:  make(chan struct{}, 1),
		ended:   make(chan struct{}),
	}
}

// deliver takes a lease the capacity service pushed for resource
// (capacity.Watcher.Deliver): it never blocks, and refuses leases for
// resources the stream no longer holds.
func (s *session) deliver(resource string, g lease.Grant) bool {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	select {
	case <-s.ended:
		return false
	default:
	}
	if !s.leased[resource] {
		return false
	}
	if old, ok := s.pushed[resource]; !ok || g.Sequence > old.Sequence {
		s.pushed[resource] = g
	}
	select {
	case s.signal <- struct{}{}:
	default:
	}
	return true
}

// stop ends the stream (capacity.Watcher.Stop): mastership lost, or the
// server drains.
func (s *session) stop() { s.once.Do(func() { close(s.ended) }) }

// report applies one validated message's usages at now and returns the
// actions to send: first assignments, renewals, changed leases and
// unconfigured buckets' answers.
func (s *session) report(ctx context.Context, now time.Time, us []usage) ([]action, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []action
	var ask []*bucket
	for _, u := range us {
		b := s.buckets[u.resource]
		if b == nil && !u.active {
			// No request to subscribe for: a report racing the bucket's
			// AbandonAction, or an idle bucket of a stream reconnected.
			// Its next request subscribes it again.
			continue
		}
		if b == nil {
			b = &bucket{pairs: u.pairs, resource: u.resource, priority: u.priority, asked: -1, lastActive: now, idle: capacity.FallbackLeaseLength}
			s.buckets[u.resource] = b
			s.m.buckets.Inc()
			if configured, _ := s.c.Configured(b.resource); !configured {
				out = append(out, s.unconfigured(now, b))
				continue
			}
		}
		b.priority = u.priority
		if d := b.avg.Observe(u.demand, s.opts.Smoothing); d > b.wants || d < b.wants*(1-Hysteresis) {
			b.wants = d
		}
		if u.active {
			b.lastActive = now
		}
		if !b.unconfigured && (b.asked < 0 || !now.Before(b.due) || changed(b.asked, b.wants)) && !contains(ask, b) {
			ask = append(ask, b)
		}
	}
	got, err := s.request(ctx, now, ask)
	return append(out, got...), err
}

// changed reports whether wants differs materially (by more than
// lease.MinGrowth) from what was last asked.
func changed(asked, wants float64) bool {
	return math.Abs(wants-asked) > lease.MinGrowth*math.Max(asked, wants)
}

func contains(bs []*bucket, b *bucket) bool {
	for _, x := range bs {
		if x == b {
			return true
		}
	}
	return false
}

// unconfigured marks b as matching no template and returns its answer,
// good for Options.UnconfiguredTTL (re-checked at half of it).
func (s *session) unconfigured(now time.Time, b *bucket) action {
	if !b.unconfigured {
		b.unconfigured = true
		s.m.unconfigured.Inc()
	}
	b.due = now.Add(s.opts.UnconfiguredTTL / 2)
	b.idle = s.opts.UnconfiguredTTL
	kind := blanketAllow
	if s.opts.Unconfigured == DenyAll {
		kind = blanketDeny
	}
	s.m.sent.Inc()
	return action{pairs: b.pairs, kind: kind, ttl: s.opts.UnconfiguredTTL}
}

// request asks the capacity service for the leases of bs (one
// GetCapacity) and returns the assignments to send.
func (s *session) request(ctx context.Context, now time.Time, bs []*bucket) ([]action, error) {
	if len(bs) == 0 {
		return nil, nil
	}
	req := &pb.GetCapacityRequest{ClientId: proto.String(s.client), Resource: make([]*pb.ResourceRequest, len(bs))}
	s.pmu.Lock()
	for i, b := range bs {
		rr := &pb.ResourceRequest{ResourceId: proto.String(b.resource), Priority: proto.Int64(b.priority), Wants: proto.Float64(b.wants)}
		if b.expiry.After(now) {
			rr.Has = &pb.Lease{Capacity: proto.Float64(b.has), ExpiryTime: proto.Int64(b.expiry.Unix()), RefreshInterval: proto.Int64(1)}
		}
		req.Resource[i] = rr
		s.leased[b.resource] = true
		b.asked = b.wants
	}
	s.pmu.Unlock()
	resp, err := s.c.GetCapacity(ctx, req)
	if err != nil {
		return nil, err
	}
	if len(resp.GetResponse()) != len(bs) {
		return nil, errNotMaster
	}
	var out []action
	for i, rr := range resp.GetResponse() {
		b := bs[i]
		if a, ok := s.apply(now, b, rr.GetGets(), false); ok {
			out = append(out, a)
		}
	}
	return out, nil
}

// apply takes a lease for b, decided (pushed false) or pushed, at now and
// returns the assignment to send, if any.
func (s *session) apply(now time.Time, b *bucket, l *pb.Lease, pushed bool) (action, bool) {
	refresh := time.Duration(l.GetRefreshInterval()) * time.Second
	if l.Sequence == nil { // an early request: the current lease, nothing decided
		if !pushed {
			b.due = now.Add(max(refresh, time.Second))
		}
		return action{}, false
	}
	if l.GetSequence() <= b.seq {
		return action{}, false // older than the lease applied
	}
	expiry := time.Unix(l.GetExpiryTime(), 0)
	b.has, b.expiry, b.seq = l.GetCapacity(), expiry, l.GetSequence()
	if !pushed {
		b.due = now.Add(max(refresh, time.Second))
		b.idle = max(expiry.Sub(now).Round(time.Second), refresh, time.Second)
		if configured, learning := s.c.Configured(b.resource); !configured {
			s.releaseOne(b)
			return s.unconfigured(now, b), true
		} else if learning && b.has == 0 && !b.sent {
			// A new master learning what its predecessor granted: the
			// proxy keeps the assignment it has until its time to live
			// ends, which is within the predecessor's leases.
			return action{}, false
		}
		b.unconfigured = false
	}
	ttl := expiry.Sub(now)
	if ttl <= 0 {
		return action{}, false // no lease (an intermediate without its parent's)
	}
	rate := assignedRate(b.sent, b.sentRate, b.has)
	b.sent, b.sentRate = true, rate
	s.m.sent.Inc()
	if pushed {
		s.m.pushed.Inc()
	}
	return action{pairs: b.pairs, kind: assign, rate: rate, ttl: ttl, pushed: pushed}, true
}

// assignedRate returns the rate to assign for a lease of capacity has,
// when sent (if sent is true) was assigned before: sent again while it is
// within lease.MinGrowth below has (never above it), so that the proxy
// extends its token bucket and keeps its tokens (a new one starts full:
// a burst of max_tokens); else has less half of lease.MinGrowth, so that
// the next wobble of the lease, either way, keeps it too.
func assignedRate(wasSent bool, sent, has float64) float64 {
	if wasSent && sent <= has && sent >= has*(1-lease.MinGrowth) {
		return sent
	}
	return has * (1 - lease.MinGrowth/2)
}

// applyPushes applies the leases pushed since the last call.
func (s *session) applyPushes(now time.Time) []action {
	s.pmu.Lock()
	ps := s.pushed
	if len(ps) == 0 {
		s.pmu.Unlock()
		return nil
	}
	s.pushed = make(map[string]lease.Grant, len(ps))
	s.pmu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []action
	for res, g := range ps {
		b := s.buckets[res]
		if b == nil || b.unconfigured {
			continue
		}
		l := &pb.Lease{Capacity: proto.Float64(g.Capacity), ExpiryTime: proto.Int64(g.Expiry.Unix()),
			RefreshInterval: proto.Int64(int64(g.RefreshInterval / time.Second)), Sequence: proto.Int64(g.Sequence)}
		if a, ok := s.apply(now, b, l, true); ok {
			out = append(out, a)
		}
	}
	return out
}

// tick renews the leases due at now (asking with the buckets' smoothed
// demand), re-checks unconfigured buckets, and abandons the buckets that
// counted no request for their lease length.
func (s *session) tick(ctx context.Context, now time.Time) ([]action, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []action
	var ask []*bucket
	for res, b := range s.buckets {
		switch {
		case !now.Before(b.lastActive.Add(b.idle)):
			delete(s.buckets, res)
			s.m.buckets.Dec()
			s.m.abandoned.Inc()
			s.releaseOne(b)
			out = append(out, action{pairs: b.pairs, kind: abandon})
		case now.Before(b.due):
		case b.unconfigured:
			if configured, _ := s.c.Configured(res); configured {
				ask = append(ask, b)
			} else {
				out = append(out, s.unconfigured(now, b))
			}
		default:
			ask = append(ask, b)
		}
	}
	got, err := s.request(ctx, now, ask)
	return append(out, got...), err
}

// next returns when tick is due (zero: no bucket).
func (s *session) next() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	var t time.Time
	for _, b := range s.buckets {
		for _, at := range []time.Time{b.due, b.lastActive.Add(b.idle)} {
			if t.IsZero() || at.Before(t) {
				t = at
			}
		}
	}
	return t
}

// releaseOne gives b's lease back, if it holds one.
func (s *session) releaseOne(b *bucket) {
	s.pmu.Lock()
	held := s.leased[b.resource]
	delete(s.leased, b.resource)
	delete(s.pushed, b.resource)
	s.pmu.Unlock()
	if held {
		_, _ = s.c.ReleaseCapacity(context.Background(), &pb.ReleaseCapacityRequest{ClientId: proto.String(s.client), ResourceId: []string{b.resource}})
	}
	b.has, b.expiry, b.sent = 0, time.Time{}, false
}

// release gives back every lease of the stream (its end), so that their
// capacity goes to the other streams at once.
func (s *session) release() {
	s.stop()
	s.pmu.Lock()
	ids := make([]string, 0, len(s.leased))
	for id := range s.leased {
		ids = append(ids, id)
	}
	s.leased = map[string]bool{}
	s.pmu.Unlock()
	for i := 0; i < len(ids); i += capacity.MaxResourcesPerRequest {
		part := ids[i:min(len(ids), i+capacity.MaxResourcesPerRequest)]
		_, _ = s.c.ReleaseCapacity(context.Background(), &pb.ReleaseCapacityRequest{ClientId: proto.String(s.client), ResourceId: part})
	}
	s.mu.Lock()
	if s.m != nil {
		s.m.buckets.Sub(float64(len(s.buckets)))
	}
	s.buckets = map[string]*bucket{}
	s.mu.Unlock()
}
