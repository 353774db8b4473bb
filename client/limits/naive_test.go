package limits_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	sluicev1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/client/limits"
)

// healthServer starts a real gRPC server (the standard health service) on
// loopback and returns its address and a count of the calls and streams
// that reached it.
func healthServer(t *testing.T) (string, *atomic.Int64) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var served atomic.Int64
	gs := grpc.NewServer(
		grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			served.Add(1)
			return h(ctx, req)
		}),
		grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			served.Add(1)
			return h(srv, ss)
		}))
	healthpb.RegisterHealthServer(gs, health.NewServer())
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return lis.Addr().String(), &served
}

// TestUnaryClientInterceptor: a real gRPC client calls a real gRPC server
// through the interceptor, which asks the real limits service before each
// call: two calls pass (the bucket of the method's service prefix holds
// two tokens), the third fails with ResourceExhausted and RetryInfo and is
// never sent.
func TestUnaryClientInterceptor(t *testing.T) {
	target, served := healthServer(t)
	c, reg := newClient(t, startLoopback(t, newService(t)))
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(c.UnaryClientInterceptor(nil)),
		grpc.WithStreamInterceptor(c.StreamClientInterceptor(nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	ctx := context.Background()
	for i := range 2 {
		if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	_, err = hc.Check(ctx, &healthpb.HealthCheckRequest{})
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted {
		t.Fatalf("third call: %v, want ResourceExhausted", err)
	}
	var retry *errdetails.RetryInfo
	for _, d := range st.Details() {
		if r, ok := d.(*errdetails.RetryInfo); ok {
			retry = r
		}
	}
	if retry == nil || retry.GetRetryDelay().AsDuration() <= 0 {
		t.Errorf("details %v: want a RetryInfo with a positive delay", st.Details())
	}
	var rej *limits.RejectedError
	if !errors.As(err, &rej) || rej.Status != sluicev1.AllowResponse_REJECTED_TIMEOUT || rej.Domain != "grpc.health.v1.Health/Check" {
		t.Errorf("errors.As(%v) = %+v, want the service's REJECTED_TIMEOUT for grpc.health.v1.Health/Check", err, rej)
	}
	if got := served.Load(); got != 2 {
		t.Errorf("server saw %d calls, want 2", got)
	}

	// Streams: the Watch method is a bucket of its own under the prefix.
	for i := range 3 {
		sctx, cancel := context.WithCancel(ctx)
		_, err := hc.Watch(sctx, &healthpb.HealthCheckRequest{})
		cancel()
		if code := status.Code(err); (i < 2) != (code == codes.OK) || i == 2 && code != codes.ResourceExhausted {
			t.Errorf("stream %d: %v", i, err)
		}
	}
	if got := metric(t, reg, "sluice_quota_client_decisions_total", "mode", "naive", "outcome", "rejected"); got != 2 {
		t.Errorf("rejected decisions = %v, want 2", got)
	}
	if got := metric(t, reg, "sluice_quota_client_decisions_total", "mode", "naive", "outcome", "allowed"); got != 4 {
		t.Errorf("allowed decisions = %v, want 4", got)
	}
}

// closeRecorder is a request body that records its closing.
type closeRecorder struct {
	io.Reader
	closed atomic.Bool
}

func (b *closeRecorder) Close() error { b.closed.Store(true); return nil }

// TestRoundTripper: requests through the RoundTripper pass while the
// service grants, then get a 429 made by the client, with Retry-After,
// without reaching the target; a rejected request's body is closed.
func TestRoundTripper(t *testing.T) {
	var served atomic.Int64
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		_, _ = io.WriteString(w, "ok")
	}))
	defer target.Close()
	c, _ := newClient(t, startLoopback(t, newService(t)))
	hc := &http.Client{Transport: c.RoundTripper(nil, nil)}
	for i, want := range []int{200, 200, 429} {
		body := &closeRecorder{Reader: strings.NewReader("x")}
		req, err := http.NewRequest("POST", target.URL+"/users/"+strconv.Itoa(i), body)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		text, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("request %d: %d %s, want %d", i, resp.StatusCode, text, want)
		}
		if want != 429 {
			continue
		}
		if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || ra < 1 {
			t.Errorf("Retry-After = %q, want whole seconds ≥ 1", resp.Header.Get("Retry-After"))
		}
		if got := resp.Header.Get("Sluice-Quota-Status"); got != "REJECTED_TIMEOUT" {
			t.Errorf("Sluice-Quota-Status = %q", got)
		}
		if !strings.Contains(string(text), "rejected") {
			t.Errorf("body %q does not explain", text)
		}
		if !body.closed.Load() {
			t.Error("the rejected request's body was not closed")
		}
	}
	if got := served.Load(); got != 2 {
		t.Errorf("target served %d, want 2", got)
	}
}

