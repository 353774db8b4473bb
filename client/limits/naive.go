package limits

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/sony/gobreaker/v2"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	sluicev1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/ratelimit"
)

// targetIdle is how long a target goes unused before the client forgets
// its fallback limiter (and, once its tokens expired, its smart bucket).
const targetIdle = time.Minute

// reason is why the fallback limiter decides.
type reason uint8

const (
	reasonNone        reason = iota
	reasonTimeout            // no answer within the timeout
	reasonUnavailable        // a transport error
	reasonServerError        // an answer without a status
	reasonBreakerOpen        // the breaker did not let the request through
	reasonNoBucket           // REJECTED_NO_BUCKET: scenario 3
)

var reasonNames = [...]string{
	reasonNone:        "none",
	reasonTimeout:     "timeout",
	reasonUnavailable: "unavailable",
	reasonServerError: "server_error",
	reasonBreakerOpen: "breaker_open",
	reasonNoBucket:    "no_bucket",
}

func (r reason) String() string { return reasonNames[r] }

// errCallerDone marks a request abandoned because the caller's context
// ended: the breaker does not count it.
var errCallerDone = errors.New("limits: the caller's context ended")

// ask sends req through the breaker within the timeout (and ctx). It
// returns the service's answer; or why there is none (the fallback
// decides); or an error that ends the call: ctx's (wrapped), or one
// wrapping ErrInvalidRequest.
func (c *Client) ask(ctx context.Context, call string, req *sluicev1.AllowRequest) (*sluicev1.AllowResponse, reason, error) {
	why := reasonNone
	resp, err := c.brk.Execute(func() (*sluicev1.AllowResponse, error) {
		rctx, cancel := context.WithTimeout(ctx, c.timeout)
		defer cancel()
		start := time.Now()
		r, err := c.stub.Allow(rctx, connect.NewRequest(req))
		if err != nil {
			res := resultOf(ctx, rctx, err)
			c.m.rpc(call, start, res)
			switch res {
			case resultCanceled:
				return nil, fmt.Errorf("limits: %s/%s: %w: %w", req.Resource, req.Domain, errCallerDone, ctx.Err())
			case resultInvalid:
				return nil, fmt.Errorf("%w: %s/%s: %w", ErrInvalidRequest, req.Resource, req.Domain, err)
			case resultTimeout:
				why = reasonTimeout
			default:
				why = reasonUnavailable
			}
			return nil, err
		}
		st := r.Msg.GetStatus()
		c.m.rpc(call, start, resultOfStatus(st))
		switch st {
		case sluicev1.AllowResponse_STATUS_UNSPECIFIED:
			why = reasonServerError
			return nil, errors.New("limits: an answer without a status")
		}
		c.m.storeDegraded(call, st == sluicev1.AllowResponse_OK && r.Msg.GetDegraded())
		return r.Msg, nil
	})
	switch {
	case errors.Is(err, gobreaker.ErrOpenState), errors.Is(err, gobreaker.ErrTooManyRequests):
		c.m.rpcs.WithLabelValues(call, string(resultBreakerOpen)).Inc()
		return nil, reasonBreakerOpen, nil
	case why != reasonNone:
		return nil, why, nil
	case err != nil:
		return nil, reasonNone, err
	}
	return resp, reasonNone, nil
}

// resultOf classifies a failed RPC: the caller's ctx ended, the service
// found the request invalid, the timeout (rctx) passed, or anything else.
func resultOf(ctx, rctx context.Context, err error) result {
	switch {
	case ctx.Err() != nil:
		return resultCanceled
	case connect.CodeOf(err) == connect.CodeInvalidArgument:
		return resultInvalid
	case rctx.Err() != nil || connect.CodeOf(err) == connect.CodeDeadlineExceeded:
		return resultTimeout
	}
	return resultUnavailable
}

