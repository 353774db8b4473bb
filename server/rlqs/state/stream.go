// Package state is the RLQS service's state machine of one stream (one
// Envoy proxy's rate_limit_quota filter, one domain) over the capacity
// service, without a transport: its buckets, their smoothed demand, their
// leases and what to send for them — assignments, renewals, pushed
// leases, abandons, unconfigured buckets' answers. Time is passed in;
// package rlqs runs it on a gRPC stream, the simulator (package sim) on
// virtual time. See package rlqs for the rules.
//
// It has the shape of etcd's raft package (its Ready): a Stream makes no
// capacity call. Report and Tick update the stream's state under its
// lock and return a Ready, the capacity work to do — leases to release,
// the one GetCapacity to make — and what to send; the caller makes the
// calls outside the lock with its stream's context and feeds the answer
// back with Apply, which returns what to send for it. Perform is that
// loop. So the status page's reads (Buckets) never wait on a capacity
// decision, which on an intermediate server may wait on its parent.
//
// Source: docs/rlqs.md.
package state

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"

	pb "github.com/sluice-rl/sluice/api/doorman"
	"github.com/sluice-rl/sluice/internal/demand"
	"github.com/sluice-rl/sluice/internal/rlqsfilter"
	"github.com/sluice-rl/sluice/lease"
	"github.com/sluice-rl/sluice/server/capacity"
	"github.com/sluice-rl/sluice/server/status/view"
)

// Leaser is what Perform needs of the capacity service
// (*capacity.Service) to do a Stream's work. A stream paces its
// requests itself (a bucket's lease is asked for at most once per report
// of it, when its demand moved or its refresh is due), so its requests
// go to GetCapacityPaced, which Doorman's minimum time between two
// requests does not hold back.
type Leaser interface {
	GetCapacityPaced(context.Context, *pb.GetCapacityRequest) (*pb.GetCapacityResponse, error)
	ReleaseCapacity(context.Context, *pb.ReleaseCapacityRequest) (*pb.ReleaseCapacityResponse, error)
}

// Config is what a Stream reads of the capacity service's configuration
// (*capacity.Service): whether a template matches resource id, and
// whether the resource is in learning mode. A Stream calls it outside
// its lock. It must be safe for concurrent use.
type Config interface {
	Configured(id string) (configured, learning bool)
}

// ErrNotMaster ends a stream whose server lost mastership (its
// GetCapacity answered with a redirect).
var ErrNotMaster = errors.New("this server is not the master of the lease tree's node (any more): reconnect to another task")

// ActionKind is what an Action tells the proxy.
type ActionKind uint8

const (
	Assign  ActionKind = iota // a token bucket at Rate (DENY_ALL at 0)
	Blanket                   // the blanket rule Rule (an unconfigured bucket: Options.Unconfigured)
	Abandon                   // forget the bucket
)

// Action is one bucket's action for the stream.
type Action struct {
	Resource string // the bucket's resource (its BucketId, with Prio)
	Prio     string // its priority pair's value as received ("": none)
	Kind     ActionKind
	Rate     float64                              // Assign: requests per second
	Rule     typev3.RateLimitStrategy_BlanketRule // Blanket: ALLOW_ALL or DENY_ALL
	TTL      time.Duration                        // assignments: their time to live
	Pushed   bool                                 // Assign: a lease the server pushed, not an answer to a report
	// Burst is an Assign's max_tokens as this long's worth of Rate
	// (bucketBurst; 0: the burst Strategy is given).
	Burst time.Duration
}