// TestTargets: the default targets name calls as documented.
func TestTargets(t *testing.T) {
	if got := limits.MethodTarget("svc")(context.Background(), "/pkg.Users/Get"); got != (limits.Target{Resource: "svc", Domain: "pkg.Users/Get", Tokens: 1}) {
		t.Errorf("MethodTarget = %+v", got)
	}
	req := httptest.NewRequest("GET", "http://api.example.com:8443/users/42?q=1#x", nil)
	if got := limits.HostPathTarget("web")(req); got != (limits.Target{Resource: "web", Domain: "api.example.com:8443/users/42", Tokens: 1}) {
		t.Errorf("HostPathTarget = %+v", got)
	}
	tests := []struct{ in, want string }{
		{"", "_"},
		{"ok/name-1.2:3_4", "ok/name-1.2:3_4"},
		{"a b%c", "a_b_c"},
		{"é", "__"},
		{strings.Repeat("y", 300), strings.Repeat("y", limits.MaxNameLen)},
	}
	for _, tc := range tests {
		if got := limits.SafeName(tc.in); got != tc.want {
			t.Errorf("SafeName(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestNaiveNoBucketFallsBack: scenario 3 — no bucket is configured for the
// target, so the client-side fallback limiter decides.
func TestNaiveNoBucketFallsBack(t *testing.T) {
	s := newService(t)
	c, reg := newClient(t, startLoopback(t, s), limits.WithFallbackRate(0.001, 0))
	ctx := context.Background()
	g, err := c.Acquire(ctx, "unconfigured", "x", 1)
	if err != nil || g.Source != limits.FromFallback {
		t.Fatalf("first = %+v, %v; want a fallback grant", g, err)
	}
	_, err = c.Acquire(ctx, "unconfigured", "x", 1)
	var rej *limits.RejectedError
	if !errors.As(err, &rej) || !rej.Fallback || rej.RetryAfter < 900*time.Second {
		t.Fatalf("second: %v, want a fallback rejection (one permit per 1000 s)", err)
	}
	for _, m := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"sluice_quota_client_fallbacks_total", []string{"reason", "no_bucket"}, 2},
		{"sluice_quota_client_requests_total", []string{"call", "decide", "result", "no_bucket"}, 2},
		{"sluice_quota_client_decisions_total", []string{"mode", "naive", "outcome", "fallback_allowed"}, 1},
		{"sluice_quota_client_decisions_total", []string{"mode", "naive", "outcome", "fallback_rejected"}, 1},
		{"sluice_quota_client_breaker_state", nil, 0}, // answers, not failures
	} {
		if got := metric(t, reg, m.name, m.labels...); got != m.want {
			t.Errorf("%s%v = %v, want %v", m.name, m.labels, got, m.want)
		}
	}
}

// TestNaiveUnreachable: with nobody listening, the fallback decides; after
// the breaker's threshold of failures it stops trying.
func TestNaiveUnreachable(t *testing.T) {
	c, reg := newClient(t, unreachable(t), limits.WithBreaker(3, time.Hour),
		failOpen)
	for i := range 5 {
		g, err := c.Acquire(context.Background(), "api", "fast", 1)
		if err != nil || g.Source != limits.FromFallback {
			t.Fatalf("call %d = %+v, %v; want a fallback grant", i, g, err)
		}
	}
	for _, m := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"sluice_quota_client_requests_total", []string{"call", "decide", "result", "unavailable"}, 3},
		{"sluice_quota_client_requests_total", []string{"call", "decide", "result", "breaker_open"}, 2},
		{"sluice_quota_client_fallbacks_total", []string{"reason", "unavailable"}, 3},
		{"sluice_quota_client_fallbacks_total", []string{"reason", "breaker_open"}, 2},
		{"sluice_quota_client_decisions_total", []string{"mode", "naive", "outcome", "fallback_allowed"}, 5},
		{"sluice_quota_client_breaker_state", nil, 2},
		{"sluice_quota_client_breaker_trips_total", nil, 1},
	} {
		if got := metric(t, reg, m.name, m.labels...); got != m.want {
			t.Errorf("%s%v = %v, want %v", m.name, m.labels, got, m.want)
		}
	}
}

