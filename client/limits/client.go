package limits

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sony/gobreaker/v2"
	"google.golang.org/protobuf/types/known/durationpb"

	sluicev1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/api/sluice/v1/sluicev1connect"
	"github.com/sluice-rl/sluice/internal/discovery"
	"github.com/sluice-rl/sluice/ratelimit"
)

// Defaults of the options.
const (
	// DefaultTimeout bounds one request to the service in the naive and
	// smart modes, top-ups and report flushes included (WithTimeout).
	DefaultTimeout = 50 * time.Millisecond
	// DefaultFallbackRate is the fallback limiter's rate per target, in
	// permits per second, with DefaultFallbackBurst seconds of stored
	// permits (WithFallbackRate): the design's example of "a naïve rate
	// limiter set to, say, 100 requests per second".
	DefaultFallbackRate  = 100
	DefaultFallbackBurst = 1
	// DefaultBreakerFailures consecutive failed requests to the service
	// open the circuit breaker; it lets one probe through every
	// DefaultBreakerProbe (WithBreaker).
	DefaultBreakerFailures = 5
	DefaultBreakerProbe    = 5 * time.Second
	// DefaultReportInterval is how often Report's batches are flushed
	// (WithReportInterval).
	DefaultReportInterval = time.Second
)

// Bounds of names and counts.
const (
	// MaxNameLen bounds resource and domain names, in bytes (the wire
	// API's bound). Names are 1 to MaxNameLen bytes of NameChars.
	MaxNameLen = 256
	// NameChars describes the bytes a name may hold.
	NameChars = "A-Z a-z 0-9 / - . : _"
	// MaxTokens bounds the tokens of one request (2⁵³, the service's
	// bound).
	MaxTokens = 1 << 53
	// MaxTargets bounds the targets (resource, domain) that get a fallback
	// limiter, a smart bucket or a report batch of their own; past it, the
	// fallback limiter of further targets is one shared limiter, further
	// smart targets are decided as in the naive mode (one request per
	// call), and reports for further targets are dropped (and counted).
	// Idle targets are forgotten (see the package doc), so the bound is on
	// targets in use at once.
	MaxTargets = 10000
)

// Errors. Rejections are *RejectedError values (errors.As).
var (
	// ErrInvalidRequest is wrapped by the error for an invalid resource,
	// domain or token count, whether the client or the service found it.
	ErrInvalidRequest = errors.New("limits: invalid request")
	// ErrUnavailable is wrapped by the error of a manual request (Allow,
	// Reserve) that the service did not answer (or answered with an RPC
	// error, or without a status). The naive and smart modes never return it:
	// their fallback limiter decides instead.
	ErrUnavailable = errors.New("limits: service unavailable")
	// ErrClosed is returned by every method of a closed Client.
	ErrClosed = errors.New("limits: client closed")
)

// Status is the service's answer status: sluicev1.AllowResponse_Status
// (OK, REJECTED_TIMEOUT, REJECTED_NO_BUCKET, …).
type Status = sluicev1.AllowResponse_Status

// RejectedError is a rejection: by the service (its status), by the smart
// mode's local bucket (the service's last rejection of a top-up), or by the
// fallback limiter (Fallback set, Status REJECTED_TIMEOUT). No tokens were
// spent. It is also a gRPC status (codes.ResourceExhausted, with a RetryInfo
// detail unless RetryNever), which the gRPC interceptors return.
type RejectedError struct {
	Resource, Domain string
	// Status is the reason: REJECTED_TIMEOUT (not enough tokens within the
	// maximum wait), REJECTED_NO_BUCKET (manual mode only: the other modes
	// fall back), REJECTED_TOO_MANY_BUCKETS or
	// REJECTED_TOO_MANY_TOKENS_REQUESTED.
	Status Status
	// RetryAfter is how long from the rejection until the same request
	// could succeed if nobody else took tokens meanwhile; unset when
	// RetryNever.
	RetryAfter time.Duration
	// RetryNever reports a request that no wait can make succeed as asked
	// (the service sent no retry_after).
	RetryNever bool
	// Fallback reports a rejection by the fallback limiter (the service
	// did not answer).
	Fallback bool
	// Detail says more, if anything: the fallback limiter's reason.
	Detail string
	// Tier is the burst-tier context of the service's answer (zero unless
	// the resource has burst tiers): HardLimited or GlobalLimited say
	// which limit held the request back.
	Tier Tier
	// Waited and Attempts are Request's: how long it took in all, retries
	// included, and how many requests it sent (0 for the other calls).
	Waited   time.Duration
	Attempts int
}

