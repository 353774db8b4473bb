// Package envoyrls is Envoy's rate limit service,
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit, over the
// rules of envoyproxy/ratelimit's configuration (limits/rls) and a store
// of counters (rls.MemoryStore, or Redis through limits/redis): what
// Envoy's HTTP, network and Thrift rate limit filters call, and with them
// Istio, Envoy Gateway, Contour and every other proxy built on Envoy.
//
// A request's descriptors are matched (rls.Config.Resolve) and decided
// together (rls.Store.Decide): when any is over its limit, none is
// charged. The answers follow envoyproxy/ratelimit's (its README and
// src/service/ratelimit.go) except where docs/envoy.md lists a departure.
// Options.Stats receives the statistics upstream keeps of each call
// (StatsSink), which server/envoyrls/upstreamstats sends over statsd by
// upstream's names.
//
// The types are go-control-plane's (github.com/envoyproxy/go-control-plane/envoy
// v1.40.0): RateLimitRequest{domain, descriptors, hits_addend},
// RateLimitDescriptor{entries, limit (requests_per_unit, unit,
// unit_multiplier), hits_addend (UInt64Value), is_negative_hits},
// RateLimitResponse{overall_code, statuses, response_headers_to_add,
// request_headers_to_add, raw_body, dynamic_metadata, quota} and
// DescriptorStatus{code, current_limit, limit_remaining,
// duration_until_reset, quota}.
package envoyrls

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-rl/sluice/internal/names"
	"github.com/sluice-rl/sluice/internal/refresh"
	"github.com/sluice-rl/sluice/internal/tracing"
	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/limits/rls"
	"github.com/sluice-rl/sluice/server/status/view"
)

// The bounds of a request, beyond which it is InvalidArgument: at most
// MaxDescriptors descriptors, each of at most MaxEntries entries, and
// every domain, key and value at most MaxNameBytes bytes.
const (
	MaxDescriptors = 64
	MaxEntries     = 32
	MaxNameBytes   = 1024
)

// Headers says which response headers ShouldRateLimit adds
// (response_headers_to_add), for the descriptors that have a limit.
type Headers struct {
	// Draft adds the IETF draft's RateLimit-Policy and RateLimit fields
	// (draft-ietf-httpapi-ratelimit-headers-10, Structured Fields), one
	// policy per limited descriptor, and Retry-After (RFC 9110, whole
	// seconds, rounded up) on OVER_LIMIT.
	Draft bool
	// XRateLimit adds the older X-RateLimit-Limit, -Remaining and -Reset
	// (seconds) of the descriptor with the least remaining.
	XRateLimit bool
	// XRateLimitNames, when set, name XRateLimit's three headers: the
	// limit, the remaining and the reset, in that order (envoyproxy/
	// ratelimit's LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER and
	// LIMIT_RESET_HEADER, whose defaults are RateLimit-Limit,
	// RateLimit-Remaining and RateLimit-Reset: its
	// LIMIT_RESPONSE_HEADERS_ENABLED is XRateLimit under those names).
	// The zero value: X-RateLimit-Limit, -Remaining and -Reset.
	XRateLimitNames [3]string
}

// xNames are XRateLimit's default header names.
var xNames = [3]string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"}

// Options configure a Service.
type Options struct {
	// Store holds the counters (required).
	Store rls.Store
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// Algorithm counts the limits of domains and rules that name none
	// (AlgorithmDefault: TokenBucket).
	Algorithm rls.Algorithm
	// ShadowMode answers every request OK, deciding and counting as
	// usual (would-be rejections count as shadow_mode).
	ShadowMode bool
	// CalendarMonths counts every limit of unit month (a rule's without
	// a calendar or unit_multiplier of its own, and a request override's)
	// in calendar months in UTC, fixed windows from the first of the
	// month, as envoyproxy/ratelimit's USE_CALENDAR_MONTH_RATE_LIMIT does.
	// false (the zero value): a month is 30 days (rls.Unit.Duration).
	CalendarMonths bool
	// Headers are the response headers to add.
	Headers Headers
	// OnStoreError is the answer when the store fails: FailClosed (the
	// zero value) answers the error (Unavailable: Envoy's
	// failure_mode_deny decides), FailOpen answers OK.
	OnStoreError limits.OnStoreError
	// NearLimitRatio is the fraction of a limit above which a granted hit
	// counts as near_limit (0: 0.8, envoyproxy/ratelimit's); New refuses
	// one outside (0, 1].
	NearLimitRatio float64
	// Tiers decides the rules with burst tiers (rls.Limit.BurstTiers):
	// the limits engine whose configuration holds the resources they
	// name (nil: such a rule's descriptor fails as a store error would).
	Tiers TierLimiter
	// Registry registers the metrics (nil: none).
	Registry prometheus.Registerer
	// Logger logs store errors (nil: slog.Default()).
	Logger *slog.Logger
	// Stats, when set, receives envoyproxy/ratelimit's statistics of
	// every call, on the call's goroutine (StatsSink's rules):
	// server/envoyrls/upstreamstats emits them over statsd by upstream's
	// names. nil (the zero value): none, at the cost of a nil check.
	Stats StatsSink
}