// TestNaiveStalledLoopback: a service that accepts the request and never
// answers: the call falls back after the timeout (over real loopback; the
// timing itself is TestNaiveTimeoutAndBreaker's, on virtual time).
func TestNaiveStalledLoopback(t *testing.T) {
	s := newService(t)
	s.stall.Store(true)
	c, reg := newClient(t, startLoopback(t, s))
	g, err := c.Acquire(context.Background(), "api", "fast", 1)
	if err != nil || g.Source != limits.FromFallback {
		t.Fatalf("Acquire = %+v, %v; want a fallback grant", g, err)
	}
	if got := metric(t, reg, "sluice_quota_client_requests_total", "call", "decide", "result", "timeout"); got != 1 {
		t.Errorf("timeouts = %v, want 1", got)
	}
	if got := s.requests.Load(); got != 1 {
		t.Errorf("service saw %d requests, want 1", got)
	}
}

// TestNaiveTimeoutAndBreaker: on virtual time, a stalled service costs
// each call exactly the timeout until the breaker opens after 5 failures;
// then calls fall back at once without a request; every probe interval
// one request goes through, and the breaker closes once it is answered.
func TestNaiveTimeoutAndBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newService(t)
		s.stall.Store(true)
		c, reg := newClient(t, "limits.test:1", startPipe(t, s), limits.WithBreaker(5, 5*time.Second))
		acquire := func(want limits.Source, took time.Duration) {
			t.Helper()
			start := time.Now()
			g, err := c.Acquire(context.Background(), "api", "fast", 1)
			if err != nil || g.Source != want || time.Since(start) != took {
				t.Fatalf("Acquire = %+v, %v after %v; want %v after %v", g, err, time.Since(start), want, took)
			}
		}
		for range 5 {
			acquire(limits.FromFallback, limits.DefaultTimeout)
		}
		acquire(limits.FromFallback, 0) // open: no request
		if got := s.requests.Load(); got != 5 {
			t.Errorf("service saw %d requests, want 5", got)
		}
		if got := metric(t, reg, "sluice_quota_client_breaker_state"); got != 2 {
			t.Errorf("breaker state %v, want 2 (open)", got)
		}
		time.Sleep(5*time.Second + time.Millisecond)
		acquire(limits.FromFallback, limits.DefaultTimeout) // the probe, still stalled
		acquire(limits.FromFallback, 0)                     // open again
		if got := s.requests.Load(); got != 6 {
			t.Errorf("service saw %d requests, want 6", got)
		}
		s.stall.Store(false)
		time.Sleep(5*time.Second + time.Millisecond)
		acquire(limits.FromService, 0) // the probe, answered
		acquire(limits.FromService, 0) // closed
		if got := metric(t, reg, "sluice_quota_client_breaker_state"); got != 0 {
			t.Errorf("breaker state %v, want 0 (closed)", got)
		}
		if got := metric(t, reg, "sluice_quota_client_breaker_trips_total"); got != 2 {
			t.Errorf("trips %v, want 2", got)
		}
		if got := metric(t, reg, "sluice_quota_client_fallbacks_total", "reason", "timeout"); got != 6 {
			t.Errorf("timeouts %v, want 6", got)
		}
	})
}