// Strategy returns the rate limit strategy a puts on the wire, as Envoy's
// filter reads it, its token bucket holding a.Burst's worth of its rate
// (burst's when a.Burst is 0): for an Assign, a token bucket filling at
// Rate (rlqsfilter.Encode), or DENY_ALL below rlqsfilter.MinRate (a token
// bucket cannot fill more slowly); for a Blanket, its Rule. An Abandon
// has none: ok is false.
func (a Action) Strategy(burst time.Duration) (s rlqsfilter.Strategy, ok bool) {
	switch {
	case a.Kind == Abandon:
		return rlqsfilter.Strategy{}, false
	case a.Kind == Blanket:
		return rlqsfilter.Strategy{Blanket: a.Rule}, true
	case a.Rate < rlqsfilter.MinRate:
		return rlqsfilter.Strategy{Blanket: typev3.RateLimitStrategy_DENY_ALL}, true
	}
	if a.Burst > 0 {
		burst = a.Burst
	}
	tb := rlqsfilter.Encode(a.Rate, burst)
	return rlqsfilter.Strategy{TokenBucket: &tb}, true
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

// Options configure a Stream.
type Options struct {
	// Unconfigured is the blanket rule that answers a bucket no template
	// matches (the zero value: ALLOW_ALL; or DENY_ALL), for
	// UnconfiguredTTL (> 0).
	Unconfigured    typev3.RateLimitStrategy_BlanketRule
	UnconfiguredTTL time.Duration
	// Smoothing is the weight of a report's demand in the smoothed demand
	// (see package demand).
	Smoothing float64
	// Burst is a token bucket's max_tokens as this long's worth of its
	// rate (0: DefaultBurst); a limited stream's holds at most
	// LimitedBurst's worth (see bucketBurst).
	Burst time.Duration
}

// DefaultBurst is Options.Burst's default: max_tokens one second's worth.
const DefaultBurst = time.Second

// Gauge and Counter are what a Stream counts with (Prometheus's types,
// or none: Discard).
type (
	Gauge interface {
		Inc()
		Dec()
		Sub(float64)
	}
	Counter interface{ Inc() }
)

// Metrics are a Stream's counts: its (stream, bucket) pairs, the
// assignments sent and pushed, the buckets abandoned and unconfigured.
// A nil field counts nothing (the zero Metrics is Discard).
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

	sent      bool
	sentRate  float64
	sentBurst time.Duration // the Action.Burst sent with sentRate
	replaced  time.Time     // when the proxy's token bucket was last replaced (a new one sent)
	held      time.Time     // when an increase held back is due (zero: none; see hold)
}

// limited reports whether the bucket's lease is more than lease.MinGrowth
// below what its stream asked for (the test by which the capacity service
// pushes a requester what becomes free): the stream's demand is above
// its assignment, so its proxy's token bucket is empty, and every new
// one — which Envoy starts full — is admitted at once on top of the rate.
func (b *bucket) limited() bool { return b.wants-b.has > lease.MinGrowth*b.wants }

// Hysteresis keeps a bucket's wants from following every wobble of its
// measured demand down: wants rise with the smoothed demand at once, and
// fall to it only once it is more than this fraction below them. A
// stream asking for what it got before gets the same lease, sent as the
// same token bucket, which the proxy extends keeping its tokens, where a
// new one would start full (a burst of max_tokens). The cost: a stream
// may hold up to this fraction more than its demand while its demand
// drifts down.
const Hysteresis = 0.05

// RateMargin is how far below its lease a new rate is assigned, as a
// fraction of the lease: a thousandth, rlqsfilter.Encode's precision. A
// rate sent before is sent again while it is within twice this below the
// lease (assignedRate), so that the proxy extends its token bucket
// rather than starting a new one. Every request per second below the
// lease is capacity a limited stream cannot use: with a margin of 0.5 %
// (kept within 1 %) a saturated bucket's streams were assigned 0.7 % less
// than its capacity for good.
const RateMargin = 0.001

// LimitedBurst is the most a limited stream's token bucket holds (see
// bucket.limited), as time at its rate: a quarter of a second. Envoy
// starts every token bucket full, with max_tokens, and replaces its
// active one by any new assignment's that is not the same on the wire;
// a limited stream's demand is above its rate, so its bucket runs empty
// and each new one's max_tokens is admitted at once on top of the rate,
// while a deeper bucket is of little use to it as long as it is limited.
// A stream within its assignment keeps Options.Burst's worth, the room
// for its own short bursts: its bucket is full, so a new one adds only
// the change of depth. The cost: a limited stream whose requests come
// in bursts of more than a quarter second's worth loses some of its
// share to the shallower bucket.
//
// Source: Envoy's api/envoy/type/v3/token_bucket.proto (max_tokens is
// also what a bucket holds at first) and its rate_limit_quota filter's
// global_client_impl.cc (rlqsfilter.Bucket.Assign); docs/rlqs.md, "The
// bound".
const LimitedBurst = 250 * time.Millisecond