// TierLimiter decides a burst-tier resource's hits: *limits.Engine.
type TierLimiter interface {
	Allow(ctx context.Context, now time.Time, req limits.Request) limits.Decision
}

// Service is envoy.service.ratelimit.v3.RateLimitService. Safe for
// concurrent use; SetConfig replaces the rules atomically.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer
	opts    Options
	cfg     atomic.Pointer[rls.Config]
	metrics *metrics
	log     *slog.Logger
	// loggedStoreError is when (Unix ns, by Options.Now) a store error
	// was last logged: at most one a second (storeErrorLogEvery).
	loggedStoreError atomic.Int64
}

// storeErrorLogEvery paces the store errors' log lines: while the store
// is down every request fails alike; sluice_envoy_ratelimit_store_errors_total
// counts them all.
const storeErrorLogEvery = time.Second

// OptionError is an Options value Check refuses: the field (its name in
// Options) and why.
type OptionError = names.FieldError

// Check returns an *OptionError for the first of the configurable
// options (the ones a server's configuration sets, not its Store, clock
// or registry) that New would refuse: NearLimitRatio outside (0, 1]
// (0 is the default).
func (o Options) Check() *OptionError {
	if r := o.NearLimitRatio; r != 0 && !(r > 0 && r <= 1) { // NaN too
		return names.FieldErr("NearLimitRatio", "%v, want a fraction in (0, 1]", r)
	}
	return nil
}

