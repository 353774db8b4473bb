// Package rlqs is Envoy's Rate Limit Quota Service
// (envoy.service.rate_limit_quota.v3.RateLimitQuotaService,
// StreamRateLimitQuotas) over the lease tree: one more service package
// over the capacity service (package capacity), like package leases.
//
// Each stream (one Envoy proxy's rate_limit_quota filter, one domain) is
// one client of the capacity service, its id "rlqs/PEER/N" (the peer's
// address and a counter of the server's streams). Each bucket of domain D
// whose BucketId holds the pairs k1=v1, k2=v2, … is the resource
// "D/k1=v1,k2=v2" (see ResourceID; the pair PriorityKey sets the bucket's
// priority band instead), so its capacity, algorithm, lease length,
// refresh interval, learning mode and safe capacity come from the
// resource templates (identifier_glob) like every other resource's; an
// intermediate server leases from its parent for all its streams. A
// stream's wants for a bucket are its reported demand, (allowed + denied)
// / time elapsed, smoothed over the reports by package demand's rule (the
// Go client's adaptive demand).
//
// What a stream is sent, per bucket:
//
//   - on its first report, and whenever a decision or a pushed lease
//     changes it, an assignment: a token bucket filling at the lease's
//     capacity less state.RateMargin (requests per second), max_tokens
//     Options.Burst's worth — a quarter of a second's
//     (state.LimitedBurst) for a stream granted less than it asked for,
//     whose bucket runs empty, so that the full bucket Envoy starts for a
//     new assignment is a small burst — assignment_time_to_live the
//     lease's remaining length in whole seconds, at least one
//     (DENY_ALL for a lease of 0);
//   - before the assignment's time to live ends (every refresh interval,
//     or halfway through it if sooner), the assignment renewed; a rate
//     within 2 × state.RateMargin below the lease is sent unchanged, so
//     that the proxy extends it and keeps its tokens;
//   - when the capacity service pushes the stream a larger share (another
//     stream gave capacity back or ended), the new assignment at once —
//     for a stream granted less than it asked for, at most once a second,
//     and for an increase of less than a tenth at most every 5 s
//     (state.MinReplaceInterval, state.SmallIncreaseInterval): each new
//     token bucket is a burst; a smaller share is sent at once;
//   - after it counted no request for its lease length, an AbandonAction
//     (its lease is released);
//   - when no template matches its resource, Options.Unconfigured (an
//     ALLOW_ALL blanket rule by default, or DENY_ALL) for
//     Options.UnconfiguredTTL, counted in sluice_rlqs_unconfigured_buckets_total.
//
// When the stream ends, every lease of it is released at once, so that
// its capacity moves to the other streams. A message that is not valid
// (parse) ends its stream, and only it, with InvalidArgument naming the
// field. A stream to a server that is not its node's master, or that
// loses mastership or drains, ends with Unavailable: Envoy reconnects.
//
// Source: Envoy's api/envoy/service/rate_limit_quota/v3/rlqs.proto and
// api/envoy/extensions/filters/http/rate_limit_quota/v3/rate_limit_quota.proto;
// docs/rlqs.md.
package rlqs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	pb "github.com/sluice-rl/sluice/api/doorman"
	"github.com/sluice-rl/sluice/internal/demand"
	"github.com/sluice-rl/sluice/internal/identity"
	"github.com/sluice-rl/sluice/internal/names"
	"github.com/sluice-rl/sluice/lease"
	"github.com/sluice-rl/sluice/server/capacity"
	"github.com/sluice-rl/sluice/server/internal/authz"
	"github.com/sluice-rl/sluice/server/rlqs/state"
	"github.com/sluice-rl/sluice/server/status/view"
)

// DefaultUnconfiguredTTL is Options.UnconfiguredTTL's default: the lease
// length of a resource no template matches (capacity.FallbackLeaseLength).
const DefaultUnconfiguredTTL = capacity.FallbackLeaseLength

// DefaultBurst is Options.Burst's default: max_tokens one second's worth.
const DefaultBurst = state.DefaultBurst