// Acquire decides a call for n tokens of (resource, domain) in the
// client's automatic mode — naive by default, smart with WithSmart — and
// waits the wait of the grant. The gRPC interceptors and the RoundTripper
// call it before each call; call it yourself to guard anything else (a
// database query, say).
//
// Naive: one request to the service, within the timeout (WithTimeout)
// and through the circuit breaker (WithBreaker). Smart: a token of the
// local bucket, topped up in the background (see the package doc). In
// both, when the service does not answer in time, fails, the breaker is
// open, or it has no bucket for the target (REJECTED_NO_BUCKET, scenario
// 3), the target's fallback limiter decides (WithFallbackRate,
// WithFallback): Grant.Source is FromFallback, and a refusal is a
// *RejectedError with Fallback set.
//
// A rejection is a *RejectedError at once, or, with WithRejectWait, after
// waiting and asking again within that bound. As with Allow, the request
// carries ctx's deadline as its max_wait; a wait that would still pass the
// deadline fails at once with an error wrapping context.DeadlineExceeded,
// and the tokens are spent (not for the fallback limiter, which takes
// them back). Other errors: ErrInvalidRequest (wrapped), ctx's error
// (wrapped), ErrClosed; never ErrUnavailable. Safe for concurrent use.
//
// Source: quotaservice-design.md, "Naïve clients", "Smart clients",
// "Failure scenarios", scenarios 1–5.
func (c *Client) Acquire(ctx context.Context, resource, domain string, n int64) (Grant, error) {
	if c.closed.Load() {
		return Grant{}, ErrClosed
	}
	m := modeNaive
	if c.smart != nil {
		m = modeSmart
	}
	if err := check(resource, domain, n); err != nil {
		c.m.decision(m, outcomeError)
		return Grant{}, err
	}
	k := key{resource, domain}
	var until time.Time
	if c.rejectWait > 0 {
		until = c.now().Add(c.rejectWait)
	}
	var g Grant
	var err error
	if c.smart != nil {
		g, err = c.acquireSmart(ctx, k, n, until)
	} else {
		g, err = c.acquireNaive(ctx, k, n, until)
	}
	c.m.record(m, g, err)
	return g, err
}

// acquireNaive is Acquire's naive mode: until is the bound of
// WithRejectWait (zero: none).
func (c *Client) acquireNaive(ctx context.Context, k key, n int64, until time.Time) (Grant, error) {
	for {
		req := &sluicev1.AllowRequest{Resource: k.resource, Domain: k.domain, Tokens: n}
		if dl, ok := ctx.Deadline(); ok {
			left := dl.Sub(c.now())
			if left <= 0 {
				return Grant{}, fmt.Errorf("limits: %s/%s: %w", k.resource, k.domain, context.DeadlineExceeded)
			}
			req.MaxWait = durationpb.New(left)
		}
		resp, why, err := c.ask(ctx, callDecide, req)
		if err != nil {
			return Grant{}, err
		}
		if why == reasonNone && resp.GetStatus() == sluicev1.AllowResponse_REJECTED_NO_BUCKET {
			why = reasonNoBucket
		}
		if why != reasonNone {
			return c.fallback(ctx, k, n, why, until)
		}
		g, err := answer(k.resource, k.domain, resp)
		if err != nil {
			var rej *RejectedError
			if errors.As(err, &rej) {
				again, werr := c.waitRejected(ctx, until, rej)
				if werr != nil {
					return Grant{}, werr
				}
				if again {
					continue
				}
			}
			return Grant{}, err
		}
		if err := c.sleep(ctx, g.Wait); err != nil {
			return g, err
		}
		return g, nil
	}
}

// waitRejected sleeps before a rejected call asks again, when rej may be
// waited out within WithRejectWait's bound (until) and ctx's deadline
// (true); an error when ctx ends first.
func (c *Client) waitRejected(ctx context.Context, until time.Time, rej *RejectedError) (bool, error) {
	if rej.RetryNever || !c.mayWait(ctx, until, rej.RetryAfter) {
		return false, nil
	}
	if err := c.sleep(ctx, max(rej.RetryAfter, time.Millisecond)); err != nil {
		return false, err
	}
	return true, nil
}