// New returns a service with no rules (every descriptor answers OK with
// no limit) until SetConfig. It errs when opts has no Store, or when
// opts.Registry already holds one of the service's metrics (the error
// names it).
func New(opts Options) (*Service, error) {
	if opts.Store == nil {
		return nil, errors.New("envoyrls: Options.Store: nil")
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Algorithm == rls.AlgorithmDefault {
		opts.Algorithm = rls.TokenBucket
	}
	if err := opts.Check(); err != nil {
		return nil, fmt.Errorf("envoyrls: Options.%w", err)
	}
	if opts.NearLimitRatio == 0 {
		opts.NearLimitRatio = 0.8
	}
	m, err := newMetrics(opts.Registry)
	if err != nil {
		return nil, fmt.Errorf("envoyrls: %w", err)
	}
	s := &Service{opts: opts, metrics: m, log: opts.Logger}
	if s.log == nil {
		s.log = slog.Default()
	}
	return s, nil
}

// SetConfig installs rules (nil: none); requests in flight finish under
// the rules they started with.
func (s *Service) SetConfig(c *rls.Config) {
	s.metrics.setConfig(c)
	s.cfg.Store(c)
}

// Run removes, every interval until ctx is done, the counters of a store
// that keeps them in this process (rls.MemoryStore's Reap: full buckets,
// windows over); a store that expires them itself (Redis) needs none.
func (s *Service) Run(ctx context.Context, interval time.Duration) {
	r, ok := s.opts.Store.(interface{ Reap(now int64) int })
	if !ok {
		return
	}
	refresh.Every(ctx, interval, func(context.Context) { r.Reap(s.opts.Now().UnixMicro()) })
}

// Config returns the rules in force (nil: none).
func (s *Service) Config() *rls.Config { return s.cfg.Load() }

// descriptor is one request descriptor's decision in progress.
type descriptor struct {
	match   rls.Match
	limit   *rls.Limit    // the limit in force (the rule's or the override's)
	bound   *rls.Limit    // once answered, the binding one of the rule's limits
	period  time.Duration // the binding limit's period (unit × unit_multiplier)
	hits    uint64        // what it adds
	entries []rls.Entry   // the request's
	domain  string
	info    *ruleInfo        // the matched rule's, or nil
	hit     int              // its index in hits, or -1 (no store decision)
	nhits   int              // its hits: 1, or a rule's rate_limits' number
	bucket  string           // a burst-tier rule's counter (TierDomain's)
	tiers   *limits.Decision // a burst-tier rule's decision, once taken
	limited bool             // answered with a limit: in the headers
	quota   uint32           // the headers' policy quota (q)
	retry   int64            // µs until refused hits fit (0: none; -1 never)
	shadow  bool             // the rule's shadow mode (or the service's)
	refund  bool             // is_negative_hits
	answer  *answer          // its place in the reply
	// What the metrics resolved: the result recorded, and the statistics'
	// name when it was worked out (label; detailed: of request values).
	res      Result
	recorded bool
	label    string
	detailed bool
}

// ShouldRateLimit implements rlsv3.RateLimitServiceServer. Errors:
// InvalidArgument naming the field for an empty domain, no descriptors, a
// descriptor with no entries, an entry with an empty key, more than
// MaxDescriptors or MaxEntries, a name longer than MaxNameBytes, or an
// override with no unit (nothing is counted); Unavailable when the store
// fails and OnStoreError is FailClosed; the context's error when the
// request's context ends.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (_ *rlsv3.RateLimitResponse, err error) {
	var rep requestReport // (Options.Stats')
	if sink := s.opts.Stats; sink != nil {
		rep.start = s.opts.Now()
		defer func() { s.reportRequest(sink, req.GetDomain(), &rep, err) }()
	}
	if err := validate(req); err != nil {
		s.metrics.invalid.Inc()
		return nil, err
	}
	cfg := s.cfg.Load()
	domain := cfg.Domain(req.Domain)
	if domain == nil {
		rep.domainNotFound = len(req.Descriptors)
	}
	sc := scratchPool.Get().(*scratch)
	defer sc.put()
	n := len(req.Descriptors)
	for _, d := range req.Descriptors {
		start := len(sc.entries)
		for _, e := range d.Entries {
			sc.entries = append(sc.entries, rls.Entry{Key: e.Key, Value: e.Value})
		}
		sc.views = append(sc.views, sc.entries[start:len(sc.entries):len(sc.entries)])
	}
	sc.matches = cfg.ResolveInto(grow(sc.matches, n), req.Domain, sc.views)
	now := rep.start // (read once when Options.Stats times the call)
	if now.IsZero() {
		now = s.opts.Now()
	}
	ds := grow(sc.ds, n)
	sc.ds = ds
	r := newReply(n)
	for i, d := range req.Descriptors {
		ds[i] = s.plan(req, domain, d, sc.matches[i], sc.views[i], &sc.hits)
		ds[i].answer = &r.answers[i]
		ds[i].answer.status.Code = rlsv3.RateLimitResponse_OK
		r.resp.Statuses[i] = &ds[i].answer.status
	}
	hits := sc.hits
	results := grow(sc.results, len(hits))
	sc.results = results
	granted, tiers := true, false
	for i := range ds {
		switch {
		case ds[i].blocks():
			// A limit of 0 refuses the request without the store: the
			// others are only checked, so that nothing is charged.
			granted = false
			for j := range hits {
				hits[j].Hits, hits[j].Refund = 0, false
			}
		case ds[i].tiered():
			if req.Descriptors[i].IsNegativeHits {
				s.metrics.invalid.Inc()
				return nil, status.Errorf(codes.InvalidArgument, "descriptors[%d].is_negative_hits: a burst-tier rule takes no refunds", i)
			}
			tiers = true
		}
	}
	degraded := false
	if len(hits) > 0 {
		ok, err := s.opts.Store.Decide(ctx, now.UnixMicro(), req.Domain, hits, results)
		if err != nil {
			rep.storeFailed = true
			if err := s.storeError(ctx, req.Domain, err); err != nil {
				s.failed(ds, &rep)
				return nil, err
			}
			degraded, ok = true, true
		}
		granted = granted && ok
	}
	charged := granted // (the answers' remaining is after the hits)
	if tiers && granted {
		// The burst tiers last, each only when all before it granted; when
		// one refuses, the counters are given back what they were charged.
		// (The limits engine takes no refunds: two burst-tier descriptors
		// are atomic only when the first refuses.)
		if refused, err := s.takeTiers(ctx, now, ds); refused || err != nil {
			if !degraded {
				s.refund(ctx, now, req.Domain, hits, sc)
			}
			if err != nil {
				rep.storeFailed = true
				if err := s.storeError(ctx, req.Domain, err); err != nil {
					s.failed(ds, &rep)
					return nil, err
				}
			}
		}
	}
	for i := range ds {
		s.answer(&ds[i], results, degraded)
		if ds[i].answer.status.Code == rlsv3.RateLimitResponse_OVER_LIMIT {
			r.resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
	}
	if sink := s.opts.Stats; sink != nil {
		s.reportDescriptors(sink, ds, charged, false, &rep)
	}
	s.headers(r, ds)
	if span := tracing.Span(ctx); span != nil {
		annotate(span, req, r.resp.OverallCode, degraded)
	}
	return &r.resp, nil
}

// failed hands Options.Stats the descriptors of a request the store
// failed and that is answered with an error.
func (s *Service) failed(ds []descriptor, rep *requestReport) {
	if sink := s.opts.Stats; sink != nil {
		s.reportDescriptors(sink, ds, false, true, rep)
	}
}

// annotate sets Sluice's attributes on a traced request's span: the
// descriptors as resources (each its entries' keys joined with "."), the
// domain, the overall code and whether the store's failure was answered
// open.
func annotate(span trace.Span, req *rlsv3.RateLimitRequest, code rlsv3.RateLimitResponse_Code, degraded bool) {
	keys := make([]string, len(req.Descriptors))
	for i, d := range req.Descriptors {
		var b strings.Builder
		for j, e := range d.Entries {
			if j > 0 {
				b.WriteByte('.')
			}
			b.WriteString(e.Key)
		}
		keys[i] = b.String()
	}
	span.SetAttributes(tracing.ResourceKey.StringSlice(keys), tracing.DomainKey.String(req.Domain),
		tracing.DecisionKey.String(code.String()), tracing.DegradedKey.Bool(degraded))
}

// storeError counts a store's failure and returns the request's answer:
// the context's error when it ended, Unavailable when the service fails
// closed, nil (answer, degraded) when it fails open.
func (s *Service) storeError(ctx context.Context, domain string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return status.FromContextError(ctxErr).Err()
	}
	s.metrics.storeErrors.Inc()
	if s.opts.OnStoreError != limits.FailOpen {
		now, last := s.opts.Now().UnixNano(), s.loggedStoreError.Load()
		if now-last >= int64(storeErrorLogEvery) && s.loggedStoreError.CompareAndSwap(last, now) {
			s.log.Warn("envoy rate limit: store error (logged at most once a second; sluice_envoy_ratelimit_store_errors_total counts them)", "domain", domain, "err", err)
		}
		return status.Errorf(codes.Unavailable, "rate limit store: %v", err)
	}
	return nil
}