// Options configures the service. The zero value is the default.
type Options struct {
	// Unconfigured is the answer to a bucket no template matches, a
	// blanket rule of Envoy's (api/envoy/type/v3/ratelimit_strategy.proto):
	// typev3.RateLimitStrategy_ALLOW_ALL (the zero value, the default:
	// its proxies are not limited) or RateLimitStrategy_DENY_ALL, sent
	// with UnconfiguredTTL and renewed (and the template looked up again)
	// every half of it.
	Unconfigured typev3.RateLimitStrategy_BlanketRule
	// UnconfiguredTTL is the unconfigured answer's time to live (0:
	// DefaultUnconfiguredTTL; at least 2 s), and how long such a bucket
	// may count no request before it is abandoned.
	UnconfiguredTTL time.Duration
	// Smoothing is the weight of a report's demand in a bucket's smoothed
	// demand, in (0, 1] (0: demand.DefaultSmoothing, 0.5).
	Smoothing float64
	// Burst is an assignment's max_tokens as this long's worth of its
	// rate (at least one token), from 1 ms to a minute (0:
	// DefaultBurst, one second); a stream granted less than it asked for
	// gets at most state.LimitedBurst's worth (a quarter of a second). A
	// new token bucket starts full: each changed assignment lets a proxy
	// whose bucket was empty admit this much at once, on top of the rate
	// (docs/rlqs.md, "The bound").
	Burst time.Duration

	// Now, Logger and Registry are the server's (package server sets
	// them): the clock (nil: time.Now), the logger (nil: slog.Default())
	// and the registry of the sluice_rlqs_* metrics (nil: none).
	Now      func() time.Time      `json:"-"`
	Logger   *slog.Logger          `json:"-"`
	Registry prometheus.Registerer `json:"-"`
	// Authorizer, when set (sluice server --client-identity cert), makes
	// each stream the client of its caller's identity (authz.Who, which
	// the server's authorization put on the stream's context): its
	// capacity client id is "IDENTITY/rlqs/N" rather than "rlqs/PEER/N",
	// and the policy's lease grants apply to its buckets' resources, each
	// checked before it is first leased (a bucket the policy does not
	// grant ends the stream with PermissionDenied; docs/identity.md).
	// nil: identities are off.
	Authorizer *identity.Authorizer `json:"-"`
}

// OptionError is an option New refuses: the field (its name in Options)
// and why.
type OptionError = names.FieldError

// Check returns an *OptionError for the first configurable option New
// would refuse: Unconfigured neither ALLOW_ALL nor DENY_ALL,
// UnconfiguredTTL negative or below 2 s, Smoothing outside (0, 1], Burst
// negative, below 1 ms or above a minute.
func (o Options) Check() *OptionError {
	switch {
	case o.Unconfigured != typev3.RateLimitStrategy_ALLOW_ALL && o.Unconfigured != typev3.RateLimitStrategy_DENY_ALL:
		return names.FieldErr("Unconfigured", "%v, want %v (the default) or %v", o.Unconfigured,
			typev3.RateLimitStrategy_ALLOW_ALL, typev3.RateLimitStrategy_DENY_ALL)
	case o.UnconfiguredTTL != 0 && o.UnconfiguredTTL < 2*time.Second:
		return names.FieldErr("UnconfiguredTTL", "%v, want at least 2s (0: %v)", o.UnconfiguredTTL, DefaultUnconfiguredTTL)
	case o.Smoothing != 0 && !(o.Smoothing > 0 && o.Smoothing <= 1):
		return names.FieldErr("Smoothing", "%v, want a weight in (0, 1]", o.Smoothing)
	case o.Burst != 0 && (o.Burst < time.Millisecond || o.Burst > time.Minute):
		return names.FieldErr("Burst", "%v, want 1ms to 1m (0: %v)", o.Burst, DefaultBurst)
	}
	return nil
}

// Service is envoy.service.rate_limit_quota.v3.RateLimitQuotaService over
// a capacity service. Safe for concurrent use; each stream holds two
// goroutines (its handler's and one reading its messages) and its
// buckets' state.
type Service struct {
	rlqspb.UnimplementedRateLimitQuotaServiceServer

	c    *capacity.Service
	opts Options
	now  func() time.Time
	log  *slog.Logger
	m    *metrics

	n        atomic.Uint64 // streams opened
	mu       sync.Mutex
	streams  map[*stream]struct{}
	draining bool
}

// New returns the service over c with opts. It errs on an option Check
// refuses (an *OptionError), or when opts.Registry already holds one of
// the service's metrics.
func New(c *capacity.Service, opts Options) (*Service, error) {
	if err := opts.Check(); err != nil {
		return nil, err
	}
	if opts.UnconfiguredTTL == 0 {
		opts.UnconfiguredTTL = DefaultUnconfiguredTTL
	}
	if opts.Smoothing == 0 {
		opts.Smoothing = demand.DefaultSmoothing
	}
	if opts.Burst == 0 {
		opts.Burst = DefaultBurst
	}
	m, err := newMetrics(opts.Registry)
	if err != nil {
		return nil, fmt.Errorf("rlqs: %w", err)
	}
	s := &Service{c: c, opts: opts, now: opts.Now, log: opts.Logger, m: m, streams: make(map[*stream]struct{})}
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	return s, nil
}

