// Package rlqsproxy emulates Envoy's rate_limit_quota HTTP filter
// (envoy.extensions.filters.http.rate_limit_quota.v3) over a real gRPC
// stream to an RLQS server, for the tests of server/rlqs and of the
// server. What the filter does with requests and assignments is
// internal/rlqsfilter's model (the one the simulator runs too): per
// bucket it counts the requests it allowed and denied, applies the
// assignments it receives as the filter reads them off the wire (a token
// bucket starting full, kept when a new one is the same, for the whole
// seconds of the time to live; a blanket rule), admits requests from
// them, falls back to its expired_assignment_behavior when an
// assignment's time to live ends and to its no_assignment_behavior before
// the first, and forgets a bucket on an AbandonAction. This package adds
// the transport and the clock: it reports every reporting interval (and
// a new bucket at once), and reads the wall clock. It is imported only
// from _test.go files.
//
// Source: Envoy's api/envoy/extensions/filters/http/rate_limit_quota/v3/rate_limit_quota.proto
// and api/envoy/service/rate_limit_quota/v3/rlqs.proto, and its filter's
// global_client_impl.cc (see internal/rlqsfilter); Envoy's own filter is
// not linked.
package rlqsproxy

import (
	"context"
	"sync"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-rl/sluice/internal/rlqsfilter"
)

// Options configure a Proxy.
type Options struct {
	// Domain is the filter's domain, sent in its reports.
	Domain string
	// ReportInterval is the filter's reporting_interval (0: 1 s).
	ReportInterval time.Duration
	// NoAssignment is no_assignment_behavior's blanket rule: what a
	// bucket without an active assignment does before its first (the
	// zero value: ALLOW_ALL; DENY_ALL admits nothing the server did not
	// assign).
	NoAssignment typev3.RateLimitStrategy_BlanketRule
	// Expired is expired_assignment_behavior's fallback_rate_limit
	// blanket rule: what it does once an assignment expired (the zero
	// value: ALLOW_ALL).
	Expired typev3.RateLimitStrategy_BlanketRule
}

// Stats are a Proxy's counts since it started (rlqsfilter.Stats).
type Stats = rlqsfilter.Stats

// Assignment is a bucket's active assignment (rlqsfilter.Assignment):
// the token bucket's fill rate as the filter reads it (+Inf for
// ALLOW_ALL, 0 for DENY_ALL), its max_tokens, its end.
type Assignment = rlqsfilter.Assignment

// Proxy is one emulated Envoy with one RLQS stream. Safe for concurrent
// use.
type Proxy struct {
	opts Options

	mu     sync.Mutex
	f      *rlqsfilter.Filter
	stream grpc.BidiStreamingClient[rlqspb.RateLimitQuotaUsageReports, rlqspb.RateLimitQuotaResponse]
	fresh  []map[string]string // buckets created since the last report of them
	full   bool                // the next prompt report is of every bucket (a new stream)
	cancel context.CancelFunc
	err    error // the stream's end (nil: open)
	done   chan struct{}
	prompt chan struct{} // a report to send at once (capacity 1)
}

// Key returns a bucket's key: its pairs sorted.
func Key(pairs map[string]string) string { return rlqsfilter.Key(pairs) }

// New returns a proxy streaming to conn's server (Connect to reconnect).
func New(ctx context.Context, conn *grpc.ClientConn, opts Options) (*Proxy, error) {
	if opts.ReportInterval <= 0 {
		opts.ReportInterval = time.Second
	}
	p := &Proxy{opts: opts, f: rlqsfilter.New(rlqsfilter.Options{NoAssignment: opts.NoAssignment, Expired: opts.Expired}),
		prompt: make(chan struct{}, 1)}
	if err := p.Connect(ctx, conn); err != nil {
		return nil, err
	}
	return p, nil
}

// Connect opens a new stream to conn's server (Envoy reconnecting after
// its stream ended), ending the previous one. The buckets and their
// assignments are kept; the new stream's first message reports every
// bucket.
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
	p.stream, p.full, p.fresh, p.cancel, p.err, p.done = st, true, nil, cancel, nil, done
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
	return p.f.Stats()
}