// TestNaiveRejectWait: with WithRejectWait a rejected call waits the
// service's retry-after and asks again, within the bound and the deadline;
// the fallback limiter's delay is waited the same way.
func TestNaiveRejectWait(t *testing.T) {
	t.Run("service", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c, _ := newClient(t, "limits.test:1", startPipe(t, newService(t)), limits.WithRejectWait(2*time.Second))
			ctx := context.Background()
			if _, err := c.Acquire(ctx, "api", "strict", 2); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			g, err := c.Acquire(ctx, "api", "strict", 1) // one token a second
			if err != nil || g.Source != limits.FromService || time.Since(start) != time.Second {
				t.Fatalf("Acquire = %+v, %v after %v; want granted after 1s", g, err, time.Since(start))
			}
			short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			defer cancel()
			start = time.Now()
			_, err = c.Acquire(short, "api", "strict", 1)
			var rej *limits.RejectedError
			if !errors.As(err, &rej) || time.Since(start) != 0 {
				t.Fatalf("with a 500ms deadline: %v after %v; want a rejection at once", err, time.Since(start))
			}
			_, err = c.Acquire(ctx, "api", "strict", 3) // 3 s away: past the bound
			if !errors.As(err, &rej) {
				t.Fatalf("past the bound: %v; want a rejection", err)
			}
		})
	})
	t.Run("fallback", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newService(t)
			s.stall.Store(true)
			c, _ := newClient(t, "limits.test:1", startPipe(t, s), limits.WithBreaker(1, time.Hour),
				limits.WithFallbackRate(10, 0), limits.WithRejectWait(time.Second))
			if _, err := c.Acquire(context.Background(), "api", "fast", 1); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			g, err := c.Acquire(context.Background(), "api", "fast", 1)
			if err != nil || g.Source != limits.FromFallback || g.Wait != 100*time.Millisecond || time.Since(start) != 100*time.Millisecond {
				// The breaker is open (no request): at 10 a second the
				// next permit is 100 ms after the first fallback's.
				t.Fatalf("Acquire = %+v, %v after %v; want a fallback grant after 100ms", g, err, time.Since(start))
			}
		})
	})
}

// TestNaiveErrors: an invalid target and an expired context fail without a
// request, with the gRPC codes the interceptor documents.
func TestNaiveErrors(t *testing.T) {
	s := newService(t)
	c, _ := newClient(t, startLoopback(t, s))
	invoked := false
	invoker := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
		invoked = true
		return nil
	}
	bad := c.UnaryClientInterceptor(func(context.Context, string) limits.Target {
		return limits.Target{Resource: "api", Domain: "no spaces"}
	})
	err := bad(context.Background(), "/x/Y", nil, nil, nil, invoker)
	if status.Code(err) != codes.InvalidArgument || !errors.Is(err, limits.ErrInvalidRequest) {
		t.Errorf("invalid target: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = c.UnaryClientInterceptor(nil)(ctx, "/x/Y", nil, nil, nil, invoker)
	if status.Code(err) != codes.Canceled || !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: %v", err)
	}
	unlimited := c.UnaryClientInterceptor(func(context.Context, string) limits.Target { return limits.Target{} })
	if err := unlimited(context.Background(), "/x/Y", nil, nil, nil, invoker); err != nil || !invoked {
		t.Errorf("a target without a resource is not limited: %v, invoked %v", err, invoked)
	}
	if got := s.requests.Load(); got != 0 {
		t.Errorf("service saw %d requests, want 0", got)
	}
}

// TestIdleTargetsForgotten: a target unused for a minute loses its
// fallback limiter (a new one starts afresh), even with a long report
// interval.
func TestIdleTargetsForgotten(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, _ := newClient(t, "limits.test:1", startPipe(t, newService(t)),
			limits.WithFallbackRate(0.001, 0), limits.WithReportInterval(time.Hour))
		acquire := func() error {
			_, err := c.Acquire(context.Background(), "unconfigured", "x", 1)
			return err
		}
		if err := acquire(); err != nil {
			t.Fatal(err)
		}
		if err := acquire(); err == nil {
			t.Fatal("second call allowed: want the fallback's 1000 s spacing")
		}
		time.Sleep(30 * time.Second)
		if err := acquire(); err == nil {
			t.Fatal("allowed after 30 s: the limiter was forgotten while in use")
		}
		time.Sleep(2 * time.Minute)
		if err := acquire(); err != nil {
			t.Fatalf("after two idle minutes: %v, want a fresh limiter's grant", err)
		}
	})
}
