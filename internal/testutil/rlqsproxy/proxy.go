// Package rlqsproxy emulates Envoy's rate_limit_quota HTTP filter
// (envoy.extensions.filters.http.rate_limit_quota.v3) over a real gRPC
// stream to an RLQS server, for the tests of server/rlqs and of the
// server: per bucket it counts the requests it allowed and denied and
// reports them every reporting interval (and at once when a bucket sees
// its first request), applies the assignments it receives (a token bucket
// starting full, or a blanket rule, replaced only when the strategy
// changes and else extended), enforces them locally, falls back to its
// expired_assignment_behavior when an assignment's time to live ends and
// to its no_assignment_behavior before the first, and forgets a bucket on
// an AbandonAction. It reads the wall clock. It is imported only from
// _test.go files.
//
// Source: Envoy's api/envoy/extensions/filters/http/rate_limit_quota/v3/rate_limit_quota.proto
// and api/envoy/service/rate_limit_quota/v3/rlqs.proto (their documented
// behaviour; Envoy's own filter is not linked).
package rlqsproxy

import (
	"context"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-rl/sluice/server/rlqs"
)

// Behavior is what a bucket without an active assignment does.
type Behavior int

const (
	// DenyAll denies every request (the tests' default: nothing is
	// admitted that the server did not assign).
	DenyAll Behavior = iota
	// AllowAll allows every request.
	AllowAll
)

// Options configure a Proxy.
type Options struct {
	// Domain is the filter's domain, sent in the stream's first message.
	Domain string
	// ReportInterval is the filter's reporting_interval (0: 1 s).
	ReportInterval time.Duration
	// NoAssignment is no_assignment_behavior's blanket rule.
	NoAssignment Behavior
	// Expired is expired_assignment_behavior's fallback_rate_limit
	// blanket rule.
	Expired Behavior
}

// Proxy is one emulated Envoy with one RLQS stream. Safe for concurrent
// use.
type Proxy struct {
	opts Options

	mu      sync.Mutex
	buckets map[string]*bucket
	stream  grpc.BidiStreamingClient[rlqspb.RateLimitQuotaUsageReports, rlqspb.RateLimitQuotaResponse]
	first   bool // the next message is the stream's first
	cancel  context.CancelFunc
	err     error // the stream's end (nil: open)
	done    chan struct{}
	stats   Stats
	trigger chan struct{}
}

// Stats are a Proxy's counts since it started.
type Stats struct {
	Allowed, Denied int64
	// Bursts is Σ max_tokens of the token buckets created (each starts
	// full): what a proxy may admit beyond its assigned rates.
	Bursts int64
	// Assignments, Abandons are the actions received.
	Assignments, Abandons int64
}

type bucket struct {
	pairs           map[string]string
	allowed, denied uint64
	last            time.Time // the last report's time (or the first request)
	// The active assignment (strategy nil: none yet).
	strategy *typev3.RateLimitStrategy
	expires  time.Time // zero: never
	tokens   float64
	at       time.Time // tokens' time
}

// Key returns a bucket's key: its pairs sorted.
func Key(pairs map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(pairs)) {
		b.WriteString(k + "=" + pairs[k] + ";")
	}
	return b.String()
}

// New returns a proxy streaming to conn's server (Connect to reconnect).
func New(ctx context.Context, conn *grpc.ClientConn, opts Options) (*Proxy, error) {
	if opts.ReportInterval <= 0 {
		opts.ReportInterval = time.Second
	}
	p := &Proxy{opts: opts, buckets: make(map[string]*bucket), trigger: make(chan struct{}, 1)}
	if err := p.Connect(ctx, conn); err != nil {
		return nil, err
	}
	return p, nil
}