// MinReplaceInterval, MinIncrease and SmallIncreaseInterval pace the
// increases of a limited stream's assignment, each of which starts a new
// token bucket — a burst of its max_tokens on top of the rate, since the
// old one was empty: its token bucket is replaced by a faster one at
// most once per MinReplaceInterval, and for an increase of less than
// MinIncrease (a fraction of the rate sent) at most once per
// SmallIncreaseInterval. An increase held back meanwhile is sent when it
// is due, and the stream's renewals send the rate sent before, which
// the proxy extends. Holding an increase back is safe — the lease only
// grew, so the rates assigned stay within the capacity — and costs the
// capacity it leaves unused meanwhile. A decrease is never held back, so
// that it reaches its proxy before the capacity it frees, pushed to the
// other streams, is spent.
//
// Source: docs/rlqs.md, "The bound" (as LimitedBurst's).
const (
	MinReplaceInterval    = time.Second
	MinIncrease           = 0.1
	SmallIncreaseInterval = 5 * time.Second
)

// MinWindow is the shortest window over which a bucket's demand is
// measured: the requests of reports closer together (Envoy's filter
// reports a new bucket at once, then at its reporting interval) are
// added up until their window is this long, so that a handful of requests
// over a few milliseconds is not taken for a rate.
const MinWindow = time.Second

// Stream is the state of one stream: its client id in the lease tree
// and its buckets by resource. Report, Tick, Apply, ApplyPushes, Next and
// Release are called by one goroutine (the stream's), with the time, and
// make no capacity call (they return a Ready); Deliver, Stop, Ended,
// Pushes, Conflict and Buckets are safe for concurrent use.
type Stream struct {
	client string
	cfg    Config
	opts   Options
	m      Metrics

	// mu guards buckets, for the status page's reads (Buckets): it is
	// held only while the state changes, never across a call to the
	// capacity service (Leaser or Config).
	mu      sync.Mutex
	buckets map[string]*bucket

	pmu    sync.Mutex
	leased map[string]bool        // resources a lease may be pushed for
	pushed map[string]lease.Grant // pushed leases not applied yet, by resource
	signal chan struct{}          // a lease was pushed (capacity 1)
	ended  chan struct{}          // closed by stop
	once   sync.Once
}

