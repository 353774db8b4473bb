package limits_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	sluicev1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/api/sluice/v1/sluicev1connect"
	"github.com/sluice-rl/sluice/client/limits"
)

// call is one request of a test: tokens of (resource, domain).
type call struct {
	resource, domain string
	n                int64
}

// TestAllowOverGRPC drives Allow against the real engine over real gRPC
// on loopback, for every answer: grants, each rejection, invalid requests.
func TestAllowOverGRPC(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name       string
		before     []call // earlier calls, each granted
		call       call
		want       limits.Grant  // when granted
		status     limits.Status // when rejected
		retryNever bool
		invalid    bool // ErrInvalidRequest, nothing sent
	}{
		{name: "granted", call: call{"api", "fast", 3},
			want: limits.Grant{Granted: 3, Remaining: 997, Limit: 1000, Bucket: "named", Source: limits.FromService}},
		{name: "prefix configuration", call: call{"grpc", "grpc.health.v1.Health/Check", 1},
			want: limits.Grant{Granted: 1, Remaining: 1, Limit: 2, Bucket: "prefix grpc.health.v1.Health", Source: limits.FromService}},
		{name: "timeout with retry-after", before: []call{{"api", "strict", 2}}, call: call{"api", "strict", 1},
			status: sluicev1.AllowResponse_REJECTED_TIMEOUT},
		{name: "no bucket", call: call{"nothing", "here", 1},
			status: sluicev1.AllowResponse_REJECTED_NO_BUCKET, retryNever: true},
		{name: "too many buckets", before: []call{{"login", "ann", 1}, {"login", "bob", 1}}, call: call{"login", "cid", 1},
			status: sluicev1.AllowResponse_REJECTED_TOO_MANY_BUCKETS, retryNever: true},
		{name: "too many tokens", call: call{"api", "slow", 11},
			status: sluicev1.AllowResponse_REJECTED_TOO_MANY_TOKENS_REQUESTED, retryNever: true},
		{name: "empty resource", call: call{"", "d", 1}, invalid: true},
		{name: "empty domain", call: call{"api", "", 1}, invalid: true},
		{name: "bad byte", call: call{"api", "a b", 1}, invalid: true},
		{name: "long name", call: call{"api", strings.Repeat("x", limits.MaxNameLen+1), 1}, invalid: true},
		{name: "zero tokens", call: call{"api", "fast", 0}, invalid: true},
		{name: "negative tokens", call: call{"api", "fast", -1}, invalid: true},
		{name: "too many for the wire", call: call{"api", "fast", limits.MaxTokens + 1}, invalid: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newService(t)
			c, reg := newClient(t, startLoopback(t, s))
			for _, b := range tc.before {
				if _, err := c.Allow(ctx, b.resource, b.domain, b.n); err != nil {
					t.Fatalf("before: %v", err)
				}
			}
			sent := s.requests.Load()
			g, err := c.Allow(ctx, tc.call.resource, tc.call.domain, tc.call.n)
			switch {
			case tc.invalid:
				if !errors.Is(err, limits.ErrInvalidRequest) {
					t.Fatalf("err = %v, want ErrInvalidRequest", err)
				}
				if got := s.requests.Load(); got != sent {
					t.Errorf("an invalid request was sent")
				}
				if got := metric(t, reg, "sluice_quota_client_decisions_total", "mode", "manual", "outcome", "error"); got != 1 {
					t.Errorf("error decisions = %v, want 1", got)
				}
			case tc.status != 0:
				var rej *limits.RejectedError
				if !errors.As(err, &rej) {
					t.Fatalf("err = %v, want a *RejectedError", err)
				}
				if rej.Status != tc.status || rej.RetryNever != tc.retryNever || rej.Fallback {
					t.Errorf("rejection = %+v, want status %v, RetryNever %v", rej, tc.status, tc.retryNever)
				}
				if !tc.retryNever && (rej.RetryAfter <= 0 || rej.RetryAfter > time.Second) {
					t.Errorf("RetryAfter = %v, want in (0, 1s] (one token a second)", rej.RetryAfter)
				}
				if rej.Resource != tc.call.resource || rej.Domain != tc.call.domain {
					t.Errorf("rejection names %s/%s", rej.Resource, rej.Domain)
				}
				if got := metric(t, reg, "sluice_quota_client_decisions_total", "mode", "manual", "outcome", "rejected"); got != 1 {
					t.Errorf("rejected decisions = %v, want 1", got)
				}
			default:
				if err != nil {
					t.Fatal(err)
				}
				// The remaining tokens refill meanwhile: compare whole tokens.
				g.Remaining = float64(int64(g.Remaining))
				if g != tc.want {
					t.Errorf("grant = %+v, want %+v", g, tc.want)
				}
			}
		})
	}
}