// Allow decides one request matched into the bucket with pairs, at the
// wall clock's now, and counts it for the next report. A bucket's first
// request has it reported at once.
func (p *Proxy) Allow(pairs map[string]string) bool {
	p.mu.Lock()
	ok, created := p.f.Allow(time.Now(), pairs)
	if created {
		p.fresh = append(p.fresh, pairs)
	}
	p.mu.Unlock()
	if created {
		p.kick()
	}
	return ok
}

// Assignment returns the active (not expired) assignment of the bucket
// with pairs; ok is false when it has none.
func (p *Proxy) Assignment(pairs map[string]string) (a Assignment, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.f.Active(time.Now(), pairs)
}

// Tracked reports whether the proxy tracks the bucket with pairs (it saw
// a request and was not told to abandon it since).
func (p *Proxy) Tracked(pairs map[string]string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.f.Tracked(pairs)
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
	case p.prompt <- struct{}{}:
	default:
	}
}

// reportEvery reports every bucket every interval, and at once when
// kicked (the new buckets; every bucket on a new stream), until ctx ends.
func (p *Proxy) reportEvery(ctx context.Context, st grpc.BidiStreamingClient[rlqspb.RateLimitQuotaUsageReports, rlqspb.RateLimitQuotaResponse]) {
	t := time.NewTicker(p.opts.ReportInterval)
	defer t.Stop()
	for {
		all := true
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-p.prompt:
			all = false
		}
		if m := p.report(st, all); m != nil {
			if err := st.Send(m); err != nil {
				return
			}
		}
	}
}

// report returns the next report on st (nil: nothing to report): of every
// bucket if all, else of the buckets created since their last report (of
// every bucket on a new stream).
func (p *Proxy) report(st any, all bool) *rlqspb.RateLimitQuotaUsageReports {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if st != p.stream {
		return nil
	}
	var us []rlqsfilter.Usage
	switch {
	case all || p.full:
		us = p.f.Usages(now)
		p.full = false
	case len(p.fresh) > 0:
		us = p.f.Usages(now, p.fresh...)
	}
	p.fresh = nil
	if len(us) == 0 {
		return nil
	}
	m := &rlqspb.RateLimitQuotaUsageReports{Domain: p.opts.Domain}
	for _, u := range us {
		m.BucketQuotaUsages = append(m.BucketQuotaUsages, &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId:           &rlqspb.BucketId{Bucket: u.ID},
			TimeElapsed:        durationpb.New(u.Elapsed), // whole seconds: 0 for a new bucket
			NumRequestsAllowed: u.Allowed,
			NumRequestsDenied:  u.Denied,
		})
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
			id := a.GetBucketId().GetBucket()
			if a.GetAbandonAction() != nil {
				p.f.Abandon(id)
				continue
			}
			qa := a.GetQuotaAssignmentAction()
			if s, ok := strategy(qa.GetRateLimitStrategy()); ok && qa != nil {
				p.f.Assign(now, id, s, qa.GetAssignmentTimeToLive().AsDuration())
			}
		}
		p.mu.Unlock()
	}
}

// strategy returns the wire's s as the filter takes it; ok is false for
// a strategy it does not apply (requests_per_time_unit, or none: Envoy's
// filter ignores the action).
func strategy(s *typev3.RateLimitStrategy) (_ rlqsfilter.Strategy, ok bool) {
	if tb := s.GetTokenBucket(); tb != nil {
		return rlqsfilter.Strategy{TokenBucket: &rlqsfilter.TokenBucket{
			MaxTokens:     tb.GetMaxTokens(),
			TokensPerFill: tb.GetTokensPerFill().GetValue(),
			FillInterval:  tb.GetFillInterval().AsDuration(),
		}}, true
	}
	r, ok := s.GetStrategy().(*typev3.RateLimitStrategy_BlanketRule_)
	if !ok {
		return rlqsfilter.Strategy{}, false
	}
	return rlqsfilter.Strategy{Blanket: r.BlanketRule}, true
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