// takeTiers takes the hits of the burst-tier descriptors of ds, in order,
// on the limits engine, up to the first that refuses (refused) or fails
// (err: the engine had no answer). Shadow-mode refusals do not stop it.
func (s *Service) takeTiers(ctx context.Context, now time.Time, ds []descriptor) (refused bool, err error) {
	if s.opts.Tiers == nil {
		return false, errors.New("burst tiers: the service has no limits engine")
	}
	for i := range ds {
		d := &ds[i]
		if !d.tiered() || d.hits == 0 { // (0: check only, nothing to take)
			continue
		}
		hits := int64(min(d.hits, uint64(limits.MaxTokens)+1)) // (beyond MaxTokens: never fits)
		dec := s.opts.Tiers.Allow(ctx, now, limits.Request{Resource: d.limit.BurstTiers, Domain: TierDomain(d.bucket), Tokens: hits, MinTokens: hits})
		d.tiers = &dec
		switch dec.Status {
		case limits.StatusOK:
		case limits.StatusNoBucket, limits.StatusServerError:
			if dec.Err == nil {
				dec.Err = fmt.Errorf("burst tiers: resource %q: %v", d.limit.BurstTiers, dec.Status)
			}
			return false, dec.Err
		default:
			if !d.shadow {
				return true, nil
			}
		}
	}
	return false, nil
}

// refund gives back what hits charged (their refunds stay), after the
// limits engine refused or failed a burst-tier descriptor of the same
// request. It runs even when the request's context has ended: the charge
// happened.
func (s *Service) refund(ctx context.Context, now time.Time, domain string, hits []rls.Hit, sc *scratch) {
	back := false
	for j := range hits {
		if hits[j].Refund {
			hits[j].Hits = 0
		}
		hits[j].Refund = true
		back = back || hits[j].Hits > 0
	}
	if !back {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), refundTimeout)
	defer cancel()
	sc.refunds = grow(sc.refunds, len(hits))
	if _, err := s.opts.Store.Decide(ctx, now.UnixMicro(), domain, hits, sc.refunds); err != nil {
		s.metrics.storeErrors.Inc()
		s.log.Warn("envoy rate limit: refund after a burst-tier refusal failed", "domain", domain, "err", err)
	}
}

// refundTimeout bounds a refund's store call.
const refundTimeout = 5 * time.Second

// TierDomain returns the domain of the limits engine's burst-tier
// resource that a counter (rls.Match.Bucket) is: its entries' values
// joined by '/' ("acme", "acme/free"; a shared wildcard's pattern stands
// for its values) when that is a valid name and no value of several has a
// '/'; else "h:" and 32 hex digits of the bucket's SHA-256, so that two
// counters never share a domain.
func TierDomain(bucket string) string {
	var b [limits.MaxNameLen]byte
	name, ok := b[:0], true
	_, entries, _, _ := rls.ParseBucket(bucket)
	for i, e := range entries {
		v := e.Value
		if i > 0 {
			name = append(name, '/')
		}
		if len(entries) > 1 && strings.IndexByte(v, '/') >= 0 || len(name)+len(v) > len(b) {
			ok = false
			break
		}
		name = append(name, v...)
	}
	if ok && names.Check(string(name)) == "" {
		return string(name)
	}
	sum := sha256.Sum256([]byte(bucket))
	return "h:" + hex.EncodeToString(sum[:16])
}

// reply is a response and every message it points to, made in one
// allocation for a request of one descriptor (most of Envoy's) and in
// three for more, and its headers in one more: the gRPC codec marshals it after the handler returns,
// so none of it can be pooled.
type reply struct {
	resp    rlsv3.RateLimitResponse
	answers []answer
	one     struct {
		status  [1]*rlsv3.RateLimitResponse_DescriptorStatus
		answers [1]answer
	}
	headers *headerBlock // made by the first addHeader
}