// Error returns a one-line description.
func (e *RejectedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "limits: %s/%s rejected: %s", e.Resource, e.Domain, e.Status)
	if e.Fallback {
		b.WriteString(" by the fallback limiter")
	}
	if e.RetryNever {
		b.WriteString("; waiting cannot make it succeed")
	} else {
		fmt.Fprintf(&b, "; retry after %v", e.RetryAfter)
	}
	if e.Detail != "" {
		b.WriteString(": " + e.Detail)
	}
	return b.String()
}

// Source says who decided a grant.
type Source uint8

// The sources.
const (
	// FromService: the service answered this request.
	FromService Source = iota
	// FromLocalBucket: the smart mode's local bucket, from tokens the
	// service granted earlier.
	FromLocalBucket
	// FromFallback: the fallback limiter, because the service did not
	// answer in time, failed, the breaker was open, or no bucket is
	// configured for the target (scenario 3).
	FromFallback
	// FromDegraded: granted by the client alone, failing open (Request,
	// ReserveCopies, ReserveMulti): the service could not be reached or
	// answered a server error, and the client granted the minimum asked.
	// Source: charon-paper.md, section 4.3 (degraded mode).
	FromDegraded
	// FromKillSwitch: the service rejected the request, and the kill
	// switch (WithKillSwitch, SetKillSwitch) turned the rejection into a
	// grant of the minimum asked. Source: charon-paper.md, section 4.3.
	FromKillSwitch
)

// String returns "service", "local bucket", "fallback", "degraded" or
// "kill switch".
func (s Source) String() string {
	switch s {
	case FromService:
		return "service"
	case FromLocalBucket:
		return "local bucket"
	case FromFallback:
		return "fallback"
	case FromDegraded:
		return "degraded"
	case FromKillSwitch:
		return "kill switch"
	}
	return fmt.Sprintf("Source(%d)", uint8(s))
}

// Grant is tokens granted.
type Grant struct {
	// Granted is the number of tokens granted (all of those asked).
	Granted int64
	// Wait is how long the caller must wait, from the answer, before using
	// the tokens (Reserve); Allow and Acquire have waited it when they
	// return without error.
	Wait time.Duration
	// Remaining is the tokens left after the grant: in the service's
	// bucket (fractional) for FromService, in the local bucket for
	// FromLocalBucket, 0 for FromFallback.
	Remaining float64
	// Limit is the service's bucket size (FromService; else 0).
	Limit int64
	// Bucket is which configuration answered ("named", "prefix a/b",
	// "dynamic", "default", "global default"; FromService only).
	Bucket string
	// Source is who decided.
	Source Source
	// Tier is the burst-tier context of the service's answer on a
	// rate-limited resource with burst tiers (zero otherwise, and for
	// grants the service did not make).
	Tier Tier
	// Unlimited reports a grant the service made without asking: the
	// resource's namespace ignores configured limits, or the resource is
	// unconfigured in a namespace that allows that (still recorded).
	// Source: charon-paper.md, section 4.3.
	Unlimited bool
	// Waited is how long Request took in all, its retries' sleeps
	// included (the paper's res.waited); 0 for the other calls.
	Waited time.Duration
	// Attempts is how many requests Request sent (0 for the other calls,
	// and for a degraded grant made without an answer it is the requests
	// tried).
	Attempts int
	// StoreDegraded reports a grant the service made while its store
	// (Redis) could not be reached, on a resource configured
	// on_store_error: open (the answer's degraded flag): the shared limit
	// was not checked, and the service recorded nothing (Remaining is 0).
	// For FromLocalBucket, some of the tokens taken came from a top-up so
	// granted. Unlike Degraded, the service did answer (Source FromService
	// or FromLocalBucket). Counted in
	// sluice_quota_client_degraded_total{reason="store"}.
	StoreDegraded bool
}