// Connect opens a new stream to conn's server (Envoy reconnecting after
// its stream ended), ending the previous one. The buckets and their
// assignments are kept; the new stream's first message carries the
// domain and every bucket.
func (p *Proxy) Connect(ctx context.Context, conn *grpc.ClientConn) error {
	p.Close()
	ctx, cancel := context.WithCancel(ctx)
	st, err := rlqspb.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		cancel()
		return err
	}
	done := make(chan struct{})
	p.mu.Lock()
	p.stream, p.first, p.cancel, p.err, p.done = st, true, cancel, nil, done
	p.mu.Unlock()
	go p.receive(st, done)
	go p.reportEvery(ctx, st)
	p.kick()
	return nil
}

// Close ends the stream (the proxy leaves) and waits for its reader.
func (p *Proxy) Close() {
	p.mu.Lock()
	cancel, done := p.cancel, p.done
	p.cancel = nil
	p.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// Err returns the stream's end: nil while it is open.
func (p *Proxy) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Stats returns the proxy's counts.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// Allow decides one request matched into the bucket with pairs, at the
// wall clock's now, and counts it for the next report.
func (p *Proxy) Allow(pairs map[string]string) bool {
	now := time.Now()
	p.mu.Lock()
	k := Key(pairs)
	b := p.buckets[k]
	if b == nil {
		b = &bucket{pairs: maps.Clone(pairs), last: now}
		p.buckets[k] = b
		defer p.kick() // a new bucket is reported at once
	}
	ok := p.decide(now, b)
	if ok {
		b.allowed++
		p.stats.Allowed++
	} else {
		b.denied++
		p.stats.Denied++
	}
	p.mu.Unlock()
	return ok
}

func blanket(b Behavior) bool { return b == AllowAll }

// decide applies b's active assignment, or the fallbacks.
func (p *Proxy) decide(now time.Time, b *bucket) bool {
	switch {
	case b.strategy == nil:
		return blanket(p.opts.NoAssignment)
	case !b.expires.IsZero() && !now.Before(b.expires):
		return blanket(p.opts.Expired)
	}
	switch s := b.strategy.GetStrategy().(type) {
	case *typev3.RateLimitStrategy_BlanketRule_:
		return s.BlanketRule == typev3.RateLimitStrategy_ALLOW_ALL
	case *typev3.RateLimitStrategy_TokenBucket:
		tb := s.TokenBucket
		rate := rlqs.FillRate(tb) // as Envoy's filter reads it
		b.tokens = math.Min(float64(tb.GetMaxTokens()), b.tokens+rate*now.Sub(b.at).Seconds())
		b.at = now
		if b.tokens >= 1 {
			b.tokens--
			return true
		}
		return false
	default: // requests_per_time_unit: Envoy's filter fails open
		return true
	}
}

// Assignment is a bucket's active assignment.
type Assignment struct {
	// Rate is the token bucket's fill rate (requests per second); +Inf
	// for ALLOW_ALL, 0 for DENY_ALL.
	Rate      float64
	MaxTokens uint32
	Expires   time.Time
}

// Assignment returns the active (not expired) assignment of the bucket
// with pairs; ok is false when it has none.
func (p *Proxy) Assignment(pairs map[string]string) (a Assignment, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b := p.buckets[Key(pairs)]
	if b == nil || b.strategy == nil || !b.expires.IsZero() && !time.Now().Before(b.expires) {
		return Assignment{}, false
	}
	a.Expires = b.expires
	switch s := b.strategy.GetStrategy().(type) {
	case *typev3.RateLimitStrategy_BlanketRule_:
		if s.BlanketRule == typev3.RateLimitStrategy_ALLOW_ALL {
			a.Rate = math.Inf(1)
		}
	case *typev3.RateLimitStrategy_TokenBucket:
		tb := s.TokenBucket
		a.Rate = rlqs.FillRate(tb)
		a.MaxTokens = tb.GetMaxTokens()
	}
	return a, true
}

// Tracked reports whether the proxy tracks the bucket with pairs (it saw
// a request and was not told to abandon it since).
func (p *Proxy) Tracked(pairs map[string]string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.buckets[Key(pairs)] != nil
}

// Wait waits for the stream's end, or ctx's.
func (p *Proxy) Wait(ctx context.Context) error {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	select {
	case <-done:
		return p.Err()
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *Proxy) kick() {
	select {
	case p.trigger <- struct{}{}:
	default:
	}
}

// reportEvery reports every interval, and at once when kicked (a new
// bucket), until ctx ends.
func (p *Proxy) reportEvery(ctx context.Context, st grpc.BidiStreamingClient[rlqspb.RateLimitQuotaUsageReports, rlqspb.RateLimitQuotaResponse]) {
	t := time.NewTicker(p.opts.ReportInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-p.trigger:
		}
		if m := p.report(st); m != nil {
			if err := st.Send(m); err != nil {
				return
			}
		}
	}
}

// report returns the next report on st (nil: nothing to report).
func (p *Proxy) report(st any) *rlqspb.RateLimitQuotaUsageReports {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if st != p.stream || len(p.buckets) == 0 {
		return nil
	}
	m := &rlqspb.RateLimitQuotaUsageReports{}
	if p.first {
		m.Domain, p.first = p.opts.Domain, false
	}
	for _, k := range slices.Sorted(maps.Keys(p.buckets)) {
		b := p.buckets[k]
		// Whole seconds, as Envoy's filter sends them: 0 in the report
		// of a new bucket (a watch) and whenever reports are less than a
		// second apart.
		elapsed := now.Sub(b.last).Truncate(time.Second)
		m.BucketQuotaUsages = append(m.BucketQuotaUsages, &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId:           &rlqspb.BucketId{Bucket: b.pairs},
			TimeElapsed:        durationpb.New(elapsed),
			NumRequestsAllowed: b.allowed,
			NumRequestsDenied:  b.denied,
		})
		b.allowed, b.denied, b.last = 0, 0, now
	}
	return m
}