// StreamRateLimitQuotas implements rlqspb.RateLimitQuotaServiceServer
// (grpc-go).
func (s *Service) StreamRateLimitQuotas(stream grpc.BidiStreamingServer[rlqspb.RateLimitQuotaUsageReports, rlqspb.RateLimitQuotaResponse]) error {
	addr := "unknown"
	if p, ok := peer.FromContext(stream.Context()); ok && p.Addr != nil {
		addr = p.Addr.String()
	}
	return s.Stream(stream.Context(), addr, stream.Recv, stream.Send)
}

// Stream serves one stream on any transport: recv returns its messages
// (io.EOF when the proxy closed it), send sends one response; peer names
// the proxy (its address) in the stream's client id. It returns nil when
// ctx ends or the proxy closes the stream, an InvalidArgument status for a
// message that is not valid, Unavailable when this server is not its
// node's master or stops being it, or drains, and recv's or send's error.
// Every lease of the stream is released when it returns.
func (s *Service) Stream(ctx context.Context, peer string, recv func() (*rlqspb.RateLimitQuotaUsageReports, error), send func(*rlqspb.RateLimitQuotaResponse) error) error {
	n := s.n.Add(1)
	client := fmt.Sprintf("rlqs/%s/%d", peer, n)
	if len(client) > capacity.MaxIDLength {
		client = client[len(client)-capacity.MaxIDLength:]
	}
	var leaser state.Leaser = s.c
	if s.opts.Authorizer != nil {
		who := authz.Who(ctx)
		client = fmt.Sprintf("%s/rlqs/%d", who, n)
		leaser = grantedLeaser{Leaser: s.c, auth: s.opts.Authorizer, who: who}
	}
	// The stream's state comes with its first valid message, which
	// names the domain its metrics count under (report).
	ss := &stream{client: client, peer: peer, leaser: leaser, ended: make(chan struct{})}
	if !s.add(ss) {
		return status.Error(codes.Unavailable, "the server drains: reconnect to another task")
	}
	defer s.remove(ss)
	cancel, err := s.c.Watch(client, &capacity.Watcher{Deliver: ss.deliver, Stop: ss.stop})
	switch {
	case errors.Is(err, capacity.ErrNotMaster):
		return status.Error(codes.Unavailable, state.ErrNotMaster.Error())
	case err == nil:
		defer cancel()
	}
	// Otherwise the server pushes no leases (--push-leases=false): the
	// stream gets its leases on its reports and renewals only.
	defer func() {
		if st := ss.state(); st != nil {
			_, _ = state.Perform(ctx, ss.leaser, st, st.Release())
		}
	}()

	msgs := make(chan *rlqspb.RateLimitQuotaUsageReports)
	recvErr := make(chan error, 1)
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			m, err := recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case msgs <- m:
			case <-done:
				return
			}
		}
	}()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		// The stream's state changes under its lock; the capacity calls
		// its Ready asks for are made here, outside it (state.Perform), so
		// that the status page never waits on them.
		st := ss.state()
		var pushes <-chan struct{}
		if st != nil {
			pushes = st.Pushes()
		}
		var out []state.Action
		var err error
		select {
		case <-ctx.Done():
			return nil
		case err := <-recvErr:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case <-ss.ended:
			return status.Error(codes.Unavailable, "mastership lost or the server drains: reconnect")
		case m := <-msgs:
			out, err = s.report(ctx, ss, m)
		case <-pushes:
			out = st.ApplyPushes(s.now())
		case <-timer.C:
			if st == nil {
				break
			}
			if out, err = state.Perform(ctx, ss.leaser, st, st.Tick(s.now())); err != nil {
				err = s.leaseErr(err)
			}
		}
		if err != nil {
			return err
		}
		if len(out) > 0 {
			if err := send(response(out, s.opts.Burst)); err != nil {
				return err
			}
		}
		d := time.Hour
		if st := ss.state(); st != nil {
			if next := st.Next(); !next.IsZero() {
				d = max(next.Sub(s.now()), time.Millisecond)
			}
		}
		timer.Reset(d)
	}
}