// mayWait reports whether a rejected call may wait d and try again: within
// WithRejectWait's bound (until) and ctx's deadline.
func (c *Client) mayWait(ctx context.Context, until time.Time, d time.Duration) bool {
	if until.IsZero() {
		return false
	}
	end := c.now().Add(d)
	if end.After(until) {
		return false
	}
	dl, ok := ctx.Deadline()
	return !ok || end.Before(dl)
}

// fallback lets the target's fallback limiter decide, for why.
func (c *Client) fallback(ctx context.Context, k key, n int64, why reason, until time.Time) (Grant, error) {
	c.m.fallbacks.WithLabelValues(why.String()).Inc()
	now := c.now()
	l := c.fallbacks.get(c, k, why, now)
	if l == nil {
		return Grant{Granted: n, Source: FromFallback}, nil
	}
	r := l.ReserveN(now, int(n))
	if !r.OK() {
		return Grant{}, &RejectedError{Resource: k.resource, Domain: k.domain, Status: sluicev1.AllowResponse_REJECTED_TIMEOUT,
			RetryNever: true, Fallback: true, Detail: "the fallback limiter's rate is 0; fallback reason: " + why.String()}
	}
	d := r.DelayFrom(now)
	if d > 0 && !c.mayWait(ctx, until, d) {
		r.CancelAt(now)
		return Grant{}, &RejectedError{Resource: k.resource, Domain: k.domain, Status: sluicev1.AllowResponse_REJECTED_TIMEOUT,
			RetryAfter: d, Fallback: true, Detail: "fallback reason: " + why.String()}
	}
	if err := c.sleep(ctx, d); err != nil {
		r.Cancel()
		return Grant{}, err
	}
	return Grant{Granted: n, Wait: d, Source: FromFallback}, nil
}

// fallbacks holds the fallback limiters, per target.
type fallbacks struct {
	mu     sync.Mutex
	m      map[key]*fallbackEntry
	shared *fallbackEntry // the targets past MaxTargets
}

type fallbackEntry struct {
	l    *ratelimit.Limiter
	used atomic.Int64 // Unix ns of the last use
}

func (f *fallbacks) init() { f.m = map[key]*fallbackEntry{} }

// get returns the target's fallback limiter (nil: admit all), making it
// with c.fallbackFn on first use; it logs the first fallback of a target.
func (f *fallbacks) get(c *Client, k key, why reason, now time.Time) *ratelimit.Limiter {
	f.mu.Lock()
	e := f.m[k]
	if e == nil && len(f.m) >= MaxTargets && f.shared != nil {
		e = f.shared
	}
	f.mu.Unlock()
	if e == nil {
		made := &fallbackEntry{l: c.fallbackFn(k.resource, k.domain)}
		f.mu.Lock()
		switch e = f.m[k]; {
		case e != nil:
		case len(f.m) < MaxTargets:
			e = made
			f.m[k] = e
		case f.shared == nil:
			f.shared = made
			e = made
		default:
			e = f.shared
		}
		f.mu.Unlock()
		if e == made {
			lv := c.log.Debug
			if why == reasonNoBucket {
				lv = c.log.Warn // scenario 3: log that client-side defaults apply
			}
			lv("limits: the fallback limiter decides for a target", "resource", k.resource, "domain", k.domain, "reason", why.String())
		}
	}
	e.used.Store(now.UnixNano())
	return e.l
}

// sweep forgets the fallback limiters unused for targetIdle.
func (f *fallbacks) sweep(now time.Time) {
	cut := now.Add(-targetIdle).UnixNano()
	f.mu.Lock()
	defer f.mu.Unlock()
	for k, e := range f.m {
		if e.used.Load() < cut {
			delete(f.m, k)
		}
	}
	if f.shared != nil && f.shared.used.Load() < cut {
		f.shared = nil
	}
}