// headerBlock holds a response's headers.
type headerBlock struct {
	values [maxHeaders]corev3.HeaderValue
	ptrs   [maxHeaders]*corev3.HeaderValue
}

// answer is one descriptor's status and the messages it points to.
type answer struct {
	status rlsv3.RateLimitResponse_DescriptorStatus
	limit  rlsv3.RateLimitResponse_RateLimit
	reset  durationpb.Duration
}

// maxHeaders is the most headers a response adds: RateLimit-Policy,
// RateLimit, Retry-After and the three X-RateLimit-*.
const maxHeaders = 6

// newReply returns an OK reply with room for n descriptors.
func newReply(n int) *reply {
	r := &reply{}
	r.resp.OverallCode = rlsv3.RateLimitResponse_OK
	if n == 1 {
		r.resp.Statuses, r.answers = r.one.status[:], r.one.answers[:]
	} else {
		r.resp.Statuses, r.answers = make([]*rlsv3.RateLimitResponse_DescriptorStatus, n), make([]answer, n)
	}
	return r
}

// addHeader appends a response header to r.
func (r *reply) addHeader(k, v string) {
	if r.headers == nil {
		r.headers = new(headerBlock)
	}
	h, i := r.headers, len(r.resp.ResponseHeadersToAdd)
	h.values[i].Key, h.values[i].Value = k, v
	h.ptrs[i] = &h.values[i]
	r.resp.ResponseHeadersToAdd = h.ptrs[:i+1]
}

// scratch is a request's working memory, pooled: the descriptors' entries
// (one block), their matches, decisions, hits and results.
type scratch struct {
	entries []rls.Entry
	views   [][]rls.Entry
	matches []rls.Match
	ds      []descriptor
	hits    []rls.Hit
	results []rls.Result
	refunds []rls.Result
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// put clears what the request left (so that the pool keeps no answer or
// name alive) and returns sc to the pool.
func (sc *scratch) put() {
	clear(sc.entries)
	clear(sc.views)
	clear(sc.matches)
	clear(sc.ds)
	clear(sc.hits)
	sc.entries, sc.views, sc.matches, sc.ds, sc.hits, sc.results, sc.refunds = sc.entries[:0], sc.views[:0], sc.matches[:0], sc.ds[:0], sc.hits[:0], sc.results[:0], sc.refunds[:0]
	scratchPool.Put(sc)
}

// grow returns s with length n, reusing its array when it is big enough.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	s = s[:n]
	clear(s)
	return s
}

// tiered reports whether d's limit is a burst-tier resource's, decided by
// the limits engine.
func (d *descriptor) tiered() bool { return d.limit != nil && d.limit.BurstTiers != "" }

// blocks reports whether d refuses the request without the store: a
// limit of 0, not in shadow mode.
func (d *descriptor) blocks() bool {
	l := d.limit
	return l != nil && !l.Unlimited && !d.tiered() && l.RequestsPerUnit == 0 && !d.shadow
}

// plan decides what descriptor d needs: no limit, an answer without the
// store (unlimited, a limit of 0), or a hit (appended to hits).
func (s *Service) plan(req *rlsv3.RateLimitRequest, domain *rls.Domain, d *ratelimitv3.RateLimitDescriptor, m rls.Match, entries []rls.Entry, hits *[]rls.Hit) descriptor {
	ds := descriptor{match: m, domain: req.Domain, entries: entries, hit: -1}
	if domain == nil {
		return ds // an unknown domain: OK, no limit (overrides too)
	}
	bucket := m.Bucket
	if m.Rule != nil {
		ds.limit = m.Rule.Limit
		ds.shadow = m.Rule.ShadowMode
		ds.info = s.metrics.rule(m.Rule)
	}
	if o := d.Limit; o != nil {
		ds.limit, bucket = override(req.Domain, o, entries)
	}
	ds.shadow = ds.shadow || s.opts.ShadowMode
	ds.hits = uint64(req.HitsAddend)
	if ds.hits == 0 {
		ds.hits = 1
	}
	if d.HitsAddend != nil {
		ds.hits = d.HitsAddend.Value
	}
	l := ds.limit
	switch {
	case l == nil || l.Unlimited:
		return ds
	case l.BurstTiers != "":
		ds.bucket = bucket // decided by the limits engine, after the others
		return ds
	}
	ds.period = l.Period()
	if l.RequestsPerUnit == 0 {
		return ds // always over: no counter
	}
	ds.hit = len(*hits)
	alg := domain.AlgorithmOf(m.Rule, s.opts.Algorithm)
	ds.refund = d.IsNegativeHits
	*hits = append(*hits, rls.Hit{Bucket: bucket, Policy: s.policy(l, alg), Hits: ds.hits, Refund: d.IsNegativeHits, Soft: ds.shadow})
	ds.nhits = 1
	if m.Rule != nil && l == m.Rule.Limit {
		for i, more := range m.Rule.MoreLimits {
			*hits = append(*hits, rls.Hit{Bucket: rls.LimitBucket(bucket, i+1), Policy: s.policy(more, alg), Hits: ds.hits, Refund: d.IsNegativeHits, Soft: ds.shadow})
		}
		ds.nhits += len(m.Rule.MoreLimits)
	}
	return ds
}