// TestAllowUnavailable: a manual request nobody answers fails with
// ErrUnavailable (no fallback in the manual mode).
func TestAllowUnavailable(t *testing.T) {
	c, reg := newClient(t, unreachable(t))
	_, err := c.Allow(context.Background(), "api", "fast", 1)
	if !errors.Is(err, limits.ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
	if got := metric(t, reg, "sluice_quota_client_requests_total", "call", "manual", "result", "unavailable"); got != 1 {
		t.Errorf("unavailable requests = %v, want 1", got)
	}
	_, err = c.Reserve(context.Background(), "api", "fast", 1)
	if !errors.Is(err, limits.ErrUnavailable) {
		t.Fatalf("Reserve: err = %v, want ErrUnavailable", err)
	}
}

// TestAllowTLS speaks gRPC over TLS (HTTP/2 by ALPN) with WithTLS.
func TestAllowTLS(t *testing.T) {
	s := newService(t)
	mux := http.NewServeMux()
	mux.Handle(sluicev1connect.NewLimitsHandler(s))
	ts := httptest.NewUnstartedServer(mux)
	ts.EnableHTTP2 = true
	ts.StartTLS()
	defer ts.Close()
	pool := x509.NewCertPool()
	pool.AddCert(ts.Certificate())
	addr := strings.TrimPrefix(ts.URL, "https://") // no scheme: WithTLS makes it https
	c, _ := newClient(t, addr, limits.WithTLS(&tls.Config{RootCAs: pool}))
	g, err := c.Allow(context.Background(), "api", "fast", 1)
	if err != nil || g.Granted != 1 {
		t.Fatalf("Allow over TLS = %+v, %v", g, err)
	}
}

// TestAllowWaitsTheGrantedWait: Allow waits the wait the service granted,
// Reserve returns it (virtual time).
func TestAllowWaitsTheGrantedWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newService(t)
		c, _ := newClient(t, "limits.test:1", startPipe(t, s))
		ctx := context.Background()
		steps := []struct {
			reserve bool
			wait    time.Duration // the grant's
			took    time.Duration // the call's
		}{
			{wait: 0, took: 0}, // the bucket's one token
			{wait: 100 * time.Millisecond, took: 100 * time.Millisecond}, // the next, 10 a second
			{reserve: true, wait: 100 * time.Millisecond, took: 0},       // returned, not waited
			{wait: 200 * time.Millisecond, took: 200 * time.Millisecond}, // behind the reservation
		}
		for i, st := range steps {
			start := time.Now()
			var g limits.Grant
			var err error
			if st.reserve {
				g, err = c.Reserve(ctx, "api", "slow", 1)
			} else {
				g, err = c.Allow(ctx, "api", "slow", 1)
			}
			if err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
			if g.Wait != st.wait || time.Since(start) != st.took {
				t.Errorf("step %d: wait %v, took %v; want %v, %v", i, g.Wait, time.Since(start), st.wait, st.took)
			}
		}
	})
}