// GRPCStatus returns the rejection as a gRPC status: codes.ResourceExhausted
// with an ErrorInfo detail (reason: the status's name, domain
// "sluice.v1.Limits", metadata resource and domain) and, unless RetryNever,
// a RetryInfo detail with RetryAfter.
func (e *RejectedError) GRPCStatus() *status.Status {
	st := status.New(codes.ResourceExhausted, e.Error())
	details := []protoadapt.MessageV1{&errdetails.ErrorInfo{
		Reason: e.Status.String(), Domain: "sluice.v1.Limits",
		Metadata: map[string]string{"resource": e.Resource, "domain": e.Domain},
	}}
	if !e.RetryNever {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(e.RetryAfter)})
	}
	if withDetails, err := st.WithDetails(details...); err == nil {
		st = withDetails
	}
	return st
}

// statusError is an error of the interceptors with its gRPC status; it
// wraps the client's error.
type statusError struct {
	st  *status.Status
	err error
}

func (e *statusError) Error() string              { return e.st.Message() }
func (e *statusError) Unwrap() error              { return e.err }
func (e *statusError) GRPCStatus() *status.Status { return e.st }

// grpcError is the interceptors' error for a refused call: the
// *RejectedError itself (codes.ResourceExhausted), or an error wrapping
// err with codes.Canceled or DeadlineExceeded (ctx ended, or the wait
// would pass its deadline), InvalidArgument (ErrInvalidRequest), or
// Unavailable (ErrClosed).
func grpcError(ctx context.Context, err error) error {
	var rej *RejectedError
	if errors.As(err, &rej) {
		return rej
	}
	var st *status.Status
	switch {
	case ctx.Err() != nil:
		st = status.FromContextError(ctx.Err())
	case errors.Is(err, context.DeadlineExceeded):
		st = status.New(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, ErrInvalidRequest):
		st = status.New(codes.InvalidArgument, err.Error())
	default:
		st = status.New(codes.Unavailable, err.Error())
	}
	return &statusError{st: st, err: err}
}

// Target is what a call asks for: Tokens (0 means 1) of (Resource,
// Domain). A Target with an empty Resource is not limited.
type Target struct {
	Resource, Domain string
	Tokens           int64
}

// MethodTarget returns the target function that charges each gRPC call
// one token of resource, in the domain named by its method without the
// leading '/' ("pkg.Service/Method", through SafeName). With the
// service's '/'-prefix lookup, a configuration for the domain
// "pkg.Service" answers for each of the service's methods (a bucket each),
// and one for "pkg.Service/Method" for that method alone.
//
// Source: quotaservice-design.md, "Naming and wildcards", example 1.
func MethodTarget(resource string) func(ctx context.Context, method string) Target {
	return func(_ context.Context, method string) Target {
		return Target{Resource: resource, Domain: SafeName(strings.TrimPrefix(method, "/")), Tokens: 1}
	}
}

// HostPathTarget returns the target function that charges each HTTP
// request one token of resource, in the domain host + path (for example
// "api.example.com:8443/users/42", through SafeName; the query is left
// out). With the service's '/'-prefix lookup, a configuration for
// "api.example.com:8443" or "api.example.com:8443/users" answers for
// everything under it.
func HostPathTarget(resource string) func(*http.Request) Target {
	return func(r *http.Request) Target {
		host := r.URL.Host
		if host == "" {
			host = r.Host
		}
		return Target{Resource: resource, Domain: SafeName(host + r.URL.Path), Tokens: 1}
	}
}