// Degraded reports a grant made by one of the paper's degraded modes:
// failing open (FromDegraded) or the kill switch (FromKillSwitch). It is
// the client's notion; a grant the service made while its own store was
// down is StoreDegraded instead.
func (g Grant) Degraded() bool { return g.Source == FromDegraded || g.Source == FromKillSwitch }

// Option configures a Client.
type Option func(*Client)

// WithTLS makes the client speak gRPC over TLS with cfg (its RootCAs
// verify the service; its Certificates, if any, are presented for mTLS).
// Addresses without a scheme get https://. Ignored with WithHTTPClient.
func WithTLS(cfg *tls.Config) Option { return func(c *Client) { c.tls = cfg } }

// WithHTTPClient sets the HTTP client of the requests to the service. It
// must speak HTTP/2 (gRPC); the default speaks h2c, or HTTP/2 over TLS with
// WithTLS (discovery.Transport).
func WithHTTPClient(h *http.Client) Option { return func(c *Client) { c.http = h } }

// WithLogger sets the logger (default slog.Default()). The client logs the
// breaker's changes of state and the first fallback of each target, not
// every decision.
func WithLogger(l *slog.Logger) Option { return func(c *Client) { c.log = l } }

// WithRegisterer registers the client's Prometheus metrics with reg (see
// the package doc, "Metrics"). New fails if reg holds the same metrics
// already (use one registry per client, or prometheus.WrapRegistererWith
// a distinguishing label).
func WithRegisterer(reg prometheus.Registerer) Option { return func(c *Client) { c.reg = reg } }

// WithClock sets the clock (default time.Now) by which waits are checked
// against deadlines, fallback limiters decide and smart tokens expire.
// Waiting itself uses timers, and the circuit breaker reads time.Now, so
// tests drive both with testing/synctest.
func WithClock(now func() time.Time) Option { return func(c *Client) { c.now = now } }

// WithTimeout sets how long the naive and smart modes wait for the
// service's answer before the fallback limiter decides (default
// DefaultTimeout, 50 ms); it bounds top-ups and report flushes too. Manual
// requests (Allow, Reserve) are bounded by their context only. d ≤ 0 keeps
// the default.
//
// Source: quotaservice-design.md, "Naïve clients", "Configuration"
// ("Timeout when communicating with the quota service").
func WithTimeout(d time.Duration) Option {
	return func(c *Client) {
		if d > 0 {
			c.timeout = d
		}
	}
}

// WithFallbackRate sets every target's fallback limiter: rate permits per
// second with burstSeconds of stored permits (a ratelimit.NewLimiter;
// default DefaultFallbackRate, DefaultFallbackBurst). Like Guava's, a new
// limiter has no stored permits: it spaces its target's first calls at the
// rate, and stores permits only while they go unused. A rate of 0 rejects
// everything while the service is away (fail closed); use WithFallback for
// other choices per target.
//
// Source: quotaservice-design.md, "Naïve clients", "Configuration"
// ("Default rate limit per service name -> service name pair").
func WithFallbackRate(rate, burstSeconds float64) Option {
	return func(c *Client) {
		c.fallbackFn = func(string, string) *ratelimit.Limiter {
			return ratelimit.NewLimiter(rate, burstSeconds, ratelimit.WithClock(c.now))
		}
	}
}

