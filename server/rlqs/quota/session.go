// Package quota is the RLQS service's state machine of one stream (one
// Envoy proxy's rate_limit_quota filter, one domain) over the capacity
// service, without a transport: its buckets, their smoothed demand, their
// leases and what to send for them — assignments, renewals, pushed
// leases, abandons, unconfigured buckets' answers. Time is passed in;
// package rlqs runs it on a gRPC stream, the simulator (package sim) on
// virtual time. See package rlqs for the rules.
//
// Source: docs/rlqs.md.
package quota

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/sluice-rl/sluice/api/doorman"
	"github.com/sluice-rl/sluice/internal/demand"
	"github.com/sluice-rl/sluice/lease"
	"github.com/sluice-rl/sluice/server/capacity"
)

// Leaser is what a Session needs of the capacity service
// (*capacity.Service). A session paces its requests itself (a bucket's
// lease is asked for at most once per report of it, when its demand moved
// or its refresh is due), so it asks with GetCapacityPaced, which
// Doorman's minimum time between two requests does not hold back.
type Leaser interface {
	GetCapacityPaced(context.Context, *pb.GetCapacityRequest) (*pb.GetCapacityResponse, error)
	ReleaseCapacity(context.Context, *pb.ReleaseCapacityRequest) (*pb.ReleaseCapacityResponse, error)
	Configured(id string) (configured, learning bool)
}

// ErrNotMaster ends a stream whose server lost mastership (its
// GetCapacity answered with a redirect).
var ErrNotMaster = errors.New("this server is not the master of the lease tree's node (any more): reconnect to another task")

// ActionKind is what an Action tells the proxy.
type ActionKind uint8

const (
	Assign   ActionKind = iota // a token bucket at Rate (DENY_ALL at 0)
	AllowAll                   // an ALLOW_ALL blanket rule (an unconfigured bucket)
	DenyAll                    // a DENY_ALL blanket rule (an unconfigured bucket)
	Abandon                    // forget the bucket
)

// Action is one bucket's action for the stream.
type Action struct {
	Resource string // the bucket's resource (its BucketId, with Prio)
	Prio     string // its priority pair's value as received ("": none)
	Kind     ActionKind
	Rate     float64       // Assign: requests per second
	TTL      time.Duration // assignments: their time to live
	Pushed   bool          // Assign: a lease the server pushed, not an answer to a report
}

// Usage is one validated bucket report.
type Usage struct {
	Resource string  // the bucket's resource (D/k1=v1,k2=v2)
	Prio     string  // the priority pair's value as received ("": none)
	Priority int64   // its band
	Requests float64 // num_requests_allowed + num_requests_denied
	// Elapsed is the report's time_elapsed in seconds: 0 (absent) for
	// the report Envoy's filter sends the moment a bucket sees its first
	// request, which only subscribes the bucket (a watch: its demand is
	// measured from the next report on). Envoy sends whole seconds, so
	// once a bucket was reported on the stream the time between its two
	// reports by the server's clock is used instead.
	Elapsed float64
}

// Options configure a Session.
type Options struct {
	// DenyUnconfigured answers a bucket no template matches with DENY_ALL
	// (else ALLOW_ALL), for UnconfiguredTTL (> 0).
	DenyUnconfigured bool
	UnconfiguredTTL  time.Duration
	// Smoothing is the weight of a report's demand in the smoothed demand
	// (see package demand).
	Smoothing float64
	// Values is the context whose values (never its deadline or
	// cancellation) the releases carry, which happen outside a report or
	// a tick: the stream's, whose peer certificate is the client's
	// identity to a capacity service that binds ids to certificates
	// (identity.Authorizer). nil: context.Background().
	Values context.Context
}

// Gauge and Counter are what a Session counts with (Prometheus's types,
// or none: Discard).
type (
	Gauge interface {
		Inc()
		Dec()
		Sub(float64)
	}
	Counter interface{ Inc() }
)

// Metrics are a Session's counts: its (stream, bucket) pairs, the
// assignments sent and pushed, the buckets abandoned and unconfigured.
type Metrics struct {
	Buckets                               Gauge
	Sent, Pushed, Abandoned, Unconfigured Counter
}

type discard struct{}

func (discard) Inc()        {}
func (discard) Dec()        {}
func (discard) Sub(float64) {}