// New returns the state of a stream whose client id in the lease tree
// is client, whose resources' templates cfg reads, counting in m
// (Discard, or a nil field: nothing). Its metrics are fixed here: a
// stream whose metrics depend on its first message (its domain) creates
// its state once that message arrived.
func New(client string, cfg Config, opts Options, m Metrics) *Stream {
	var d discard
	if m.Buckets == nil {
		m.Buckets = d
	}
	for _, c := range []*Counter{&m.Sent, &m.Pushed, &m.Abandoned, &m.Unconfigured} {
		if *c == nil {
			*c = d
		}
	}
	if opts.Burst <= 0 {
		opts.Burst = DefaultBurst
	}
	return &Stream{
		client: client, cfg: cfg, opts: opts, m: m,
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
func (s *Stream) Deliver(resource string, g lease.Grant) bool {
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
func (s *Stream) Stop() { s.once.Do(func() { close(s.ended) }) }

// Ready is what a Report, Tick, Apply or Release leaves to its caller:
// the capacity calls to make, outside the stream's lock and in this
// order, and what to send the proxy. Perform makes them.
type Ready struct {
	// Release are the leases to give back, first (ReleaseCapacity). Their
	// answers are not needed: a release that fails leaves the lease to
	// end at its expiry.
	Release []*pb.ReleaseCapacityRequest
	// Ask is the one GetCapacity to make then (GetCapacityPaced), nil
	// for none: its answer goes back with Apply(this Ready, answer).
	Ask *pb.GetCapacityRequest
	// Send is what to send the proxy whatever the answer (unconfigured
	// buckets' answers, abandons); Apply's Ready adds the assignments the
	// answer brings.
	Send []Action

	at    time.Time // the report's or tick's time
	asked []*bucket // Ask's buckets, in its order
}

// Perform does rd's work for s with c: the releases (with ctx's values
// but not its cancellation, so that a stream that ended still gives its
// leases back), then the GetCapacity with ctx, whose answer it gives
// s.Apply, and the releases that leaves. It returns what to send: rd.Send
// and the assignments the answer brought. It errs with the GetCapacity's
// error, or ErrNotMaster. No lock of s is held during the calls. Call it
// from the goroutine of s's Report and Tick.
func Perform(ctx context.Context, c Leaser, s *Stream, rd Ready) ([]Action, error) {
	for {
		for _, r := range rd.Release {
			_, _ = c.ReleaseCapacity(context.WithoutCancel(ctx), r)
		}
		if rd.Ask == nil {
			return rd.Send, nil
		}
		resp, err := c.GetCapacityPaced(ctx, rd.Ask)
		if err != nil {
			return nil, err
		}
		if rd, err = s.Apply(rd, resp); err != nil {
			return nil, err
		}
	}
}

// configured is what Config said of a resource.
type configured struct{ ok, learning bool }

// lookup asks s's Config about each of ids (outside s.mu).
func (s *Stream) lookup(ids []string) map[string]configured {
	if len(ids) == 0 {
		return nil
	}
	out := make(map[string]configured, len(ids))
	for _, id := range ids {
		if _, done := out[id]; !done {
			ok, learning := s.cfg.Configured(id)
			out[id] = configured{ok, learning}
		}
	}
	return out
}

// Report applies one validated message's usages at now and returns the
// work it leaves: the lease requests of the buckets due (first
// assignments, renewals, changed demand) and, to send whatever their
// answer, unconfigured buckets' answers.
func (s *Stream) Report(now time.Time, us []Usage) Ready {
	// The templates of the buckets this report subscribes, looked up
	// before the lock is taken (the stream's goroutine is the only one
	// that adds buckets).
	var fresh []string
	s.mu.Lock()
	for _, u := range us {
		if s.buckets[u.Resource] == nil && u.Requests > 0 {
			fresh = append(fresh, u.Resource)
		}
	}
	s.mu.Unlock()
	cfg := s.lookup(fresh)

	s.mu.Lock()
	defer s.mu.Unlock()
	rd := Ready{at: now}
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
			if !cfg[b.resource].ok {
				rd.Send = append(rd.Send, s.unconfigured(now, b))
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
		if !b.unconfigured && b.measured && (b.asked < 0 || !now.Before(b.due) || changed(b.asked, b.wants)) && !contains(rd.asked, b) {
			rd.asked = append(rd.asked, b)
		}
	}
	s.ask(&rd)
	return rd
}

// Conflict returns an error naming the first usage whose resource the
// stream already reports (or reports earlier in us) with another priority
// band: one stream holds one lease of a resource, in one band. On a nil
// Stream (a stream before its first message) it checks us alone.
func (s *Stream) Conflict(us []Usage) error {
	held := func(string) (string, bool) { return "", false }
	if s != nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		held = func(res string) (string, bool) {
			if b := s.buckets[res]; b != nil {
				return b.prio, true
			}
			return "", false
		}
	}
	seen := make(map[string]string, len(us))
	for i, u := range us {
		prio, ok := seen[u.Resource]
		if !ok {
			prio, ok = held(u.Resource)
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
func (s *Stream) unconfigured(now time.Time, b *bucket) Action {
	if !b.unconfigured {
		b.unconfigured = true
		s.m.Unconfigured.Inc()
	}
	b.due = now.Add(s.opts.UnconfiguredTTL / 2)
	b.idle = s.opts.UnconfiguredTTL
	s.m.Sent.Inc()
	return Action{Resource: b.resource, Prio: b.prio, Kind: Blanket, Rule: s.opts.Unconfigured, TTL: s.opts.UnconfiguredTTL}
}

// ask sets rd.Ask to the request of the leases of rd.asked (one
// GetCapacity), under s.mu. Their resources take pushed leases from now
// on, so that a lease pushed while the request is in flight is kept.
func (s *Stream) ask(rd *Ready) {
	if len(rd.asked) == 0 {
		return
	}
	req := &pb.GetCapacityRequest{ClientId: proto.String(s.client), Resource: make([]*pb.ResourceRequest, len(rd.asked))}
	s.pmu.Lock()
	for i, b := range rd.asked {
		rr := &pb.ResourceRequest{ResourceId: proto.String(b.resource), Priority: proto.Int64(b.priority), Wants: proto.Float64(b.wants)}
		if b.expiry.After(rd.at) {
			rr.Has = &pb.Lease{Capacity: proto.Float64(b.has), ExpiryTime: proto.Int64(b.expiry.Unix()), RefreshInterval: proto.Int64(1)}
		}
		req.Resource[i] = rr
		s.leased[b.resource] = true
	}
	s.pmu.Unlock()
	rd.Ask = req
}

// Apply takes the capacity service's answer to rd.Ask (rd from Report or
// Tick, answered before the stream's goroutine calls anything else of s)
// and returns the rest of the work: rd.Send with the assignments the
// answer brings, and the leases to release (of buckets whose template
// went away). With rd.Ask nil it returns rd's Send alone. It errs with
// ErrNotMaster when the answer is a redirect (it holds no lease per
// resource asked).
func (s *Stream) Apply(rd Ready, resp *pb.GetCapacityResponse) (Ready, error) {
	out := Ready{Send: rd.Send, at: rd.at}
	if rd.Ask == nil {
		return out, nil
	}
	if len(resp.GetResponse()) != len(rd.asked) {
		return Ready{}, ErrNotMaster
	}
	ids := make([]string, len(rd.asked))
	for i, b := range rd.asked {
		ids[i] = b.resource
	}
	cfg := s.lookup(ids)
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, rr := range resp.GetResponse() {
		b := rd.asked[i]
		if s.buckets[b.resource] != b {
			continue // abandoned since (a Ready applied out of turn)
		}
		if a, ok := s.apply(&out, rd.at, b, rr.GetGets(), false, cfg[b.resource]); ok {
			out.Send = append(out.Send, a)
		}
	}
	return out, nil
}

// apply takes a lease for b, decided (pushed false, cfg what Config says
// of b's resource) or pushed, at now and returns the assignment to send,
// if any; a lease to release goes to rd.
func (s *Stream) apply(rd *Ready, now time.Time, b *bucket, l *pb.Lease, pushed bool, cfg configured) (Action, bool) {
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
	left := expiry.Sub(now)
	if !pushed {
		b.asked = b.wants // decided: the wants the lease answers
		// Renewed at its refresh interval, or halfway through the
		// assignment's time to live if sooner (an intermediate's leases
		// end with its own, before their refresh interval), so that the
		// proxy's assignment is renewed before it ends. Idle for the
		// lease length: the expiry is in whole seconds (Doorman's wire),
		// so what is left of the lease is rounded up.
		b.due = now.Add(max(min(refresh, timeToLive(left)/2), MinRenewal))
		b.idle = max((left + time.Second - 1).Truncate(time.Second), refresh, time.Second)
		if !cfg.ok {
			s.releaseOne(rd, b)
			return s.unconfigured(now, b), true
		} else if cfg.learning && b.has == 0 && !b.sent {
			// A new master learning what its predecessor granted: the
			// proxy keeps the assignment it has until its time to live
			// ends, which is within the predecessor's leases (or less
			// than a second past one: timeToLive).
			return Action{}, false
		}
		b.unconfigured = false
	}
	if left <= 0 {
		return Action{}, false // no lease (an intermediate without its parent's)
	}
	rate := assignedRate(b.sent, b.sentRate, b.has)
	if s.hold(now, b, rate) {
		if pushed {
			return Action{}, false
		}
		// A renewal: the rate sent before, which the proxy extends.
		rate = b.sentRate
	}
	return s.assign(now, b, rate, left, pushed), true
}

// hold reports whether the increase of b's assignment to rate, at now,
// is held back, under s.mu, and if so sets b.held to when it is due (on
// Tick): a limited stream's token bucket is replaced by a faster one at
// most once per MinReplaceInterval, and for an increase of less than
// MinIncrease at most once per SmallIncreaseInterval. Meanwhile its
// renewals send the rate sent before (extended, not replaced).
func (s *Stream) hold(now time.Time, b *bucket, rate float64) bool {
	if !b.sent || rate <= b.sentRate || !b.limited() {
		return false
	}
	wait := MinReplaceInterval
	if rate < b.sentRate*(1+MinIncrease) {
		wait = SmallIncreaseInterval
	}
	if until := b.replaced.Add(wait); now.Before(until) {
		b.held = until
		return true
	}
	return false
}

// assign returns the assignment of rate to b for the lease's left (> 0)
// to run, at now, and records it as sent, under s.mu: a rate other than
// the one sent before is a new token bucket, holding bucketBurst's worth
// of it. Its time to live is timeToLive(left).
func (s *Stream) assign(now time.Time, b *bucket, rate float64, left time.Duration, pushed bool) Action {
	if !b.sent || rate != b.sentRate {
		b.sentBurst, b.replaced, b.held = s.bucketBurst(b), now, time.Time{}
	}
	b.sent, b.sentRate = true, rate
	s.m.Sent.Inc()
	if pushed {
		s.m.Pushed.Inc()
	}
	return Action{Resource: b.resource, Prio: b.prio, Kind: Assign, Rate: rate, TTL: timeToLive(left), Pushed: pushed, Burst: b.sentBurst}
}

// MinRenewal is the least time between a lease's renewals by a stream:
// half the least time to live (timeToLive), which a renewal every
// MinRenewal keeps from ending.
const MinRenewal = time.Second / 2

// timeToLive returns an assignment's assignment_time_to_live for a lease
// with left to run: its whole seconds, all that Envoy reads of it
// (its filter's startActionExpirationTimer; the assignment may end up to
// a second before the lease), but at least a second. A lease with less
// than a second left — an intermediate's, capped at its own lease from
// its parent just before that is renewed — would otherwise be read as
// none, and the proxy would fall back to its expired_assignment_behavior
// until the next renewal. The proxy may then enforce it for less than a
// second past its expiry, while the server that granted it keeps its
// capacity booked for lease.ExpiryAllowance (docs/departures.md, "What
// Sluice changes in the allocation across the tree", rule 7).
func timeToLive(left time.Duration) time.Duration {
	return max(left.Truncate(time.Second), time.Second)
}

// bucketBurst returns the max_tokens of a new token bucket for b, as
// time at its rate: Options.Burst's worth (New sets DefaultBurst for 0), at most
// LimitedBurst's while b is limited. The proxy admits a new bucket's
// max_tokens at once on top of the rate when its old one was empty, as
// a limited stream's is; a stream within its rate replaces a full bucket.
func (s *Stream) bucketBurst(b *bucket) time.Duration {
	if b.limited() {
		return min(s.opts.Burst, LimitedBurst)
	}
	return s.opts.Burst
}

// assignedRate returns the rate to assign for a lease of capacity has,
// when sent (if sent is true) was assigned before: sent again while it is
// within 2 × RateMargin below has (never above it), so that the proxy
// extends its token bucket and keeps its tokens (a new one starts full:
// a burst of max_tokens); else has less RateMargin, so that a renewal of
// the same lease, or a wobble of it by less than RateMargin either way,
// keeps it too.
func assignedRate(wasSent bool, sent, has float64) float64 {
	if wasSent && sent <= has && sent >= has*(1-2*RateMargin) {
		return sent
	}
	return has * (1 - RateMargin)
}

// ApplyPushes applies the leases pushed since the last call and returns
// the assignments to send for them. It makes no capacity call.
func (s *Stream) ApplyPushes(now time.Time) []Action {
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
		// A pushed lease neither reads the configuration nor releases.
		if a, ok := s.apply(nil, now, b, l, true, configured{}); ok {
			out = append(out, a)
		}
	}
	return out
}

// Tick returns the work due at now: the renewals of the leases due
// (asking with the buckets' smoothed demand), unconfigured buckets looked
// up again (leased if a template now matches, else their answer renewed),
// and the buckets that counted no request for their lease length
// abandoned (their leases released, an Abandon sent).
func (s *Stream) Tick(now time.Time) Ready {
	// Unconfigured buckets due are looked up before the lock is taken.
	var recheck []string
	s.mu.Lock()
	for res, b := range s.buckets {
		if b.unconfigured && now.Before(b.lastActive.Add(b.idle)) && !now.Before(b.due) {
			recheck = append(recheck, res)
		}
	}
	s.mu.Unlock()
	cfg := s.lookup(recheck)

	s.mu.Lock()
	defer s.mu.Unlock()
	rd := Ready{at: now}
	for res, b := range s.buckets {
		switch {
		case !now.Before(b.lastActive.Add(b.idle)):
			delete(s.buckets, res)
			s.m.Buckets.Dec()
			s.m.Abandoned.Inc()
			s.releaseOne(&rd, b)
			rd.Send = append(rd.Send, Action{Resource: b.resource, Prio: b.prio, Kind: Abandon})
		case now.Before(b.due), !b.measured && !b.unconfigured:
			// Not due, or a watch whose demand no report measured yet;
			// an increase held back may be due (hold).
			if !b.held.IsZero() && !now.Before(b.held) {
				b.held = time.Time{}
				if rate := assignedRate(b.sent, b.sentRate, b.has); b.sent && rate != b.sentRate && b.expiry.After(now) && !s.hold(now, b, rate) {
					rd.Send = append(rd.Send, s.assign(now, b, rate, b.expiry.Sub(now), false))
				}
			}
		case b.unconfigured:
			if cfg[res].ok {
				rd.asked = append(rd.asked, b)
			} else {
				rd.Send = append(rd.Send, s.unconfigured(now, b))
			}
		default:
			b.held = time.Time{} // the renewal's answer sends it
			rd.asked = append(rd.asked, b)
		}
	}
	s.ask(&rd)
	return rd
}

// Next returns when Tick is due (zero: no bucket).
func (s *Stream) Next() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	var t time.Time
	for _, b := range s.buckets {
		for _, at := range []time.Time{b.due, b.lastActive.Add(b.idle), b.held} {
			if !at.IsZero() && (t.IsZero() || at.Before(t)) {
				t = at
			}
		}
	}
	return t
}

// releaseOne forgets b's lease, under s.mu, and adds its release to rd
// if it holds one.
func (s *Stream) releaseOne(rd *Ready, b *bucket) {
	s.pmu.Lock()
	held := s.leased[b.resource]
	delete(s.leased, b.resource)
	delete(s.pushed, b.resource)
	s.pmu.Unlock()
	if held {
		rd.Release = append(rd.Release, &pb.ReleaseCapacityRequest{ClientId: proto.String(s.client), ResourceId: []string{b.resource}})
	}
	b.has, b.expiry, b.sent, b.held = 0, time.Time{}, false, time.Time{}
}

// Release ends the stream (Stop) and forgets its buckets, and returns
// the releases of every lease of the stream (its end), so that their
// capacity goes to the other streams at once: in parts of
// capacity.MaxResourcesPerRequest resources.
func (s *Stream) Release() Ready {
	s.Stop()
	s.pmu.Lock()
	ids := make([]string, 0, len(s.leased))
	for id := range s.leased {
		ids = append(ids, id)
	}
	s.leased = map[string]bool{}
	s.pmu.Unlock()
	var rd Ready
	for i := 0; i < len(ids); i += capacity.MaxResourcesPerRequest {
		part := ids[i:min(len(ids), i+capacity.MaxResourcesPerRequest)]
		rd.Release = append(rd.Release, &pb.ReleaseCapacityRequest{ClientId: proto.String(s.client), ResourceId: part})
	}
	s.mu.Lock()
	s.m.Buckets.Sub(float64(len(s.buckets)))
	s.buckets = map[string]*bucket{}
	s.mu.Unlock()
	return rd
}

// Ended is closed once Stop was called: the stream must end.
func (s *Stream) Ended() <-chan struct{} { return s.ended }

// Pushes receives (one signal at most held) when a lease was pushed:
// ApplyPushes returns what to send for it.
func (s *Stream) Pushes() <-chan struct{} { return s.signal }

// Buckets returns a snapshot of the stream's buckets, by resource, for
// the status page (rates in requests per second).
func (s *Stream) Buckets() []view.BucketStatus {
	s.mu.Lock()
	out := make([]view.BucketStatus, 0, len(s.buckets))
	for _, b := range s.buckets {
		out = append(out, view.BucketStatus{Resource: b.resource, Priority: b.priority, Wants: b.wants, Has: b.has, Sent: b.sent,
			Assigned: b.sentRate, Expiry: b.expiry, Unconfigured: b.unconfigured})
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b view.BucketStatus) int { return strings.Compare(a.Resource, b.Resource) })
	return out
}