// WithFallback sets the function that makes the fallback limiter of a
// target (resource, domain) the first time the target needs one; it runs
// once per target (again after the target was forgotten as idle), under
// no lock of the client's that a decision waits on, and must be safe for
// concurrent use. A nil limiter admits every call of the target while the
// service is away (fail open). Give the limiters the client's clock
// (ratelimit.WithClock) if you set one.
func WithFallback(f func(resource, domain string) *ratelimit.Limiter) Option {
	return func(c *Client) { c.fallbackFn = f }
}

// WithBreaker sets the circuit breaker: after failures consecutive failed
// requests (no answer within the timeout, an RPC error other than
// InvalidArgument — a server whose store failed answers Unavailable — or
// an answer without a status) the client stops calling the service, and the
// fallback limiter decides; every probe interval it lets one request
// through, and closes again if it is answered (default
// DefaultBreakerFailures, DefaultBreakerProbe). Values ≤ 0 keep the
// default. Rejections are answers: they never open the breaker.
//
// Source: quotaservice-design.md, "Failure scenarios" ("After a threshold
// of failed calls to the quota service, clients will stop calling into the
// quota service and just use client-side rate-limiters, periodically
// checking if the quota service has resumed service").
func WithBreaker(failures int, probe time.Duration) Option {
	return func(c *Client) {
		if failures > 0 {
			c.breakerFailures = uint32(min(failures, 1<<31))
		}
		if probe > 0 {
			c.breakerProbe = probe
		}
	}
}

// WithRejectWait makes a rejected call of the naive and smart modes
// (Acquire, the interceptors, the RoundTripper) wait and ask again, for at
// most d in all and never past its context's deadline, instead of
// failing at once with a *RejectedError (the default, d = 0). A rejection
// whose RetryAfter would pass that bound, or that is RetryNever, still
// fails at once.
func WithRejectWait(d time.Duration) Option {
	return func(c *Client) { c.rejectWait = max(d, 0) }
}

// WithReportInterval sets how often Report's batches are sent (default
// DefaultReportInterval); d ≤ 0 keeps the default.
func WithReportInterval(d time.Duration) Option {
	return func(c *Client) {
		if d > 0 {
			c.reportInterval = d
		}
	}
}

// Client is a client of Sluice's limits service (sluice.v1.Limits) over
// gRPC. It is safe for concurrent use. Close it to stop its goroutine and
// flush its reports.
type Client struct {
	addr  string
	http  *http.Client
	own   bool // c.http was made here: Close closes its connections
	tls   *tls.Config
	log   *slog.Logger
	reg   prometheus.Registerer
	now   func() time.Time
	stub  sluicev1connect.LimitsClient
	m     *metrics
	brk   *gobreaker.CircuitBreaker[*sluicev1.AllowResponse]
	smart *Smart // nil: the naive mode

	timeout         time.Duration
	fallbackFn      func(resource, domain string) *ratelimit.Limiter
	breakerFailures uint32
	breakerProbe    time.Duration
	rejectWait      time.Duration
	reportInterval  time.Duration

	ch charon // Charon's calls: their options, degraded modes and session

	fallbacks fallbacks
	locals    locals
	reports   reports

	life     sync.Mutex // orders background's wg.Add before Close's wg.Wait
	closed   atomic.Bool
	ctx      context.Context // ends at Close: top-ups and flushes use it
	cancel   context.CancelFunc
	wg       sync.WaitGroup // top-ups in flight
	loopDone chan struct{}
}