// Discard counts nothing.
var Discard = Metrics{Buckets: discard{}, Sent: discard{}, Pushed: discard{}, Abandoned: discard{}, Unconfigured: discard{}}

// bucket is one (stream, bucket) pair: its demand, its lease and what was
// sent. About 200 bytes with its map entry.
type bucket struct {
	resource   string
	prio       string // the PriorityKey's value as received
	priority   int64
	avg        demand.Average
	wants      float64   // the smoothed demand (requests per second)
	asked      float64   // the wants of the last request (-1: none yet)
	window     time.Time // the start of the window being measured (zero: none yet)
	pending    float64   // the requests reported in it
	measured   bool      // a window measured its demand
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

// MinWindow is the shortest window over which a bucket's demand is
// measured: the requests of reports closer together (Envoy's filter
// reports a new bucket at once, then at its reporting interval) are
// added up until their window is this long, so that a handful of requests
// over a few milliseconds is not taken for a rate.
const MinWindow = time.Second

// Session is the state of one stream: its client id in the lease tree
// and its buckets by resource. Report, ApplyPushes, Tick, Next and
// Release are called by one goroutine (the stream's), with the time;
// Deliver, Stop and Buckets are safe for concurrent use.
type Session struct {
	client string
	c      Leaser
	opts   Options
	m      Metrics

	mu      sync.Mutex // guards buckets for the status page's reads
	buckets map[string]*bucket

	pmu    sync.Mutex
	leased map[string]bool        // resources a lease may be pushed for
	pushed map[string]lease.Grant // pushed leases not applied yet, by resource
	signal chan struct{}          // a lease was pushed (capacity 1)
	ended  chan struct{}          // closed by stop
	once   sync.Once
}

// New returns the session of a stream whose client id in the lease tree
// is client, leasing from c, counting in m (Discard: nothing).
func New(client string, c Leaser, opts Options, m Metrics) *Session {
	return &Session{
		client: client, c: c, opts: opts, m: m,
		buckets: make(map[string]*bucket),
		leased:  make(map[string]bool),
		pushed:  make(map[string]lease.Grant),
		signal:  make(chan struct{}, 1),
		ended:   make(chan struct{}),
	}
}

// Deliver takes a lease the capacity service pushed for resource
// (capacity.Watcher.Deliver): it never blocks, and refuses leases for
// resources the stream no longer holds.
func (s *Session) Deliver(resource string, g lease.Grant) bool {
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

// Stop ends the stream (capacity.Watcher.Stop): mastership lost, or the
// server drains.
func (s *Session) Stop() { s.once.Do(func() { close(s.ended) }) }

// Report applies one validated message's usages at now and returns the
// actions to send: first assignments, renewals, changed leases and
// unconfigured buckets' answers.
func (s *Session) Report(ctx context.Context, now time.Time, us []Usage) ([]Action, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Action
	var ask []*bucket
	for _, u := range us {
		b := s.buckets[u.Resource]
		active := u.Requests > 0
		if b == nil && !active {
			// No request to subscribe for: a report racing the bucket's
			// AbandonAction, or an idle bucket of a stream reconnected.
			// Its next request subscribes it again.
			continue
		}
		if b == nil {
			b = &bucket{resource: u.Resource, prio: u.Prio, priority: u.Priority, asked: -1, lastActive: now, idle: capacity.FallbackLeaseLength}
			s.buckets[u.Resource] = b
			s.m.Buckets.Inc()
			if configured, _ := s.c.Configured(b.resource); !configured {
				out = append(out, s.unconfigured(now, b))
				continue
			}
		}
		// The requests of the reports since the window began, measured
		// once the window is MinWindow long (a bucket's first report
		// says how long its window is; the others are timed by the
		// server's clock, since Envoy sends whole seconds).
		if b.window.IsZero() {
			b.window = now.Add(-time.Duration(u.Elapsed * float64(time.Second)))
		}
		b.pending += u.Requests
		if window := now.Sub(b.window); window >= MinWindow {
			b.measured = true
			if d := b.avg.ObserveCount(b.pending, window.Seconds(), s.opts.Smoothing); d > b.wants || d < b.wants*(1-Hysteresis) {
				b.wants = d
			}
			b.window, b.pending = now, 0
		}
		if active {
			b.lastActive = now
		}
		if !b.unconfigured && b.measured && (b.asked < 0 || !now.Before(b.due) || changed(b.asked, b.wants)) && !contains(ask, b) {
			ask = append(ask, b)
		}
	}
	got, err := s.request(ctx, now, ask)
	return append(out, got...), err
}

// Conflict returns an error naming the first usage whose resource the
// stream already reports (or reports earlier in us) with another priority
// band: one stream holds one lease of a resource, in one band.
func (s *Session) Conflict(us []Usage) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := make(map[string]string, len(us))
	for i, u := range us {
		prio, ok := seen[u.Resource]
		if !ok {
			if b := s.buckets[u.Resource]; b != nil {
				prio, ok = b.prio, true
			}
		}
		if ok && prio != u.Prio {
			return fmt.Errorf("bucket_quota_usages[%d].bucket_id: priority %q, but the stream reports the bucket's resource %q with priority %q: one stream, one band per resource", i, u.Prio, u.Resource, prio)
		}
		seen[u.Resource] = u.Prio
	}
	return nil
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
func (s *Session) unconfigured(now time.Time, b *bucket) Action {
	if !b.unconfigured {
		b.unconfigured = true
		s.m.Unconfigured.Inc()
	}
	b.due = now.Add(s.opts.UnconfiguredTTL / 2)
	b.idle = s.opts.UnconfiguredTTL
	kind := AllowAll
	if s.opts.DenyUnconfigured {
		kind = DenyAll
	}
	s.m.Sent.Inc()
	return Action{Resource: b.resource, Prio: b.prio, Kind: kind, TTL: s.opts.UnconfiguredTTL}
}

// request asks the capacity service for the leases of bs (one
// GetCapacity) and returns the assignments to send.
func (s *Session) request(ctx context.Context, now time.Time, bs []*bucket) ([]Action, error) {
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
	}
	s.pmu.Unlock()
	resp, err := s.c.GetCapacityPaced(ctx, req)
	if err != nil {
		return nil, err
	}
	if len(resp.GetResponse()) != len(bs) {
		return nil, ErrNotMaster
	}
	var out []Action
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
func (s *Session) apply(now time.Time, b *bucket, l *pb.Lease, pushed bool) (Action, bool) {
	refresh := time.Duration(l.GetRefreshInterval()) * time.Second
	if l.Sequence == nil {
		// An early request (Doorman's 5-second rule): the current lease,
		// nothing decided. Ask again in a second, so that a renewal due
		// within the rule is late by a second at most.
		b.due = now.Add(time.Second)
		return Action{}, false
	}
	if l.GetSequence() <= b.seq {
		return Action{}, false // older than the lease applied
	}
	expiry := time.Unix(l.GetExpiryTime(), 0)
	b.has, b.expiry, b.seq = l.GetCapacity(), expiry, l.GetSequence()
	if !pushed {
		b.asked = b.wants // decided: the wants the lease answers
		// Renewed at its refresh interval, or halfway to its expiry if
		// sooner (an intermediate's leases end with its own, before their
		// refresh interval), so that a lease is renewed before it ends.
		// Idle for the lease length: the expiry is in whole seconds
		// (Doorman's wire), so what is left of the lease is rounded up.
		left := expiry.Sub(now)
		b.due = now.Add(max(min(refresh, left/2), time.Second))
		b.idle = max((left + time.Second - 1).Truncate(time.Second), refresh, time.Second)
		if configured, learning := s.c.Configured(b.resource); !configured {
			s.releaseOne(b)
			return s.unconfigured(now, b), true
		} else if learning && b.has == 0 && !b.sent {
			// A new master learning what its predecessor granted: the
			// proxy keeps the assignment it has until its time to live
			// ends, which is within the predecessor's leases.
			return Action{}, false
		}
		b.unconfigured = false
	}
	ttl := expiry.Sub(now)
	if ttl <= 0 {
		return Action{}, false // no lease (an intermediate without its parent's)
	}
	rate := assignedRate(b.sent, b.sentRate, b.has)
	b.sent, b.sentRate = true, rate
	s.m.Sent.Inc()
	if pushed {
		s.m.Pushed.Inc()
	}
	return Action{Resource: b.resource, Prio: b.prio, Kind: Assign, Rate: rate, TTL: ttl, Pushed: pushed}, true
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

// ApplyPushes applies the leases pushed since the last call.
func (s *Session) ApplyPushes(now time.Time) []Action {
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
	var out []Action
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

// Tick renews the leases due at now (asking with the buckets' smoothed
// demand), re-checks unconfigured buckets, and abandons the buckets that
// counted no request for their lease length.
func (s *Session) Tick(ctx context.Context, now time.Time) ([]Action, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Action
	var ask []*bucket
	for res, b := range s.buckets {
		switch {
		case !now.Before(b.lastActive.Add(b.idle)):
			delete(s.buckets, res)
			s.m.Buckets.Dec()
			s.m.Abandoned.Inc()
			s.releaseOne(b)
			out = append(out, Action{Resource: b.resource, Prio: b.prio, Kind: Abandon})
		case now.Before(b.due), !b.measured && !b.unconfigured:
			// Not due, or a watch whose demand no report measured yet.
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

// Next returns when Tick is due (zero: no bucket).
func (s *Session) Next() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	var t time.Time
	for _, b := range s.buckets {
		for _, at := range []time.Time{b.due, b.lastActive.Add(b.idle)} {
			if !at.IsZero() && (t.IsZero() || at.Before(t)) {
				t = at
			}
		}
	}
	return t
}

// releaseContext is the context of a release: Options.Values without its
// cancellation (a stream that ended still gives its leases back).
func (s *Session) releaseContext() context.Context {
	if s.opts.Values == nil {
		return context.Background()
	}
	return context.WithoutCancel(s.opts.Values)
}

// releaseOne gives b's lease back, if it holds one.
func (s *Session) releaseOne(b *bucket) {
	s.pmu.Lock()
	held := s.leased[b.resource]
	delete(s.leased, b.resource)
	delete(s.pushed, b.resource)
	s.pmu.Unlock()
	if held {
		_, _ = s.c.ReleaseCapacity(s.releaseContext(), &pb.ReleaseCapacityRequest{ClientId: proto.String(s.client), ResourceId: []string{b.resource}})
	}
	b.has, b.expiry, b.sent = 0, time.Time{}, false
}

// Release gives back every lease of the stream (its end), so that their
// capacity goes to the other streams at once.
func (s *Session) Release() {
	s.Stop()
	s.pmu.Lock()
	ids := make([]string, 0, len(s.leased))
	for id := range s.leased {
		ids = append(ids, id)
	}
	s.leased = map[string]bool{}
	s.pmu.Unlock()
	for i := 0; i < len(ids); i += capacity.MaxResourcesPerRequest {
		part := ids[i:min(len(ids), i+capacity.MaxResourcesPerRequest)]
		_, _ = s.c.ReleaseCapacity(s.releaseContext(), &pb.ReleaseCapacityRequest{ClientId: proto.String(s.client), ResourceId: part})
	}
	s.mu.Lock()
	s.m.Buckets.Sub(float64(len(s.buckets)))
	s.buckets = map[string]*bucket{}
	s.mu.Unlock()
}

// Ended is closed once Stop was called: the stream must end.
func (s *Session) Ended() <-chan struct{} { return s.ended }

// Pushes receives (one signal at most held) when a lease was pushed:
// ApplyPushes returns what to send for it.
func (s *Session) Pushes() <-chan struct{} { return s.signal }

// SetMetrics replaces the session's counts (once its domain is known),
// before the first Report.
func (s *Session) SetMetrics(m Metrics) { s.m = m }

// BucketStatus is one of a stream's buckets, for the status page. Rates
// are requests per second.
type BucketStatus struct {
	Resource     string    `json:"resource"`
	Priority     int64     `json:"priority"`
	Wants        float64   `json:"wants"`    // the smoothed demand
	Has          float64   `json:"has"`      // the lease's capacity
	Sent         bool      `json:"sent"`     // an assignment was sent
	Assigned     float64   `json:"assigned"` // the rate sent (when Sent; 0: DENY_ALL)
	Expiry       time.Time `json:"expiry"`   // the lease's end (zero: none)
	Unconfigured bool      `json:"unconfigured"`
}

// Buckets returns a snapshot of the session's buckets, by resource.
func (s *Session) Buckets() []BucketStatus {
	s.mu.Lock()
	out := make([]BucketStatus, 0, len(s.buckets))
	for _, b := range s.buckets {
		out = append(out, BucketStatus{Resource: b.resource, Priority: b.priority, Wants: b.wants, Has: b.has, Sent: b.sent,
			Assigned: b.sentRate, Expiry: b.expiry, Unconfigured: b.unconfigured})
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b BucketStatus) int { return strings.Compare(a.Resource, b.Resource) })
	return out
}