// UnaryClientInterceptor returns a gRPC client interceptor that acquires
// target(ctx, method) with Acquire before each call (nil target:
// MethodTarget("grpc")). A refused call is not sent, and fails with the
// *RejectedError (codes.ResourceExhausted, with RetryInfo), or an error
// with codes.Canceled or codes.DeadlineExceeded (its context ended, or the
// wait would pass its deadline), codes.InvalidArgument (an invalid
// target), or codes.Unavailable (the client is closed); each wraps the
// client's error (errors.Is, errors.As). Safe for concurrent use.
//
// Source: quotaservice-design.md, "Naïve clients".
func (c *Client) UnaryClientInterceptor(target func(ctx context.Context, method string) Target) grpc.UnaryClientInterceptor {
	if target == nil {
		target = MethodTarget("grpc")
	}
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if t := target(ctx, method); t.Resource != "" {
			if _, err := c.Acquire(ctx, t.Resource, t.Domain, max(t.Tokens, 1)); err != nil {
				return grpcError(ctx, err)
			}
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

// StreamClientInterceptor is UnaryClientInterceptor for streams: one
// acquisition per stream opened.
func (c *Client) StreamClientInterceptor(target func(ctx context.Context, method string) Target) grpc.StreamClientInterceptor {
	if target == nil {
		target = MethodTarget("grpc")
	}
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		if t := target(ctx, method); t.Resource != "" {
			if _, err := c.Acquire(ctx, t.Resource, t.Domain, max(t.Tokens, 1)); err != nil {
				return nil, grpcError(ctx, err)
			}
		}
		return streamer(ctx, desc, cc, method, opts...)
	}
}

// RoundTripper returns an http.RoundTripper that acquires target(req) with
// Acquire before sending each request through next (nil next:
// http.DefaultTransport; nil target: HostPathTarget("http")). A rejected
// request is not sent: the answer is a 429 Too Many Requests response made
// here, with Retry-After (whole seconds, rounded up, at least 1; absent
// when RetryNever) and Sluice-Quota-Status (the status's name) headers and
// the rejection as its text body. Other refusals are errors wrapping the
// client's (ctx's, context.DeadlineExceeded, ErrInvalidRequest,
// ErrClosed). Either way the request's body is closed. Safe for concurrent
// use.
//
// Source: quotaservice-design.md, "Naïve clients".
func (c *Client) RoundTripper(next http.RoundTripper, target func(*http.Request) Target) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	if target == nil {
		target = HostPathTarget("http")
	}
	return &roundTripper{c: c, next: next, target: target}
}

type roundTripper struct {
	c      *Client
	next   http.RoundTripper
	target func(*http.Request) Target
}

func (rt *roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	t := rt.target(req)
	if t.Resource == "" {
		return rt.next.RoundTrip(req)
	}
	_, err := rt.c.Acquire(req.Context(), t.Resource, t.Domain, max(t.Tokens, 1))
	if err == nil {
		return rt.next.RoundTrip(req)
	}
	if req.Body != nil {
		_ = req.Body.Close()
	}
	var rej *RejectedError
	if errors.As(err, &rej) {
		return tooManyRequests(req, rej), nil
	}
	return nil, fmt.Errorf("limits: %s %s: %w", req.Method, req.URL.Redacted(), err)
}

// tooManyRequests is the 429 response for a rejected request.
func tooManyRequests(req *http.Request, e *RejectedError) *http.Response {
	body := e.Error() + "\n"
	h := http.Header{}
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Sluice-Quota-Status", e.Status.String())
	if !e.RetryNever {
		h.Set("Retry-After", strconv.FormatInt(retryAfterSeconds(e.RetryAfter), 10))
	}
	return &http.Response{
		Status: "429 Too Many Requests", StatusCode: http.StatusTooManyRequests,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body)),
		Request: req,
	}
}

// retryAfterSeconds is d in whole seconds, rounded up, at least 1.
func retryAfterSeconds(d time.Duration) int64 {
	return max(1, int64(math.Ceil(d.Seconds())))
}