// New returns a client of the limits service at addr (host:port, or a URL
// with a scheme). It starts one goroutine (report flushes and the forgetting
// of idle targets) and does not contact the service. It returns an error
// for an empty address, an invalid WithSmart, or metrics that cannot be
// registered (WithRegisterer).
func New(addr string, opts ...Option) (*Client, error) {
	addr = strings.TrimSpace(addr)
	if addr == "" {
		return nil, errors.New("limits: no service address")
	}
	c := &Client{
		addr:            addr,
		timeout:         DefaultTimeout,
		breakerFailures: DefaultBreakerFailures,
		breakerProbe:    DefaultBreakerProbe,
		reportInterval:  DefaultReportInterval,
		ch:              charon{callTimeout: DefaultCallTimeout, backoffUnit: DefaultBackoffUnit, sessionTTL: DefaultSessionTTL},
		loopDone:        make(chan struct{}),
	}
	c.ch.c = c
	for _, o := range opts {
		o(c)
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	if c.now == nil {
		c.now = time.Now
	}
	if c.fallbackFn == nil {
		WithFallbackRate(DefaultFallbackRate, DefaultFallbackBurst)(c)
	}
	if c.smart != nil {
		if err := c.smart.normalize(); err != nil {
			return nil, err
		}
	}
	if c.http == nil {
		c.http = &http.Client{Transport: discovery.Transport(c.tls, false)}
		c.own = true
	}
	url := addr
	if !strings.Contains(addr, "://") {
		url = discovery.Scheme(c.tls) + "://" + addr
	}
	c.stub = sluicev1connect.NewLimitsClient(c.http, url, connect.WithGRPC())
	c.m = newMetrics()
	c.brk = gobreaker.NewCircuitBreaker[*sluicev1.AllowResponse](gobreaker.Settings{
		Name:        addr,
		MaxRequests: 1,
		Timeout:     c.breakerProbe,
		ReadyToTrip: func(n gobreaker.Counts) bool { return n.ConsecutiveFailures >= c.breakerFailures },
		IsSuccessful: func(err error) bool {
			return err == nil || errors.Is(err, ErrInvalidRequest)
		},
		IsExcluded:    func(err error) bool { return errors.Is(err, errCallerDone) },
		OnStateChange: c.breakerChanged,
	})
	c.m.breakerState = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_quota_client_breaker_state",
		Help: "State of the circuit breaker in front of the limits service: 0 closed, 1 half-open (probing), 2 open (the fallback limiters decide).",
	}, func() float64 { return float64(c.brk.State()) })
	if c.reg != nil {
		if err := c.m.register(c.reg); err != nil {
			return nil, err
		}
	}
	c.fallbacks.init()
	c.locals.init()
	c.reports.init()
	c.ctx, c.cancel = context.WithCancel(context.Background())
	go c.loop()
	return c, nil
}

// breakerChanged logs and counts the breaker's changes of state.
func (c *Client) breakerChanged(_ string, from, to gobreaker.State) {
	switch to {
	case gobreaker.StateOpen:
		c.m.breakerTrips.Inc()
		c.log.Warn("limits: service failing; the fallback limiters decide until a probe succeeds",
			"addr", c.addr, "from", from.String(), "probe", c.breakerProbe)
	case gobreaker.StateClosed:
		c.log.Info("limits: service answering again", "addr", c.addr)
	}
}

// loop flushes reports every report interval and forgets idle targets
// (at least every targetIdle) until Close.
func (c *Client) loop() {
	defer close(c.loopDone)
	flushed := time.Now() // before the ticker: its first tick is ≥ an interval after
	t := time.NewTicker(min(c.reportInterval, targetIdle))
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case tick := <-t.C:
			if tick.Sub(flushed) >= c.reportInterval {
				c.flush(c.ctx)
				flushed = tick
			}
			now := c.now()
			c.fallbacks.sweep(now)
			c.sweepLocals(now)
		}
	}
}

// background runs f in a goroutine that Close waits for, unless the
// client is closed (false).
func (c *Client) background(f func()) bool {
	c.life.Lock()
	defer c.life.Unlock()
	if c.closed.Load() {
		return false
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		f()
	}()
	return true
}