// receive applies the stream's responses until it ends.
func (p *Proxy) receive(st grpc.BidiStreamingClient[rlqspb.RateLimitQuotaUsageReports, rlqspb.RateLimitQuotaResponse], done chan struct{}) {
	defer close(done)
	for {
		m, err := st.Recv()
		if err != nil {
			p.mu.Lock()
			if st == p.stream {
				p.err = err
			}
			p.mu.Unlock()
			return
		}
		now := time.Now()
		p.mu.Lock()
		for _, a := range m.GetBucketAction() {
			k := Key(a.GetBucketId().GetBucket())
			b := p.buckets[k]
			if a.GetAbandonAction() != nil {
				p.stats.Abandons++
				delete(p.buckets, k)
				continue
			}
			qa := a.GetQuotaAssignmentAction()
			if b == nil || qa == nil {
				continue // a bucket this proxy does not track
			}
			p.stats.Assignments++
			var expires time.Time
			if ttl := qa.GetAssignmentTimeToLive(); ttl != nil {
				expires = now.Add(ttl.AsDuration())
			}
			active := b.strategy != nil && (b.expires.IsZero() || now.Before(b.expires))
			if active && proto.Equal(b.strategy, qa.GetRateLimitStrategy()) {
				b.expires = expires // the same strategy: extended
				continue
			}
			b.strategy, b.expires = qa.GetRateLimitStrategy(), expires
			if tb := b.strategy.GetTokenBucket(); tb != nil {
				b.tokens, b.at = float64(tb.GetMaxTokens()), now // a new bucket starts full
				p.stats.Bursts += int64(tb.GetMaxTokens())
			}
		}
		p.mu.Unlock()
	}
}

// Drive offers requests to the bucket with pairs at rate() requests per
// second (read every step), in steps of 5 ms, until ctx ends; the
// returned channel is closed then.
func (p *Proxy) Drive(ctx context.Context, pairs map[string]string, rate func() float64) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		last := time.Now()
		var owed float64
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				owed += rate() * now.Sub(last).Seconds()
				last = now
				for ; owed >= 1; owed-- {
					p.Allow(pairs)
				}
			}
		}
	}()
	return done
}