// report validates and applies one message of ss: the first valid one
// creates its state, counting under its domain.
func (s *Service) report(ctx context.Context, ss *stream, m *rlqspb.RateLimitQuotaUsageReports) ([]state.Action, error) {
	domain, us, err := parse(ss.domain, m)
	st := ss.state()
	if err == nil {
		err = st.Conflict(us) // a nil state checks us alone
	}
	if err != nil {
		dm := ss.m
		if dm == nil {
			dm = s.m.domain("")
		}
		dm.badMsgs.Inc()
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if st == nil {
		ss.m = s.m.domain(domain)
		ss.m.streams.Inc()
		st = state.New(ss.client, s.c, state.Options{
			Unconfigured: s.opts.Unconfigured, UnconfiguredTTL: s.opts.UnconfiguredTTL, Smoothing: s.opts.Smoothing, Burst: s.opts.Burst,
		}, state.Metrics{Buckets: ss.m.buckets, Sent: ss.m.sent, Pushed: ss.m.pushed, Abandoned: ss.m.abandoned, Unconfigured: ss.m.unconfigured})
		ss.st.Store(st)
		s.mu.Lock()
		ss.domain = domain // under s.mu: the status page reads it
		s.mu.Unlock()
	}
	ss.m.reports.Inc()
	out, err := state.Perform(ctx, ss.leaser, st, st.Report(s.now(), us))
	if err != nil {
		return nil, s.leaseErr(err)
	}
	return out, nil
}

// leaseErr returns err, from the capacity service, as the stream's end.
func (s *Service) leaseErr(err error) error {
	if errors.Is(err, state.ErrNotMaster) {
		return status.Error(codes.Unavailable, err.Error())
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(codes.Unavailable, err.Error())
}

// stream is one stream: its state machine, and what the service knows of it.
type stream struct {
	client, peer string
	leaser       state.Leaser                 // the capacity service, as the stream's identity sees it
	st           atomic.Pointer[state.Stream] // nil until its first valid message
	domain       string                       // under Service.mu once set
	m            *domainMetrics               // nil until the domain is known

	ended chan struct{} // closed by stop
	once  sync.Once
}

// state returns the stream's state machine (nil before its first valid
// message).
func (ss *stream) state() *state.Stream { return ss.st.Load() }

// deliver takes a lease the capacity service pushed
// (capacity.Watcher.Deliver): refused before the stream has a state machine,
// which holds no lease then.
func (ss *stream) deliver(resource string, g lease.Grant) bool {
	if st := ss.state(); st != nil {
		return st.Deliver(resource, g)
	}
	return false
}

// stop ends the stream (capacity.Watcher.Stop, Drain): mastership lost,
// or the server drains.
func (ss *stream) stop() {
	ss.once.Do(func() { close(ss.ended) })
	if st := ss.state(); st != nil {
		st.Stop()
	}
}

// add registers ss, unless the service drains.
func (s *Service) add(ss *stream) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining {
		return false
	}
	s.streams[ss] = struct{}{}
	return true
}

// remove unregisters ss and counts its stream out.
func (s *Service) remove(ss *stream) {
	s.mu.Lock()
	delete(s.streams, ss)
	s.mu.Unlock()
	if ss.m != nil {
		ss.m.streams.Dec()
	}
}

// Drain ends every stream (Unavailable: the proxies reconnect to another
// task) and refuses new ones: the server drains, and its listener waits
// for the streams in flight. Their leases are released. Safe for
// concurrent use.
func (s *Service) Drain() {
	s.mu.Lock()
	s.draining = true
	ss := make([]*stream, 0, len(s.streams))
	for x := range s.streams {
		ss = append(ss, x)
	}
	s.mu.Unlock()
	for _, x := range ss {
		x.stop()
	}
}

// Streams returns a snapshot of the open streams and their buckets, in
// the order of their client ids, buckets by resource. O(streams ×
// buckets); safe for concurrent use.
func (s *Service) Streams() []view.StreamStatus {
	s.mu.Lock()
	ss := make([]*stream, 0, len(s.streams))
	domains := make([]string, 0, len(s.streams))
	for x := range s.streams {
		ss = append(ss, x)
		domains = append(domains, x.domain)
	}
	s.mu.Unlock()
	out := make([]view.StreamStatus, len(ss))
	for i, x := range ss {
		bs := []view.BucketStatus{}
		if st := x.state(); st != nil {
			bs = st.Buckets() // never waits on a capacity call (state.Stream)
		}
		out[i] = view.StreamStatus{Client: x.client, Peer: x.peer, Domain: domains[i], Buckets: bs}
	}
	slices.SortFunc(out, func(a, b view.StreamStatus) int { return strings.Compare(a.Client, b.Client) })
	return out
}

// grantedLeaser is the capacity service as a stream of identity who sees
// it: each resource a request asks for must be granted lease by the
// policy (a *identity.Refusal, as PermissionDenied, otherwise).
type grantedLeaser struct {
	state.Leaser
	auth *identity.Authorizer
	who  string
}

func (g grantedLeaser) GetCapacityPaced(ctx context.Context, req *pb.GetCapacityRequest) (*pb.GetCapacityResponse, error) {
	for _, r := range req.GetResource() {
		if err := g.auth.UseAs(g.who, identity.Lease, r.GetResourceId()); err != nil {
			return nil, authz.GRPCStatus(err)
		}
	}
	return g.Leaser.GetCapacityPaced(ctx, req)
}