// Close stops the client: it closes its session, if one is open
// (CloseSession, best effort within 2 s: the service releases every copy
// the session holds; its Holds' Err becomes ErrClosed), stops its
// goroutines (report flushes, the session's keep-alive) and the top-ups
// in flight, sends the reports still batched (best effort, within 2 s;
// tokens it could not send are counted as dropped), and closes the idle
// connections of an HTTP client it made. Calls after Close return
// ErrClosed; closing twice does nothing. It returns nil.
func (c *Client) Close() error {
	c.life.Lock()
	already := c.closed.Swap(true)
	c.life.Unlock()
	if already {
		return nil
	}
	c.ch.closeSession()
	c.cancel()
	<-c.loopDone
	c.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c.flushFinal(ctx)
	if c.own {
		c.http.CloseIdleConnections()
	}
	return nil
}

// Allow asks the service once for n tokens of (resource, domain) and
// waits the granted wait (the manual mode: no timeout but ctx's, no
// breaker, no fallback).
//
// When ctx has a deadline, the request's max_wait is the time left, so
// the service rejects (REJECTED_TIMEOUT, spending nothing) rather than
// grant a wait the caller cannot honour. If the answer's wait would still
// end after ctx's deadline (the request took its time), Allow returns at
// once an error wrapping context.DeadlineExceeded, and if ctx ends while
// waiting, an error wrapping ctx.Err(): in both cases the tokens are spent
// (the service has granted them; there is no giving back), and the Grant
// is returned with the error.
//
// Errors: *RejectedError for a rejection (status and retry-after), an
// error wrapping ErrInvalidRequest for an empty or over-long name, a byte
// outside NameChars, or n outside [1, MaxTokens], one wrapping
// ErrUnavailable when the service did not answer, one wrapping ctx.Err()
// when ctx ended first, ErrClosed. Safe for concurrent use.
//
// Source: quotaservice-design.md, "Manual clients", scenarios 1, 2 and 4.
func (c *Client) Allow(ctx context.Context, resource, domain string, n int64) (Grant, error) {
	g, err := c.manual(ctx, resource, domain, n, true)
	if err != nil {
		return g, err
	}
	if err := c.sleep(ctx, g.Wait); err != nil {
		return g, err
	}
	return g, nil
}

// Reserve asks the service once for n tokens of (resource, domain) and
// returns the grant without waiting: the tokens are spent, and usable
// after Grant.Wait. The request carries no max_wait (the bucket's wait
// timeout applies). Errors as Allow's (never a deadline error for the
// wait). Safe for concurrent use.
func (c *Client) Reserve(ctx context.Context, resource, domain string, n int64) (Grant, error) {
	return c.manual(ctx, resource, domain, n, false)
}

// manual is one manual request; withDeadline sets max_wait from ctx's
// deadline.
func (c *Client) manual(ctx context.Context, resource, domain string, n int64, withDeadline bool) (Grant, error) {
	if c.closed.Load() {
		return Grant{}, ErrClosed
	}
	if err := check(resource, domain, n); err != nil {
		c.m.decision(modeManual, outcomeError)
		return Grant{}, err
	}
	req := &sluicev1.AllowRequest{Resource: resource, Domain: domain, Tokens: n}
	if withDeadline {
		if dl, ok := ctx.Deadline(); ok {
			left := dl.Sub(c.now())
			if left <= 0 {
				c.m.decision(modeManual, outcomeError)
				return Grant{}, fmt.Errorf("limits: %w", context.DeadlineExceeded)
			}
			req.MaxWait = durationpb.New(left)
		}
	}
	start := time.Now()
	resp, err := c.stub.Allow(ctx, connect.NewRequest(req))
	if err != nil {
		res := resultOf(ctx, ctx, err)
		c.m.rpc(callManual, start, res)
		c.m.decision(modeManual, outcomeError)
		switch res {
		case resultCanceled:
			return Grant{}, fmt.Errorf("limits: %s/%s: %w", resource, domain, ctx.Err())
		case resultInvalid:
			return Grant{}, fmt.Errorf("%w: %s/%s: %w", ErrInvalidRequest, resource, domain, err)
		}
		return Grant{}, fmt.Errorf("%w: %s: %w", ErrUnavailable, c.addr, err)
	}
	c.m.rpc(callManual, start, resultOfStatus(resp.Msg.GetStatus()))
	g, err := answer(resource, domain, resp.Msg)
	switch {
	case err == nil:
		c.m.storeDegraded(callManual, g.StoreDegraded)
		c.m.decision(modeManual, outcomeAllowed)
	case isRejected(err):
		c.m.decision(modeManual, outcomeRejected)
	default:
		c.m.decision(modeManual, outcomeError)
	}
	return g, err
}