// policy returns limit l's policy under algorithm alg: a month is the
// calendar's in UTC under Options.CalendarMonths.
func (s *Service) policy(l *rls.Limit, alg rls.Algorithm) rls.Policy {
	p := l.Policy(alg)
	if s.opts.CalendarMonths && l.Unit == rls.Month && l.Calendar == nil && l.UnitMultiplier <= 1 {
		p.Algorithm, p.Burst, p.Calendar = rls.FixedWindow, 0, rls.Calendar{Unit: rls.Month, Location: time.UTC}
	}
	return p
}

// limitAt returns d's i-th limit: its limit in force, then its rule's
// MoreLimits.
func (d *descriptor) limitAt(i int) *rls.Limit {
	if i == 0 {
		return d.limit
	}
	return d.match.Rule.MoreLimits[i-1]
}

// binding returns the index, among d's results, of the limit that binds:
// of those over (not fitting), the one whose retry is furthest (never
// first); else the one with the least remaining (the first of equals).
func binding(results []rls.Result) int {
	b := 0
	for i, r := range results[1:] {
		i++
		switch rb := results[b]; {
		case r.Over && !rb.Over:
			b = i
		case r.Over && rb.Over:
			if rb.RetryAfter >= 0 && (r.RetryAfter < 0 || r.RetryAfter > rb.RetryAfter) {
				b = i
			}
		case !r.Over && !rb.Over && r.Remaining < rb.Remaining:
			b = i
		}
	}
	return b
}

// override returns the limit of a descriptor's override and its own
// bucket (the descriptor's entries tagged with the override, apart from
// any rule's).
func override(domain string, o *ratelimitv3.RateLimitDescriptor_RateLimitOverride, entries []rls.Entry) (*rls.Limit, string) {
	l := &rls.Limit{RequestsPerUnit: o.RequestsPerUnit, Unit: rls.Unit(o.Unit)}
	if o.UnitMultiplier != nil && o.UnitMultiplier.Value > 1 {
		l.UnitMultiplier = o.UnitMultiplier.Value
	}
	tag := overrideTag + strconv.FormatUint(uint64(o.RequestsPerUnit), 10) + "/" + l.Unit.String()
	if o.UnitMultiplier != nil {
		tag += "*" + strconv.FormatUint(uint64(o.UnitMultiplier.Value), 10)
	}
	return l, rls.TaggedBucket(domain, entries, tag)
}

// overrideTag begins the tag of an override's bucket.
const overrideTag = "override "

// answer fills d's status from its limit and its hit's result (or its
// burst tiers' decision).
func (s *Service) answer(d *descriptor, results []rls.Result, degraded bool) {
	l, st := d.limit, &d.answer.status
	switch {
	case l == nil:
		return
	case l.Unlimited:
		st.LimitRemaining = math.MaxUint32
		s.metrics.record(d, ResultWithin)
		return
	case l.BurstTiers != "":
		s.answerTiers(d)
		return
	}
	var r rls.Result
	if d.hit >= 0 && !degraded {
		mine := results[d.hit : d.hit+d.nhits]
		b := 0
		if d.nhits > 1 {
			b = binding(mine)
			s.metrics.recordLimits(d, mine, s.opts.NearLimitRatio)
		}
		r, l = mine[b], d.limitAt(b)
		d.period = l.Period()
	}
	d.bound = l
	d.limited, d.quota = true, l.RequestsPerUnit
	a := d.answer
	a.limit.Name, a.limit.RequestsPerUnit, a.limit.Unit = l.Name, l.RequestsPerUnit, rlsv3.RateLimitResponse_RateLimit_Unit(l.Unit)
	st.CurrentLimit = &a.limit
	switch {
	case d.hit < 0: // requests_per_unit: 0, always over
		st.DurationUntilReset = a.setReset(d.period)
		s.over(d)
	case degraded:
		st.LimitRemaining = l.RequestsPerUnit
		s.metrics.record(d, ResultDegraded)
	default:
		st.LimitRemaining = r.Remaining
		st.DurationUntilReset = a.setReset(time.Duration(r.Reset) * time.Microsecond)
		d.retry = r.RetryAfter
		switch {
		case r.Over:
			s.over(d)
		default:
			s.within(d, l.RequestsPerUnit, r.Remaining)
		}
	}
}

