package client

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Drop-in middleware (the quota service's "naive clients"): every call
// takes a permit from a Sluice rate limiter first. The limiter is chosen per
// call by a function of the method or request; nil means the call is not
// limited.

// UnaryClientInterceptor returns a gRPC client interceptor that waits for a
// permit from pick(method) before each call (nil: the call is not limited).
// If the wait would pass the call's deadline it fails at once with
// codes.ResourceExhausted; if the call's context ends first (before or
// while waiting) it fails with codes.Canceled or codes.DeadlineExceeded, as
// the server interceptors do. In both cases nothing is sent. Safe for
// concurrent use.
func UnaryClientInterceptor(pick func(method string) *RateLimiter) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if l := pick(method); l != nil {
			if err := l.Wait(ctx); err != nil {
				return waitStatus(ctx, method, err)
			}
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

// StreamClientInterceptor is UnaryClientInterceptor for streams: one permit
// per stream opened, with the same status codes.
func StreamClientInterceptor(pick func(method string) *RateLimiter) grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		if l := pick(method); l != nil {
			if err := l.Wait(ctx); err != nil {
				return nil, waitStatus(ctx, method, err)
			}
		}
		return streamer(ctx, desc, cc, method, opts...)
	}
}

// RoundTripper returns an http.RoundTripper that waits for a permit from
// pick(req) before sending each request through next (nil:
// http.DefaultTransport). A wait that would pass the request's deadline
// fails at once with an error wrapping context.DeadlineExceeded; a request
// whose context ends first fails with an error wrapping its ctx.Err()
// (context.Canceled or context.DeadlineExceeded). Nothing is sent then.
func RoundTripper(next http.RoundTripper, pick func(*http.Request) *RateLimiter) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	return roundTripper{next: next, pick: pick}
}

type roundTripper struct {
	next http.RoundTripper
	pick func(*http.Request) *RateLimiter
}

func (rt roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	if l := rt.pick(req); l != nil {
		if err := l.Wait(req.Context()); err != nil {
			return nil, fmt.Errorf("sluice: %s %s: %w", req.Method, req.URL, err)
		}
	}
	return rt.next.RoundTrip(req)
}

// admit takes a permit from l for a server-side request, waiting up to
// maxWait. It returns 0 if admitted, else how long until a permit would be
// free (math.MaxInt64 at rate 0).
func admit(ctx context.Context, l *RateLimiter, maxWait time.Duration) (time.Duration, error) {
	r := l.Reserve()
	d := r.Delay()
	if !r.OK() || d > maxWait {
		r.Cancel()
		return d, nil
	}
	if d == 0 {
		return 0, nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return 0, nil
	case <-ctx.Done():
		r.Cancel()
		return 0, ctx.Err()
	}
}

// retryAfter is a delay in whole seconds, rounded up, at least 1.
func retryAfter(d time.Duration) int64 {
	if d >= time.Duration(math.MaxInt64) || d < 0 {
		return 60
	}
	return max(1, int64(math.Ceil(d.Seconds())))
}

// setRateLimitHeaders sets the RateLimit-* headers (IETF draft
// "RateLimit header fields for HTTP"): the limit per second, the permits
// left now, and the seconds until the next one.
func setRateLimitHeaders(h http.Header, l *RateLimiter, reset time.Duration) {
	limit := l.Rate()
	if !math.IsInf(limit, 1) {
		h.Set("RateLimit-Limit", strconv.FormatInt(int64(math.Floor(limit)), 10))
	}
	if tokens := l.Tokens(); !math.IsInf(tokens, 1) {
		h.Set("RateLimit-Remaining", strconv.FormatInt(max(0, int64(math.Floor(tokens))), 10))
	}
	h.Set("RateLimit-Reset", strconv.FormatInt(int64(math.Ceil(max(reset, 0).Seconds())), 10))
}

// HTTPMiddleware returns middleware that admits each request with a permit
// from pick(req), waiting up to maxWait for one; otherwise it answers 429
// Too Many Requests with Retry-After and RateLimit-* headers and does not
// call the handler. Admitted requests get the RateLimit-* headers too.
func HTTPMiddleware(pick func(*http.Request) *RateLimiter, maxWait time.Duration) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			l := pick(r)
			if l == nil {
				next.ServeHTTP(w, r)
				return
			}
			wait, err := admit(r.Context(), l, maxWait)
			if err != nil {
				return // the client went away
			}
			if wait > 0 {
				setRateLimitHeaders(w.Header(), l, wait)
				w.Header().Set("Retry-After", strconv.FormatInt(retryAfter(wait), 10))
				http.Error(w, "rate limited by sluice", http.StatusTooManyRequests)
				return
			}
			setRateLimitHeaders(w.Header(), l, 0)
			next.ServeHTTP(w, r)
		})
	}
}

// UnaryServerInterceptor returns a gRPC server interceptor that admits
// each call with a permit from pick(fullMethod), waiting up to maxWait;
// otherwise it fails the call with codes.ResourceExhausted and a
// "retry-after" header (seconds).
func UnaryServerInterceptor(pick func(fullMethod string) *RateLimiter, maxWait time.Duration) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := admitGRPC(ctx, pick(info.FullMethod), maxWait); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamServerInterceptor is UnaryServerInterceptor for streams: one permit
// per stream.
func StreamServerInterceptor(pick func(fullMethod string) *RateLimiter, maxWait time.Duration) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := admitGRPC(ss.Context(), pick(info.FullMethod), maxWait); err != nil {
			return err
		}
		return handler(srv, ss)
	}
}

// waitStatus is the gRPC status of a failed wait for a permit, for the
// client and the server interceptors alike: if ctx has ended (cancelled, or
// its deadline passed) the status of that (codes.Canceled or
// codes.DeadlineExceeded, by status.FromContextError); otherwise the
// limiter refused because the wait would pass ctx's deadline:
// codes.ResourceExhausted.
func waitStatus(ctx context.Context, method string, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return status.FromContextError(cerr).Err()
	}
	return status.Errorf(codes.ResourceExhausted, "sluice: %s: %v", method, err)
}

func admitGRPC(ctx context.Context, l *RateLimiter, maxWait time.Duration) error {
	if l == nil {
		return nil
	}
	wait, err := admit(ctx, l, maxWait)
	if err != nil {
		return waitStatus(ctx, "", err)
	}
	if wait > 0 {
		_ = grpc.SetHeader(ctx, metadata.Pairs("retry-after", strconv.FormatInt(retryAfter(wait), 10)))
		return status.Errorf(codes.ResourceExhausted, "rate limited by sluice; retry after %v", wait.Round(time.Millisecond))
	}
	return nil
}