// answer turns the service's answer into a grant or an error.
func answer(resource, domain string, r *sluicev1.AllowResponse) (Grant, error) {
	switch r.GetStatus() {
	case sluicev1.AllowResponse_OK:
		return Grant{
			Granted: r.GetGranted(), Wait: max(r.GetWait().AsDuration(), 0),
			Remaining: r.GetRemaining(), Limit: r.GetLimit(), Bucket: r.GetBucket(), Source: FromService,
			Tier: tierOf(r), Unlimited: r.GetUnlimited(), StoreDegraded: r.GetDegraded(),
		}, nil
	case sluicev1.AllowResponse_STATUS_UNSPECIFIED:
		return Grant{}, fmt.Errorf("%w: %s/%s: an answer without a status", ErrUnavailable, resource, domain)
	}
	// Every other status is a rejection, including those of a newer
	// service that this client does not know.
	e := &RejectedError{Resource: resource, Domain: domain, Status: r.GetStatus(), Tier: tierOf(r)}
	if r.GetRetryAfter() == nil {
		e.RetryNever = true
	} else {
		e.RetryAfter = max(r.GetRetryAfter().AsDuration(), 0)
	}
	return Grant{}, e
}

func isRejected(err error) bool {
	var r *RejectedError
	return errors.As(err, &r)
}

// sleep waits d, unless d would pass ctx's deadline (an error wrapping
// context.DeadlineExceeded at once) or ctx ends first (an error wrapping
// ctx.Err()).
func (c *Client) sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	if dl, ok := ctx.Deadline(); ok && dl.Sub(c.now()) < d {
		return fmt.Errorf("limits: wait of %v would pass the deadline: %w", d, context.DeadlineExceeded)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("limits: %w", ctx.Err())
	}
}

// nameOK reports whether b may appear in a name.
func nameOK(b byte) bool {
	return 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' ||
		b == '/' || b == '-' || b == '.' || b == ':' || b == '_'
}

// checkName validates one name.
func checkName(field, s string) error {
	if s == "" {
		return fmt.Errorf("%w: %s is empty", ErrInvalidRequest, field)
	}
	if len(s) > MaxNameLen {
		return fmt.Errorf("%w: %s is longer than %d bytes", ErrInvalidRequest, field, MaxNameLen)
	}
	for i := 0; i < len(s); i++ {
		if !nameOK(s[i]) {
			return fmt.Errorf("%w: %s %q has %q at byte %d; allowed: %s", ErrInvalidRequest, field, s, s[i], i, NameChars)
		}
	}
	return nil
}

// check validates a request.
func check(resource, domain string, n int64) error {
	_, err := checkLeast("tokens", resource, domain, n, 0)
	return err
}

// SafeName returns s as a valid name: every byte outside NameChars becomes
// '_', it is cut to MaxNameLen bytes, and "" becomes "_". Distinct inputs
// may map to one name.
func SafeName(s string) string {
	if s == "" {
		return "_"
	}
	if len(s) > MaxNameLen {
		s = s[:MaxNameLen]
	}
	for i := 0; i < len(s); i++ {
		if !nameOK(s[i]) {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if !nameOK(b[j]) {
					b[j] = '_'
				}
			}
			return string(b)
		}
	}
	return s
}

// key is a target.
type key struct{ resource, domain string }