// answerTiers fills a burst-tier descriptor's status from the limits
// engine's decision: OK with no current limit when it was not taken (the
// request was refused before it, or its hits are 0); else limit_remaining
// the hits a request could be granted now, duration_until_reset (refused)
// the time until its hits would fit, and current_limit the resource's
// hard limit per second when it has one (tiers have windows of any
// length, which Envoy's units cannot say; the headers can: the policy is
// the current tier's limit, q, with its window, w).
func (s *Service) answerTiers(d *descriptor) {
	dec, st := d.tiers, &d.answer.status
	if dec == nil {
		return
	}
	d.limited = true
	d.quota = uint32(min(dec.Tiers.TierLimit, math.MaxUint32))
	if d.quota == 0 {
		d.quota = uint32(min(dec.Limit, math.MaxUint32)) // no tier active: the most one request can have
	}
	d.period = dec.Tiers.TierWindow
	st.LimitRemaining = uint32(min(max(dec.Remaining, 0), math.MaxUint32))
	if h := dec.Tiers.HardLimit; h > 0 {
		a := d.answer
		a.limit.Name, a.limit.RequestsPerUnit, a.limit.Unit = d.limit.Name, uint32(min(h, math.MaxUint32)), rlsv3.RateLimitResponse_RateLimit_SECOND
		if a.limit.Name == "" {
			a.limit.Name = d.limit.BurstTiers
		}
		st.CurrentLimit = &a.limit
	}
	switch {
	case dec.Degraded:
		s.metrics.record(d, ResultDegraded)
	case dec.Status == limits.StatusOK:
		s.within(d, uint32(min(dec.Limit, math.MaxUint32)), st.LimitRemaining)
	default:
		if !dec.RetryNever {
			d.retry = int64((dec.RetryAfter + time.Microsecond - 1) / time.Microsecond) // (µs, rounded up)
			st.DurationUntilReset = d.answer.setReset(time.Duration(d.retry) * time.Microsecond)
		}
		s.over(d)
	}
}

// within counts a granted hit as near_limit when less than
// 1 − NearLimitRatio of limit remains, else within_limit.
func (s *Service) within(d *descriptor, limit, remaining uint32) {
	if float64(limit-min(remaining, limit)) > s.opts.NearLimitRatio*float64(limit) {
		s.metrics.record(d, ResultNear)
		return
	}
	s.metrics.record(d, ResultWithin)
}

// setReset sets a's reset to t and returns it.
func (a *answer) setReset(t time.Duration) *durationpb.Duration {
	a.reset.Seconds, a.reset.Nanos = int64(t/time.Second), int32(t%time.Second)
	return &a.reset
}

// over answers d over its limit, or OK in shadow mode.
func (s *Service) over(d *descriptor) {
	if d.shadow {
		s.metrics.record(d, ResultShadow)
		return
	}
	d.answer.status.Code = rlsv3.RateLimitResponse_OVER_LIMIT
	s.metrics.record(d, ResultOver)
}

// headers adds to r the response headers for the limited descriptors.
func (s *Service) headers(r *reply, ds []descriptor) {
	h := s.opts.Headers
	if !h.Draft && !h.XRateLimit {
		return
	}
	var pbuf, sbuf [256]byte // (on the stack: only one string of both is kept)
	policy, state := pbuf[:0], sbuf[:0]
	var retry int64 = -1 // µs
	least := -1
	for i := range ds {
		d := &ds[i]
		st := &d.answer.status
		if !d.limited {
			continue
		}
		if least < 0 || st.LimitRemaining < ds[least].answer.status.LimitRemaining {
			least = i
		}
		name := policyName(d, i)
		if len(policy) > 0 {
			policy = append(policy, ", "...)
			state = append(state, ", "...)
		}
		policy = append(append(policy, name...), ";q="...)
		policy = strconv.AppendUint(policy, uint64(d.quota), 10)
		if d.period > 0 {
			policy = strconv.AppendInt(append(policy, ";w="...), seconds(d.period), 10)
		}
		state = append(append(state, name...), ";r="...)
		state = strconv.AppendUint(state, uint64(st.LimitRemaining), 10)
		if st.DurationUntilReset != nil {
			state = strconv.AppendInt(append(state, ";t="...), seconds(st.DurationUntilReset.AsDuration()), 10)
		}
		if st.Code == rlsv3.RateLimitResponse_OVER_LIMIT {
			wait := st.DurationUntilReset.AsDuration().Microseconds()
			if d.retry > 0 {
				wait = d.retry
			}
			retry = max(retry, wait)
		}
	}
	if least < 0 {
		return
	}
	if h.Draft {
		both := string(append(policy, state...))
		r.addHeader("RateLimit-Policy", both[:len(policy)])
		r.addHeader("RateLimit", both[len(policy):])
		if retry >= 0 {
			r.addHeader("Retry-After", strconv.FormatInt(seconds(time.Duration(retry)*time.Microsecond), 10))
		}
	}
	if h.XRateLimit {
		st := &ds[least].answer.status
		names := xNames
		for i, n := range h.XRateLimitNames {
			if n != "" {
				names[i] = n
			}
		}
		r.addHeader(names[0], strconv.FormatUint(uint64(ds[least].quota), 10))
		r.addHeader(names[1], strconv.FormatUint(uint64(st.LimitRemaining), 10))
		r.addHeader(names[2], strconv.FormatInt(seconds(st.DurationUntilReset.AsDuration()), 10))
	}
}