// TestAllowDeadline: a request carries the time left to ctx's deadline as
// its max_wait, so the service rejects a wait the caller cannot honour
// without spending tokens; a wait that still passes the deadline (the
// answer was slow) fails at once with DeadlineExceeded, the tokens spent.
func TestAllowDeadline(t *testing.T) {
	t.Run("max_wait from the deadline", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newService(t)
			c, _ := newClient(t, "limits.test:1", startPipe(t, s))
			if _, err := c.Allow(context.Background(), "api", "slow", 1); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			_, err := c.Allow(ctx, "api", "slow", 1)
			var rej *limits.RejectedError
			if !errors.As(err, &rej) || rej.Status != sluicev1.AllowResponse_REJECTED_TIMEOUT || rej.RetryAfter != 50*time.Millisecond {
				t.Fatalf("err = %v, want REJECTED_TIMEOUT retry after 50ms", err)
			}
			reqs := s.received()
			if got := reqs[len(reqs)-1].GetMaxWait().AsDuration(); got != 50*time.Millisecond {
				t.Errorf("max_wait sent = %v, want 50ms", got)
			}
			// Nothing was spent: the next token is still 100 ms after the first.
			g, err := c.Reserve(context.Background(), "api", "slow", 1)
			if err != nil || g.Wait != 100*time.Millisecond {
				t.Errorf("Reserve after the rejection = %+v, %v; want wait 100ms", g, err)
			}
		})
	})
	t.Run("slow answer: tokens spent", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newService(t)
			c, _ := newClient(t, "limits.test:1", startPipe(t, s))
			if _, err := c.Allow(context.Background(), "api", "slow", 1); err != nil {
				t.Fatal(err)
			}
			s.after.Store(int64(30 * time.Millisecond))
			ctx, cancel := context.WithTimeout(context.Background(), 110*time.Millisecond)
			defer cancel()
			start := time.Now()
			g, err := c.Allow(ctx, "api", "slow", 1)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("err = %v, want DeadlineExceeded", err)
			}
			if took := time.Since(start); took != 30*time.Millisecond {
				t.Errorf("returned after %v, want at once on the answer (30ms)", took)
			}
			if g.Granted != 1 || g.Wait != 100*time.Millisecond {
				t.Errorf("grant = %+v, want the spent token with its 100ms wait", g)
			}
		})
	})
	t.Run("cancelled while waiting", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newService(t)
			c, _ := newClient(t, "limits.test:1", startPipe(t, s))
			if _, err := c.Allow(context.Background(), "api", "slow", 1); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(40*time.Millisecond, cancel)
			start := time.Now()
			_, err := c.Allow(ctx, "api", "slow", 1)
			if !errors.Is(err, context.Canceled) || time.Since(start) != 40*time.Millisecond {
				t.Fatalf("err = %v after %v, want Canceled after 40ms", err, time.Since(start))
			}
		})
	})
}

// TestClosed: every method of a closed client returns ErrClosed.
func TestClosed(t *testing.T) {
	c, err := limits.New(unreachable(t), limits.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	ctx := context.Background()
	for name, f := range map[string]func() error{
		"Allow":   func() error { _, err := c.Allow(ctx, "a", "b", 1); return err },
		"Reserve": func() error { _, err := c.Reserve(ctx, "a", "b", 1); return err },
		"Acquire": func() error { _, err := c.Acquire(ctx, "a", "b", 1); return err },
		"Report":  func() error { return c.Report("a", "b", 1) },
	} {
		if err := f(); !errors.Is(err, limits.ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
}

// TestNewErrors: New refuses an empty address and a bad Smart.
func TestNewErrors(t *testing.T) {
	tests := []struct {
		name string
		addr string
		opts []limits.Option
	}{
		{name: "empty address", addr: " "},
		{name: "negative batch", addr: "x:1", opts: []limits.Option{limits.WithSmart(limits.Smart{Batch: -1})}},
		{name: "low water at batch", addr: "x:1", opts: []limits.Option{limits.WithSmart(limits.Smart{Batch: 4, LowWater: 4})}},
		{name: "negative TTL", addr: "x:1", opts: []limits.Option{limits.WithSmart(limits.Smart{TTL: -time.Second})}},
	}
	reg := prometheus.NewRegistry()
	first, err := limits.New("x:1", limits.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	tests = append(tests, struct {
		name string
		addr string
		opts []limits.Option
	}{name: "metrics registered twice", addr: "x:1", opts: []limits.Option{limits.WithRegisterer(reg)}})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if c, err := limits.New(tc.addr, tc.opts...); err == nil {
				_ = c.Close()
				t.Fatal("New succeeded")
			}
		})
	}
}