// seconds rounds d up to whole seconds.
func seconds(d time.Duration) int64 { return int64(math.Ceil(d.Seconds())) }

// policyName names descriptor i's policy in the headers, as a
// Structured Field string: its limit's name, else its rule's keys and
// values (rls.RulePath), else "descriptor_<i>" (an override on no rule).
func policyName(d *descriptor, i int) string {
	switch {
	case d.info != nil: // a configured rule: its name resolved once
		return d.info.policy
	case d.limit.Name != "":
		return sfString(d.limit.Name)
	case d.match.Rule != nil: // a rule of a configuration just replaced
		return sfString(d.match.Rule.Key)
	}
	return sfString("descriptor_" + strconv.Itoa(i))
}

// sfString returns s as a Structured Field string (RFC 9651 §3.3.3):
// quoted, with '"' and '\' escaped and bytes outside printable ASCII
// replaced by '?'.
func sfString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c > 0x7e:
			b.WriteByte('?')
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// validate checks a request's shape; the error names the field.
func validate(req *rlsv3.RateLimitRequest) error {
	bad := func(field, format string, args ...any) error {
		return status.Errorf(codes.InvalidArgument, "%s: %s", field, fmt.Sprintf(format, args...))
	}
	switch {
	case req.Domain == "":
		return bad("domain", "empty")
	case len(req.Domain) > MaxNameBytes:
		return bad("domain", "%d bytes, at most %d", len(req.Domain), MaxNameBytes)
	case len(req.Descriptors) == 0:
		return bad("descriptors", "none (at least one)")
	case len(req.Descriptors) > MaxDescriptors:
		return bad("descriptors", "%d, at most %d", len(req.Descriptors), MaxDescriptors)
	}
	for i, d := range req.Descriptors {
		// (field names are made only for an error: this runs per request)
		f := func() string { return "descriptors[" + strconv.Itoa(i) + "]" }
		switch {
		case d == nil || len(d.Entries) == 0:
			return bad(f()+".entries", "none (at least one)")
		case len(d.Entries) > MaxEntries:
			return bad(f()+".entries", "%d, at most %d", len(d.Entries), MaxEntries)
		}
		for j, e := range d.Entries {
			ef := func() string { return f() + ".entries[" + strconv.Itoa(j) + "]" }
			switch {
			case e == nil || e.Key == "":
				return bad(ef()+".key", "empty")
			case len(e.Key) > MaxNameBytes:
				return bad(ef()+".key", "%d bytes, at most %d", len(e.Key), MaxNameBytes)
			case len(e.Value) > MaxNameBytes:
				return bad(ef()+".value", "%d bytes, at most %d", len(e.Value), MaxNameBytes)
			}
		}
		if o := d.Limit; o != nil {
			if u := rls.Unit(o.Unit); u == rls.UnitUnknown || u.Duration() == 0 {
				return bad(f()+".limit.unit", "%v is not a unit", o.Unit)
			}
			if m := o.UnitMultiplier; m != nil && m.Value > 1000000 {
				return bad(f()+".limit.unit_multiplier", "%d, at most 1000000", m.Value)
			}
		}
	}
	return nil
}

// Rules returns the rules in force that have a limit, by domain and in
// file order: O(configured rules), never O(counters).
func (s *Service) Rules() []view.RuleRow {
	cfg := s.cfg.Load()
	var rows []view.RuleRow
	for _, name := range cfg.Names() {
		d := cfg.Domain(name)
		d.Each(func(p []*rls.Rule) {
			r := p[len(p)-1]
			l := r.Limit
			if l == nil {
				return
			}
			row := view.RuleRow{Domain: d.Name, Rule: rls.RulePath(p), Name: l.Name, Replaces: l.Replaces,
				Algorithm: d.AlgorithmOf(r, s.opts.Algorithm).String(), Limit: "unlimited"}
			switch {
			case l.BurstTiers != "":
				row.Algorithm, row.Limit = limits.BurstTiers.String(), l.BurstTiers
			case !l.Unlimited:
				var all []string
				for l := range r.AllLimits() {
					all = append(all, l.String())
				}
				row.Limit = strings.Join(all, " and ")
			}
			for _, f := range []struct {
				on   bool
				name string
			}{{r.ShadowMode, "shadow_mode"}, {r.DetailedMetric, "detailed_metric"}, {r.ValueToMetric, "value_to_metric"}, {r.ShareThreshold, "share_threshold"}} {
				if f.on {
					row.Flags = append(row.Flags, f.name)
				}
			}
			rows = append(rows, row)
		})
	}
	return rows
}
